"""A job from a forge thread keeps ONE status comment there, edited in place as the job
moves: the store queues a refresh in the transaction of each move, and the delivery task
renders the job as it stands. A review job of a pull request posts its review (line
comments on the lines the diff shows, never an approval) once, and its verdict as the
``riverbeam/review`` commit status (its docs checks as ``riverbeam/checks``); commit-notes
jobs of one pull request share a comment. Real Redis, the fake GitHub held to
``api.github.com.json``."""

from __future__ import annotations

from typing import Any

from bot.config import Settings
from bot.core.frames import ErrorInfo
from bot.jobs.delivery import deliver_due
from bot.jobs.forge_posts import checks_status, landed_pull_request
from bot.review.check_report import CheckFinding, CheckRun, ChecksReport
from bot.store.models import (
    Approval,
    CommitNotesOutcome,
    DecisionBinding,
    Finding,
    JobKind,
    JobRecord,
    JobResult,
    JobSpec,
    JobState,
    ReviewOutcome,
)
from bot.store.store import JobStore
from harness.fake_github import FakeGitHub, Repository
from tests.forge.kit import APPROVAL_ID, GITHUB_REPO, push_approval

DIFF = (
    "diff --git a/docs/install.md b/docs/install.md\n"
    "--- a/docs/install.md\n+++ b/docs/install.md\n"
    "@@ -1 +1 @@\n-Run the installr first.\n+Run the installer first.\n"
)


def _job(store: JobStore, kind: JobKind = JobKind.AUTHOR, **origin: Any) -> JobRecord:
    forge = {"name": "gh", "repository": GITHUB_REPO, "number": 1, "thread": "issue", **origin}
    spec = JobSpec(
        kind=kind,
        repo="docs",
        request="Fix the install page",
        requested_by="gh:Codertocat",
        metadata={"forge": forge},
        branch=None if kind is JobKind.AUTHOR else "docs-fix",
    )
    return store.jobs.create(spec)


def _pending(record: JobRecord, diff_stat: str = " docs/install.md | 2 +-\n") -> Approval:
    return push_approval(record.id, "gh:Codertocat", diff_stat=diff_stat, diff=DIFF)


def _delivered(store: JobStore, settings: Settings) -> list[str]:
    return [f"{a.entry.channel}:{a.outcome}" for a in deliver_due(store, settings)]


def _park(store: JobStore, record: JobRecord, approval: Approval) -> None:
    assert store.jobs.claim(record.id, worker="w1", lease_seconds=60) is not None
    assert store.jobs.park(approval, owner="w1", run_state="{}", snapshot=None) is not None


def test_one_comment_follows_the_job_from_queued_to_landed(
    settings: Settings, store: JobStore, thread: Repository, github: FakeGitHub
) -> None:
    record = _job(store)
    seen: list[str] = []

    def step() -> str:
        assert _delivered(store, settings) == ["forge_status:delivered"]
        [comment] = thread.comments.values()
        seen.append(comment.body.split("\n")[0])
        return comment.body

    assert "**queued**" in step()
    _park(store, record, _pending(record))
    parked = step()
    assert f"/riverbeam approve {APPROVAL_ID}" in parked
    assert "{+installer+}" in parked and "[-installr-]" in parked, "the word-diff excerpt"
    binding = DecisionBinding(approval_id=APPROVAL_ID, commit_sha="d" * 40, diff_digest="")
    store.approvals.decide(record.id, approve=True, by="gh:ada", binding=binding)
    assert "Approved by gh:ada" in step()
    assert store.jobs.claim_resume(record.id, worker="w2", lease_seconds=60) is not None
    store.jobs.begin_push(record.id, worker="w2", sha="e" * 40, ref=f"riverbeam/{record.id}")
    assert "**pushing**" in step()
    store.jobs.end_push(record.id, worker="w2")
    store.jobs.transition(record.id, JobState.SUCCEEDED, from_states=[JobState.RUNNING])
    done = step()
    assert "**done**" in done and f"Landed commit `eeeeeeeeeeee` on `riverbeam/{record.id}`" in done
    # Every move edited the one comment: created once, then PATCHed.
    assert github.operations["issues/create-comment"] == 1
    assert github.operations["issues/update-comment"] == len(seen) - 1
    assert all(f"job `{record.id}`" in line for line in seen)


def test_a_move_while_its_comment_is_being_posted_is_posted_after(
    settings: Settings, store: JobStore, thread: Repository
) -> None:
    record = _job(store)
    [entry] = store.outbox.claim(lease_seconds=60)
    # The job moves while a worker holds the entry: the move keeps the lease and the newer
    # revision, and the delivery of the older one leaves it due.
    assert store.jobs.claim(record.id, worker="w1", lease_seconds=60) is not None
    store.outbox.delivered(entry)
    assert store.outbox.due() == 1 and store.outbox.next_due_in() == 0
    assert _delivered(store, settings) == ["forge_status:delivered"]
    [comment] = thread.comments.values()
    assert "**running**" in comment.body and store.outbox.due() == 0


def test_a_deleted_status_comment_is_posted_again(
    settings: Settings, store: JobStore, thread: Repository
) -> None:
    record = _job(store)
    _delivered(store, settings)
    thread.comments.clear()
    store.jobs.claim(record.id, worker="w1", lease_seconds=60)
    assert _delivered(store, settings) == ["forge_status:delivered"]
    [comment] = thread.comments.values()
    assert "**running**" in comment.body


def test_a_failed_job_shows_its_code_and_hostile_text_stays_inert(
    settings: Settings, store: JobStore, thread: Repository
) -> None:
    record = _job(store)
    _park(store, record, _pending(record, diff_stat=" docs/a```\n@everyone | 2 +-\n"))
    _delivered(store, settings)
    [comment] = thread.comments.values()
    # Every fence is Riverbeam's: the hostile path holds no backtick any more.
    assert comment.body.count("```") == 4 and "@everyone" not in comment.body
    error = ErrorInfo(code="BEM-340", message="the upstream refused `main` @admins")
    store.jobs.transition(
        record.id, JobState.FAILED, from_states=[JobState.AWAITING_APPROVAL], error=error
    )
    _delivered(store, settings)
    [comment] = thread.comments.values()
    assert "**failed** (BEM-340)" in comment.body and "@admins" not in comment.body


def _review_result(verdict: str) -> JobResult:
    findings = [
        Finding(path="docs/install.md", line=3, severity="major", note="Typo: installr"),
        Finding(path="docs/install.md", line=40, note="Outside the diff"),
        Finding(path="docs/other.md", note="A whole-file note"),
    ]
    outcome = ReviewOutcome(
        branch="docs-fix", commit_sha="c" * 40, verdict=verdict, summary="Two fixes needed."
    )
    return JobResult(outcome=outcome.model_copy(update={"findings": findings}))


def _review_job(store: JobStore, thread: Repository, github: FakeGitHub) -> JobRecord:
    patch = "@@ -1,3 +1,3 @@\n a\n-Run the installr\n+Run the installer\n b"
    pull = github.add_pull(
        thread, head="docs-fix", files=["docs/install.md"], patches={"docs/install.md": patch}
    )
    return _job(
        store,
        JobKind.REVIEW,
        number=pull.number,
        thread="pull_request",
        head_sha=pull.head_sha,
    )


def test_a_review_job_posts_its_review_once_and_its_verdict_as_a_status(
    settings: Settings, store: JobStore, thread: Repository, github: FakeGitHub
) -> None:
    record = _review_job(store, thread, github)
    _delivered(store, settings)
    assert [(s["state"], s["context"]) for s in thread.statuses] == [
        ("pending", "riverbeam/review")
    ]
    store.jobs.claim(record.id, worker="w1", lease_seconds=60)
    store.jobs.transition(
        record.id,
        JobState.SUCCEEDED,
        from_states=[JobState.RUNNING],
        result=_review_result("request_changes"),
    )
    attempts = deliver_due(store, settings)
    assert sorted(f"{a.entry.channel}:{a.outcome}" for a in attempts) == [
        "forge_review:delivered",
        "forge_status:delivered",
    ]
    [review] = thread.reviews
    assert review["event"] == "COMMENT" and review["commit_id"] == "c" * 40
    assert [(c["path"], c["line"]) for c in review["comments"]] == [("docs/install.md", 3)]
    assert "docs/install.md:40" in review["body"] and "docs/other.md" in review["body"]
    assert (thread.statuses[-1]["state"], thread.statuses[-1]["sha"]) == ("failure", "c" * 40)
    # Its status comment delivered again (a retry, a redelivery): no second review.
    [status] = [a.entry for a in attempts if a.entry.channel == "forge_status"]
    assert store.outbox.add(status)
    assert _delivered(store, settings) == ["forge_status:delivered"]
    assert len(thread.reviews) == 1


def test_a_review_that_ended_without_a_verdict_never_passes(
    settings: Settings, store: JobStore, thread: Repository, github: FakeGitHub
) -> None:
    record = _review_job(store, thread, github)
    store.jobs.claim(record.id, worker="w1", lease_seconds=60)
    error = ErrorInfo(code="BEM-521", message="no verdict")
    store.jobs.transition(record.id, JobState.FAILED, from_states=[JobState.RUNNING], error=error)
    _delivered(store, settings)
    assert thread.reviews == []
    assert (
        thread.statuses[-1]["state"] == "failure"
        and "BEM-521" in (thread.statuses[-1]["description"])
    )


def test_commit_notes_jobs_of_one_pull_request_keep_one_comment(
    settings: Settings, store: JobStore, thread: Repository, github: FakeGitHub
) -> None:
    pull = github.add_pull(thread, head="docs-fix", files=["docs/install.md"])
    for subject in ("Fix the installer's name", "Fix the installer's name and path"):
        record = _job(store, JobKind.COMMIT_NOTES, number=pull.number, thread="pull_request")
        store.jobs.claim(record.id, worker="w1", lease_seconds=60)
        outcome = CommitNotesOutcome(range="main..docs-fix", subject=subject)
        store.jobs.transition(
            record.id,
            JobState.SUCCEEDED,
            from_states=[JobState.RUNNING],
            result=JobResult(outcome=outcome),
        )
        _delivered(store, settings)
    [comment] = thread.comments.values()
    assert "Fix the installer's name and path" in comment.body and record.id in comment.body


def test_a_push_that_addressed_a_review_moves_the_pull_request_and_says_so(
    settings: Settings, store: JobStore, thread: Repository, github: FakeGitHub
) -> None:
    pull = github.add_pull(thread, head="riverbeam/3f9c2a71b0de", files=["docs/install.md"])
    record = _job(store, number=pull.number, thread="pull_request")
    record = store.jobs.create(record.spec.model_copy(update={"branch": pull.head}))
    approved = push_approval(record.id, "gh:Codertocat", target_ref=pull.head, decided_by="gh:ada")
    entry = landed_pull_request(settings, record, approved, "e" * 40)
    assert entry is not None and entry.channel == "forge_comment"
    store.outbox.add(entry)
    deliver_due(store, settings)
    replies = [c.body for c in thread.comments.values() if "addressed the review" in c.body]
    assert len(replies) == 1 and "`eeeeeeeeeeee`" in replies[0] and "gh:ada" in replies[0]
    # No second pull request: the one whose branch moved is the one.
    assert list(thread.pulls) == [pull.number]
    # A push to a branch of its own (not the one it revises) says nothing there.
    elsewhere = approved.model_copy(update={"target_ref": f"riverbeam/{record.id}"})
    assert landed_pull_request(settings, record, elsewhere, "e" * 40) is None


def test_a_status_the_forge_refuses_is_given_up_and_shown_on_the_job(
    settings: Settings, store: JobStore, github: FakeGitHub
) -> None:
    github.add_repository(GITHUB_REPO)  # no issue 1 there: 404
    record = _job(store)
    assert _delivered(store, settings) == ["forge_status:given_up"]
    [error] = store.jobs.get(record.id).posts_given_up
    assert error.code == "BEM-823" and "given up" in error.message
    # The job itself goes on: the post's failure is not the job's.
    assert store.jobs.get(record.id).state is JobState.QUEUED


def test_a_review_with_docs_checks_posts_them_as_their_own_status(
    settings: Settings, store: JobStore, thread: Repository, github: FakeGitHub
) -> None:
    record = _review_job(store, thread, github)
    store.jobs.claim(record.id, worker="w1", lease_seconds=60)
    new = CheckFinding(check="codespell", path="docs/install.md", line=3, rule="typo", message="x")
    failing = ChecksReport(
        commit="c" * 40,
        runs=[
            CheckRun(check="links", status="passed", seconds=0.1),
            CheckRun(check="codespell", status="failed", seconds=0.1, new=[new], new_total=1),
        ],
    )
    result = _review_result("approve")
    assert isinstance(result.outcome, ReviewOutcome)
    result.outcome = result.outcome.model_copy(update={"checks": failing})
    store.jobs.transition(
        record.id, JobState.SUCCEEDED, from_states=[JobState.RUNNING], result=result
    )
    _delivered(store, settings)
    latest = {s["context"]: (s["state"], s["sha"], s["description"]) for s in thread.statuses}
    assert latest["riverbeam/review"][:2] == ("success", "c" * 40)
    assert latest["riverbeam/checks"] == ("failure", "c" * 40, "Docs checks fail: codespell")


def test_a_landed_push_carries_the_checks_of_its_park_and_an_override_stays_a_failure(
    store: JobStore,
) -> None:
    record = _job(store)
    store.jobs.claim(record.id, worker="w1", lease_seconds=60)
    report = ChecksReport(runs=[CheckRun(check="mkdocs", status="error", seconds=0.0)])
    approval = _pending(record).model_copy(
        update={"checks": report, "checks_overridden_by": "gh:admin"}
    )
    assert checks_status(record, approval) is None  # not landed yet
    done = store.jobs.transition(record.id, JobState.SUCCEEDED, from_states=[JobState.RUNNING])
    assert done is not None
    assert checks_status(done, approval) is None  # decided, never applied
    landed = approval.model_copy(update={"applied": True})
    assert checks_status(done, landed) == (
        approval.commit_sha,
        "failure",
        "Docs checks fail: mkdocs; approved over them by gh:admin",
    )
    clean = landed.model_copy(update={"checks": ChecksReport(runs=[])})
    assert checks_status(done, clean) == (
        approval.commit_sha,
        "success",
        "Docs checks: no new failure",
    )
