"""The park is one transaction: a worker killed at any point of it leaves the job either
running with nothing of the park written (the sweep takes it over), or parked with all of
it; never half-parked. Against a real redis-server: the killed worker is a real process that
sends MULTI and the first writes of the park's transaction, then dies (SIGKILL) before its
EXEC, at every point from none to all of them; a last one dies just after the EXEC."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime

import pytest

from bot.core.errors import JobError
from bot.store.models import Approval, JobRecord, JobResult, JobState, OutboxEntry
from bot.store.store import JobStore
from harness.redis_server import RedisServer
from tests.store.kit import author

WORKER = "w1"
# Run by a worker process of its own: park the job, dying after ``cut`` of the park's
# queued writes were sent inside MULTI (no EXEC), or just after the EXEC when ``cut`` is
# past them all.
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from itertools import chain
    from redis.client import Pipeline
    from bot.store.models import Approval
    from bot.store.store import JobStore

    from bot.store.models import OutboxEntry

    url, prefix, approval, entry, cut = sys.argv[1:5] + [int(sys.argv[5])]
    original = Pipeline._execute_transaction

    def dying(self, connection, commands, raise_on_error):
        if cut >= len(commands):
            return original(self, connection, commands, raise_on_error)
        sent = chain([("MULTI",)], [args for args, _ in commands[:cut]])
        connection.send_packed_command(connection.pack_commands(list(sent)))
        os.kill(os.getpid(), signal.SIGKILL)

    Pipeline._execute_transaction = dying
    store = JobStore.from_url(url, prefix=prefix)
    parked = store.jobs.park(
        Approval.model_validate_json(approval),
        owner="w1",
        run_state='{"version": 1}',
        snapshot=b"snapshot",
        deliveries=[OutboxEntry.model_validate_json(entry)],
        result={"text": "parked"},
    )
    assert parked is not None
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


ENTRY = OutboxEntry(
    id="e" * 32,
    channel="approval_webhook",
    repo="docs",
    job_id="job1",
    event="approval.parked",
    payload={"event": "approval.parked"},
    created_at=datetime(2026, 12, 6, tzinfo=UTC),
)


def _approval(record: JobRecord) -> Approval:
    return Approval(
        id="a1",
        job_id=record.id,
        repo="docs",
        requested_by="alice",
        call_id="call_1",
        tool="git_push",
        arguments={},
        commit_sha="c" * 40,
        target_ref="riverbeam/job1",
    )


def _written(store: JobStore, job_id: str) -> dict[str, bool]:
    """Which parts of a park the store holds for the job."""
    client, keys = store.gateway.client, store.gateway.keys
    record = store.jobs.get(job_id)
    return {
        "run_state": client.exists(keys.run(job_id)) == 1,
        "snapshot": client.exists(keys.snapshot(job_id)) == 1,
        "approval": client.exists(keys.approval(job_id)) == 1,
        "queued": client.zscore(keys.pending, job_id) is not None,
        "summary": client.hexists(keys.summaries, job_id),
        "announcement": client.exists(keys.outbox(ENTRY.id)) == 1,
        "announcement_due": client.zscore(keys.outbox_due, ENTRY.id) is not None,
        "moved": record.state is JobState.AWAITING_APPROVAL and record.approval_id == "a1",
    }


def test_a_worker_killed_anywhere_in_the_park_leaves_none_or_all_of_it(
    store: JobStore, server: RedisServer
) -> None:
    record = store.jobs.claim(store.jobs.create(author()).id, worker=WORKER, lease_seconds=60)
    assert record is not None
    approval = _approval(record).model_dump_json()
    entry = ENTRY.model_dump_json()
    seen: list[dict[str, bool]] = []
    for cut in range(20):
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                CHILD,
                server.url,
                store.gateway.keys.prefix,
                approval,
                entry,
                str(cut),
            ],
            env=os.environ,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert child.returncode == -9, child.stderr
        written = _written(store, record.id)
        seen.append(written)
        if any(written.values()):
            break
        # Nothing of the park: the job is as the worker left it, running on its lease.
        assert store.jobs.get(record.id).version == record.version
    assert all(seen[-1].values()), seen[-1]
    # The park's writes were cut after each one of them, and after all but the EXEC.
    assert len(seen) >= 9 and not any(any(w.values()) for w in seen[:-1])


def test_a_park_of_a_job_the_worker_no_longer_runs_writes_nothing(store: JobStore) -> None:
    record = store.jobs.claim(store.jobs.create(author()).id, worker="w2", lease_seconds=60)
    assert record is not None
    parked = store.jobs.park(
        _approval(record), owner=WORKER, run_state="{}", snapshot=b"s", result=JobResult()
    )
    assert parked is None
    assert not any(_written(store, record.id).values())


def test_a_park_with_a_snapshot_over_the_cap_writes_nothing(store: JobStore) -> None:
    record = store.jobs.claim(store.jobs.create(author()).id, worker=WORKER, lease_seconds=60)
    assert record is not None
    with pytest.raises(JobError) as caught:
        store.jobs.park(_approval(record), owner=WORKER, run_state="{}", snapshot=b"x" * 4097)
    assert caught.value.code == "BEM-503"
    assert not any(_written(store, record.id).values())
