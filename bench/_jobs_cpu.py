"""CPU-seconds the job benchmarks spend per job, read from ``/proc`` and the engine's cgroups.

Three parts, each read before and after a measured stretch (``CpuMeter.start`` / ``stop``):

- **workers**: every worker's process tree (its main process and pool processes, and what
  they reaped): user + system time from ``/proc/<pid>/stat``. Exactly this run's.
- **containers**: the run's sandbox containers (labelled with one of its jobs, as the code
  before issue 18 labelled them too, or its deployment's spares, idle or claimed,
  ``bot.jobs.spares``): each one's
  cgroup CPU (``cpuacct.usage``, cgroup v1, or ``cpu.stat`` ``usage_usec``, v2), read every
  ``POLL_SECONDS`` while it exists, so the last moments before its removal may be missed
  (a lower bound); plus its ``containerd-shim`` process tree (the shim and the ``runc``
  calls it reaped), read the same way.
- **engine**: ``dockerd`` and ``containerd`` (and what they reaped). Shared by every client
  of the engine: on a machine where other sessions start containers, theirs is in it too.

The figures are for comparing: the baseline and the new setting are measured the same way, in
the same run, so what the method misses or lets in weighs on both alike.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import threading
from dataclasses import dataclass, field
from pathlib import Path

from docker import DockerClient
from docker.errors import DockerException

from harness.procstat import cpu_seconds, stat_fields
from harness.stack import Stack
from sandbox.host.container.hardening import JOB_LABEL, ROLE_LABEL, ROLE_SANDBOX, SPARE_LABEL
from sandbox.host.engine import connect

POLL_SECONDS = 0.1
# What ``CpuMeter`` notes for a spare of the run's workers: it counts, claimed or idle.
_SPARE = "(spare)"
CONTAINER_STARTS = ("ahead", "on_demand", "eager")
# The baseline whose workers run an older commit's code (``bench._previous_tree``).
PREVIOUS = "previous"
BEFORE_ISSUE_18 = "eb61274"
"""The last commit before issue 18's work (2026-12-01 20:54): the previous baseline's code."""
ENGINE_DAEMONS = ("dockerd", "containerd")
SHIM = "containerd-shim"  # /proc/<pid>/comm is cut at 15 characters
CGROUP_ROOTS = (
    Path("/sys/fs/cgroup/cpuacct/docker"),
    Path("/sys/fs/cgroup/cpu,cpuacct/docker"),
    Path("/sys/fs/cgroup/system.slice"),
)


def _processes() -> dict[int, tuple[int, str]]:
    """Every process: pid → (parent pid, command name)."""
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        fields = stat_fields(int(entry.name))
        if fields is not None:
            found[int(entry.name)] = (int(fields[1]), comm)
    return found


def _tree(root: int, processes: dict[int, tuple[int, str]]) -> set[int]:
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [p for p, (ppid, _) in processes.items() if ppid == parent and p not in tree]
        tree.update(children)
        frontier.extend(children)
    return tree


def process_tree(root: int) -> set[int]:
    """``root`` and every process descended from it."""
    return _tree(root, _processes())


def add_setting_arguments(parser: argparse.ArgumentParser) -> None:
    """``--container-start`` and ``--spares`` (the setting measured), and ``--baseline``,
    ``--baseline-commit``, ``--baseline-spares`` and ``--baseline-runtime`` (measured
    first)."""
    parser.add_argument(
        "--container-start", choices=CONTAINER_STARTS, default="ahead", help="jobs.container_start"
    )
    parser.add_argument(
        "--spares", type=int, default=1, help="jobs.spare_containers of the measured setting"
    )
    parser.add_argument(
        "--baseline",
        choices=[PREVIOUS, *CONTAINER_STARTS, "none"],
        default=PREVIOUS,
        help="measured first, to compare with: previous (the workers run the code of "
        "--baseline-commit), a jobs.container_start of this code, or none (skip it)",
    )
    parser.add_argument(
        "--baseline-commit",
        default=BEFORE_ISSUE_18,
        help="the commit whose code the previous baseline's workers run (default: "
        f"{BEFORE_ISSUE_18}, the code before issue 18)",
    )
    parser.add_argument(
        "--baseline-spares",
        type=int,
        default=0,
        help="jobs.spare_containers of a baseline of this code (0: none, as before spares)",
    )
    parser.add_argument("--runtime", default="auto", help="sandbox.runtime of the measured setting")
    parser.add_argument(
        "--baseline-runtime",
        default="runc",
        help="sandbox.runtime of a baseline of this code (runc: the runtime before issue 18)",
    )


def _named(container_start: str, spares: int) -> str:
    return f"{container_start}+spares={spares}" if spares else container_start


def settings_to_run(options: argparse.Namespace) -> list[str]:
    """The settings to measure, the baseline first: ``previous`` (the older commit's code),
    or a ``jobs.container_start`` of this code, with ``+spares=N`` when it runs with
    ``jobs.spare_containers`` N."""
    measured = _named(options.container_start, options.spares)
    if options.baseline == "none":
        return [measured]
    if options.baseline == PREVIOUS:
        return [PREVIOUS, measured]
    return [_named(options.baseline, options.baseline_spares), measured]


def container_start_of(setting: str) -> str:
    """The ``jobs.container_start`` of a setting's name (the older code's: in line)."""
    return "eager" if setting == PREVIOUS else setting.partition("+")[0]


def setting_label(options: argparse.Namespace, setting: str) -> str:
    """How the reports name a setting."""
    if setting == PREVIOUS:
        return f"code of {options.baseline_commit}"
    return f"container_start={setting}"


def runtime_of(options: argparse.Namespace, setting: str) -> str:
    """The ``sandbox.runtime`` a setting's stack runs with: a baseline's own, so that a
    baseline of this code is the configuration before issue 18 (start in line, on runc);
    the older code's containers run on the engine's default, as they did."""
    if setting == PREVIOUS:
        return f"{connect().info().get('DefaultRuntime', '?')} (the engine's default)"
    baseline, measured = settings_to_run(options)[0], settings_to_run(options)[-1]
    return str(options.baseline_runtime if setting == baseline != measured else options.runtime)


def stack_config(options: argparse.Namespace, setting: str) -> dict[str, dict[str, object]]:
    """The configuration a setting's stack adds to the benchmark's (none for the older
    code's: it knows none of these keys)."""
    if setting == PREVIOUS:
        return {}
    spares = setting.partition("+spares=")[2]
    return {
        "jobs": {
            "container_start": container_start_of(setting),
            "spare_containers": int(spares or 0),
        },
        "sandbox": {"runtime": runtime_of(options, setting)},
    }


def _cgroup_seconds() -> dict[str, float]:
    """Every running container's cgroup CPU-seconds so far, by container id."""
    found: dict[str, float] = {}
    for root in CGROUP_ROOTS:
        if not root.is_dir():
            continue
        for entry in root.iterdir():
            container_id = entry.name.removeprefix("docker-").removesuffix(".scope")
            if len(container_id) != 64:
                continue
            try:
                if (entry / "cpuacct.usage").exists():
                    found[container_id] = int((entry / "cpuacct.usage").read_text()) / 1e9
                else:
                    usage = (entry / "cpu.stat").read_text().split("usage_usec", 1)[1].split()[0]
                    found[container_id] = int(usage) / 1e6
            except (OSError, IndexError, ValueError):
                continue
    return found


def _shim_container(pid: int) -> str | None:
    """The container a ``containerd-shim`` process runs (its ``-id`` argument)."""
    try:
        command = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for flag, value in itertools.pairwise(command):
        if flag == b"-id":
            return value.decode(errors="replace")
    return None


@dataclass
class CpuFigures:
    workers: float
    containers: float
    engine: float
    containers_seen: int

    @property
    def total(self) -> float:
        return self.workers + self.containers + self.engine


@dataclass
class CpuMeter:
    """Measures the CPU a stretch of the run costs (see the module docstring)."""

    stack: Stack
    jobs: set[str]
    _containers: dict[str, float] = field(default_factory=dict)
    _shims: dict[int, float] = field(default_factory=dict)
    _job_of: dict[str, str | None] = field(default_factory=dict)
    _client: DockerClient = field(default_factory=connect)
    _before: tuple[float, float] = (0.0, 0.0)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._before = (self._workers(), self._engine())
        self._thread = threading.Thread(target=self._poll, name="cpu-meter", daemon=True)
        self._thread.start()

    def stop(self) -> CpuFigures:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        workers, engine = self._workers(), self._engine()
        return CpuFigures(
            workers=workers - self._before[0],
            containers=sum(self._containers.values()) + sum(self._shims.values()),
            engine=engine - self._before[1],
            containers_seen=len(self._containers),
        )

    def _workers(self) -> float:
        processes = _processes()
        trees = [_tree(w.process.pid, processes) for w in self.stack.workers.values()]
        return cpu_seconds(set().union(*trees)) if trees else 0.0

    @staticmethod
    def _engine() -> float:
        processes = _processes()
        daemons = [pid for pid, (_, comm) in processes.items() if comm in ENGINE_DAEMONS]
        # containerd runs under dockerd: each process counted once.
        return cpu_seconds(set().union(*(_tree(pid, processes) for pid in daemons)))

    def _poll(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self._sample()

    def _sample(self) -> None:
        for container_id, seconds in _cgroup_seconds().items():
            if self._is_ours(container_id):
                known = self._containers.get(container_id, 0.0)
                self._containers[container_id] = max(known, seconds)
        processes = _processes()
        for pid, (_, comm) in processes.items():
            if comm.startswith(SHIM):
                shim_of = _shim_container(pid)
                if shim_of is not None and self._is_ours(shim_of):
                    seconds = cpu_seconds(_tree(pid, processes))
                    self._shims[pid] = max(self._shims.get(pid, 0.0), seconds)

    def _is_ours(self, container_id: str) -> bool:
        """Whether the container is one of the run's jobs', or a spare of its workers (its
        labels, looked up once: a spare claimed later keeps them)."""
        if container_id not in self._job_of:
            try:
                labels = self._client.api.inspect_container(container_id)["Config"]["Labels"] or {}
            except (DockerException, KeyError):
                return False  # gone, or not yet known to the engine: asked again next time
            sandbox = labels.get(ROLE_LABEL) == ROLE_SANDBOX
            spare = labels.get(SPARE_LABEL) == self.stack.store.gateway.deployment()
            self._job_of[container_id] = (
                _SPARE if sandbox and spare else labels.get(JOB_LABEL) if sandbox else None
            )
        # The job, not the verdict, is kept: ``jobs`` grows while the run submits them.
        job = self._job_of[container_id]
        return job == _SPARE or job in self.jobs


def cpu_lines(runs: dict[str, tuple[CpuFigures, int]], floor_cpu: list[float]) -> list[str]:
    """CPU-seconds per job of each setting (``runs``: figures and how many jobs they cover),
    beside the in-process floor; then each setting against the first (the baseline)."""
    lines = [
        "CPU-seconds per job (workers' process trees + the run's containers + the engine):",
        f"  {'':40}{'workers':>9}{'containers':>12}{'engine':>9}{'total':>9}",
    ]
    for name, (figures, jobs) in runs.items():
        per = [v / max(jobs, 1) for v in (figures.workers, figures.containers, figures.engine)]
        lines.append(
            f"  {name:<40}"
            + "".join(f"{v:>{w}.3f}" for v, w in zip(per, (9, 12, 9), strict=True))
            + f"{sum(per):>9.3f}   ({jobs} jobs, {figures.containers_seen} containers)"
        )
    floor = statistics.median(floor_cpu) if floor_cpu else 0.0
    lines.append(f"  {'floor, in process':<40}{floor:>39.3f}   (median of {len(floor_cpu)} runs)")
    (first, (base, base_jobs)), *others = runs.items()
    for name, (figures, jobs) in others:
        ratio = (figures.total / max(jobs, 1)) / max(base.total / max(base_jobs, 1), 1e-9)
        lines.append(f"  {name} / {first}: {ratio:.2f}x the CPU per job")
    return lines
