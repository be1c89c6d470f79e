"""One job stack and one ``riverbeam api`` with forges configured, per test module that asks.

``forge_api``: real Redis and a real API process with three forges: ``gh`` (GitHub, the App
installation 1, ``Codertocat/Hello-World`` as ``docs``), ``gl`` (GitLab, the projects of
GitLab's documented payloads as ``docs``, whose workers' lookups say nobody may do
anything) and ``flood`` (GitHub, 20 deliveries a minute);
plus ``nosecret``, whose secret file does not exist. No worker consumes the ``forge``
queue, so a test reads what was queued (``queued``).

``dripping``: a server that drips its reply a byte a second, for the clients' deadline."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from harness.api_server import ApiServer, api_server
from harness.forges import forge_toml
from harness.stack import Stack, job_stack
from tests.api.conftest import TOKENS
from tests.forge.kit import BOT, GITHUB_REPO, GITLAB_ISSUE_PROJECT, GITLAB_MR_PROJECT
from tests.forge.slow_servers import Dripping, dripping_server

GH_SECRET = "It's a Secret to Everybody"
GL_SECRET = "gitlab-webhook-token-for-the-tests"
FLOOD_PER_MINUTE = 20


@dataclass
class ForgeApi:
    stack: Stack
    api: ApiServer
    redis: redis.Redis

    def queued(self) -> list[dict[str, Any]]:
        """The events waiting on the ``forge`` queue, oldest first (kombu's Redis list)."""
        raws = self.redis.lrange("forge", 0, -1)
        events = []
        for raw in reversed(raws):
            message = json.loads(raw)
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            events.append(args[0])
        return events


def forges_toml(stack: Stack) -> str:
    secrets = stack.base / "secrets"
    secrets.mkdir(mode=0o700)
    (secrets / "github").write_text(GH_SECRET + "\n")
    (secrets / "gitlab").write_text(GL_SECRET)
    docs = {"repository": "docs"}
    repositories = {GITHUB_REPO: docs}
    github: dict[str, Any] = {"installations": [1]}
    return (
        forge_toml(
            "gh",
            kind="github",
            secret_file=secrets / "github",
            bot_login=BOT,
            repositories=repositories,
            **github,
        )
        + forge_toml(
            "gl",
            kind="gitlab",
            secret_file=secrets / "gitlab",
            bot_login="riverbeam-bot",
            repositories={GITLAB_ISSUE_PROJECT: {**docs, "project_id": 5}, GITLAB_MR_PROJECT: docs},
            # The workers ask this fake forge: nobody has any permission there.
            client_factory="harness.forges:no_one_may",
        )
        + forge_toml(
            "flood",
            kind="github",
            secret_file=secrets / "github",
            bot_login=BOT,
            deliveries_per_minute=FLOOD_PER_MINUTE,
            repositories=repositories,
            **github,
        )
        + forge_toml(
            "nosecret",
            kind="github",
            secret_file=secrets / "absent",
            bot_login=BOT,
            repositories=repositories,
            **github,
        )
    )


@pytest.fixture(scope="module")
def forge_api() -> Iterator[ForgeApi]:
    with job_stack() as stack:
        stack.config.write_text(stack.config.read_text() + forges_toml(stack))
        with api_server(stack, TOKENS) as api:
            client = redis.Redis.from_url(stack.redis_url)
            try:
                yield ForgeApi(stack, api, client)
            finally:
                client.close()


@pytest.fixture
def dripping() -> Iterator[Dripping]:
    with dripping_server() as server:
        yield server
