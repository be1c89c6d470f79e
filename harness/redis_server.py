"""A real ``redis-server`` process on a free loopback port (one of the test process's own,
``harness.workers``), owned by the test session.

``redis_server(workdir)`` yields the URL of a server that lives as long as the block.
``running_redis(workdir)`` yields a ``RedisServer`` that a test can stop, crash, pause and
start again on the same port and data directory, to see what survives a restart or an
outage, and what a hung Redis costs.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.workers import free_port


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One redis-server on a fixed port and directory. Missing Redis fails the test:
    integration tests never skip silently (``tests/run`` installs it)."""

    def __init__(
        self, workdir: Path, *, appendonly: bool = False, config: Path | None = None
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed; run tests/run, which installs it")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        # A config file comes first; the options after it override what it says.
        self._args = [binary] + ([str(config)] if config is not None else [])
        self._args += ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(workdir)]
        if config is None:
            self._args += ["--save", "", "--appendonly", "yes" if appendonly else "no"]
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self._process is not None:
            raise RuntimeError("redis-server is already running")
        process = subprocess.Popen(self._args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self._process = process
        deadline = time.monotonic() + 10
        while not _answers_ping(self.port):
            if process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        """A clean shutdown (SIGTERM): Redis flushes what it persists before it exits."""
        self._end(signal.SIGTERM)

    def crash(self) -> None:
        """SIGKILL: no shutdown work at all, as when the process dies or is OOM-killed."""
        self._end(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the port still accepts connections and nothing answers, as with a hung
        Redis (a host swapping, a stuck disk)."""
        assert self._process is not None, "redis-server is not running"
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._process is not None, "redis-server is not running"
        self._process.send_signal(signal.SIGCONT)

    @contextmanager
    def paused(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def _end(self, how: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a paused server must run to end
            process.send_signal(how)
            process.wait(timeout=10)


@contextmanager
def running_redis(
    workdir: Path, *, appendonly: bool = False, config: Path | None = None
) -> Iterator[RedisServer]:
    server = RedisServer(workdir, appendonly=appendonly, config=config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def redis_server(workdir: Path, *, appendonly: bool = False) -> Iterator[str]:
    """Start redis-server in ``workdir`` and yield its URL."""
    with running_redis(workdir, appendonly=appendonly) as server:
        yield server.url
