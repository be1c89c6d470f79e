"""A real ``riverbeam api`` process on loopback for the API and browser tests, over a
``job_stack``: same Redis, same config, plus the tokens a test asks for.

::

    with job_stack() as stack, api_server(stack, TOKENS) as api:
        stack.start_worker("a")
        reply = httpx.post(f"{api.url}/v1/jobs", headers=api.auth("writer"), json={...})

``TOKENS`` maps a token holder's name to its role and, optionally, the repositories it is
limited to; ``api.tokens[name]`` is the holder's bearer token.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from bot.cli.tokens import token_table
from bot.config import Role, TokenConfig
from bot.service.access import new_token, token_digest
from harness.stack import PROJECT_ROOT, Stack, clean_environment, log_tail
from harness.workers import free_port

READY_SECONDS = 30.0

TokenSpec = tuple[Role, Sequence[str] | None]


@dataclass
class ApiServer:
    url: str
    tokens: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path
    config: Path

    def auth(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}

    def client(self, name: str | None = None, **kw: object) -> httpx.Client:
        headers = self.auth(name) if name else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0, **kw)  # type: ignore[arg-type]

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log, lines)


def _token_tables(tokens: Mapping[str, str], specs: Mapping[str, TokenSpec]) -> str:
    return "\n".join(
        token_table(
            TokenConfig(
                name=name,
                role=role,
                sha256=token_digest(tokens[name]),
                repos=None if repos is None else tuple(repos),
            )
        )
        for name, (role, repos) in specs.items()
    )


@contextmanager
def api_server(
    stack: Stack, specs: Mapping[str, TokenSpec], *, api_table: Mapping[str, str] | None = None
) -> Iterator[ApiServer]:
    """Start ``riverbeam api`` on a free loopback port and wait until ``/openapi.json``
    answers; stopped (SIGTERM, then SIGKILL) on the way out."""
    tokens = {name: new_token() for name in specs}
    config = stack.base / "riverbeam-api.toml"
    # Tests send many wrong tokens from one address on purpose; the throttle's own tests
    # set a small allowance.
    table = {"auth_failures": "100000", **(api_table or {})}
    extra = "".join(f"{key} = {value}\n" for key, value in table.items())
    config.write_text(
        stack.config.read_text() + "\n[api]\n" + extra + "\n" + _token_tables(tokens, specs)
    )
    port = free_port()
    log = stack.base / "api.log"
    environment = clean_environment()
    environment.update(RIVERBEAM_CONFIG=str(config), PYTHONPATH=str(PROJECT_ROOT))
    command = [sys.executable, "-m", "bot.cli", "api", "--port", str(port)]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, cwd=PROJECT_ROOT, env=environment, stdout=output, stderr=subprocess.STDOUT
        )
    server = ApiServer(f"http://127.0.0.1:{port}", tokens, process, log, config)
    try:
        _wait_ready(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(server: ApiServer) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"riverbeam api exited:\n{server.log_tail()}")
        try:
            if httpx.get(f"{server.url}/openapi.json", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"riverbeam api did not answer in {READY_SECONDS} s:\n{server.log_tail()}")
