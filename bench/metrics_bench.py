"""What a ``/metrics`` scrape costs with a long approval queue of large diffs, beside an empty
store, beside the same queue with small diffs, and beside the full read the scrape used to
make.

    python -m bench.metrics_bench [--approvals 1000] [--diff-kib 1024] [--runs 20]

A real ``redis-server`` (no persistence). In one store ``--approvals`` author jobs are
parked on a pending approval whose diff is ``--diff-kib`` KiB, as the executor parks them;
in a second store (another key prefix) as many with 1 KiB diffs. Timed, each the median
(and the slowest) of ``--runs`` rounds, with the bytes Redis sent per round (``INFO
stats``, ``total_net_output_bytes``):

- **approvals**: ``bot.api.metrics.approval_metrics``, the scrape's approval queue (count
  and oldest age, from the store's per-approval summaries), on an empty store, on the queue
  of small diffs and on the queue of large ones;
- **baseline, full read**: the same figures as the scrape made them before summaries, every
  pending approval read whole (``store.approvals.pending``), on the queue of large diffs
  (``--baseline-runs`` rounds: each moves the whole queue out of Redis);
- **whole store part of a scrape** (``store_metrics``: jobs, durations, tool calls,
  approvals) on the large queue, for scale: its job part reads the newest 1,000 job records
  whatever the approvals; and the same **rendered** as a scrape serves it (read by
  ``RiverbeamCollector`` in its thread, written by ``prometheus_client.generate_latest``).

Nothing is asserted; the target is an approval read whose cost does not grow with the
diffs: as many bytes read for the large queue as for the small one (kilobytes, not the
gigabyte), and times alike (on a loaded machine a median moves by several milliseconds).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from prometheus_client import CollectorRegistry, generate_latest

from bench import percentile
from bot.api.metrics import RiverbeamCollector, approval_metrics, store_metrics
from bot.store.models import Approval, JobKind, JobSpec, JobState
from bot.store.store import JobStore
from harness.redis_server import redis_server

PREFIX = "bench"
SMALL_DIFF_BYTES = 1024


@dataclass(frozen=True)
class Timing:
    label: str
    seconds: list[float]
    bytes_out: int

    def row(self) -> str:
        median = statistics.median(self.seconds) * 1000
        slowest = percentile(self.seconds, 1.0) * 1000
        return (
            f"{self.label:<44} {median:>10.2f} ms  {slowest:>10.2f} ms  {_size(self.bytes_out):>12}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    options = _arguments(argv)
    runs, count = options.runs, options.approvals
    with (
        tempfile.TemporaryDirectory(prefix="riverbeam-bench-") as scratch,
        redis_server(Path(scratch)) as url,
    ):
        large = JobStore.from_url(url, prefix=PREFIX)
        small = JobStore.from_url(url, prefix=f"{PREFIX}-small")
        client = redis.Redis.from_url(url)
        empty = timed(client, "approvals, empty store", runs, lambda: _approvals(large))
        started = time.monotonic()
        park_many(large, count, options.diff_kib * 1024)
        parked_in = time.monotonic() - started
        park_many(small, count, SMALL_DIFF_BYTES)
        timings = [
            empty,
            timed(client, f"approvals, {count} of 1 KiB", runs, lambda: _approvals(small)),
            timed(
                client,
                f"approvals, {count} of {options.diff_kib} KiB",
                runs,
                lambda: _approvals(large),
            ),
            timed(
                client,
                f"baseline: full read, {count} of {options.diff_kib} KiB",
                options.baseline_runs,
                lambda: _full_read(large),
            ),
            timed(client, "whole store part of a scrape, large", runs, lambda: _scrape(large)),
            timed(client, "the same, rendered", runs, _rendered(large)),
        ]
        memory = int(client.info("memory")["used_memory"])
    print(
        f"metrics_bench: {count} approvals of {options.diff_kib} KiB diffs "
        f"(parked in {parked_in:.1f} s; Redis holds {_size(memory)})"
    )
    print(f"{'':<44} {'median':>13}  {'slowest':>13}  {'sent/round':>12}")
    for timing in timings:
        print(timing.row())
    _, on_small, on_large, baseline, *_ = (statistics.median(t.seconds) for t in timings)
    same = timings[1].bytes_out == timings[2].bytes_out
    print(
        f"large diffs: {on_large / max(on_small, 1e-9):.2f}x the time of small ones, "
        f"{'the same' if same else 'NOT the same'} bytes read (target: the same); "
        f"the full read takes {baseline / max(on_large, 1e-9):.0f}x the summaries"
    )
    return 0


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--approvals", type=int, default=1000, help="parked approvals")
    parser.add_argument("--diff-kib", type=int, default=1024, help="KiB of diff per approval")
    parser.add_argument("--runs", type=int, default=20, help="rounds of each scrape")
    parser.add_argument("--baseline-runs", type=int, default=3, help="rounds of the full read")
    return parser.parse_args(argv)


def park_many(store: JobStore, count: int, diff_bytes: int) -> None:
    """``count`` author jobs parked on a pending approval with a diff of ``diff_bytes``."""
    diff = ("+" + "x" * 99 + "\n") * (diff_bytes // 101)
    for number in range(count):
        park(store, JobSpec(kind=JobKind.AUTHOR, repo="docs", request=f"fix page {number}"), diff)


def park(store: JobStore, spec: JobSpec, diff: str, **changes: Any) -> Approval:
    """A job parked on a pending approval of ``diff``, the way the executor parks it (claim,
    open the approval, move to awaiting_approval with ``changes``); its approval."""
    record = store.jobs.create(spec)
    store.jobs.claim(record.id, worker="bench", lease_seconds=600)
    approval = Approval(
        id=f"ap-{record.id}",
        job_id=record.id,
        repo=spec.repo,
        requested_by=record.spec.requested_by,
        call_id="call-1",
        tool="git_push",
        arguments={},
        commit_sha="a" * 40,
        target_ref=f"riverbeam/{record.id}",
        diff_digest="d" * 64,
        diff=diff,
    )
    store.approvals.open(approval)
    store.jobs.transition(
        record.id,
        JobState.AWAITING_APPROVAL,
        from_states={JobState.RUNNING},
        approval_id=approval.id,
        **changes,
    )
    return approval


def _scrape(store: JobStore) -> object:
    return store_metrics(store, datetime.now(UTC))


def _rendered(store: JobStore) -> Callable[[], bytes]:
    """The store part as ``/metrics`` serves it, on a registry of its own."""
    registry = CollectorRegistry()
    registry.register(
        RiverbeamCollector({"store": lambda: store_metrics(store, datetime.now(UTC))})
    )
    return lambda: generate_latest(registry)


def _approvals(store: JobStore) -> object:
    return approval_metrics(store, datetime.now(UTC))


def _full_read(store: JobStore) -> tuple[int, float]:
    """The approval figures as scrapes computed them before summaries: every pending
    approval read whole."""
    now = datetime.now(UTC)
    pending = store.approvals.pending()
    ages = [(now - approval.created_at).total_seconds() for approval in pending]
    return len(pending), max(ages, default=0.0)


def timed(client: redis.Redis, label: str, runs: int, work: Callable[[], object]) -> Timing:
    work()  # warm: connections, imports
    sent = _bytes_out(client)
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - started)
    # Our own INFO call is a few KiB of the total: small beside what is measured.
    return Timing(label, seconds, (_bytes_out(client) - sent) // runs)


def _bytes_out(client: redis.Redis) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if count < 1024:
            return f"{count:.0f} B" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


if __name__ == "__main__":
    raise SystemExit(main())
