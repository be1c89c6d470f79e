"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, npm) against
Riverbeam's two MCP transports, with the two loopback adapters it needs (test-only):

- ``TokenProxy``: the suite's client sends no ``Authorization`` header, and ``/mcp`` answers
  401 without one. The proxy forwards every request to the real API unchanged (method, path,
  ``Host``, ``Origin``, body) with one token added, and streams the answer back, so the suite
  talks to the production endpoint with its authentication on.
- ``StdioBridge``: the suite speaks only Streamable HTTP. The bridge serves it on loopback
  in front of a ``riverbeam mcp`` process (stdio), writing each JSON-RPC message to its
  stdin and sending what it prints back as the POST's event stream.

``run_suite(url, out)`` runs the suite's active server scenarios and reads its per-scenario
``checks.json`` files: a scenario passes when none of its checks is a ``FAILURE`` (as the
suite's own summary counts). Node.js 22 and the suite come from ``docker/provision-node``.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from harness.stack import PROJECT_ROOT, clean_environment

SUITE_VERSION = "0.1.16"
NODE_VERSION = "v22.23.3"
NODE_PREFIX = Path(os.environ.get("RIVERBEAM_NODE_PREFIX", "/opt/riverbeam-node"))
SUITE_SECONDS = 180.0
Message = dict[str, Any]
Traceback = TracebackType | None


class SuiteMissing(RuntimeError):
    """Node.js 22 or the pinned suite is not installed."""


def suite_command() -> list[str]:
    """The suite's CLI run by the prefix's Node 22 (never the machine's older node)."""
    bin_dir = NODE_PREFIX / "node_modules" / ".bin"
    node, cli = bin_dir / "node", bin_dir / "conformance"
    manifest = NODE_PREFIX / "node_modules" / "@modelcontextprotocol" / "conformance"
    try:
        version = json.loads((manifest / "package.json").read_text())["version"]
        node_version = subprocess.run(
            [str(node), "--version"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as error:
        raise SuiteMissing(f"{error}; run docker/provision-node") from None
    if (version, node_version) != (SUITE_VERSION, NODE_VERSION):
        raise SuiteMissing(
            f"found the suite {version} on Node {node_version}, want {SUITE_VERSION} on "
            f"{NODE_VERSION}; run docker/provision-node"
        )
    return [str(node), str(cli.resolve())]


@dataclass
class SuiteRun:
    """What one run of the suite found: each scenario's failed and passed check ids."""

    failed: dict[str, list[str]] = field(default_factory=dict)
    passed: dict[str, list[str]] = field(default_factory=dict)
    output: str = ""

    @property
    def failing(self) -> set[str]:
        return {name for name, checks in self.failed.items() if checks}

    @property
    def passing(self) -> set[str]:
        return set(self.failed) - self.failing


def run_suite(url: str, out: Path) -> SuiteRun:
    """The suite's active server scenarios against ``url``; results under ``out``."""
    command = [*suite_command(), "server", "--url", url, "--output-dir", str(out)]
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(out)}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=SUITE_SECONDS, env=environment
    )
    run = SuiteRun(output=done.stdout + done.stderr)
    for checks_file in sorted(out.glob("server-*/checks.json")):
        # server-<scenario>-<timestamp>: the last six dashes are the one before the timestamp
        # and its own five (2026-12-01T21-46-12-387Z).
        scenario = checks_file.parent.name.removeprefix("server-").rsplit("-", 6)[0]
        checks = json.loads(checks_file.read_text())
        run.failed[scenario] = [c["id"] for c in checks if c["status"] == "FAILURE"]
        run.passed[scenario] = [c["id"] for c in checks if c["status"] == "SUCCESS"]
    return run


class _Loopback(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The suite drops connections it is done with (a stream it read enough of): no noise.
        pass

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/mcp"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def begin(self, status: int, headers: Mapping[str, str]) -> None:
        """A chunked answer, so an event stream reaches the client as it is written."""
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def finish_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def reply(self, status: int, body: bytes = b"", headers: Mapping[str, str] = {}) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Serving:
    """A loopback server started on entry and stopped on exit."""

    server: _Loopback

    @property
    def url(self) -> str:
        return self.server.url

    def __enter__(self) -> _Serving:
        self.server.thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Traceback
    ) -> None:
        self.server.shutdown()
        self.server.server_close()


# Hop-by-hop headers the proxy does not pass on (RFC 9110 section 7.6.1), and the caller's
# own credentials, which the proxy replaces.
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "content-length"}


class TokenProxy(_Serving):
    """``/mcp`` of the API at ``api_url`` as the holder of ``token``, for a client that sends
    no token. Everything else of each request goes through as it came."""

    def __init__(self, api_url: str, token: str) -> None:
        target = urlsplit(api_url)
        host, port = target.hostname or "127.0.0.1", target.port or 80

        class Forward(_Handler):
            def forward(self) -> None:
                headers = {
                    name: value
                    for name, value in self.headers.items()
                    if name.lower() not in _HOP | {"authorization"}
                }
                headers["Authorization"] = f"Bearer {token}"
                upstream = http.client.HTTPConnection(host, port, timeout=SUITE_SECONDS)
                try:
                    upstream.request(self.command, self.path, body=self.body(), headers=headers)
                    answer = upstream.getresponse()
                    self.begin(
                        answer.status,
                        {k: v for k, v in answer.getheaders() if k.lower() not in _HOP},
                    )
                    # A stream the API ends early (the client went away) just ends here too.
                    try:
                        while data := answer.read1(65536):
                            self.chunk(data)
                    except http.client.IncompleteRead:
                        pass
                    self.finish_chunks()
                except (ConnectionError, TimeoutError):
                    self.close_connection = True
                finally:
                    upstream.close()

            do_GET = do_POST = do_DELETE = forward

        self.server = _Loopback(Forward)


class _Process:
    """One ``riverbeam mcp`` process: messages in on stdin, one per line. Request ids are
    renumbered on the way in, so two sessions' ids never meet in the one process, and given
    back on the way out; each line the process prints goes to the open POST waiting for it."""

    def __init__(self, command: list[str], environment: dict[str, str], log: Path) -> None:
        with log.open("ab") as errors:
            self.process = subprocess.Popen(
                command,
                cwd=PROJECT_ROOT,
                env=environment,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
            )
        self.lock = threading.Lock()
        self.numbers = itertools.count(1)
        # Our request id -> (the waiting POST's queue, the client's id); progress token ->
        # the queue of the call that asked for progress.
        self.waiting: dict[int, tuple[queue.Queue[Message | None], Any]] = {}
        self.progress: dict[Any, queue.Queue[Message | None]] = {}
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def send(self, messages: list[Message], inbox: queue.Queue[Message | None]) -> None:
        lines = []
        with self.lock:
            for message in messages:
                if "method" in message and "id" in message:
                    number = next(self.numbers)
                    self.waiting[number] = (inbox, message["id"])
                    token = (message.get("params") or {}).get("_meta", {}).get("progressToken")
                    if token is not None:
                        self.progress[token] = inbox
                    message = {**message, "id": number}
                lines.append(json.dumps(message).encode() + b"\n")
            assert self.process.stdin is not None
            self.process.stdin.write(b"".join(lines))
            self.process.stdin.flush()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message: Message = json.loads(line)
            with self.lock:
                inbox: queue.Queue[Message | None] | None
                if "method" not in message:  # a response
                    inbox, message["id"] = self.waiting.pop(message.get("id"), (None, None))
                else:  # a notification: to the call it is about, else to any open call
                    token = (message.get("params") or {}).get("progressToken")
                    waiting = [queue for queue, _ in self.waiting.values()]
                    inbox = self.progress.get(token) or next(iter(waiting), None)
            if inbox is not None:
                inbox.put(message)
        with self.lock:
            for inbox, _ in self.waiting.values():
                inbox.put(None)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.reader.join(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


class StdioBridge(_Serving):
    """Streamable HTTP on loopback in front of a ``riverbeam mcp`` process that holds
    ``token`` and calls the API at ``api_url``.

    The suite opens a session per scenario and never ends one; ``riverbeam mcp`` takes about
    two seconds to start, so one process serves every session in turn (each session's
    ``initialize`` initializes it again, as the SDK's server allows) rather than thirty. The
    command's own start, one client per process, is what tests/mcp/test_mcp_stdio.py runs."""

    def __init__(self, api_url: str, token: str, log: Path) -> None:
        environment = clean_environment()
        environment.update(
            RIVERBEAM_TOKEN=token, RIVERBEAM_API_URL=api_url, PYTHONPATH=str(PROJECT_ROOT)
        )
        self.stdio = stdio = _Process([sys.executable, "-m", "bot.cli", "mcp"], environment, log)
        sessions: set[str] = set()

        class Bridge(_Handler):
            def do_POST(self) -> None:
                try:
                    sent = json.loads(self.body())
                except ValueError:
                    return self.reply(400, b"not JSON")
                messages: list[Message] = sent if isinstance(sent, list) else [sent]
                name = self.headers.get("Mcp-Session-Id") or ""
                if any(m.get("method") == "initialize" for m in messages):
                    name = uuid.uuid4().hex
                    sessions.add(name)
                elif name not in sessions:
                    return self.reply(404 if name else 400, b"no such session")
                inbox: queue.Queue[Message | None] = queue.Queue()
                stdio.send(messages, inbox)
                expected = sum(1 for m in messages if "method" in m and "id" in m)
                if not expected:
                    return self.reply(202, headers={"Mcp-Session-Id": name})
                self.begin(200, {"Content-Type": "text/event-stream", "Mcp-Session-Id": name})
                while expected:
                    message = inbox.get(timeout=SUITE_SECONDS)
                    if message is None:  # the process ended
                        break
                    expected -= "method" not in message
                    self.chunk(f"event: message\ndata: {json.dumps(message)}\n\n".encode())
                self.finish_chunks()

            def do_GET(self) -> None:
                # No stream for messages outside a call: the stdio server sends none.
                self.reply(405, headers={"Allow": "POST, DELETE"})

            def do_DELETE(self) -> None:
                name = self.headers.get("Mcp-Session-Id") or ""
                self.reply(200 if name in sessions else 404)
                sessions.discard(name)

        self.server = _Loopback(Bridge)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Traceback
    ) -> None:
        super().__exit__(kind, error, tb)
        self.stdio.stop()
