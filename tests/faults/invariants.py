"""What every fault test checks last: whatever broke, the service kept its promises.

``check_invariants(stack, job_ids)`` waits (bounded) until every job is final, then runs the
sandbox reaper and asserts:

- **no job lost**: every job is in the store and in its index (``jobs list`` shows it);
- **a clear final state**: succeeded or refused with a result, failed or cancelled with a BEM
  code; no approval of them still pending, no lease of them outstanding;
- **no push twice**: the upstream's reflog (the stack turns reflogs on) has at most one
  update of each job's branch, exactly one at the pushed commit for a job that says it
  pushed, and ``main`` was never moved;
- **the record says what reached the upstream**: the job's last landed push is what its
  upstream branch holds, and no push is recorded as landed that is not there;
- **no container left** once the reaper ran: none labelled with one of the jobs.

The reaper is the real one (``sandbox.host.container.reaper.reap``), given the stack's
deployment and told to leave alone the jobs that are not this test's: the Docker engine is
shared with other stacks (the suite's parallel workers, other runs), whose containers it
judges by their deadlines only.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from bot.store.models import AuthorOutcome, JobRecord, JobState, PushState
from harness.stack import Stack, wait_until
from sandbox.host.container.reaper import reap
from sandbox.host.engine import connect

SETTLE_SECONDS = 90.0
_CODE = re.compile(r"BEM-\d{3}")


def settle(stack: Stack, job_ids: Collection[str], timeout: float = SETTLE_SECONDS) -> None:
    """Wait until every job is final; fail with the workers' logs if one is not in time."""

    def open_jobs() -> list[str]:
        return [
            f"{job_id}: {stack.store.jobs.get(job_id).state.value}"
            for job_id in job_ids
            if not stack.store.jobs.get(job_id).state.is_final
        ]

    wait_until(
        lambda: not open_jobs(), timeout, lambda: f"not final: {open_jobs()}\n{stack.log_tails()}"
    )


def check_invariants(stack: Stack, job_ids: Collection[str]) -> dict[str, JobRecord]:
    """Assert the invariants above for ``job_ids``; returns their final records."""
    ours = set(job_ids)
    settle(stack, ours)
    records = {job_id: stack.store.jobs.get(job_id) for job_id in ours}
    assert ours <= _indexed(stack), "a job is missing from the store's index"
    for record in records.values():
        _assert_clear_final_state(record)
    pending = {approval.job_id for approval in stack.store.approvals.pending()}
    assert not pending & ours, f"approvals still pending: {pending & ours}"
    assert not set(stack.store.leases.expired()) & ours, "a final job still holds a lease"
    for record in records.values():
        _assert_pushed_at_most_once(stack, record)
    assert len(stack.upstream_updates("main")) == 1, "main was moved"
    reap(connect(), lambda job_id: job_id not in ours, deployment=stack.store.gateway.deployment())
    left = {job_id: stack.sandbox_containers(job_id) for job_id in ours}
    assert not any(left.values()), f"containers left after the reaper ran: {left}"
    return records


def _indexed(stack: Stack) -> set[str]:
    found: set[str] = set()
    cursor: str | None = None
    while True:
        page, cursor = stack.store.listing.list(cursor=cursor, limit=1000)
        found.update(record.id for record in page)
        if cursor is None:
            return found


def _assert_clear_final_state(record: JobRecord) -> None:
    assert record.state.is_final, f"job {record.id} is {record.state.value}"
    assert record.lease_until is None, f"job {record.id} ended holding a lease"
    if record.state in (JobState.FAILED, JobState.CANCELLED):
        assert record.error is not None and _CODE.fullmatch(record.error.code), record
        assert record.error.message, record
    else:
        assert record.result is not None, record


def _assert_pushed_at_most_once(stack: Stack, record: JobRecord) -> None:
    branch = f"riverbeam/{record.id}"
    updates = stack.upstream_updates(branch)
    assert len(updates) <= 1, f"{branch} was pushed {len(updates)} times: {updates}"
    outcome = record.result.outcome if record.result is not None else None
    if isinstance(outcome, AuthorOutcome) and outcome.pushed_sha is not None:
        assert len(updates) == 1 and stack.upstream_ref(branch) == outcome.pushed_sha, record
    # The record says what reached the upstream, whatever state the job ended in.
    landed = [p.sha for p in record.pushes if p.ref == branch and p.state is PushState.LANDED]
    if stack.upstream_ref(branch) is None:
        assert not landed, f"{record.id} records a push that is not upstream: {record.pushes}"
    elif record.pushes and record.pushes[-1].state is not PushState.UNKNOWN:
        assert landed[-1:] == [stack.upstream_ref(branch)], record
