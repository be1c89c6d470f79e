"""Load: 200 scripted author jobs at once through real workers, in two worker layouts.

    python -m bench.load_bench [--jobs 200] [--scenario two-workers|two-hosts|both]
                               [--container-start ahead] [--spares 1]
                               [--baseline previous|eager|ahead|on_demand|none]
                               [--baseline-commit eb61274] [--baseline-spares 0]
                               [--baseline-jobs 60]

Everything but the model is real (the end-to-end stack of ``harness.stack``, as in
``bench.jobs_bench``): Redis, Celery worker processes, one sandbox container per job
segment, a bare upstream and the relay. Each scenario runs on a fresh stack:

- **two-workers**: two worker processes, each its own host (workspace root, mirror cache);
- **two-hosts**: four worker processes on two simulated hosts, two per host sharing the
  host's workspace root and mirror cache.

A few jobs first warm each worker (its mirror, its first imports; not counted). Then all
``--jobs`` are submitted at once; once every one has parked on its push they are approved
in bulk, and the run ends when every push has landed. Printed per scenario:

- throughput: jobs per minute from the first submit to the last push;
- latency percentiles (p50, p90, p99): submit → park and approve → pushed, from the job
  records (the Redis server's clock), queues included;
- peak RSS per worker: the worker's whole process tree (its main process and pool
  processes), summed from ``/proc`` once a second;
- containers: the sandbox containers of the run's jobs, counted once a second;
- lost (a job that did not succeed), duplicated (an upstream branch updated more than once,
  read from its reflog) and orphan containers (any container of the run's jobs still there
  once every job finished);
- CPU-seconds per job, first submit to last push: the worker process trees, the run's
  containers and the engine (``bench._jobs_cpu``);

beside the floor: the same playbook in this process on in-process tools (``bench._jobs``),
its CPU too. The workers start containers as ``--container-start`` says
(``jobs.container_start``); before it, each scenario runs with ``--baseline`` on
``--baseline-jobs`` jobs, so both figures come from the same run: ``previous`` (the
default) has the workers run the code of ``--baseline-commit``, by default ``eb61274``, the
code before issue 18 (``bench._previous_tree``: the start in line of every segment, on the
engine's default runtime, no spares); another choice runs this code with that
``jobs.container_start`` on ``--baseline-runtime``. ``--spares`` and ``--baseline-spares``
set the ``jobs.spare_containers`` of the measured setting and of a baseline of this code (1
and 0 by default). Targets: at least 60 jobs per minute end to
end (issue 18: 200 in ``two-workers``), zero lost, duplicated and orphans, and CPU-seconds
per job at most half the baseline's. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import percentile
from bench._jobs import MODEL_FACTORY, PLAYBOOK, Floor, decide, run_floor, run_one
from bench._jobs_cpu import (
    CpuFigures,
    CpuMeter,
    add_setting_arguments,
    cpu_lines,
    process_tree,
    runtime_of,
    setting_label,
    settings_to_run,
    stack_config,
)
from bench._previous_tree import SettingWorkers, setting_workers
from bot.store.models import JobKind, JobRecord, JobState
from harness.playbooks import AUTHOR_REQUEST
from harness.stack import Stack, job_stack
from sandbox.host.container.hardening import ROLE_LABEL, ROLE_SANDBOX, SPARE_LABEL, container_job
from sandbox.host.engine import connect

TARGET_JOBS_PER_MINUTE = 60.0
SAMPLE_SECONDS = 1.0
POLL_SECONDS = 0.5
PHASE_TIMEOUT_SECONDS = 900.0
WARM_JOBS_PER_WORKER = 2
FLOOR_RUNS = 10
# Worker name → simulated host, per scenario.
SCENARIOS: dict[str, dict[str, str]] = {
    "two-workers": {"w0": "host-a", "w1": "host-b"},
    "two-hosts": {"w0": "host-a", "w1": "host-a", "w2": "host-b", "w3": "host-b"},
}


def main(argv: Sequence[str] | None = None) -> int:
    options = _arguments(argv)
    floor = run_floor(FLOOR_RUNS)
    names = list(SCENARIOS) if options.scenario == "both" else [options.scenario]
    settings = settings_to_run(options)
    # The baseline on fewer jobs: its CPU per job needs no 200, and the run stays short.
    runs = [(s, options.baseline_jobs if s != settings[-1] else options.jobs) for s in settings]
    with setting_workers(options) as workers:
        for name in names:
            outcomes = []
            for setting, jobs in runs:
                outcome = run_scenario(name, SCENARIOS[name], jobs, setting, options, workers)
                print(outcome.render(floor))
                print()
                outcomes.append(outcome)
            cpu = {
                f"{name}, {setting_label(options, o.setting)}": (o.cpu, len(o.records))
                for o in outcomes
            }
            print("\n".join(cpu_lines(cpu, floor.cpu)))
            print()
    return 0


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs submitted at once")
    parser.add_argument("--scenario", choices=[*SCENARIOS, "both"], default="both")
    add_setting_arguments(parser)
    parser.add_argument("--baseline-jobs", type=int, default=60, help="jobs of the baseline")
    return parser.parse_args(argv)


# -- sampling --------------------------------------------------------------------------


def _tree_rss_kib(root: int) -> int:
    """Resident memory of ``root`` and every process descended from it, in KiB."""
    return sum(_rss_kib(pid) for pid in process_tree(root))


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass
class Sampler:
    """Once a second, from a thread: each worker's tree RSS and the run's containers."""

    stack: Stack
    jobs: set[str]
    peak_rss_kib: dict[str, int] = field(default_factory=dict)
    containers: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        client, deployment = connect(), self.stack.store.gateway.deployment()
        started = time.monotonic()
        while not self._stop.wait(SAMPLE_SECONDS):
            for name, worker in self.stack.workers.items():
                rss = _tree_rss_kib(worker.process.pid)
                self.peak_rss_kib[name] = max(self.peak_rss_kib.get(name, 0), rss)
            found = client.api.containers(filters={"label": f"{ROLE_LABEL}={ROLE_SANDBOX}"})
            # A job's container, claimed spare or not, and the workers' idle spares.
            ours = [c for c in found if _ours(c, self.jobs, deployment)]
            self.containers.append((time.monotonic() - started, len(ours)))


def _ours(container: dict[str, Any], jobs: set[str], deployment: str) -> bool:
    labels = container.get("Labels") or {}
    job = container_job(labels, container.get("Names") or [])
    return job in jobs or labels.get(SPARE_LABEL) == deployment


# -- one scenario ----------------------------------------------------------------------


@dataclass
class Outcome:
    scenario: str
    setting: str
    label: str
    code: str
    runtime: str
    layout: dict[str, str]
    records: dict[str, JobRecord]
    parked_at: dict[str, float]
    approved_at: dict[str, float]
    sampler: Sampler
    duplicated: int
    orphans: int
    cpu: CpuFigures

    def render(self, floor: Floor) -> str:
        done = [
            r
            for r in self.records.values()
            if r.state is JobState.SUCCEEDED and r.id in self.parked_at
        ]
        lost = len(self.records) - len(done)
        submitted = min(r.created_at.timestamp() for r in self.records.values())
        last_push = max((r.updated_at.timestamp() for r in done), default=submitted)
        per_minute = len(done) / max(last_push - submitted, 1e-9) * 60
        to_park = [self.parked_at[r.id] - r.created_at.timestamp() for r in done]
        to_push = [r.updated_at.timestamp() - self.approved_at[r.id] for r in done]
        hosts = sorted(set(self.layout.values()))
        floor_park, floor_push = statistics.median(floor.to_park), statistics.median(floor.to_push)
        lines = [
            f"load_bench {self.scenario}, {self.label}, sandbox.runtime = {self.runtime}: "
            f"{len(self.records)} author jobs ({PLAYBOOK}), "
            f"{len(self.layout)} workers (prefork 1) on {len(hosts)} hosts: "
            + ", ".join(
                f"{host}: {'+'.join(w for w, h in self.layout.items() if h == host)}"
                for host in hosts
            ),
            f"  the workers run {self.code}",
            f"  throughput: {per_minute:.1f} jobs/min end to end "
            f"({len(done)} jobs, first submit to last push {last_push - submitted:.1f} s)",
            f"  {'':32}{'p50':>9}{'p90':>9}{'p99':>9}",
            _percentiles("submit -> park (queue included)", to_park),
            _percentiles("approve -> pushed (in bulk)", to_push),
            f"  floor, in process: start -> park {floor_park * 1000:.0f} ms, "
            f"resume -> pushed {floor_push * 1000:.0f} ms (median of {len(floor.to_park)}; "
            f"one job at a time: {60 / (floor_park + floor_push):.0f} jobs/min)",
            "  peak RSS per worker (process tree): "
            + ", ".join(
                f"{name} {self.sampler.peak_rss_kib.get(name, 0) / 1024:.0f} MiB"
                for name in self.layout
            ),
            "  containers of the run's jobs, max per 10 s: " + _series(self.sampler.containers),
            f"  CPU-seconds per job: {self.cpu.total / max(len(self.records), 1):.3f} "
            f"(workers {self.cpu.workers / max(len(self.records), 1):.3f}, containers "
            f"{self.cpu.containers / max(len(self.records), 1):.3f}, engine "
            f"{self.cpu.engine / max(len(self.records), 1):.3f}); floor in process "
            f"{statistics.median(floor.cpu):.3f}",
            f"  lost {lost}, duplicated {self.duplicated}, orphan containers {self.orphans}",
            f"  target >= {TARGET_JOBS_PER_MINUTE:.0f} jobs/min with nothing lost, duplicated "
            "or orphaned: "
            + (
                "met"
                if per_minute >= TARGET_JOBS_PER_MINUTE
                and lost == self.duplicated == self.orphans == 0
                else "MISSED"
            ),
        ]
        return "\n".join(lines)


def _percentiles(label: str, seconds: Sequence[float]) -> str:
    values = [percentile(seconds, f) for f in (0.5, 0.9, 0.99)] if seconds else [0.0] * 3
    return f"  {label:<32}" + "".join(f"{v:>8.2f}s" for v in values)


def _series(samples: list[tuple[float, int]]) -> str:
    buckets: dict[int, int] = {}
    for at, count in samples:
        buckets[int(at // 10)] = max(buckets.get(int(at // 10), 0), count)
    return " ".join(str(buckets[b]) for b in sorted(buckets)) or "(no samples)"


def run_scenario(
    name: str,
    layout: dict[str, str],
    jobs: int,
    setting: str,
    options: argparse.Namespace,
    workers: SettingWorkers,
) -> Outcome:
    more = stack_config(options, setting)
    with job_stack(lease_seconds=30.0, model_factory=MODEL_FACTORY, more_config=more) as stack:
        for worker, host in layout.items():
            workers.start(stack, setting, worker, host=host)
        for _ in range(WARM_JOBS_PER_WORKER * len(layout)):
            run_one(stack)
        meter = CpuMeter(stack, set())
        meter.start()
        ids = [
            stack.submit(JobKind.AUTHOR, PLAYBOOK, request=AUTHOR_REQUEST).id for _ in range(jobs)
        ]
        meter.jobs.update(ids)
        sampler = Sampler(stack, set(ids))
        sampler.start()
        try:
            parked = _wait_all(stack, ids, {JobState.AWAITING_APPROVAL})
            waiting = [i for i in ids if parked[i].state is JobState.AWAITING_APPROVAL]
            approved_at = {job_id: decide(stack, job_id) for job_id in waiting}
            records = _wait_all(stack, ids, {JobState.SUCCEEDED})
        finally:
            sampler.stop()
            cpu = meter.stop()
        return Outcome(
            scenario=name,
            setting=setting,
            label=setting_label(options, setting),
            code=workers.describe(setting),
            runtime=runtime_of(options, setting),
            cpu=cpu,
            layout=layout,
            records=records,
            # The parked record's last change is the park (the Redis server's clock).
            parked_at={i: parked[i].updated_at.timestamp() for i in waiting},
            approved_at=approved_at,
            sampler=sampler,
            duplicated=sum(len(stack.upstream_updates(f"riverbeam/{i}")) > 1 for i in ids),
            orphans=sum(len(stack.sandbox_containers(i)) for i in ids),
        )


def _wait_all(stack: Stack, ids: list[str], states: set[JobState]) -> dict[str, JobRecord]:
    """Every job once it is in one of ``states`` (or final otherwise: counted as lost)."""
    wanted, found = set(ids), dict[str, JobRecord]()
    deadline = time.monotonic() + PHASE_TIMEOUT_SECONDS
    while wanted - set(found):
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(wanted - set(found))} jobs never reached {states}")
        page, _ = stack.store.listing.list(limit=1000)
        for record in page:
            if record.id in wanted and (record.state in states or record.state.is_final):
                found.setdefault(record.id, record)
        time.sleep(POLL_SECONDS)
    return found


if __name__ == "__main__":
    raise SystemExit(main())
