"""What the check before every model and tool call costs a running job: one EXISTS of its
cancel flag (``StopCheck.check``), beside the read the check used to make (the whole job
record, GET and parse: ``store.jobs.get(job_id).cancel_requested``).

    python -m bench.cancel_check_bench [--result-kib 16] [--checks 2000] [--runs 7]

A real ``redis-server`` (no persistence). The job is a resumed author job: it parked with
a result of ``--result-kib`` KiB of text (what a resumed job's record carries), was
approved, and runs again. Each round makes ``--checks`` checks; the figures are the median
(and slowest) round per check, and the bytes Redis sent per check (``INFO stats``,
``total_net_output_bytes``). Nothing is asserted; the target is a check whose cost does not
grow with the record.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

from bench import percentile
from bench.metrics_bench import park, timed
from bot.jobs.lease import LeaseKeeper, StopCheck
from bot.store.models import JobKind, JobResult, JobSpec
from bot.store.store import JobStore
from harness.redis_server import redis_server


def main(argv: Sequence[str] | None = None) -> int:
    options = _arguments(argv)
    with (
        tempfile.TemporaryDirectory(prefix="riverbeam-bench-") as scratch,
        redis_server(Path(scratch)) as url,
    ):
        store = JobStore.from_url(url, prefix="bench")
        client = redis.Redis.from_url(url)
        job_id = resumed_job(store, options.result_kib * 1024)
        record_bytes = int(client.strlen(store.gateway.keys.job(job_id)))
        lease = LeaseKeeper(store, job_id, worker="bench", seconds=600)  # not started

        def flag() -> None:
            StopCheck(store, job_id, lease).check()

        def record() -> None:
            assert not store.jobs.get(job_id).cancel_requested

        checks = options.checks

        def many(check: Callable[[], None]) -> Callable[[], object]:
            return lambda: [check() for _ in range(checks)]

        rows = [
            timed(client, "cancel flag: EXISTS (StopCheck.check)", options.runs, many(flag)),
            timed(client, "baseline: the whole record, GET + parse", options.runs, many(record)),
        ]
    print(
        f"cancel_check_bench: a resumed job whose record is {record_bytes / 1024:.1f} KiB, "
        f"{options.checks} checks a round, {options.runs} rounds"
    )
    print(f"{'':<42} {'median/check':>14}  {'slowest':>10}  {'sent/check':>11}")
    for row in rows:
        per_check = [seconds / checks * 1e6 for seconds in row.seconds]
        print(
            f"{row.label:<42} {statistics.median(per_check):>11.1f} µs  "
            f"{percentile(per_check, 1.0):>7.1f} µs  {row.bytes_out / checks:>9.0f} B"
        )
    on_flag, on_record = (statistics.median(row.seconds) for row in rows)
    ratio = on_record / max(on_flag, 1e-12)
    print(
        f"the record read takes {ratio:.1f}x the time and "
        f"{rows[1].bytes_out / max(rows[0].bytes_out, 1):.0f}x the bytes of the flag "
        "(target: the flag's cost independent of the record's size)"
    )
    return 0


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--result-kib", type=int, default=16, help="KiB of result text")
    parser.add_argument("--checks", type=int, default=2000, help="checks per round")
    parser.add_argument("--runs", type=int, default=7, help="rounds")
    return parser.parse_args(argv)


def resumed_job(store: JobStore, result_bytes: int) -> str:
    """An author job that parked with a result of ``result_bytes``, was approved, and was
    claimed by its resume: running, with the record a resumed job has."""
    spec = JobSpec(kind=JobKind.AUTHOR, repo="docs", request="fix the page")
    approval = park(store, spec, "+x\n", result=JobResult(text="x" * result_bytes))
    store.approvals.decide(approval.job_id, approve=True, by="reviewer", binding=approval.binding())
    store.jobs.claim_resume(approval.job_id, worker="bench", lease_seconds=600)
    return approval.job_id


if __name__ == "__main__":
    raise SystemExit(main())
