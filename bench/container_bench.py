"""Sandbox container benchmark: ``python -m bench.container_bench``.

On the current sandbox image, in one run:

- create → ready, broken down by stage (engine create, attach, engine start until the tool
  server's first line, its imports, the tree check, the ready line back on the host), for
  three setups started in turn: the *previous* server (every module imported before the ready
  line, as before the imports were deferred: a copy of the image whose entrypoint imports
  them all first) on runc, and the current one on runc and on crun (when the engine has it);
  with ``--baseline REF``, also an image built from other code (say, main's image, tagged
  before a change to the server), on crun when the engine has it, so a change to the server
  is measured against the code before it in the same run.
  Then ready → first reply (the server loads its tools after the ready line), create →
  first reply, so nothing deferred hides, and the CPU time the container used until then
  (from its cgroup);
- claim → ready of a spare (``bot.jobs.spares``), in turn with the starts above: a spare
  started ahead on the sandbox's settings, the job's clone built in its directory and renamed
  into place, then ``ContainerSandbox.start`` claims it (rename, arguments line, tree check,
  ready line); beside it, create → ready of the same run;
- stop, four ways, each after a served call: the previous stop (close stdin, wait for the
  exit, remove), ``stop`` + remove, ``kill`` + remove, and ``remove(force=True)`` (the current
  ``ContainerSandbox.stop``); each checks that the container is gone;
- tool round trips through the long-lived tool server (``ContainerSandbox.call``) for a small
  ``read_file``, ``list_tree`` and ``git_status``;
- the naive baseline: the same calls as one ``docker exec`` each (a fresh Python in the
  container that opens the tree and runs the tool), through the SDK's ``exec_run``;
- in process: the synchronous dispatcher ``sandbox.inside.sandbox_tools.call_tool`` on the host.

Figures are printed, never asserted. Targets: create → ready ≤ 250 ms median; a small
``read_file`` round trip ≤ 1 ms median and ≥ 50× faster than ``docker exec``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import docker
import pygit2

from bench import percentile
from bench._repo import bench_repository
from bot.config import SandboxLimits, Settings
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.container.runtime import PREFERRED_RUNTIME, engine_runtimes, resolve_runtime
from sandbox.host.engine import connect
from sandbox.host.image.build import build_image
from sandbox.host.workspace.spare_dirs import make_spare_directory
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.sandbox_tools import call_tool
from sandbox.inside.worktree import WorkingTree

PROTECTED = ("main", "release/*")
SMALL_READ = {"path": "docs/section-00/topic-00/page-000.md"}
# (label, tool, arguments, share of --runs): the slower calls get fewer runs.
CALLS: tuple[tuple[str, str, dict[str, Any], float], ...] = (
    ("read_file (small)", "read_file", SMALL_READ, 1.0),
    ("list_tree", "list_tree", {}, 0.2),
    ("git_status", "git_status", {}, 0.05),
)
# One docker exec: a fresh interpreter that opens the tree and runs one tool, as a naive
# sandbox would.
_EXEC_SNIPPET = (
    "import json, sys\n"
    "from sandbox.inside.server import _arguments, open_tree\n"
    "from sandbox.inside.sandbox_tools import call_tool\n"
    "tree = open_tree(_arguments(['--root', '/workspace', '--protected', 'main']))\n"
    "print(json.dumps(call_tool(tree, sys.argv[1], json.loads(sys.argv[2]))))\n"
)
# The previous start: every module the server uses imported before ``main`` runs, so before
# the ready line, as the server did before it deferred them.
_PREVIOUS_ENTRY = (
    "import sys\n"
    "import sandbox.inside.sandbox_tools, sandbox.inside.tree_checks, sandbox.inside.server\n"
    "sys.exit(sandbox.inside.server.main(sys.argv[1:]))\n"
)
# (row label, from stage, to stage): consecutive stages of ``ContainerSandbox.startup_stages``.
STAGES = (
    ("engine create", "create", "created"),
    ("attach", "created", "attached"),
    ("engine start → server main", "attached", "interpreter"),
    ("  of which the start call", "attached", "started"),
    ("imports (jail, ref policy)", "interpreter", "imported"),
    ("tree check", "imported", "checked"),
    ("ready line → host", "checked", "ready"),
    ("create → ready", "create", "ready"),
)
# The same for a claimed spare (``ContainerSandbox.start`` on a started spare).
CLAIM_STAGES = (
    ("rename", "claim", "renamed"),
    ("arguments → server", "renamed", "claimed"),
    ("tree check", "claimed", "checked"),
    ("ready line → host", "checked", "ready"),
    ("claim → ready", "claim", "ready"),
)
SPARE = "spare"
STOPS = ("previous: EOF, exit, remove", "stop + remove", "kill + remove", "remove(force=True)")


@dataclass(frozen=True)
class Timing:
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        return percentile(self.samples, 0.99)


@dataclass(frozen=True)
class Setup:
    """One way of starting the sandbox: an image (current or previous) and a runtime."""

    label: str
    image: str
    limits: SandboxLimits


@dataclass
class StartFigures:
    """Per setup: each stage's samples, first replies, and create → first reply."""

    stages: dict[str, list[float]]
    first_reply: list[float]
    to_first_reply: list[float]
    server_cpu: list[float]


def measure(action: Callable[[], object], runs: int, warmup: int = 3) -> Timing:
    for _ in range(warmup):
        action()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return Timing(tuple(samples))


def _clone(source: Path, destination: Path, uid: int) -> Path:
    """A fresh clone of the generated docs repository, owned by ``uid``, with an index whose
    stat data matches the files: chown changes every ctime, and a stale index would make
    status hash every file, which no real job's clone does."""
    pygit2.clone_repository(str(source), str(destination), checkout_branch="main")
    for top, _, names in os.walk(destination):
        os.chown(top, uid, uid)
        for name in names:
            os.lchown(os.path.join(top, name), uid, uid)
    # This process may not own the clone; the refresh below is the bench's own doing.
    pygit2.option(pygit2.enums.Option.SET_OWNER_VALIDATION, False)
    index = pygit2.Repository(str(destination)).index
    index.add_all()
    index.write()
    pygit2.option(pygit2.enums.Option.SET_OWNER_VALIDATION, True)
    os.chown(destination / ".git" / "index", uid, uid)
    return destination


def _deadline() -> datetime:
    return datetime.now(UTC) + timedelta(hours=1)


@contextmanager
def previous_image(client: docker.DockerClient, image: str) -> Iterator[str]:
    """A copy of ``image`` whose entrypoint imports every module before the server's
    ``main``: the previous start, on the same files. Removed afterwards."""
    api = client.api
    entrypoint: list[str] = list(client.images.get(image).attrs["Config"]["Entrypoint"])
    entrypoint = [*entrypoint[: entrypoint.index("-m")], "-c", _PREVIOUS_ENTRY]
    repository = image.rsplit(":", 1)[0]
    ref = f"{repository}:bench-previous"
    container = api.create_container(image, entrypoint=["/nonexistent"])
    try:
        api.commit(
            container["Id"],
            repository,
            "bench-previous",
            changes=f"ENTRYPOINT {json.dumps(entrypoint)}",
        )
    finally:
        api.remove_container(container["Id"], force=True)
    try:
        yield ref
    finally:
        api.remove_image(ref)


def bench_starts(
    client: docker.DockerClient,
    setups: list[Setup],
    workspace: Path,
    runs: int,
    spare: tuple[Setup, Path, Path] | None = None,
) -> dict[str, StartFigures]:
    """``runs`` starts per setup, taken in turn so that the machine's load falls on all alike;
    each start serves one small read and stops. ``spare``: the setup, source repository and
    scratch directory of a spare's claim, measured in turn with the others (as ``SPARE``)."""
    figures = {setup.label: StartFigures({}, [], [], []) for setup in setups}
    figures[SPARE] = StartFigures({}, [], [], [])
    for index in range(runs + 1):
        for setup in setups:
            sandbox = ContainerSandbox(client, setup.image)
            sandbox.start("bench-ready", workspace, PROTECTED, setup.limits, deadline=_deadline())
            _served(sandbox, figures[setup.label], "create", keep=index > 0)
        if spare is not None:
            _claim_once(client, *spare, figures[SPARE], index)
    if spare is None:
        del figures[SPARE]
    return figures


def _served(sandbox: ContainerSandbox, into: StartFigures, first: str, *, keep: bool) -> None:
    """One small read, then the stop; the start's figures kept unless it warmed the engine."""
    sandbox.call("read_file", SMALL_READ)
    replied = time.monotonic()
    cpu = _container_cpu(sandbox.container_id)
    sandbox.stop()
    if not keep:
        return
    stamps = sandbox.startup_stages
    if cpu is not None:
        into.server_cpu.append(cpu)
    for _, start, end in (*STAGES, *CLAIM_STAGES):
        if start in stamps and end in stamps:
            into.stages.setdefault(f"{start}-{end}", []).append(stamps[end] - stamps[start])
    into.first_reply.append(replied - stamps["ready"])
    into.to_first_reply.append(replied - stamps[first])


def _claim_once(
    client: docker.DockerClient,
    setup: Setup,
    source: Path,
    scratch: Path,
    into: StartFigures,
    index: int,
) -> None:
    """A spare started ahead (not timed), a clone built in its directory and renamed as a
    job's workspace is, then the claim (timed by its stages)."""
    sandbox = ContainerSandbox(client, setup.image)
    token, directory = make_spare_directory(scratch, _deadline(), views=False)
    sandbox.start_spare(token, directory, setup.limits, deadline=_deadline())
    uid = setup.limits.uid
    _clone(source, directory / "tree", uid)
    pygit2.init_repository(str(directory / "outbox.git"), bare=True)
    for top, _, names in os.walk(directory / "outbox.git"):
        os.chown(top, uid, uid)
        for name in names:
            os.lchown(os.path.join(top, name), uid, uid)
    job = scratch / f"bench-claim-{index}"
    os.rename(directory, job)
    try:
        sandbox.start(
            "bench-claim",
            job / "tree",
            PROTECTED,
            setup.limits,
            deadline=_deadline(),
            outbox=job / "outbox.git",
        )
        assert "claim" in sandbox.startup_stages, "the spare was not claimed"
        _served(sandbox, into, "claim", keep=index > 0)
    finally:
        sandbox.stop()
        shutil.rmtree(job, ignore_errors=True)


def _container_cpu(container_id: str | None) -> float | None:
    """CPU seconds the container's processes used so far, from its cgroup on this host (the
    engine's cgroupfs layout, v1 or v2); None where the engine keeps it elsewhere."""
    candidates = [
        (Path(f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage"), 1e-9),
        (Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat"), 1e-6),
        (Path(f"/sys/fs/cgroup/docker/{container_id}/cpu.stat"), 1e-6),
    ]
    for path, unit in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.name == "cpu.stat":
            text = dict(line.split() for line in text.splitlines())["usage_usec"]
        return int(text) * unit
    return None


def bench_stops(
    client: docker.DockerClient, image: str, workspace: Path, limits: SandboxLimits, runs: int
) -> dict[str, Timing]:
    """Each stop after a served call (the server idle, as at a job's end), ways in turn."""
    api = client.api
    samples: dict[str, list[float]] = {way: [] for way in STOPS}
    for _ in range(runs):
        for way in STOPS:
            sandbox = ContainerSandbox(client, image)
            sandbox.start("bench-stop", workspace, PROTECTED, limits, deadline=_deadline())
            sandbox.call("read_file", SMALL_READ)
            container_id = sandbox.container_id
            assert container_id is not None
            started = time.perf_counter()
            if way == STOPS[0]:
                sandbox.stop(graceful=True)
            elif way == STOPS[1]:
                api.stop(container_id, timeout=0)  # PID 1 ignores SIGTERM: no grace to wait
                api.remove_container(container_id, v=True)
            elif way == STOPS[2]:
                api.kill(container_id)
                api.remove_container(container_id, v=True)
            else:
                sandbox.stop()
            samples[way].append(time.perf_counter() - started)
            sandbox.stop()  # the stream, for the ways that went around it; the container is gone
            assert not api.containers(all=True, filters={"id": container_id}), way
    return {way: Timing(tuple(values)) for way, values in samples.items()}


def bench_exec(
    client: docker.DockerClient, container_id: str, tool: str, args: dict[str, Any], runs: int
) -> Timing:
    command = ["python3", "-I", "-c", _EXEC_SNIPPET, tool, json.dumps(args)]

    def once() -> None:
        result = client.api.exec_start(client.api.exec_create(container_id, command)["Id"])
        json.loads(result)

    return measure(once, runs, warmup=1)


def _setups(
    client: docker.DockerClient,
    image: str,
    previous: str,
    limits: SandboxLimits,
    baseline: str | None = None,
) -> list[Setup]:
    registered, _ = engine_runtimes(client.api)
    runc = limits.model_copy(update={"runtime": "runc"})
    setups = [Setup("previous, runc", previous, runc), Setup("current, runc", image, runc)]
    fastest = runc
    if PREFERRED_RUNTIME in registered:
        fastest = limits.model_copy(update={"runtime": PREFERRED_RUNTIME})
        setups.append(Setup(f"current, {PREFERRED_RUNTIME}", image, fastest))
    if baseline is not None:
        setups.append(Setup(f"baseline, {fastest.runtime}", baseline, fastest))
    return setups


def run(
    files: int,
    commits: int,
    runs: int,
    exec_runs: int,
    ready_runs: int,
    stop_runs: int,
    baseline: str | None = None,
) -> str:
    client = connect()
    settings = Settings()
    limits = settings.sandbox
    image = build_image(settings, client=client)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="riverbeam-bench-") as scratch:
        base = Path(scratch)
        source = bench_repository(files=files, commits=commits).path
        workspace = _clone(source, base / "container" / "workspace", limits.uid)
        # The in-process tree belongs to this process's user: libgit2 checks the owner.
        local_copy = _clone(source, base / "host" / "workspace", os.getuid())
        tree = WorkingTree(SandboxRoot(local_copy), PROTECTED)
        scratch = base / "spares"
        scratch.mkdir(mode=0o711)
        spare = (Setup(SPARE, image.ref, limits), source, scratch)
        with previous_image(client, image.ref) as previous:
            setups = _setups(client, image.ref, previous, limits, baseline)
            starts = bench_starts(client, setups, workspace, ready_runs, spare)
        stops = bench_stops(client, image.ref, workspace, limits, stop_runs)
        rows: list[tuple[str, Timing, Timing, Timing]] = []
        with ContainerSandbox(client, image.ref) as sandbox:
            sandbox.start("bench-calls", workspace, PROTECTED, limits, deadline=_deadline())
            container_id = sandbox.container_id
            assert container_id is not None
            for label, tool, args, share in CALLS:
                count = max(10, round(runs * share))
                served = measure(functools.partial(sandbox.call, tool, args), count)
                execed = bench_exec(client, container_id, tool, args, exec_runs)
                local = measure(functools.partial(call_tool, tree, tool, args), count)
                rows.append((label, served, execed, local))
    header = (
        f"sandbox container benchmark: {image.ref}, {files:,}-file / {commits:,}-commit "
        f"repository; load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end "
        f"on {os.cpu_count()} CPUs"
    )
    runtime = resolve_runtime(client.api, limits.runtime)
    return "\n\n".join(
        [
            header,
            render_starts(starts, ready_runs),
            render_claims(starts, runtime),
            render_stops(stops),
            render_calls(rows),
        ]
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:9.1f} ms"


def render_claims(starts: dict[str, StartFigures], runtime: str) -> str:
    """A spare's claim → ready by stage, beside create → ready of the same run."""
    claims = starts[SPARE]
    lines = [
        f"claim → ready of a spare (sandbox.runtime = {runtime}; median, in turn with the above)"
    ]
    for row, first, last in CLAIM_STAGES:
        lines.append(f"{row:32}{_ms(statistics.median(claims.stages[f'{first}-{last}'])):>18}")
    lines.append(f"{'ready → first reply':32}{_ms(statistics.median(claims.first_reply)):>18}")
    lines.append(f"{'claim → first reply':32}{_ms(statistics.median(claims.to_first_reply)):>18}")
    if claims.server_cpu:
        cpu = statistics.median(claims.server_cpu)
        lines.append(f"{'spare CPU, start to first reply':32}{_ms(cpu):>18}")
    claimed = statistics.median(claims.stages["claim-ready"])
    for label, figures in starts.items():
        if label != SPARE:
            created = statistics.median(figures.stages["create-ready"])
            lines.append(
                f"create → ready, {label}: {_ms(created).strip()}; "
                f"claim → ready {created / claimed:.1f}× shorter"
            )
    return "\n".join(lines)


def render_starts(starts: dict[str, StartFigures], runs: int) -> str:
    starts = {label: figures for label, figures in starts.items() if label != SPARE}
    labels = list(starts)
    lines = [
        f"create → ready, by stage (median of {runs} starts per setup, in turn)",
        f"{'':32}" + "".join(f"{label:>18}" for label in labels),
    ]
    for row, first, last in STAGES:
        key = f"{first}-{last}"
        cells = [starts[label].stages.get(key) for label in labels]
        lines.append(
            f"{row:32}"
            + "".join(
                f"{_ms(statistics.median(c)):>18}" if c else f"{'(in main)':>18}" for c in cells
            )
        )
    for row, attribute in (
        ("ready → first reply", "first_reply"),
        ("create → first reply", "to_first_reply"),
    ):
        medians = [statistics.median(getattr(starts[label], attribute)) for label in labels]
        lines.append(f"{row:32}" + "".join(f"{_ms(cell):>18}" for cell in medians))
    cpu = [starts[label].server_cpu for label in labels]
    lines.append(
        f"{'server CPU to first reply':32}"
        + "".join(f"{_ms(statistics.median(c)):>18}" if c else f"{'n/a':>18}" for c in cpu)
    )
    total = {label: statistics.median(starts[label].stages["create-ready"]) for label in labels}
    current = [label for label in labels if label.startswith("current")]
    lines.append("")
    for label in current:
        ratio = total[labels[0]] / total[label]
        lines.append(f"create → ready, {labels[0]} / {label}: {ratio:.2f}×")
    for label in labels:
        if label.startswith("baseline") and starts[label].server_cpu:
            cpu = {each: statistics.median(starts[each].server_cpu or [0.0]) for each in labels}
            fastest = current[-1]
            lines.append(
                f"create → ready, {label} / {fastest}: {total[label] / total[fastest]:.2f}×; "
                f"server CPU to first reply: {cpu[label] / cpu[fastest]:.2f}×"
            )
    if len(current) == 2:
        lines.append(
            f"create → ready, {current[0]} / {current[1]}: "
            f"{total[current[0]] / total[current[1]]:.2f}×"
        )
    best = min(total[label] for label in current)
    lines.append(f"target: create → ready ≤ 250 ms median: {'met' if best <= 0.250 else 'MISSED'}")
    lines.append(
        "(previous: its imports run before main, so they count in 'engine start → server main')"
    )
    return "\n".join(lines)


def render_stops(stops: dict[str, Timing]) -> str:
    lines = [
        "stop after a served call (median, p99; the container gone after each)",
        *(f"{way:32}{_ms(t.median)}{_ms(t.p99)}" for way, t in stops.items()),
    ]
    previous, current = stops[STOPS[0]], stops[STOPS[-1]]
    lines.append(f"previous / remove(force=True): {previous.median / current.median:.2f}×")
    return "\n".join(lines)


def render_calls(rows: list[tuple[str, Timing, Timing, Timing]]) -> str:
    def ms(seconds: float) -> str:
        return f"{seconds * 1000:9.2f} ms"

    lines = [
        "tool round trips",
        f"{'':20}{'tool server':>26}{'docker exec':>26}{'':>10}{'in-process':>26}",
        f"{'':20}{'median':>13}{'p99':>13}{'median':>13}{'p99':>13}{'exec/srv':>10}"
        f"{'median':>13}{'p99':>13}",
    ]
    for label, served, execed, local in rows:
        ratio = execed.median / served.median
        lines.append(
            f"{label:20}{ms(served.median)}{ms(served.p99)}{ms(execed.median)}{ms(execed.p99)}"
            f"{ratio:9.0f}×{ms(local.median)}{ms(local.p99)}"
        )
    read = rows[0]
    targets = [
        ("small read_file ≤ 1 ms median", read[1].median <= 0.001),
        ("small read_file ≥ 50× faster than docker exec", read[2].median / read[1].median >= 50),
    ]
    lines += [f"target: {name}: {'met' if held else 'MISSED'}" for name, held in targets]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.container_bench")
    parser.add_argument("--files", type=int, default=2_000)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--runs", type=int, default=1000, help="small read_file round trips")
    parser.add_argument("--exec-runs", type=int, default=10, help="docker execs per call")
    parser.add_argument("--ready-runs", type=int, default=20, help="container starts per setup")
    parser.add_argument("--stop-runs", type=int, default=8, help="container stops per way")
    parser.add_argument(
        "--baseline", help="an image built from other code to start beside the current one"
    )
    args = parser.parse_args(argv)
    print(
        run(
            args.files,
            args.commits,
            args.runs,
            args.exec_runs,
            args.ready_runs,
            args.stop_runs,
            args.baseline,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
