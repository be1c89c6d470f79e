"""The job service end to end: scripted author jobs through real workers, in one run.

    python -m bench.jobs_bench [--jobs 60] [--workers 2] [--concurrency 1] [--latency-jobs 10]
                               [--container-start ahead] [--spares 1]
                               [--baseline previous|eager|ahead|on_demand|none]
                               [--baseline-commit eb61274] [--baseline-spares 0]

Everything but the model is real: a ``redis-server``, ``--workers`` Celery worker processes
(prefork, ``--concurrency`` pool processes each, each worker with its own workspace root and
mirror cache, like separate hosts), one sandbox container per job segment, a bare upstream,
the relay. The model is the ``author-fix-install`` playbook of ``harness.playbooks``
(list the tree, read the install page, write it fixed, add, commit, push), installed in the
workers through ``model.factory`` (``bench._jobs_model``). The stack is the end-to-end test
harness (``harness.stack``).

Each job goes submit → park (the push waits for approval) → approve → pushed (the relay
landed the commit upstream). The benchmark is its own approver: it approves each parked push
as soon as it sees it. The workers start each segment's container as ``--container-start``
says (``jobs.container_start``), with ``--spares`` (``jobs.spare_containers``). First, on a
stack of its own set up alike, the same runs with ``--baseline``, so both figures come from
the same run: ``previous`` (the default) has the workers run the code of
``--baseline-commit``, by default ``eb61274``, the code before issue 18 (the container
started in line in every segment, on the engine's default runtime, no spares), unpacked from
git with its own sandbox image (``bench._previous_tree``); the other choices run this code
with that ``jobs.container_start`` on ``--baseline-runtime`` (runc) with
``--baseline-spares`` (0): ``--baseline ahead --container-start ahead`` compares spares
alone. Per setting, three runs:

1. **unloaded**: ``--latency-jobs`` jobs one at a time: the latency of one job;
2. **under load**: ``--jobs`` jobs submitted at once: jobs per minute end to end (first
   submit to last push), and the latencies again, now with the queue in them;
3. **the floor**, in this process, before the stack starts: the same playbook on the same
   tools called in process on a local clone (``sandbox.inside.sandbox_tools.sandbox_tools``),
   no Celery, no Redis, no container; start → the parked push, and the approved push to a
   local bare repository.

How the times are measured. Latencies come from the job records: submit is ``created_at``,
park is ``updated_at`` of the parked record, approve is the approval's ``decided_at``,
pushed is ``updated_at`` of the succeeded record. All four are the Redis server's clock, so
the benchmark's polling does not enter them. The split of submit → park comes from the
workers themselves: each segment logs its phases (``bot.jobs.timings``: image check, model
client, workspace, container start, the agent run, container stop, park), each model call is
logged by the timed model (``bench._jobs_model``), and each tool call's duration is in its
tool frame (``ToolCallRecord.duration_ms``, measured by the runner around the call into the
container). "Container" is container start + tool calls + container stop; "model" is the sum
of model calls; everything else (queue pickup, image check, workspace, the runner, event
writes, the park itself) is "outside". A start that ran on a background thread counts only
for the part a tool call waited for ("start waited for"); the whole start is printed beside.

CPU-seconds per job, over the burst: the worker process trees, the run's containers and the
engine (``bench._jobs_cpu``), beside the floor's CPU in this process.

Targets: at least 60 jobs per minute, a median submit → park of at most 1.5 s, and (issue 18)
CPU-seconds per job at most half the baseline's (the code before issue 18's, by default).
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench._jobs import (
    JOB_TIMEOUT_SECONDS,
    MODEL_FACTORY,
    PLAYBOOK,
    POLL_SECONDS,
    Floor,
    JobTimes,
    approve,
    row,
    run_floor,
    run_one,
    submit,
)
from bench._jobs_cpu import (
    PREVIOUS,
    CpuFigures,
    CpuMeter,
    add_setting_arguments,
    container_start_of,
    cpu_lines,
    runtime_of,
    setting_label,
    settings_to_run,
    stack_config,
)
from bench._jobs_model import PREFIX as MODEL_PREFIX
from bench._previous_tree import SettingWorkers, setting_workers
from bot.core.errors import BeamError
from bot.core.frames import ToolFrame
from bot.jobs.timings import PREFIX as TIMINGS_PREFIX
from bot.store.models import JobState
from harness.stack import REPO, Stack, job_stack

TARGET_JOBS_PER_MINUTE = 60.0
TARGET_PARK_SECONDS = 1.5
TARGET_CPU_RATIO = 0.5
# Finished jobs are looked for less often: their times come from the records, so a late look
# costs nothing but this process's CPU, which the workers share on a small machine.
PUSHED_POLL_SECONDS = 0.25


def main(argv: Sequence[str] | None = None) -> int:
    options = _arguments(argv)
    floor = run_floor(options.latency_jobs)
    with setting_workers(options) as workers:
        reports = [
            run_setting(options, setting, floor, workers) for setting in settings_to_run(options)
        ]
    for report in reports:
        print(report.render())
        print()
    print("\n".join(_comparison(reports, floor)))
    return 0


def run_setting(
    options: argparse.Namespace, setting: str, floor: Floor, workers: SettingWorkers
) -> Report:
    """The three runs on a fresh stack whose workers run the code and start containers as
    ``setting`` says."""
    more = stack_config(options, setting)
    with job_stack(lease_seconds=30.0, model_factory=MODEL_FACTORY, more_config=more) as stack:
        for index in range(options.workers):
            workers.start(stack, setting, f"w{index}", concurrency=options.concurrency)
        # The first jobs pay once for what every later one reuses: each worker's mirror,
        # the pool processes' first imports and connections.
        cold = [run_one(stack) for _ in range(2 * options.workers * options.concurrency)]
        unloaded = [run_one(stack) for _ in range(options.latency_jobs)]
        loaded, elapsed, cpu = run_burst(stack, options.jobs)
        return Report(
            options=options,
            setting=setting,
            code=workers.describe(setting),
            cold=cold,
            unloaded=unloaded,
            loaded=loaded,
            burst_seconds=elapsed,
            floor=floor,
            splits=read_splits(stack, [*unloaded, *loaded]),
            cpu=cpu,
        )


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=60, help="jobs in the burst")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=1, help="pool processes per worker")
    parser.add_argument("--latency-jobs", type=int, default=10, help="jobs run one at a time")
    add_setting_arguments(parser)
    return parser.parse_args(argv)


def run_burst(stack: Stack, jobs: int) -> tuple[list[JobTimes], float, CpuFigures]:
    """``jobs`` jobs submitted at once, each approved as soon as it parks; returns their
    times, the seconds from the first submit to the last push, and the CPU they took."""
    meter = CpuMeter(stack, set())
    meter.start()
    submitted = {times.job_id: times for times in (submit(stack) for _ in range(jobs))}
    meter.jobs.update(submitted)
    waiting = set(submitted)
    pushing: set[str] = set()
    deadline = time.monotonic() + JOB_TIMEOUT_SECONDS + jobs * 5.0
    next_look = 0.0
    while waiting or pushing:
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(waiting)} jobs never parked, {len(pushing)} never pushed")
        for approval in stack.store.approvals.pending(repo=REPO):
            if approval.job_id in waiting:
                parked = stack.store.jobs.get(approval.job_id)
                try:
                    approve(stack, submitted[approval.job_id], parked)
                except BeamError:
                    continue  # the approval opened a moment before the job parked on it
                waiting.discard(approval.job_id)
                pushing.add(approval.job_id)
        if time.monotonic() >= next_look or not waiting:
            next_look = time.monotonic() + PUSHED_POLL_SECONDS
            for job_id in list(pushing):
                record = stack.store.jobs.get(job_id)
                if record.state is JobState.SUCCEEDED:
                    submitted[job_id].pushed = record.updated_at.timestamp()
                    pushing.discard(job_id)
                elif record.state.is_final:
                    raise AssertionError(f"job {job_id} ended {record.state.value}: {record.error}")
        time.sleep(POLL_SECONDS if waiting else PUSHED_POLL_SECONDS)
    cpu = meter.stop()
    times = list(submitted.values())
    return times, max(t.pushed for t in times) - min(t.submitted for t in times), cpu


# -- where the time went -----------------------------------------------------------------


@dataclass
class Split:
    """The first segment of one job (submit → park), in milliseconds."""

    started: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    model_ms: float = 0.0
    tools_ms: float = 0.0


def read_splits(stack: Stack, jobs: list[JobTimes]) -> dict[str, Split]:
    """Each job's first segment, from the workers' logs and its tool frames."""
    splits: dict[str, Split] = defaultdict(Split)
    model_calls: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for worker in stack.workers.values():
        for line in worker.log.read_text(errors="replace").splitlines():
            if TIMINGS_PREFIX in line:
                entry = json.loads(line.split(TIMINGS_PREFIX, 1)[1])
                split = splits[entry["job"]]
                # The first segment ends parked; the second (the resume) is not counted.
                if entry["state"] == JobState.AWAITING_APPROVAL.value:
                    split.started = entry["started"]
                    split.phases = entry["phases_ms"]
            elif MODEL_PREFIX in line:
                call = json.loads(line.split(MODEL_PREFIX, 1)[1])
                model_calls[call["job"]].append((call["at"], call["ms"]))
    for times in jobs:
        split = splits[times.job_id]
        split.model_ms = sum(ms for at, ms in model_calls[times.job_id] if at <= times.parked)
        split.tools_ms = _tool_ms(stack, times.job_id, times.parked)
    return dict(splits)


def _tool_ms(stack: Stack, job_id: str, before: float) -> float:
    """Tool call time of the frames written before ``before`` (a stream id is the Redis
    server's millisecond clock)."""
    total = 0.0
    for event in stack.store.events.read(job_id, count=10_000):
        if isinstance(event.frame, ToolFrame) and int(event.id.split("-")[0]) <= before * 1000:
            total += event.frame.record.duration_ms
    return total


# -- the report --------------------------------------------------------------------------


@dataclass
class Report:
    options: argparse.Namespace
    setting: str
    code: str
    cold: list[JobTimes]
    unloaded: list[JobTimes]
    loaded: list[JobTimes]
    burst_seconds: float
    floor: Floor
    splits: dict[str, Split]
    cpu: CpuFigures

    @property
    def per_minute(self) -> float:
        return len(self.loaded) / self.burst_seconds * 60

    def render(self) -> str:
        o = self.options
        per_minute = self.per_minute
        park_median = statistics.median(t.to_park for t in self.unloaded)
        lines = [
            f"jobs_bench: author jobs ({PLAYBOOK} playbook), {o.workers} workers x prefork "
            f"{o.concurrency}, real Redis, Celery, containers and relay; "
            f"{setting_label(o, self.setting)}, sandbox.runtime = {runtime_of(o, self.setting)}",
            f"the workers run {self.code}",
            f"{'':36}{'median':>11} {'p95':>11}",
            f"unloaded: {len(self.unloaded)} jobs one at a time",
            row("submit -> park", [t.to_park for t in self.unloaded]),
            row("approve -> pushed", [t.to_push for t in self.unloaded]),
            f"under load: {len(self.loaded)} jobs submitted at once",
            row("submit -> park (queue included)", [t.to_park for t in self.loaded]),
            row("approve -> pushed (queue included)", [t.to_push for t in self.loaded]),
            f"floor, in process (no Celery, Redis, container): {len(self.floor.to_park)} runs",
            row("start -> park", self.floor.to_park),
            row("resume -> pushed (local bare repo)", self.floor.to_push),
            f"cold start: the first {len(self.cold)} jobs took "
            + ", ".join(f"{t.to_park * 1000:.0f}" for t in self.cold)
            + " ms to park (not counted above)",
            "",
            f"throughput: {per_minute:.1f} jobs/min end to end ({len(self.loaded)} jobs in "
            f"{self.burst_seconds:.1f} s, first submit to last push)",
            "",
            *self._split_lines("unloaded", self.unloaded),
            "",
            *self._split_lines("under load", self.loaded),
            "",
            f"target >= {TARGET_JOBS_PER_MINUTE:.0f} jobs/min: "
            f"{'met' if per_minute >= TARGET_JOBS_PER_MINUTE else 'MISSED'}; "
            f"target median submit -> park <= {TARGET_PARK_SECONDS} s (unloaded): "
            f"{'met' if park_median <= TARGET_PARK_SECONDS else 'MISSED'}",
        ]
        return "\n".join(lines)

    def _split_lines(self, label: str, jobs: list[JobTimes]) -> list[str]:
        """Median per job of where submit -> park went."""
        rows: dict[str, list[float]] = defaultdict(list)
        for times in jobs:
            split = self.splits.get(times.job_id)
            if split is None or not split.phases:
                continue
            phases = split.phases
            total = times.to_park * 1000
            # The start counts for what the segment waited of it; the rest ran meanwhile.
            # Unless in line, that wait was inside the first tool call, as the runner timed it.
            # The older code started in line and logged the whole start as ``container``.
            waited = phases.get("container" if self.setting == PREVIOUS else "container_wait", 0)
            tools_ms = split.tools_ms - (
                waited if container_start_of(self.setting) != "eager" else 0
            )
            container = waited + phases.get("stop", 0) + tools_ms
            outside = total - split.model_ms - container
            queue = (split.started - times.submitted) * 1000
            rows["submit -> park"].append(total)
            rows["model calls"].append(split.model_ms)
            rows["container: start (waited for)"].append(waited)
            rows["  the whole start (in line or overlapped)"].append(phases.get("container", 0))
            rows["container: tool calls"].append(tools_ms)
            rows["container: stop"].append(phases.get("stop", 0))
            rows["outside model and container"].append(outside)
            rows["  queue: submit -> segment start"].append(queue)
            rows["  image check + model client"].append(
                phases.get("image", 0) + phases.get("model", 0)
            )
            rows["  spare taken (one still starting waited for)"].append(phases.get("spare", 0))
            rows["  workspace"].append(phases.get("workspace", 0))
            rows["  agent run minus model and tools"].append(
                phases.get("agent", 0) - split.model_ms - split.tools_ms
            )
            rows["  park (run state, snapshot, approval)"].append(phases.get("park", 0))
            rows["share outside model and container"].append(outside / total * 100)
            # Under load most of "outside" is the queue; without it, what a job costs.
            rows["share outside, the queue left out"].append(
                (outside - queue) / (total - queue) * 100
            )
        lines = [f"where submit -> park went, {label} (median per job):"]
        for name, values in rows.items():
            unit = "%" if name.startswith("share") else "ms"
            lines.append(f"  {name:<42}{statistics.median(values):>9.1f} {unit}")
        return lines


def _comparison(reports: list[Report], floor: Floor) -> list[str]:
    """CPU per job of each setting beside the floor, and the settings side by side."""
    runs = {setting_label(r.options, r.setting): (r.cpu, len(r.loaded)) for r in reports}
    lines = [*cpu_lines(runs, floor.cpu), ""]
    for report in reports:
        park = statistics.median(t.to_park for t in report.unloaded)
        lines.append(
            f"{setting_label(report.options, report.setting)}: {report.per_minute:.1f} "
            "jobs/min, unloaded "
            f"submit -> park median {park * 1000:.0f} ms"
        )
    if len(reports) > 1:
        base, new = reports[0], reports[-1]
        ratio = (new.cpu.total / len(new.loaded)) / (base.cpu.total / len(base.loaded))
        lines.append(
            f"target CPU-seconds per job <= {TARGET_CPU_RATIO:.0%} of "
            f"{setting_label(base.options, base.setting)}'s: "
            f"{'met' if ratio <= TARGET_CPU_RATIO else 'MISSED'} ({ratio:.0%})"
        )
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
