"""Approvals against a real redis-server: decided once, bound to what the person saw,
queued and summarized, indexed until a resume applies them; documents of the previous
release."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import redis

from bot.core.errors import ApprovalError
from bot.review.check_report import CheckFinding, ChecksReport, compare_run
from bot.store.models import Approval, ApprovalState, DecisionBinding, JobKind, JobRecord, JobSpec
from bot.store.store import JobStore
from harness.parking import park_on, pending_for
from harness.redis_server import RedisServer
from tests.store.kit import author, code_of, open_store, parked, race, seen

# approvals --------------------------------------------------------------------------------


class _SelfApproving:
    """A decision policy that lets anyone decide, the requester included."""

    def check(self, record: JobRecord) -> None:
        return None

    def allows_self_approval(self, record: JobRecord) -> bool:
        return True


def test_an_approval_is_decided_once_and_kept_in_history(store: JobStore) -> None:
    record = parked(store)
    opened = store.approvals.get(record.id)
    assert opened is not None and opened.state is ApprovalState.PENDING
    decided = store.approvals.decide(
        record.id, binding=seen(store, record.id), approve=True, by="bob", comment="looks right"
    )[0]
    assert decided.state is ApprovalState.APPROVED
    assert (decided.decided_by, decided.comment) == ("bob", "looks right")
    assert decided.decided_at is not None
    assert store.approvals.get(record.id) == decided
    assert store.approvals.history(record.id) == [decided]
    assert store.approvals.pending() == []
    with pytest.raises(ApprovalError) as caught:
        store.approvals.decide(record.id, binding=seen(store, record.id), approve=False, by="carol")
    assert caught.value.code == "BEM-601"
    assert "approved by bob at " in caught.value.message


def test_a_refusal_is_recorded_too(store: JobStore) -> None:
    record = parked(store)
    refused = store.approvals.decide(
        record.id, binding=seen(store, record.id), approve=False, by="bob", comment="wrong page"
    )[0]
    assert refused.state is ApprovalState.REFUSED
    claimed = store.jobs.claim_resume(record.id, worker="w2", lease_seconds=30)
    assert claimed is not None and claimed[1] == refused.model_copy(update={"applied": True})


def test_no_approval_waiting_is_bem_600(store: JobStore) -> None:
    record = store.jobs.create(author())
    assert code_of(
        lambda: store.approvals.decide(record.id, binding=None, approve=False, by="bob")[0]
    ) == ("BEM-600")
    # Opened but not parked yet (the worker is between the two writes): not decidable.
    store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    store.approvals.open(pending_for(record))
    with pytest.raises(ApprovalError) as caught:
        store.approvals.decide(record.id, binding=seen(store, record.id), approve=True, by="bob")
    assert caught.value.code == "BEM-600" and "running" in caught.value.message


def test_the_requester_cannot_approve_their_own_job_unless_allowed(store: JobStore) -> None:
    record = parked(store)
    with pytest.raises(ApprovalError) as caught:
        store.approvals.decide(record.id, binding=seen(store, record.id), approve=True, by="alice")
    assert caught.value.code == "BEM-602"
    assert (
        store.approvals.decide(
            record.id,
            binding=seen(store, record.id),
            approve=True,
            by="alice",
            policy=_SelfApproving(),
        )[0].decided_by
        == "alice"
    )
    other = parked(store)
    assert (
        store.approvals.decide(other.id, binding=seen(store, other.id), approve=False, by="alice")[
            0
        ].state
        is ApprovalState.REFUSED
    )


def test_concurrent_decisions_exactly_one_lands(store: JobStore) -> None:
    record = parked(store)
    results = race(
        10,
        lambda i: store.approvals.decide(
            record.id, binding=seen(store, record.id), approve=i % 2 == 0, by=f"r{i}"
        )[0],
    )
    landed = [result for result in results if isinstance(result, Approval)]
    assert len(landed) == 1
    assert all(
        isinstance(r, ApprovalError) and r.code == "BEM-601" for r in results if r not in landed
    )
    assert store.approvals.get(record.id) == landed[0]
    assert store.approvals.history(record.id) == landed


def test_pending_approvals_are_oldest_first_and_filter_by_repo(store: JobStore) -> None:
    first = parked(store, author())
    second = parked(store, JobSpec(kind=JobKind.REVIEW, repo="api", branch="b"))
    third = parked(store, author())
    assert [a.job_id for a in store.approvals.pending()] == [first.id, second.id, third.id]
    assert [a.job_id for a in store.approvals.pending(repo="api")] == [second.id]
    assert store.approvals.pending(repo="elsewhere") == []


def _summarized(store: JobStore, **kw: Any) -> tuple[int, list[tuple[str, str]]]:
    count, summaries = store.approvals.pending_summaries(limit=100, **kw)
    return count, [(summary.job_id, summary.repo) for summary in summaries]


def test_pending_summaries_follow_open_decide_and_withdraw_without_reading_a_diff(
    store: JobStore,
) -> None:
    first = parked(store, author())
    second = parked(store, JobSpec(kind=JobKind.REVIEW, repo="api", branch="b"))
    third = parked(store, author())
    # A summary is read, never the approval: its document gone, it is still counted.
    store.gateway.client.delete(store.gateway.keys.approval(first.id))
    assert _summarized(store) == (3, [(first.id, "docs"), (second.id, "api"), (third.id, "docs")])
    count, capped = store.approvals.pending_summaries(limit=1)
    assert (count, [summary.job_id for summary in capped]) == (3, [first.id])

    store.approvals.decide(second.id, binding=seen(store, second.id), approve=True, by="bob")
    store.jobs.request_cancel(third.id)
    assert _summarized(store) == (1, [(first.id, "docs")])
    assert store.gateway.client.hlen(store.gateway.keys.summaries) == 1


def test_an_approval_parked_by_the_previous_release_is_summarized_on_first_read(
    store: JobStore,
) -> None:
    """The previous release kept the approval and its place in the pending queue, no
    summary: the first read writes it from the full document, then reads only the summary."""
    old = [parked(store, author()) for _ in range(3)]
    store.gateway.client.delete(store.gateway.keys.summaries)

    assert _summarized(store, migrate=2) == (3, [(old[0].id, "docs"), (old[1].id, "docs")])
    assert _summarized(store, migrate=2) == (3, [(job.id, "docs") for job in old])
    assert store.gateway.client.hlen(store.gateway.keys.summaries) == 3
    for job in old:
        store.gateway.client.delete(
            store.gateway.keys.approval(job.id)
        )  # from now on, summaries only
    assert _summarized(store, migrate=0) == (3, [(job.id, "docs") for job in old])


def test_a_decision_recorded_before_the_resume_index_is_indexed_by_the_sweeps(
    server: RedisServer,
) -> None:
    """The previous release recorded decisions without indexing them: the sweeps index them
    a page at a time, and a glob character in the prefix matches only itself."""
    store = open_store(server.url, prefix=f"t{uuid.uuid4().hex[:8]}[x]")
    lost = parked(store)
    store.approvals.decide(lost.id, binding=seen(store, lost.id), approve=True, by="bob")
    applied = parked(store)
    store.approvals.decide(applied.id, binding=None, approve=False, by="bob")
    store.jobs.claim_resume(applied.id, worker="w1", lease_seconds=30)
    store.gateway.client.delete(store.gateway.keys.decided)  # as the previous release left it
    marker = store.gateway.key("approvals", "decided", "backfill")

    for _ in range(10_000):  # one SCAN page per sweep, over the whole shared server
        found = store.approvals.unapplied_decisions(older_than=0)
        if store.gateway.client.get(marker) == b"done":
            break
    assert [job.id for job in found] == [lost.id]
    assert [job.id for job in store.approvals.unapplied_decisions(older_than=0)] == [lost.id]


def test_a_decision_stays_in_the_resume_index_until_a_resume_claims_it(store: JobStore) -> None:
    record = parked(store)
    store.approvals.decide(record.id, binding=seen(store, record.id), approve=True, by="bob")
    assert store.approvals.unapplied_decisions(older_than=3600) == []  # too recent to be overdue
    assert [job.id for job in store.approvals.unapplied_decisions(older_than=0)] == [record.id]
    assert [job.id for job in store.approvals.unapplied_decisions(older_than=0)] == [record.id]

    assert store.jobs.claim_resume(record.id, worker="w1", lease_seconds=30) is not None
    assert store.approvals.unapplied_decisions(older_than=0) == []
    assert store.gateway.client.zcard(store.gateway.keys.decided) == 0


def test_opening_an_approval_again_is_idempotent_and_a_new_one_replaces_it(
    store: JobStore,
) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    first = store.approvals.open(pending_for(record, "ap1"))
    assert store.approvals.open(pending_for(record, "ap1")) == first  # a redelivered park
    second = store.approvals.open(pending_for(record, "ap2"))
    assert store.approvals.get(record.id) == second
    assert [a.id for a in store.approvals.pending()] == ["ap2"]
    with pytest.raises(ValueError):
        store.approvals.open(second.model_copy(update={"state": ApprovalState.APPROVED}))
    orphan = pending_for(record).model_copy(update={"job_id": "nope"})
    assert code_of(lambda: store.approvals.open(orphan)) == "BEM-500"


# decisions name what they decide ---------------------------------------------------------


def park_again(store: JobStore, record: JobRecord, approval_id: str, commit: str) -> None:
    """The resume applied the decision; the agent committed something else and parked on it."""
    assert store.jobs.claim_resume(record.id, worker="w2", lease_seconds=30) is not None
    again = pending_for(record, approval_id).model_copy(
        update={"commit_sha": commit, "diff_digest": "e" * 64, "diff": "+++ another change\n"}
    )
    park_on(store, again)


def test_an_approve_of_what_was_shown_before_the_job_parked_again_is_refused(
    store: JobStore,
) -> None:
    """Reviewer A opens approval 1; B refuses it; the job parks approval 2 on another commit;
    A's approve still names approval 1, so it lands on nothing."""
    record = parked(store, approval_id="ap1")
    shown_to_a = seen(store, record.id)
    store.approvals.decide(
        record.id, binding=seen(store, record.id), approve=False, by="b", comment="no"
    )
    park_again(store, record, "ap2", "b" * 40)

    for approve in (True, False):
        with pytest.raises(ApprovalError) as caught:
            store.approvals.decide(record.id, binding=shown_to_a, approve=approve, by="a")
        assert caught.value.code == "BEM-604"
        assert "ap2 (pending)" in caught.value.message and "look at" in caught.value.message
    waiting = store.approvals.get(record.id)
    assert waiting is not None and waiting.id == "ap2" and waiting.state is ApprovalState.PENDING
    assert [a.id for a in store.approvals.history(record.id)] == ["ap1"]
    assert [a.id for a in store.approvals.pending()] == ["ap2"]


def test_a_decision_naming_the_waiting_approval_with_another_commit_or_digest_is_refused(
    store: JobStore,
) -> None:
    record = parked(store)
    shown = seen(store, record.id)
    assert shown is not None
    for wrong in (
        shown.model_copy(update={"commit_sha": "b" * 40}),
        shown.model_copy(update={"commit_sha": None}),
        shown.model_copy(update={"diff_digest": "e" * 64}),
        shown.model_copy(update={"diff_digest": ""}),
    ):
        with pytest.raises(ApprovalError) as caught:
            store.approvals.decide(record.id, binding=wrong, approve=True, by="bob")
        assert caught.value.code == "BEM-604"
    # As the CLI and the web page show them: the digest with its prefix, any case.
    typed = DecisionBinding(
        approval_id="ap1", commit_sha=("A" * 40), diff_digest="SHA256:" + "D" * 64
    )
    assert store.approvals.decide(record.id, binding=typed, approve=True, by="bob")[0].state is (
        ApprovalState.APPROVED
    )


def test_an_approve_must_name_what_it_approves_and_a_refuse_need_not(store: JobStore) -> None:
    record = parked(store)
    with pytest.raises(ApprovalError) as caught:
        store.approvals.decide(record.id, binding=None, approve=True, by="bob")
    assert caught.value.code == "BEM-605"
    untouched = store.approvals.get(record.id)
    assert untouched is not None and untouched.state is ApprovalState.PENDING
    refused = store.approvals.decide(
        record.id, binding=None, approve=False, by="bob", comment="no"
    )[0]
    assert refused.state is ApprovalState.REFUSED


def test_an_approval_and_job_stored_by_the_previous_release_are_decided_and_resumed(
    store: JobStore, client: redis.Redis
) -> None:
    """Records exactly as the previous release wrote them (no OS account, no pushes): the
    binding is what their approval document shows, and the decision applies."""
    job_id = "0123456789ab"
    sha, digest = "c" * 40, "f" * 64
    job = {
        "id": job_id,
        "spec": {
            "kind": "author",
            "repo": "docs",
            "request": "fix the install page",
            "base": None,
            "branch": None,
            "range": None,
            "review_job": None,
            "pages": [],
            "requested_by": "alice",
            "metadata": {},
        },
        "state": "awaiting_approval",
        "version": 3,
        "created_at": "2026-11-30T10:00:00Z",
        "updated_at": "2026-11-30T10:01:00Z",
        "attempt": 1,
        "worker": None,
        "lease_until": None,
        "branch": f"riverbeam/{job_id}",
        "approval_id": "9f1c2b3a4d5e6f708192a3b4c5d6e7f8",
        "cancel_requested": False,
        "result": None,
        "error": None,
    }
    approval = {
        "id": "9f1c2b3a4d5e6f708192a3b4c5d6e7f8",
        "job_id": job_id,
        "repo": "docs",
        "requested_by": "alice",
        "call_id": "call-1",
        "tool": "git_push",
        "arguments": {},
        "commit_sha": sha,
        "target_ref": f"riverbeam/{job_id}",
        "base_sha": "b" * 40,
        "diff_digest": digest,
        "diff_stat": " install.md | 2 +-\n",
        "diff": "--- a/install.md\n+++ b/install.md\n",
        "created_at": "2026-11-30T10:01:00Z",
        "state": "pending",
        "decided_by": None,
        "decided_at": None,
        "comment": "",
        "applied": False,
    }
    client.set(store.gateway.key("job", job_id), json.dumps(job))
    client.zadd(store.gateway.key("jobs"), {job_id: 1_700_000_000.0})
    client.set(store.gateway.key("approval", job_id), json.dumps(approval))
    client.zadd(store.gateway.key("approvals", "pending"), {job_id: 1_700_000_000.0})

    shown = DecisionBinding(approval_id=approval["id"], commit_sha=sha, diff_digest=digest)
    stored = store.approvals.get(job_id)
    assert stored is not None and stored.binding() == shown
    assert store.jobs.get(job_id).pushes == []
    decided = store.approvals.decide(job_id, binding=shown, approve=True, by="bob")[0]
    assert decided.state is ApprovalState.APPROVED and decided.decided_by_os_user is None
    claimed = store.jobs.claim_resume(job_id, worker="w1", lease_seconds=30)
    assert claimed is not None and claimed[1].applied


def test_a_cli_decision_records_the_os_account_and_it_too_may_not_approve_its_own_job(
    store: JobStore,
) -> None:
    record = parked(store)  # requested by alice
    with pytest.raises(ApprovalError) as caught:
        store.approvals.decide(
            record.id, binding=seen(store, record.id), approve=True, by="bob", os_user="alice"
        )
    assert caught.value.code == "BEM-602"
    decided = store.approvals.decide(
        record.id, binding=seen(store, record.id), approve=True, by="bob", os_user="carol"
    )[0]
    assert (decided.decided_by, decided.decided_by_os_user) == ("bob", "carol")
    assert decided.decider == "bob (OS user carol)"
    assert store.approvals.history(record.id)[0].decided_by_os_user == "carol"


def _failing_checks() -> ChecksReport:
    run = compare_run(
        "codespell",
        [CheckFinding(check="codespell", path="a.md", line=3, rule="misspelling", message="x")],
        [],
        seconds=0.2,
        base_seconds=0.2,
        cap=10,
    )
    return ChecksReport(commit="a" * 40, runs=[run])


class _Deciders:
    def __init__(self, admin: bool) -> None:
        self.admin = admin

    def check(self, record: JobRecord) -> None:
        return None

    def allows_self_approval(self, record: JobRecord) -> bool:
        return False

    def allows_checks_override(self, record: JobRecord) -> bool:
        return self.admin


def test_a_blocking_check_failure_refuses_the_approve_until_an_admin_overrides(
    store: JobStore,
) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    approval = pending_for(record).model_copy(
        update={"checks": _failing_checks(), "checks_block": True}
    )
    park_on(store, approval)
    shown = seen(store, record.id)

    def approve(*, admin: bool, override: bool) -> Approval:
        return store.approvals.decide(
            record.id,
            binding=shown,
            approve=True,
            by="bob",
            policy=_Deciders(admin),
            override_checks=override,
        )[0]

    for admin, override in ((False, False), (True, False), (False, True)):
        with pytest.raises(ApprovalError) as caught:
            approve(admin=admin, override=override)
        assert caught.value.code == "BEM-606" and "codespell" in caught.value.message
    assert store.approvals.get(record.id).state is ApprovalState.PENDING  # type: ignore[union-attr]
    decided = approve(admin=True, override=True)
    assert decided.state is ApprovalState.APPROVED and decided.checks_overridden_by == "bob"


def test_a_failure_that_does_not_block_and_a_refuse_need_no_override(store: JobStore) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    park_on(store, pending_for(record).model_copy(update={"checks": _failing_checks()}))
    decided = store.approvals.decide(
        record.id, binding=seen(store, record.id), approve=True, by="bob"
    )[0]
    assert decided.state is ApprovalState.APPROVED and decided.checks_overridden_by is None
