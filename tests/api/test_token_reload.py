"""A running ``riverbeam api`` loads new tokens on SIGHUP, drops removed ones, and keeps
the ones in force when the configuration no longer reads."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from bot.cli.tokens import token_table
from bot.config import TokenConfig
from bot.service.access import new_token, token_digest
from harness.api_server import ApiServer, api_server
from harness.stack import Stack

pytestmark = pytest.mark.slow


@pytest.fixture
def own_api(stack: Stack) -> Iterator[ApiServer]:
    with api_server(stack, {"admin": ("admin", None)}) as server:
        yield server


def _status(api: ApiServer, token: str) -> int:
    reply = httpx.get(f"{api.url}/v1/jobs", headers={"Authorization": f"Bearer {token}"})
    return reply.status_code


def _hang_up_and_wait(api: ApiServer, token: str, expected: int) -> None:
    api.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while _status(api, token) != expected:
        assert time.monotonic() < deadline, api.log_tail()
        time.sleep(0.1)
    assert api.process.poll() is None, "SIGHUP must not stop the server"


def test_sighup_loads_new_tokens_and_drops_removed_ones(own_api: ApiServer) -> None:
    newcomer = new_token()
    entry = TokenConfig(name="newcomer", role="reviewer", sha256=token_digest(newcomer))
    original = own_api.config.read_text()
    assert _status(own_api, newcomer) == 401

    own_api.config.write_text(original + "\n" + token_table(entry))
    _hang_up_and_wait(own_api, newcomer, 200)
    assert _status(own_api, own_api.tokens["admin"]) == 200

    own_api.config.write_text(original)
    _hang_up_and_wait(own_api, newcomer, 401)


def test_a_configuration_that_no_longer_reads_keeps_the_tokens_in_force(
    own_api: ApiServer,
) -> None:
    own_api.config.write_text(own_api.config.read_text() + "\n[api\nbroken = \n")
    own_api.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "tokens not reloaded" not in own_api.log_tail():
        assert time.monotonic() < deadline, own_api.log_tail()
        time.sleep(0.1)
    assert _status(own_api, own_api.tokens["admin"]) == 200
    assert own_api.process.poll() is None
