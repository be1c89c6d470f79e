"""Where a worker process's CPU goes per author job, by part, in this process.

    python -m bench.worker_cpu_bench [--jobs 20] [--profile 30]

The job service of ``harness.stack`` (real Redis, containers, upstream, relay), its workers
in this process (``Stack.worker``: the task bodies called directly, no Celery): each job is
submitted, its first segment run on worker ``a``, approved, and its resume run on ``a``
(even jobs) or on ``b`` (odd ones: another host, which restores the parked snapshot), as
half the resumes do in ``load_bench``. The workers run as ``jobs_bench`` measures them:
``jobs.container_start = "ahead"``, one spare, ``sandbox.runtime = "auto"`` (crun when the
engine has it).

Per segment phase (``bot.jobs.timings``) the CPU-seconds of this process (``process_time``,
every thread: the lease keeper and a spare starting meanwhile land in the phase they ran
beside) and of the children it reaped, and the subprocesses and forks each phase started
(the checkout as the sandbox uid forks). ``(outside)`` is a segment's CPU outside its
phases: the claim, the lease, the spare's refill, the timings line; ``(between)`` what the
worker's threads (a spare starting) spent while no segment ran. Celery's own share
(receiving and acknowledging a message) is not in it; ``jobs_bench``'s workers line has it.

``--profile N``: the measured jobs under ``cProfile`` on the process's CPU clock (so every
thread's CPU lands in the main thread's function running meanwhile), then its top ``N``
functions by own time and by cumulative time (the profiler slows Python code down, so read
its shares, not its seconds).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bench._jobs import MODEL_FACTORY, PLAYBOOK, decide, submit
from bot.jobs.tasks import JobWorker
from bot.jobs.timings import SegmentTimings
from bot.store.models import JobState
from harness.stack import Stack, job_stack

OUTSIDE = "(outside)"
BETWEEN = "(between)"
CONFIG: dict[str, dict[str, object]] = {
    "jobs": {"container_start": "ahead", "spare_containers": 1},
    "sandbox": {"runtime": "auto"},
}


def _cpu() -> tuple[float, float]:
    """This process's CPU-seconds (every thread) and its reaped children's."""
    times = os.times()
    return time.process_time(), times.children_user + times.children_system


@dataclass
class Tally:
    """CPU-seconds and subprocesses by phase, over the measured segments: the CPU since the
    last switch is charged to the phase on top of ``phase`` when it changes."""

    own: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    children: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    spawned: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    phase: list[str] = field(default_factory=lambda: [OUTSIDE])
    mark: tuple[float, float] = (0.0, 0.0)
    on: bool = False

    def switch(self) -> tuple[float, float]:
        """Charge the CPU since the last switch to the current phase; returns it."""
        now = _cpu()
        spent = now[0] - self.mark[0], now[1] - self.mark[1]
        if self.on:
            self.own[self.phase[-1]] += spent[0]
            self.children[self.phase[-1]] += spent[1]
        self.mark = now
        return spent


TALLY = Tally()


def _instrument() -> None:
    """Count each phase's CPU and each subprocess spawned, in this process only."""
    timed = SegmentTimings.phase

    @contextmanager
    def phase(self: SegmentTimings, name: str) -> Iterator[None]:
        TALLY.switch()
        TALLY.phase.append(name)
        try:
            with timed(self, name):
                yield
        finally:
            TALLY.switch()
            TALLY.phase.pop()

    SegmentTimings.phase = phase  # type: ignore[method-assign]
    popen_init = subprocess.Popen.__init__

    def counted(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        words = [str(word) for word in ([args] if isinstance(args, str | bytes) else args)]
        command = " ".join([os.path.basename(words[0]), *words[1:2]])
        if TALLY.on:
            TALLY.spawned[TALLY.phase[-1]][command] += 1
        popen_init(self, args, *rest, **options)

    subprocess.Popen.__init__ = counted  # type: ignore[method-assign]
    fork = os.fork

    def counted_fork() -> int:
        # The checkout as the sandbox uid (``sandbox.host.workspace.checkout``) forks.
        if TALLY.on:
            TALLY.spawned[TALLY.phase[-1]]["fork"] += 1
        return fork()

    os.fork = counted_fork


def _segment(run: Any, job_id: str) -> float:
    """Run one segment; its CPU-seconds (children included). What ran outside any phase is
    charged to ``(outside)``."""
    start = TALLY.mark = _cpu()
    run(job_id)
    TALLY.switch()
    end = _cpu()
    return end[0] - start[0] + end[1] - start[1]


def _timed_segment(run: Any, job_id: str) -> tuple[float, float]:
    """``_segment``, and the CPU-seconds this thread spent in it."""
    started = time.thread_time()
    spent = _segment(run, job_id)
    return spent, time.thread_time() - started


def run_jobs(stack: Stack, count: int, *, measured: bool) -> list[float]:
    """``count`` jobs, each submit → park on ``a`` → approve → resume on ``a`` or ``b``;
    the worker CPU-seconds of each job (both segments, children included)."""
    workers: Sequence[JobWorker] = (stack.worker("a"), stack.worker("b"))
    per_job = []
    TALLY.on = measured
    for index in range(count):
        started, bench = sum(_cpu()), time.thread_time()
        job = submit(stack).job_id
        first, in_first = _timed_segment(workers[0].run_job, job)
        if stack.store.jobs.get(job).state is not JobState.AWAITING_APPROVAL:
            raise AssertionError(f"job {job} did not park: {stack.store.jobs.get(job)}")
        decide(stack, job)
        second, in_second = _timed_segment(workers[index % 2].resume_job, job)
        if stack.store.jobs.get(job).state is not JobState.SUCCEEDED:
            raise AssertionError(f"job {job} did not push: {stack.store.jobs.get(job)}")
        # The benchmark's own calls (submit, decide, reads) ran on this thread outside the
        # segments; what other threads (a spare starting) did meanwhile is the worker's.
        bench = time.thread_time() - bench - in_first - in_second
        total = sum(_cpu()) - started - bench
        if measured:
            TALLY.own[BETWEEN] += total - first - second
        per_job.append(total)
    TALLY.on = False
    return per_job


def report(per_job: list[float], jobs: int) -> str:
    lines = [
        f"worker CPU per job, median of {jobs}: {statistics.median(per_job) * 1000:.1f} ms"
        f" (mean {statistics.mean(per_job) * 1000:.1f})",
        f"  {'part':<14}{'own ms':>9}{'children ms':>12}  subprocesses and forks per job",
    ]
    names = sorted(TALLY.own, key=lambda n: -(TALLY.own[n] + TALLY.children[n]))
    for name in names:
        spawned = ", ".join(
            f"{command} ×{count / jobs:g}" for command, count in TALLY.spawned[name].most_common()
        )
        lines.append(
            f"  {name:<14}{TALLY.own[name] / jobs * 1000:>9.1f}"
            f"{TALLY.children[name] / jobs * 1000:>12.1f}  {spawned}"
        )
    total = sum(TALLY.own.values()) + sum(TALLY.children.values())
    lines.append(f"  {'total':<14}{total / jobs * 1000:>9.1f} (mean per job)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--profile", type=int, default=0, help="top N functions (0: none)")
    parser.add_argument("--dump", help="write the profile to this file too (pstats)")
    options = parser.parse_args(argv)
    _instrument()
    with job_stack(lease_seconds=30.0, model_factory=MODEL_FACTORY, more_config=CONFIG) as stack:
        run_jobs(stack, 4, measured=False)  # mirrors, imports, connections, the image check
        profiler = cProfile.Profile(time.process_time) if options.profile else None
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        per_job = run_jobs(stack, options.jobs, measured=True)
        if profiler is not None:
            profiler.disable()
        elapsed = time.perf_counter() - started
    print(f"{PLAYBOOK}: {options.jobs} jobs in {elapsed:.1f} s")
    print(report(per_job, options.jobs))
    if profiler is not None:
        stats = pstats.Stats(profiler)
        if options.dump:
            stats.dump_stats(options.dump)
        stats.sort_stats("tottime").print_stats(options.profile)
        stats.sort_stats("cumulative").print_stats(options.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
