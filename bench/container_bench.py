"""Sandbox container benchmark: ``python -m bench.container_bench``.

On the current sandbox image, in one run:

- container create → ready (``ContainerSandbox.start``: create, attach, start, ready line);
- tool round trips through the long-lived tool server (``ContainerSandbox.call``) for a small
  ``read_file``, ``list_tree`` and ``git_status``;
- the naive baseline: the same calls as one ``docker exec`` each (a fresh Python in the
  container that opens the tree and runs the tool), through the SDK's ``exec_run``;
- in process: the synchronous dispatcher ``sandbox.inside.sandbox_tools.call_tool`` on the host.

Figures are printed, never asserted. Targets: ready ≤ 400 ms median; a small ``read_file``
round trip ≤ 1 ms median and ≥ 50× faster than ``docker exec``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
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
from sandbox.host.engine import connect
from sandbox.host.image.build import build_image
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.sandbox_tools import call_tool
from sandbox.inside.worktree import WorkingTree

PROTECTED = ("main", "release/*")
# (label, tool, arguments, share of --runs): the slower calls get fewer runs.
CALLS: tuple[tuple[str, str, dict[str, Any], float], ...] = (
    ("read_file (small)", "read_file", {"path": "docs/section-00/topic-00/page-000.md"}, 1.0),
    ("list_tree", "list_tree", {}, 0.2),
    ("git_status", "git_status", {}, 0.2),
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


@dataclass(frozen=True)
class Timing:
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        return percentile(self.samples, 0.99)


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


def bench_ready(
    client: docker.DockerClient, image: str, workspace: Path, limits: SandboxLimits, runs: int
) -> Timing:
    def start_and_stop() -> float:
        sandbox = ContainerSandbox(client, image)
        started = time.perf_counter()
        sandbox.start("bench-ready", workspace, PROTECTED, limits, deadline=_deadline())
        elapsed = time.perf_counter() - started
        sandbox.stop()
        return elapsed

    start_and_stop()  # warm the engine's caches
    return Timing(tuple(start_and_stop() for _ in range(runs)))


def bench_exec(
    client: docker.DockerClient, container_id: str, tool: str, args: dict[str, Any], runs: int
) -> Timing:
    command = ["python3", "-I", "-c", _EXEC_SNIPPET, tool, json.dumps(args)]

    def once() -> None:
        result = client.api.exec_start(client.api.exec_create(container_id, command)["Id"])
        json.loads(result)

    return measure(once, runs, warmup=1)


def run(files: int, commits: int, runs: int, exec_runs: int, ready_runs: int) -> str:
    client = connect()
    settings = Settings()
    limits = settings.sandbox
    image = build_image(settings, client=client)
    with tempfile.TemporaryDirectory(prefix="riverbeam-bench-") as scratch:
        base = Path(scratch)
        source = bench_repository(files=files, commits=commits).path
        workspace = _clone(source, base / "container" / "workspace", limits.uid)
        # The in-process tree belongs to this process's user: libgit2 checks the owner.
        local_copy = _clone(source, base / "host" / "workspace", os.getuid())
        tree = WorkingTree(SandboxRoot(local_copy), PROTECTED)
        ready = bench_ready(client, image.ref, workspace, limits, ready_runs)
        rows: list[tuple[str, Timing, Timing, Timing]] = []
        with ContainerSandbox(client, image.ref) as sandbox:
            sandbox.start("bench-calls", workspace, PROTECTED, limits, deadline=_deadline())
            container_id = sandbox.container_id
            assert container_id is not None
            for label, tool, args, share in CALLS:
                count = max(10, round(runs * share))
                served = measure(lambda t=tool, a=args: sandbox.call(t, a), count)
                execed = bench_exec(client, container_id, tool, args, exec_runs)
                local = measure(lambda t=tool, a=args: call_tool(tree, t, a), count)
                rows.append((label, served, execed, local))
    return render(image.ref, files, commits, ready, rows)


def render(
    image: str,
    files: int,
    commits: int,
    ready: Timing,
    rows: list[tuple[str, Timing, Timing, Timing]],
) -> str:
    def ms(seconds: float) -> str:
        return f"{seconds * 1000:9.2f} ms"

    lines = [
        f"sandbox container benchmark: {image}, {files:,}-file / {commits:,}-commit repository",
        "",
        f"{'':20}{'tool server':>26}{'docker exec':>26}{'':>10}{'in-process':>26}",
        f"{'':20}{'median':>13}{'p99':>13}{'median':>13}{'p99':>13}{'exec/srv':>10}"
        f"{'median':>13}{'p99':>13}",
        f"{'create → ready':20}{ms(ready.median)}{ms(ready.p99)}",
    ]
    for label, served, execed, local in rows:
        ratio = execed.median / served.median
        lines.append(
            f"{label:20}{ms(served.median)}{ms(served.p99)}{ms(execed.median)}{ms(execed.p99)}"
            f"{ratio:9.0f}×{ms(local.median)}{ms(local.p99)}"
        )
    read = rows[0]
    targets = [
        ("create → ready ≤ 400 ms median", ready.median <= 0.400),
        ("small read_file ≤ 1 ms median", read[1].median <= 0.001),
        ("small read_file ≥ 50× faster than docker exec", read[2].median / read[1].median >= 50),
    ]
    lines.append("")
    lines += [f"target: {name}: {'met' if held else 'MISSED'}" for name, held in targets]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.container_bench")
    parser.add_argument("--files", type=int, default=2_000)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--runs", type=int, default=1000, help="small read_file round trips")
    parser.add_argument("--exec-runs", type=int, default=20, help="docker execs per call")
    parser.add_argument("--ready-runs", type=int, default=20, help="container starts")
    args = parser.parse_args(argv)
    print(run(args.files, args.commits, args.runs, args.exec_runs, args.ready_runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
