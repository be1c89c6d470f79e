"""The whole job service for end-to-end tests: real Redis, real Celery worker processes, real
containers, a real bare upstream. Only the model is scripted (``harness.playbooks``).

::

    with job_stack() as stack:
        stack.start_worker("a")
        job = stack.submit(JobKind.AUTHOR, "author-fix-install", request="Fix the install page")
        parked = stack.wait_for(job.id, JobState.AWAITING_APPROVAL)
        stack.decide(job.id, approve=True)
        done = stack.wait_for(job.id, JobState.SUCCEEDED)

``job_stack`` starts a ``redis-server``, seeds a bare upstream (``docs`` repository, branch
``main``, the pages of ``playbooks.SEED_PAGES``) with reflogs on, writes a ``riverbeam.toml``
registering it, and builds the sandbox image if the code changed. Each worker is a
``python -m celery ... worker`` process in its own session, with its own workspace root and
mirror cache (``RIVERBEAM_WORKSPACES__ROOT``/``__MIRRORS``), so two workers behave like two
hosts; ``start_worker(name, host=H)`` puts workers on one simulated host H instead (they
share its workspace root and mirrors); ``start_worker(name, tree=T)`` runs the code of
source tree T (a previous release, for the upgrade test). ``stop_worker`` sends SIGTERM
(a warm shutdown) and waits; ``kill_worker`` sends SIGKILL to the worker's whole process
group, as a crashed host would.

For the other kinds: ``push_branch`` puts a branch with one commit upstream (what review,
summarize and commit-notes read), and the repository's ``publish_ref`` is ``PUBLISH_REF``.
The playbooks ``review-approve``, ``summarize``, ``commit-notes`` and ``publish`` drive
them. ``job_stack(repositories={...})`` adds keys to the ``docs`` repository's table (a
``summary_schedule``, a ``summary_webhook``) or registers more repositories on the same
upstream; ``submit(..., repo=NAME)`` names one. ``job_stack(more_config={"jobs": {...}})`` adds
keys to other tables of the config; ``redis_config`` starts Redis with that file (say
``docker/redis.conf``), and ``stack.redis`` can stop, crash and start it again;
``serve_upstream=True`` registers the upstream over smart HTTP (``harness.git_http``),
where its hooks run. ``worker(name)`` is an in-process
``JobWorker`` (call task bodies directly); ``wait_for`` fails with the workers' log tails
when a job ends elsewhere; ``tool_calls`` reads a job's tool calls from its event stream.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery

from bot.cli.localstack import STOP_SECONDS as LOCAL_STOP_SECONDS
from bot.config import Settings
from bot.core.errors import BeamError
from bot.core.frames import ToolCallRecord, ToolFrame
from bot.jobs.celery_app import create_app
from bot.jobs.tasks import JobWorker
from bot.service.access import Principal, TokenRegistry
from bot.service.jobs import JobService
from bot.service.queues import TaskQueues, worker_queues
from bot.store.models import Approval, JobKind, JobRecord, JobSpec, JobState
from bot.store.store import JobStore
from harness.git_http import GitHttpServer
from harness.gitkit import commit_all, git, traversable_dir, write_files
from harness.playbooks import seed_upstream
from harness.redis_server import RedisServer, running_redis
from harness.workers import IMAGE_BUILD, one_at_a_time
from sandbox.host.container.hardening import (
    ROLE_LABEL,
    ROLE_SANDBOX,
    SPARE_LABEL,
    container_job,
)
from sandbox.host.container.reaper import reap_after_cancel
from sandbox.host.engine import connect
from sandbox.host.image.build import build_image

PROJECT_ROOT = Path(__file__).resolve().parents[1]
REPO = "docs"
REQUESTER = "writer@example.com"
REVIEWER = "reviewer@example.com"
PUBLISH_REF = "docs-live"
READY_SECONDS = 30.0
IMAGE_VARIABLE = "RIVERBEAM_SANDBOX__IMAGE"
# The bound `riverbeam up` gives a worker's warm shutdown (see its reasons there).
STOP_SECONDS = LOCAL_STOP_SECONDS["worker"]


@dataclass
class WorkerProcess:
    name: str
    process: subprocess.Popen[bytes]
    root: Path
    log: Path

    @property
    def hostname(self) -> str:
        return f"{self.name}@riverbeam-test"

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log, lines)


# A worker started by the harness writes every thread's stack to its log on this signal
# (``faulthandler``; forked pool processes inherit it), for a worker that will not stop.
DUMP_SIGNAL = signal.SIGUSR2
_CELERY_WITH_DUMPS = (
    "import faulthandler, signal, sys; "
    f"faulthandler.register(signal.{DUMP_SIGNAL.name}, all_threads=True); "
    "from celery.__main__ import main; sys.argv[0] = 'celery'; sys.exit(main())"
)


def log_tail(log: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a process's log file ("" before it exists)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Stack:
    """A running service; see the module docstring."""

    base: Path
    redis_url: str
    config: Path
    upstream: Path
    settings: Settings
    store: JobStore
    app: Celery
    redis: RedisServer
    workers: dict[str, WorkerProcess] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)
    in_process: dict[str, JobWorker] = field(default_factory=dict)

    @property
    def service(self) -> JobService:
        """The job service the CLI builds for these settings (an operator's, no tokens)."""
        return JobService(
            self.settings,
            self.store,
            TaskQueues(self.app),
            TokenRegistry(()),
            after_cancel=reap_after_cancel(self.store.gateway.deployment),
        )

    # -- workers ------------------------------------------------------------------------

    def start_worker(
        self,
        name: str,
        *,
        queues: list[str] | None = None,
        pool: str = "prefork",
        concurrency: int = 1,
        env: Mapping[str, str] | None = None,
        host: str | None = None,
        tree: Path = PROJECT_ROOT,
    ) -> WorkerProcess:
        """Start a worker process (``concurrency`` pool processes) and wait until it
        consumes; its workspace root and mirror cache are its own (``<base>/<name>/``), or
        those of simulated ``host`` (``<base>/<host>/``) shared with the host's other
        workers. ``tree``: the source tree it runs (another release's, for an upgrade)."""
        self.hosts[name] = host or name
        root = self.base / self.hosts[name]
        root.mkdir(mode=0o711, exist_ok=True)
        log = root / f"{name}.log"
        own = self.worker_settings(name).workspaces
        environment = {
            **clean_environment(),
            "RIVERBEAM_CONFIG": str(self.config),
            "RIVERBEAM_WORKSPACES__ROOT": str(own.root),
            "RIVERBEAM_WORKSPACES__MIRRORS": str(own.mirrors),
            "PYTHONPATH": str(tree),
            **(env or {}),
        }
        command = [
            sys.executable,
            "-c",
            _CELERY_WITH_DUMPS,
            "-A",
            "bot.jobs.celery_app",
            "worker",
            "--queues",
            ",".join(queues or worker_queues()),
            "--concurrency",
            str(concurrency),
            "--pool",
            pool,
            "--hostname",
            f"{name}@riverbeam-test",
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        with log.open("wb") as output:
            process = subprocess.Popen(
                command,
                cwd=tree,
                env=environment,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProcess(name, process, root, log)
        self.workers[name] = worker
        wait_until(
            lambda: " ready." in worker.log.read_text(errors="replace"),
            READY_SECONDS,
            lambda: f"worker {name} did not get ready:\n{worker.log_tail()}",
            alive=process,
        )
        return worker

    def stop_worker(self, name: str) -> int:
        """SIGTERM (warm shutdown: the current task finishes); returns the exit code."""
        worker = self.workers.pop(name)
        worker.process.send_signal(signal.SIGTERM)
        try:
            return worker.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            # What each thread of the worker and its pool was doing, into its log, first.
            os.killpg(worker.process.pid, DUMP_SIGNAL)
            time.sleep(1.0)
            os.killpg(worker.process.pid, signal.SIGKILL)
            worker.process.wait()
            tail = worker.log_tail(lines=200)
            raise AssertionError(f"worker {name} ignored SIGTERM:\n{tail}") from None

    def kill_worker(self, name: str) -> None:
        """SIGKILL the worker and its pool processes: a host that died mid-flight."""
        worker = self.workers.pop(name)
        os.killpg(worker.process.pid, signal.SIGKILL)
        worker.process.wait()
        # A pool process in uninterruptible sleep dies only when it wakes: wait for the whole
        # group, so what the test checks next sees a dead host, not a dying one.
        deadline = time.monotonic() + 30
        while _group_alive(worker.process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def worker_settings(self, name: str) -> Settings:
        """The settings worker ``name`` runs with: its host's workspace root and mirrors."""
        root = self.base / self.hosts.get(name, name)
        workspaces = self.settings.workspaces.model_copy(
            update={"root": root / "workspaces", "mirrors": root / "mirrors"}
        )
        return self.settings.model_copy(update={"workspaces": workspaces})

    def worker(self, name: str) -> JobWorker:
        """An in-process ``JobWorker`` with its own workspace root under ``<base>/<name>``:
        calls the task bodies directly (a redelivered message, a duplicate). One per name,
        as one worker process, closed (its spares removed) when the stack stops."""
        if name not in self.in_process:
            (self.base / name).mkdir(mode=0o711, exist_ok=True)
            settings = self.worker_settings(name)
            self.in_process[name] = JobWorker(settings, name=f"{name}@in-process", store=self.store)
        return self.in_process[name]

    # -- jobs ---------------------------------------------------------------------------

    def submit(self, kind: JobKind, playbook: str, *, repo: str = REPO, **fields: Any) -> JobRecord:
        metadata = {"playbook": playbook, **fields.pop("metadata", {})}
        spec = JobSpec(kind=kind, repo=repo, requested_by=REQUESTER, metadata=metadata, **fields)
        return self.service.submit(Principal.operator(REQUESTER), spec)

    def decide(
        self,
        job_id: str,
        *,
        approve: bool,
        by: str = REVIEWER,
        comment: str = "",
        override_checks: bool = False,
    ) -> Approval:
        """Decide the job's current approval, as a reviewer who looked at it."""
        current = self.store.approvals.get(job_id)
        return self.service.decide(
            Principal.operator(by),
            job_id,
            approve=approve,
            comment=comment,
            binding=current.binding() if current is not None else None,
            override_checks=override_checks,
        )

    def cancel(self, job_id: str, *, by: str = REQUESTER) -> JobRecord:
        """Cancel the job, as its requester."""
        return self.service.cancel(Principal.operator(by), job_id)

    def wait_for(self, job_id: str, *states: JobState, timeout: float = 30.0) -> JobRecord:
        """The job once it is in one of ``states``; fails with the workers' logs on timeout
        or when the job ends in another state."""
        found: list[JobRecord] = []

        def reached() -> bool:
            record = self.store.jobs.get(job_id)
            found[:] = [record]
            if record.state.is_final and record.state not in states:
                raise AssertionError(self._report(record, states))
            return record.state in states

        wait_until(reached, timeout, lambda: self._report(found[-1] if found else None, states))
        return found[-1]

    def _report(self, record: JobRecord | None, states: tuple[JobState, ...]) -> str:
        wanted = ", ".join(state.value for state in states)
        shown = record.model_dump_json(indent=2) if record else "(not read)"
        return f"job did not reach {wanted}:\n{shown}\n{self.log_tails()}"

    def log_tails(self) -> str:
        """The tail of each worker's log, for a failure message."""
        return "\n".join(
            f"--- worker {name} ---\n{worker.log_tail()}" for name, worker in self.workers.items()
        )

    def tool_calls(self, job_id: str, name: str | None = None) -> list[ToolCallRecord]:
        """The job's tool calls so far (those named ``name``), from its event stream."""
        return [
            event.frame.record
            for event in self.store.events.read(job_id, count=10_000)
            if isinstance(event.frame, ToolFrame) and name in (None, event.frame.record.name)
        ]

    # -- the upstream and the engine ----------------------------------------------------

    def upstream_ref(self, branch: str) -> str | None:
        out = git(
            "-C",
            str(self.upstream),
            "for-each-ref",
            f"refs/heads/{branch}",
            "--format=%(objectname)",
        )
        return out or None

    def push_branch(
        self, branch: str, files: Mapping[str, str], message: str, *, onto: str = "main"
    ) -> str:
        """Someone pushes ``branch`` upstream: ``onto`` plus one commit changing ``files``
        (what review, summarize and commit-notes jobs read). Returns the commit id."""
        work = self.base / f"push-{branch.replace('/', '-')}"
        git("clone", "-q", "--branch", onto, str(self.upstream), str(work))
        write_files(work, files)
        sha = commit_all(work, message)
        git("-C", str(work), "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
        shutil.rmtree(work)
        return sha

    def upstream_updates(self, branch: str) -> list[str]:
        """The reflog of ``branch`` upstream, newest first: one line per update it got."""
        log = self.upstream / "logs" / "refs" / "heads" / branch
        return log.read_text().splitlines()[::-1] if log.exists() else []

    def sandbox_containers(self, job_id: str | None = None) -> list[str]:
        """The sandbox containers of ``job_id`` (by its label, or a claimed spare's name),
        or with None every sandbox container on the engine."""
        found = connect().api.containers(
            all=True, filters={"label": f"{ROLE_LABEL}={ROLE_SANDBOX}"}
        )
        return [
            container["Id"] for container in found if job_id is None or _job_of(container) == job_id
        ]

    def spare_containers(self) -> list[str]:
        """This stack's spare containers, claimed or idle (``bot.jobs.spares``)."""
        found = connect().api.containers(
            all=True, filters={"label": f"{SPARE_LABEL}={self.store.gateway.deployment()}"}
        )
        return [container["Id"] for container in found]


@contextmanager
def job_stack(
    *,
    lease_seconds: float = 10.0,
    repositories: Mapping[str, Mapping[str, object]] | None = None,
    model_factory: str | None = "harness.playbooks:for_job",
    more_config: Mapping[str, Mapping[str, object]] | None = None,
    redis_config: Path | None = None,
    serve_upstream: bool = False,
) -> Iterator[Stack]:
    """Redis, a seeded upstream, a config and a Celery app; no worker runs until
    ``start_worker``. Everything started here is stopped on the way out. ``repositories``:
    more keys for ``docs``, or more repositories (on the same upstream unless they say);
    ``model_factory``: the workers' ``model.factory`` (None: the endpoint ``more_config``'s
    ``model`` table names); ``more_config``: keys for other tables
    (``jobs``, ``sandbox``); ``redis_config``: the file Redis starts with;
    ``serve_upstream``: reach the upstream over HTTP instead of its path."""
    with ExitStack() as cleanup:
        base = cleanup.enter_context(traversable_dir("riverbeam-stack-"))
        (base / "redis").mkdir()
        redis = cleanup.enter_context(running_redis(base / "redis", config=redis_config))
        redis_url = redis.url
        upstream = seed_upstream(base / "upstream.git")
        tables = {name: dict(keys) for name, keys in (repositories or {}).items()}
        if serve_upstream:
            served = cleanup.enter_context(GitHttpServer(base))
            tables.setdefault(REPO, {})["upstream"] = served.url_for(upstream)
        config = base / "riverbeam.toml"
        config.write_text(
            _config_text(
                redis_url, upstream, base, lease_seconds, tables, model_factory, _more(more_config)
            )
        )
        settings = Settings(**tomllib.loads(config.read_text()))
        with one_at_a_time(IMAGE_BUILD):
            build_image(settings, client=connect())
        store = JobStore.from_url(redis_url, prefix=settings.jobs.prefix)
        stack = Stack(
            base=base,
            redis_url=redis_url,
            config=config,
            upstream=upstream,
            settings=settings,
            store=store,
            app=create_app(settings),
            redis=redis,
        )
        cleanup.callback(_stop_all, stack)
        yield stack


def _more(
    more_config: Mapping[str, Mapping[str, object]] | None,
) -> Mapping[str, Mapping[str, object]]:
    """``more_config``, with the sandbox image this process builds (``RIVERBEAM_SANDBOX__IMAGE``
    when set) written in: the workers' environment leaves ``RIVERBEAM_*`` out, and they must
    run the image the stack built, not another of the same code that may be gone."""
    more = dict(more_config or {})
    image = os.environ.get("RIVERBEAM_SANDBOX__IMAGE")
    if image:
        more["sandbox"] = {"image": image, **more.get("sandbox", {})}
    return more


def _config_text(
    redis_url: str,
    upstream: Path,
    base: Path,
    lease_seconds: float,
    repositories: Mapping[str, Mapping[str, object]],
    model_factory: str | None,
    more: Mapping[str, Mapping[str, object]],
) -> str:
    tables = {REPO: {"upstream": str(upstream), "publish_ref": PUBLISH_REF}}
    for name, keys in repositories.items():
        tables.setdefault(name, {"upstream": str(upstream)}).update(keys)
    jobs = {"prefix": "rbtest", "lease_seconds": lease_seconds, **more.get("jobs", {})}
    others = {
        name: keys for name, keys in more.items() if name not in ("jobs", "workspaces", "model")
    }
    registered = "".join(_table(f"repositories.{name}", keys) for name, keys in tables.items())
    return (
        f'redis_url = "{redis_url}"\n\n'
        f"{registered}"
        "[workspaces]\n"
        f'root = "{base / "workspaces"}"\n'
        f'mirrors = "{base / "mirrors"}"\n\n'
        + _table("model", {**_factory(model_factory), **more.get("model", {})})
        + "".join(_table(name, keys) for name, keys in {"jobs": jobs, **others}.items())
    )


def _factory(model_factory: str | None) -> dict[str, object]:
    return {} if model_factory is None else {"factory": model_factory}


def _table(name: str, keys: Mapping[str, object]) -> str:
    return f"[{name}]\n" + "".join(f"{key} = {_value(v)}\n" for key, v in keys.items()) + "\n"


def _value(value: object) -> str:
    """``value`` in TOML: a mapping as an inline table; JSON strings, numbers, booleans and
    lists of them are valid TOML values."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{key} = {_value(v)}" for key, v in value.items()) + "}"
    return json.dumps(value)


def _stop_all(stack: Stack) -> None:
    for name in list(stack.workers):
        worker = stack.workers[name]
        if worker.process.poll() is None:
            stack.stop_worker(name)
        else:
            stack.workers.pop(name)
    for in_process in stack.in_process.values():
        in_process.close()
    # A container a test left behind (a worker killed mid-segment) goes, if it belongs to
    # a job of this stack, or is one of its spares; tests assert on containers before this.
    client = connect()
    try:
        spares = set(stack.spare_containers())
    except BeamError:
        spares = set()  # the store is unreachable (a fault test): its spares go by deadline
    for container in client.api.containers(
        all=True, filters={"label": f"{ROLE_LABEL}={ROLE_SANDBOX}"}
    ):
        job_id = _job_of(container)
        if container["Id"] in spares or (job_id and not _unknown(stack.store, job_id)):
            client.api.remove_container(container["Id"], force=True)


def _job_of(container: dict[str, Any]) -> str:
    return container_job(container.get("Labels") or {}, container.get("Names") or [])


def _unknown(store: JobStore, job_id: str) -> bool:
    try:
        store.jobs.get(job_id)
    except BeamError:
        return True
    return False


# Kept for the workers: the stack built the image under this name (one per checkout).
_KEPT_SETTINGS = frozenset({"RIVERBEAM_SANDBOX__IMAGE"})


def clean_environment() -> dict[str, str]:
    """The test process's environment without model keys or Riverbeam settings (but the
    sandbox image's name, which the stack built)."""
    return {
        name: value
        for name, value in os.environ.items()
        if name in _KEPT_SETTINGS
        or not name.startswith(("RIVERBEAM_", "BEAM_", "GFS_", "NVIDIA_", "OPENAI_"))
    }


def wait_until(
    done: Callable[[], bool],
    timeout: float,
    explain: Callable[[], str],
    *,
    alive: subprocess.Popen[bytes] | None = None,
) -> None:
    """Poll ``done`` until it holds; past ``timeout`` (or once ``alive`` exited) fail with
    ``explain()``."""
    deadline = time.monotonic() + timeout
    while not done():
        if alive is not None and alive.poll() is not None:
            raise AssertionError(explain())
        if time.monotonic() > deadline:
            raise AssertionError(explain())
        time.sleep(0.05)


def _group_alive(group: int) -> bool:
    """Whether a process of ``group`` still runs (a zombie counts as dead)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(group) and fields[0] not in ("Z", "X"):
            return True
    return False
