"""Author jobs on real docs repositories, beside the benches' 4-page one, in one run.

    python -m bench.real_repos [--repo NAME=DIR ...] [--jobs 5]

Each ``--repo`` is a bare repository (or a checkout) of a real docs project, registered as
repository NAME of a job stack of its own (``harness.stack``: real Redis, a Celery worker, a
sandbox container per segment, the relay); the baseline is the benches' seeded 4-page
repository (``docs``) on a stack set up alike, first in the same run. By default
``tldr=/tmp/real/tldr.git`` and ``book=/tmp/real/book.git``; one that is absent, or that git
itself cannot fetch, is skipped, and the report says why (how to bring them with the search
tool's ``fetch``: bench/README.md).

The model is the ``author-new-page`` playbook (list the root, write a new page, add, commit,
push), which needs no page of the repository. Per repository, one worker:

1. the first job, on a cold mirror: submit → park (the mirror's fetch is in it), beside a
   plain ``git fetch`` of the same branch into an empty bare repository;
2. ``--jobs`` more, one at a time, each approved and pushed before the next: submit →
   park on the Redis server's clock, the worker process tree's CPU-seconds for the job
   (``bench._jobs_cpu.CpuMeter``), and the tree's peak resident memory while it ran
   (sampled every 50 ms from ``/proc``).

Targets (issue 33), medians: submit → park on tldr at most 1.5× that on the 4-page
repository, worker CPU-seconds per job on tldr at most 0.5, the worker tree at most 300 MiB.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench._jobs import APPROVER, JOB_TIMEOUT_SECONDS, MODEL_FACTORY
from bench._jobs_cpu import CpuMeter, process_tree
from bot.jobs.timings import PREFIX as TIMING_PREFIX
from bot.store.models import JobKind, JobState
from harness.playbooks import AUTHOR_REQUEST
from harness.stack import REPO, Stack, job_stack

PLAYBOOK = "author-new-page"
DEFAULT_REPOS = {"tldr": Path("/tmp/real/tldr.git"), "book": Path("/tmp/real/book.git")}
COLD_TIMEOUT_SECONDS = 600.0
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class JobFigures:
    job_id: str
    to_park: float
    cpu: float
    peak_rss: int  # bytes


@dataclass
class RepoFigures:
    name: str
    files: int
    cold: float = 0.0
    git_fetch: float = 0.0
    jobs: list[JobFigures] = field(default_factory=list)
    # The segment phases of the warm jobs' parking segments (``bot.jobs.timings``), in ms.
    phases: dict[str, list[float]] = field(default_factory=dict)

    def median(self, pick: str) -> float:
        return statistics.median(getattr(job, pick) for job in self.jobs)


class PeakRss:
    """The largest resident memory of a worker's process tree while it runs (``/proc``)."""

    def __init__(self, root: int) -> None:
        self._root = root
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="rss", daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while True:
            self.peak = max(self.peak, _tree_rss(self._root))
            if self._stop.wait(0.05):
                return


def _tree_rss(root: int) -> int:
    total = 0
    for pid in process_tree(root):
        try:
            resident = Path(f"/proc/{pid}/statm").read_text().split()[1]
        except (OSError, IndexError):
            continue  # gone between the listing and the read
        total += int(resident) * _PAGE
    return total


def main() -> None:
    options = _arguments()
    present = {name: path for name, path in options.repo.items() if path.exists()}
    for name, path in options.repo.items():
        if name not in present:
            print(f"skipped {name}: {path} is absent (bench/README.md says how to bring it)")
    with tempfile.TemporaryDirectory(prefix="riverbeam-real-repos-") as scratch:
        upstreams = {name: _bare(path, Path(scratch) / name) for name, path in present.items()}
        fetched = {}
        for name, upstream in upstreams.items():
            try:
                fetched[name] = _git_fetch(upstream)
            except subprocess.CalledProcessError as failed:
                # A fetch snapshot may lack objects of its history: our mirror refuses it
                # (BEM-349) as git does.
                said = failed.stderr.strip().splitlines()
                print(f"skipped {name}: git cannot fetch it ({said[0] if said else failed})")
        figures = [_run(REPO, None, options.jobs)]
        figures += [
            _run(name, upstreams[name], options.jobs, fetch) for name, fetch in fetched.items()
        ]
    _report(figures)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument(
        "--repo",
        action="append",
        type=_named_path,
        help="NAME=DIR: a real repository (default: tldr and book under /tmp/real)",
    )
    options = parser.parse_args()
    options.repo = dict(options.repo) if options.repo else dict(DEFAULT_REPOS)
    return options


def _named_path(value: str) -> tuple[str, Path]:
    name, _, path = value.partition("=")
    if not name or not path:
        raise argparse.ArgumentTypeError("expected NAME=DIR")
    return name, Path(path)


def _bare(path: Path, target: Path) -> Path:
    """A bare upstream with only the default branch (a ``fetch`` snapshot may name objects
    it lacks on other branches), sharing the source's objects."""
    source = path / ".git" if (path / ".git").is_dir() else path
    _git("clone", "-q", "--bare", "--local", str(source), str(target))
    branch = _git("-C", str(target), "symbolic-ref", "--short", "HEAD").strip()
    for ref in _git("-C", str(target), "for-each-ref", "--format=%(refname)").split():
        if ref != f"refs/heads/{branch}":
            _git("-C", str(target), "update-ref", "-d", ref)
    return target


def _run(name: str, upstream: Path | None, jobs: int, git_fetch: float = 0.0) -> RepoFigures:
    repositories = {} if upstream is None else {name: {"upstream": str(upstream)}}
    with job_stack(repositories=repositories, model_factory=MODEL_FACTORY) as stack:
        source = stack.upstream if upstream is None else upstream
        files = len(_git("--git-dir", str(source), "ls-tree", "-r", "--name-only", "HEAD").split())
        figures = RepoFigures(name, files, git_fetch=git_fetch or _git_fetch(source))
        stack.start_worker("a")
        figures.cold = _one(stack, name, COLD_TIMEOUT_SECONDS).to_park
        figures.jobs = [_one(stack, name, JOB_TIMEOUT_SECONDS) for _ in range(jobs)]
        warm = {job.job_id for job in figures.jobs}
        figures.phases = _parking_phases(stack.workers["a"].log, warm)
        print(f"{name}: {files} files, {jobs + 1} jobs done", flush=True)
        return figures


def _one(stack: Stack, repo: str, timeout: float) -> JobFigures:
    worker = stack.workers["a"].process.pid
    record = stack.submit(JobKind.AUTHOR, PLAYBOOK, repo=repo, request=AUTHOR_REQUEST)
    meter = CpuMeter(stack, {record.id})
    meter.start()
    with PeakRss(worker) as rss:
        parked = stack.wait_for(record.id, JobState.AWAITING_APPROVAL, timeout=timeout)
    cpu = meter.stop()
    stack.decide(record.id, approve=True, by=APPROVER)
    stack.wait_for(record.id, JobState.SUCCEEDED, timeout=timeout)
    to_park = parked.updated_at.timestamp() - record.created_at.timestamp()
    return JobFigures(record.id, to_park, cpu.workers, rss.peak)


def _parking_phases(log: Path, jobs: set[str]) -> dict[str, list[float]]:
    """Each phase's durations over the segments of ``jobs`` that parked, from the worker's
    timing lines."""
    phases: dict[str, list[float]] = {}
    for line in log.read_text(errors="replace").splitlines():
        _, found, text = line.partition(TIMING_PREFIX)
        if not found:
            continue
        timing = json.loads(text)
        if timing["job"] in jobs and timing["state"] == JobState.AWAITING_APPROVAL.value:
            for name, value in timing["phases_ms"].items():
                phases.setdefault(name, []).append(value)
    return phases


def _git_fetch(source: Path) -> float:
    """A plain ``git fetch`` of the branch into an empty bare repository (no hard links:
    ``file://``), the cold mirror's baseline."""
    with tempfile.TemporaryDirectory(prefix="riverbeam-git-fetch-") as target:
        _git("init", "-q", "--bare", target)
        started = time.perf_counter()
        _git("-C", target, "fetch", "-q", f"file://{source}", "HEAD:refs/heads/main")
        return time.perf_counter() - started


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def _report(figures: list[RepoFigures]) -> None:
    small = figures[0]
    print()
    print(
        f"{'repository':12} {'files':>7} {'cold job':>9} {'git fetch':>9}"
        f" {'to park':>9} {'x small':>8} {'worker CPU-s':>12} {'peak RSS':>9}"
    )
    for repo in figures:
        park = repo.median("to_park")
        print(
            f"{repo.name:12} {repo.files:7d} {repo.cold:8.2f}s {repo.git_fetch:8.2f}s"
            f" {park:8.2f}s {park / small.median('to_park'):7.2f}x"
            f" {repo.median('cpu'):12.2f} {repo.median('peak_rss') / 2**20:6.0f} MiB"
        )
    print("\nphases of the segment that parks, medians in ms (bot.jobs.timings):")
    for repo in figures:
        shown = ", ".join(
            f"{name} {statistics.median(values):.0f}" for name, values in repo.phases.items()
        )
        print(f"  {repo.name}: {shown}")
    print(
        f"\nmedians of {len(small.jobs)} warm jobs each; the baseline is {small.name} (the"
        " benches' seeded repository). Targets on tldr: to park <= 1.5x the baseline's,"
        " worker CPU-s <= 0.5, peak RSS <= 300 MiB."
    )


if __name__ == "__main__":
    main()
