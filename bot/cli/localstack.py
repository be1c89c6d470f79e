"""The all-in-one local stack behind ``riverbeam up`` and ``riverbeam demo``.

On loopback, for one configuration: Redis (``docker/redis.conf``: append-only file on, data
under the state directory), the sandbox image (built when stale), a Celery worker and
Celery beat. Each is started only when it is not already running:

- Redis answering at ``redis_url`` is reused; otherwise, when the URL is on this machine,
  ``redis-server`` is started with its data in ``<state>/redis-<port>``.
- Workers and beat are found with a control-channel ping on the broker. Those this code
  starts are named ``riverbeam-<role>-<fingerprint>-<pid>@<host>``, where the fingerprint is
  a hash of the effective settings (all but ``api.tokens``, which reload live), so a running
  one started with the same configuration is recognised and reused. One started with
  another configuration (or by plain ``celery``) is reused too, with a warning; in
  ``strict`` mode (the demo, whose jobs name a repository only its own configuration
  registers) it is an error instead.

The processes started here run in their own sessions (a Ctrl-C in the terminal reaches
only this process, which stops them in order) and, on Linux, get SIGTERM if this process
dies. ``stop`` ends them in reverse order: SIGTERM, a bounded wait (a worker's warm
shutdown lets its current job segment finish), then SIGKILL of the whole process group.

With ``api`` on (``riverbeam up``; the demo works without it), the HTTP API and web pages
come last: anything answering HTTP at ``api.host:api.port`` is reused, else ``riverbeam
api`` is started there and is ready when its OpenAPI document answers.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import redis
from celery import Celery
from rich.console import Console
from rich.text import Text

from bot.cli.paths import state_dir
from bot.config import Settings
from bot.core.errors import BeamError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
REDIS_CONF = PROJECT_ROOT / "docker" / "redis.conf"
# What docker/redis.conf settles, for an installation without the repository's docker/.
REDIS_FALLBACK_OPTIONS = (
    *("--appendonly", "yes", "--appendfsync", "everysec"),
    *("--maxmemory-policy", "noeviction"),
)
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
READY_SECONDS = 60.0
PING_SECONDS = 1.0
# A worker's warm shutdown can take 30 s beyond its task: when a task arrives just as it
# begins, billiard's pool process waits up to 30 s for the main process to read a result
# it no longer reads (docs/jobs.md, Graceful shutdown).
STOP_SECONDS = {"redis": 30.0, "worker": 60.0, "beat": 15.0, "api": 10.0}
LOG_TAIL_LINES = 30
# Said of a worker or beat whose node name does not carry this configuration's fingerprint.
FOREIGN_PROCESS = "started with another configuration, or not by riverbeam (settings unknown)"


def fingerprint(settings: Settings) -> str:
    """A short hash of the effective settings: processes with the same one run the same
    configuration. ``api.tokens`` is left out: the API reloads them on SIGHUP and workers and
    beat never read them, so a changed token does not make them another configuration's."""
    effective = settings.model_dump_json(exclude={"api": {"tokens"}})
    return hashlib.sha256(effective.encode()).hexdigest()[:10]


def node_name(role: str, settings: Settings, pid: int | None = None) -> str:
    """The Celery node name of a worker or beat this code starts (see the module doc)."""
    process = os.getpid() if pid is None else pid
    return f"riverbeam-{role}-{fingerprint(settings)}-{process}@{socket.gethostname()}"


def beat_schedule_file(settings: Settings) -> Path:
    return state_dir() / "beat" / f"{fingerprint(settings)}-schedule"


@dataclass(frozen=True)
class RedisAddress:
    host: str
    port: int
    password: str | None

    @classmethod
    def of(cls, url: str) -> RedisAddress:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise BeamError(
                "BEM-504", f"the local stack runs Redis over TCP, not {parts.scheme}://"
            )
        password = unquote(parts.password) if parts.password else None
        return cls(parts.hostname or "localhost", parts.port or 6379, password)

    @property
    def local(self) -> bool:
        return self.host in LOOPBACK


@dataclass
class Started:
    """A process this stack started: stopped by ``stop``."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-LOG_TAIL_LINES:])


# A process on its way up: it, its Celery node name, and the line that reports it.
Starting = tuple[Started, str, str]


@dataclass
class LocalStack:
    """The local stack for ``settings``: ``start`` brings up what is missing and reports
    each service on ``out``; ``wait`` blocks until Ctrl-C; ``stop`` ends what was started.
    ``strict``: a worker of another configuration on the same Redis is an error (BEM-900),
    not something to reuse."""

    settings: Settings
    out: Console
    concurrency: int | None = None
    strict: bool = False
    api: bool = False
    started: list[Started] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from bot.jobs.celery_app import create_app

        self._state = state_dir()
        self._redis = RedisAddress.of(self.settings.redis_url)
        self._app: Celery = create_app(self.settings)
        self._hurry = threading.Event()

    # -- up ---------------------------------------------------------------------------

    def start(self) -> None:
        """Bring every service up, reusing what runs; on a failure, stop what was started
        and raise."""
        try:
            self._ensure_redis()
            self._ensure_image()
            nodes = self._ping_all()
            # Worker and beat start side by side; each is ready when it answers a ping.
            starting = [self._ensure_worker(nodes), self._ensure_beat(nodes)]
            for started, name, line in filter(None, starting):
                self._wait_ready(started, functools.partial(self._pings, name))
                self._said(line)
            if self.api:
                self._ensure_api()
        except BaseException:
            self.stop()
            raise

    def _ensure_redis(self) -> None:
        where = f"{self._redis.host}:{self._redis.port}"
        if self._redis_answers():
            self._reuse(f"redis at {where}")
            return
        if not self._redis.local:
            raise BeamError(
                "BEM-504",
                f"nothing answers at {where} and it is not on this machine: start that Redis "
                "or point redis_url at one",
            )
        binary = shutil.which("redis-server")
        if binary is None:
            raise BeamError(
                "BEM-504",
                "redis-server is not installed: install it (Debian: apt-get install "
                "redis-server; docker/demo does) or point redis_url at a running Redis",
            )
        data = self._state / f"redis-{self._redis.port}"
        data.mkdir(parents=True, exist_ok=True, mode=0o700)
        config = [str(REDIS_CONF)] if REDIS_CONF.exists() else list(REDIS_FALLBACK_OPTIONS)
        command = [binary, *config, "--port", str(self._redis.port), "--bind", "127.0.0.1"]
        command += ["--dir", str(data), "--daemonize", "no", "--logfile", ""]
        if self._redis.password:
            command += ["--requirepass", self._redis.password]
        started = self._spawn("redis", command, data / "redis.log")
        self._wait_ready(started, self._redis_answers)
        self._said(f"redis at {where} (pid {started.process.pid}, data in {data})")

    def _ensure_image(self) -> None:
        from sandbox.host.image.build import build_image

        with self.out.status("checking the sandbox image (the first build takes a minute or two)"):
            image = build_image(self.settings)
        if image.built:
            self._line("built", f"sandbox image {image.ref} ({image.method})")
        else:
            self._line("current", f"sandbox image {image.ref}")

    def _ensure_worker(self, nodes: list[str]) -> Starting | None:
        from bot.service.queues import HOSTS_QUEUE, worker_queues

        wanted = [queue for queue in worker_queues() if queue != HOSTS_QUEUE]
        mine = f"riverbeam-worker-{fingerprint(self.settings)}-"
        running = self._active_queues([name for name in nodes if not _is_beat(name)])
        ours = {name: queues for name, queues in running.items() if name.startswith(mine)}
        others = sorted(set(running) - set(ours))
        if others and self.strict:
            raise BeamError(
                "BEM-900",
                f"worker {others[0]} serves this Redis ({self.settings.redis_url}) with another "
                "configuration, and would take these jobs; stop it, or use another redis_url",
            )
        for name in others:
            self._reuse(f"worker {name}", warn=FOREIGN_PROCESS)
        for name in ours:
            self._reuse(f"worker {name}")
        served = {queue for queues in running.values() for queue in queues}
        missing = [queue for queue in wanted if queue not in served]
        if not missing:
            return None
        command = [sys.executable, "-m", "bot.cli", "worker", "--queues"]
        command.append(",".join([*missing, HOSTS_QUEUE]))
        if self.concurrency:
            command += ["--concurrency", str(self.concurrency)]
        started = self._spawn("worker", command, self._log(f"worker-{fingerprint(self.settings)}"))
        name = node_name("worker", self.settings, started.process.pid)
        served_here = ", ".join(missing)
        return started, name, f"worker {name} for {served_here} ({_where(started)})"

    def _ensure_beat(self, nodes: list[str]) -> Starting | None:
        beats = [name for name in nodes if _is_beat(name)]
        mine = f"riverbeam-beat-{fingerprint(self.settings)}-"
        for name in beats:
            warn = None if name.startswith(mine) else FOREIGN_PROCESS
            self._reuse(f"beat {name}", warn=warn)
        if beats:
            return None
        command = [sys.executable, "-m", "bot.cli", "beat"]
        started = self._spawn("beat", command, self._log(f"beat-{fingerprint(self.settings)}"))
        name = node_name("beat", self.settings, started.process.pid)
        return started, name, f"beat {name} ({_where(started)})"

    def _ensure_api(self) -> None:
        url = f"http://{self.settings.api.host}:{self.settings.api.port}"
        if self._api_answers(url):
            self._reuse(f"api at {url}")
            return
        command = [sys.executable, "-m", "bot.cli", "api"]
        started = self._spawn("api", command, self._log(f"api-{fingerprint(self.settings)}"))
        self._wait_ready(started, functools.partial(self._api_answers, url))
        self._said(f"api and web pages at {url} ({_where(started)})")

    # -- probes -------------------------------------------------------------------------

    @staticmethod
    def _api_answers(url: str) -> bool:
        import httpx

        try:
            return httpx.get(f"{url}/openapi.json", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    def _redis_answers(self) -> bool:
        client = redis.Redis.from_url(
            self.settings.redis_url, socket_connect_timeout=0.5, socket_timeout=2.0
        )
        try:
            return bool(client.ping())
        except redis.exceptions.AuthenticationError:
            raise BeamError(
                "BEM-504",
                f"Redis at {self._redis.host}:{self._redis.port} refused the password in redis_url",
            ) from None
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            return False
        finally:
            client.close()

    def _ping_all(self) -> list[str]:
        replies = self._app.control.ping(timeout=PING_SECONDS) or []
        return sorted(name for reply in replies for name in reply)

    def _pings(self, name: str) -> bool:
        return bool(self._app.control.ping(destination=[name], timeout=0.5))

    def _active_queues(self, workers: list[str]) -> dict[str, list[str]]:
        """Each of ``workers`` that answers, and the queues it consumes."""
        from bot.jobs.workers import active_queues

        return active_queues(self._app, PING_SECONDS, workers)

    # -- processes ------------------------------------------------------------------------

    def _log(self, name: str) -> Path:
        logs = self._state / "logs"
        logs.mkdir(parents=True, exist_ok=True, mode=0o700)
        return logs / f"{name}.log"

    def _spawn(self, name: str, command: Sequence[str], log: Path) -> Started:
        with log.open("ab") as output:
            process = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        started = Started(name, process, log)
        self.started.append(started)
        return started

    def _wait_ready(self, started: Started, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + READY_SECONDS
        with self.out.status(f"starting {started.name}"):
            while not ready():
                code = started.process.poll()
                if code is not None or time.monotonic() > deadline:
                    why = f"exited with {code}" if code is not None else "did not get ready"
                    raise BeamError(
                        "BEM-510",
                        f"{started.name} {why} (log {started.log}):\n{started.log_tail()}",
                    )
                time.sleep(0.1)

    def _said(self, what: str) -> None:
        self._line("started", what)

    def _reuse(self, what: str, *, warn: str | None = None) -> None:
        self.reused.append(what)
        self._line("reusing", what, warn=warn)

    def _line(self, label: str, what: str, *, warn: str | None = None) -> None:
        style = {"started": "green", "built": "green", "reusing": "cyan"}.get(label, "dim")
        line = Text.assemble((f"  {label:9}", style), what)
        if warn:
            line.append(f" ({warn})", style="yellow")
        self.out.print(line, soft_wrap=True)

    # -- down -----------------------------------------------------------------------------

    def wait(self) -> str:
        """Block until SIGINT or SIGTERM, or until a started process exits; what ended it."""
        stop = threading.Event()
        received: list[str] = []

        def handler(signum: int, frame: object) -> None:
            received.append(signal.Signals(signum).name)
            stop.set()

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not stop.wait(0.5):
                for started in self.started:
                    code = started.process.poll()
                    if code is not None:
                        return f"{started.name} exited with {code}:\n{started.log_tail()}"
            return f"{received[0]} received"
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    def stop(self) -> None:
        """Stop what this stack started, newest first. A second SIGINT or SIGTERM while it
        waits kills what is left at once."""

        def hurry(signum: int, frame: object) -> None:
            self.out.print("  stopping at once: killing what is left")
            self._hurry.set()

        previous = {}
        if self.started and threading.current_thread() is threading.main_thread():
            previous = {sig: signal.signal(sig, hurry) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while self.started:
                self._stop_one(self.started.pop())
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
            self._app.close()

    def _stop_one(self, started: Started) -> None:
        process = started.process
        if process.poll() is None:
            with self.out.status(f"stopping {started.name} (pid {process.pid})"):
                process.send_signal(signal.SIGTERM)
                deadline = time.monotonic() + STOP_SECONDS[started.name]
                while process.poll() is None and time.monotonic() < deadline:
                    if self._hurry.wait(0.1):
                        break
        how = "stopped" if process.poll() is not None else "killed"
        # Whatever is left in its process group (a worker's pool children) goes too.
        _kill_group(process.pid)
        process.wait()
        self._line(how, f"{started.name} (pid {process.pid})")


def _where(started: Started) -> str:
    return f"pid {started.process.pid}, log {started.log}"


def _is_beat(name: str) -> bool:
    return name.startswith(("riverbeam-beat-", "celerybeat@"))


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the parent dies (Linux), so a killed
    ``up`` leaves nothing running."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)
