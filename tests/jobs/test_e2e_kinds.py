"""Review, summarize, commit-notes and publish jobs end to end, and cancelling and redelivery
for every state: real Redis, real Celery worker processes, real containers, a real bare
upstream. Only the model is scripted (``harness.playbooks``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from pydantic import TypeAdapter

from bot.core.errors import BeamError
from bot.core.frames import DoneFrame
from bot.jobs.commit_notes import MAX_SUBJECT_CHARS
from bot.service.queues import RESUME_JOB, RUN_JOB, queue_for
from bot.store.models import (
    ApprovalState,
    CommitInfo,
    CommitNotesOutcome,
    Finding,
    JobKind,
    JobRecord,
    JobSpec,
    JobState,
    PublishOutcome,
    ReviewOutcome,
    SummaryOutcome,
)
from harness.gitkit import git
from harness.playbooks import (
    CHANGES_SUMMARY,
    FIXED_INSTALL,
    LONG_SUBJECT,
    NOTES_BODY,
    NOTES_SUBJECT,
    REVIEW_SUMMARY,
    SLOW_SECONDS,
    SUMMARY_TEXT,
)
from harness.stack import PUBLISH_REF, REPO, REQUESTER, Stack, job_stack, wait_until
from sandbox.inside.reports import LogReport

pytestmark = pytest.mark.slow

LOCKED = "docs-locked"
"""A repository on the same upstream whose publish ref is protected (release/*)."""

FINDING = Finding(
    path="docs/install.md",
    line=3,
    severity="nit",
    note="Name the minimum pip version.",
    suggestion="Install the tool with pip 23 or newer:",
)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack(
        lease_seconds=2.0, repositories={LOCKED: {"publish_ref": "release/docs"}}
    ) as running:
        running.start_worker("a")
        yield running


@pytest.fixture
def unpublished(stack: Stack) -> Stack:
    """No publish branch upstream yet (publishing is fast-forward only, so each test starts
    it afresh), and so no reflog for it either."""
    if stack.upstream_ref(PUBLISH_REF) is not None:
        git("-C", str(stack.upstream), "branch", "-D", PUBLISH_REF)
    return stack


def _done_frames(stack: Stack, job_id: str) -> int:
    events = stack.store.events.read(job_id, count=10_000)
    return sum(isinstance(event.frame, DoneFrame) for event in events)


def _fix_branch(stack: Stack, branch: str) -> str:
    return stack.push_branch(branch, {"docs/install.md": FIXED_INSTALL}, "Fix the install page")


def _succeeded(stack: Stack, job: JobRecord) -> JobRecord:
    done = stack.wait_for(job.id, JobState.SUCCEEDED)
    assert stack.sandbox_containers(job.id) == []
    assert stack.store.approvals.get(job.id) is None
    return done


def _reviewed(stack: Stack, branch: str, *, repo: str = REPO) -> tuple[JobRecord, str]:
    """A succeeded review of a fresh branch that fixes the install page, and its commit."""
    sha = _fix_branch(stack, branch)
    review = stack.submit(JobKind.REVIEW, "review-approve", repo=repo, branch=branch)
    return _succeeded(stack, review), sha


# -- review ----------------------------------------------------------------------------------


def test_a_review_delivers_a_verdict_and_findings_that_hold_against_the_tree(
    stack: Stack,
) -> None:
    sha = _fix_branch(stack, "docs/review-me")
    job = stack.submit(JobKind.REVIEW, "review-fix-finding", branch="docs/review-me")
    done = _succeeded(stack, job)

    assert done.result is not None
    outcome = done.result.outcome
    assert isinstance(outcome, ReviewOutcome)
    assert (outcome.branch, outcome.commit_sha) == ("docs/review-me", sha)
    assert outcome.verdict == "approve_with_suggestions" and outcome.summary == REVIEW_SUMMARY
    assert outcome.findings == [FINDING]
    # review_change checked the first review against the tree: line 99 of a 7-line page.
    first, second = stack.tool_calls(job.id, "review_change")
    assert not first.ok and first.error is not None and first.error.code == "BEM-090"
    assert "line 99 is past the end of 'docs/install.md', which has 7 lines" in first.error.message
    assert second.ok and isinstance(second.result, dict) and second.result["recorded"] is True
    # The diff the reviewer read is the branch's change against main.
    (diff,) = stack.tool_calls(job.id, "git_diff")
    assert "+Install the tool with pip:" in str(diff.result)
    assert stack.upstream_ref("docs/review-me") == sha


# -- summarize -------------------------------------------------------------------------------


def test_a_summary_covers_the_branch_since_it_left_main(stack: Stack) -> None:
    branch = "docs/summarize-me"
    sha = stack.push_branch(branch, {"docs/faq.md": "# FAQ\n\nAsk away.\n"}, "Add a FAQ page")
    # main moves on after the branch left it: the summary shows the branch's change only.
    stack.push_branch("main", {"docs/changelog.md": "# Changes\n"}, "Start a changelog")
    job = stack.submit(JobKind.SUMMARIZE, "summarize", branch=branch)
    done = _succeeded(stack, job)

    assert done.result is not None and done.result.text == SUMMARY_TEXT
    outcome = done.result.outcome
    assert isinstance(outcome, SummaryOutcome)
    assert (outcome.branch, outcome.base) == (branch, "main")
    assert outcome.commits == [CommitInfo(sha=sha, subject="Add a FAQ page")]
    assert outcome.files == ["docs/faq.md"]
    assert outcome.summary == SUMMARY_TEXT
    (log,) = stack.tool_calls(job.id, "git_log")
    assert "Start a changelog" not in str(log.result) and "Add a FAQ page" in str(log.result)


# -- commit-notes ----------------------------------------------------------------------------


def test_commit_notes_for_a_range_of_commits(stack: Stack) -> None:
    start = stack.upstream_ref("main") or ""
    end = stack.push_branch("docs/notes-range", {"docs/install.md": FIXED_INSTALL}, "wip")
    wanted = f"{start[:12]}..{end[:12]}"
    job = stack.submit(JobKind.COMMIT_NOTES, "commit-notes", range=wanted)
    done = _succeeded(stack, job)

    assert done.result is not None
    outcome = done.result.outcome
    assert outcome == CommitNotesOutcome(range=wanted, subject=NOTES_SUBJECT, body=NOTES_BODY)
    (log,) = stack.tool_calls(job.id, "git_log")
    report = TypeAdapter(LogReport).validate_python(log.result)
    assert [commit.sha for commit in report.commits] == [end]
    assert report.since is not None and report.since.sha == start


def test_commit_notes_for_a_branch_keep_the_subject_within_72_characters(stack: Stack) -> None:
    _fix_branch(stack, "docs/notes-branch")
    job = stack.submit(JobKind.COMMIT_NOTES, "commit-notes-long", branch="docs/notes-branch")
    done = _succeeded(stack, job)

    assert done.result is not None
    outcome = done.result.outcome
    assert isinstance(outcome, CommitNotesOutcome)
    assert outcome.range == "main..docs/notes-branch"
    assert len(LONG_SUBJECT) > MAX_SUBJECT_CHARS >= len(outcome.subject)
    assert LONG_SUBJECT.startswith(outcome.subject) and outcome.subject_truncated
    assert outcome.body == NOTES_BODY


# -- publish ---------------------------------------------------------------------------------


def test_a_publish_parks_on_the_reviewed_commit_and_moves_the_publish_ref_once(
    unpublished: Stack,
) -> None:
    stack = unpublished
    review, sha = _reviewed(stack, "docs/publish-me")
    job = stack.submit(JobKind.PUBLISH, "publish", review_job=review.id)
    parked = stack.wait_for(job.id, JobState.AWAITING_APPROVAL)

    approval = stack.store.approvals.get(job.id)
    assert approval is not None and parked.approval_id == approval.id
    assert (approval.tool, approval.commit_sha, approval.target_ref) == (
        "publish_docset",
        sha,
        PUBLISH_REF,
    )
    assert approval.requested_by == REQUESTER
    assert f"{PUBLISH_REF} does not exist yet" in approval.diff
    assert stack.sandbox_containers(job.id) == []
    assert stack.upstream_ref(PUBLISH_REF) is None

    stack.decide(job.id, approve=True, comment="Ship it")
    # Duplicates of the resume, and of the first run, arriving with the real one.
    for task in (RESUME_JOB, RESUME_JOB, RUN_JOB):
        stack.app.send_task(task, args=[job.id], queue=queue_for(JobKind.PUBLISH))
    done = stack.wait_for(job.id, JobState.SUCCEEDED)

    assert stack.upstream_ref(PUBLISH_REF) == sha
    assert stack.upstream_ref("main") != sha
    assert done.result is not None
    assert done.result.outcome == PublishOutcome(publish_ref=PUBLISH_REF, sha=sha)
    assert done.result.text == f"Published {sha} to {PUBLISH_REF}."
    time.sleep(1.0)  # the duplicates have been consumed by now
    again = stack.store.jobs.get(job.id)
    assert (again.state, again.version, again.attempt) == (JobState.SUCCEEDED, done.version, 2)
    assert len(stack.upstream_updates(PUBLISH_REF)) == 1
    (published,) = stack.tool_calls(job.id, "publish_docset")  # run once, after approval
    assert isinstance(published.result, dict) and published.result["already_there"] is False
    assert stack.sandbox_containers(job.id) == []


def test_a_refused_publish_leaves_the_publish_ref_alone(unpublished: Stack) -> None:
    stack = unpublished
    review, _ = _reviewed(stack, "docs/publish-refused")
    job = stack.submit(JobKind.PUBLISH, "publish", review_job=review.id)
    stack.wait_for(job.id, JobState.AWAITING_APPROVAL)
    stack.decide(job.id, approve=False, comment="Not before the release")
    done = stack.wait_for(job.id, JobState.REFUSED)

    assert stack.upstream_ref(PUBLISH_REF) is None
    assert done.result is not None and done.result.text.startswith("Nothing was published")
    assert [(a.state, a.comment) for a in stack.store.approvals.history(job.id)] == [
        (ApprovalState.REFUSED, "Not before the release")
    ]
    assert stack.sandbox_containers(job.id) == []


def test_a_publish_of_a_review_that_requested_changes_fails_before_the_model_runs(
    unpublished: Stack,
) -> None:
    stack = unpublished
    _fix_branch(stack, "docs/not-ready")
    review = stack.submit(JobKind.REVIEW, "review-request-changes", branch="docs/not-ready")
    reviewed = _succeeded(stack, review)
    outcome = reviewed.result.outcome if reviewed.result else None
    assert isinstance(outcome, ReviewOutcome) and outcome.verdict == "request_changes"
    assert outcome.summary == CHANGES_SUMMARY

    started = time.monotonic()
    job = stack.submit(JobKind.PUBLISH, "publish", review_job=review.id)
    failed = stack.wait_for(job.id, JobState.FAILED)
    assert time.monotonic() - started < 5
    assert failed.error is not None and failed.error.code == "BEM-360"
    assert "verdict is request_changes" in failed.error.message
    # The model never ran: the stream holds only the end marker.
    assert [event.end for event in stack.store.events.read(job.id)] == [JobState.FAILED]
    assert stack.store.approvals.get(job.id) is None
    assert stack.upstream_ref(PUBLISH_REF) is None


def test_a_publish_to_a_protected_ref_fails_with_bem_361(stack: Stack) -> None:
    review, _ = _reviewed(stack, "docs/locked-fix", repo=LOCKED)
    job = stack.submit(JobKind.PUBLISH, "publish", repo=LOCKED, review_job=review.id)
    failed = stack.wait_for(job.id, JobState.FAILED)
    assert failed.error is not None and failed.error.code == "BEM-361"
    assert "'release/docs'" in failed.error.message and "protected" in failed.error.message
    assert stack.store.approvals.get(job.id) is None
    assert stack.upstream_ref("release/docs") is None


# -- cancel, in every state ------------------------------------------------------------------


def test_a_queued_job_is_cancelled_and_its_message_does_nothing_later(stack: Stack) -> None:
    _fix_branch(stack, "docs/cancel-queued")
    stack.stop_worker("a")  # nobody consumes: the job stays queued
    try:
        job = stack.submit(JobKind.SUMMARIZE, "summarize", branch="docs/cancel-queued")
        cancelled = stack.cancel(job.id)
        assert cancelled.state is JobState.CANCELLED and cancelled.cancel_requested
        assert cancelled.error is not None and cancelled.error.code == "BEM-506"
    finally:
        stack.start_worker("a")
    # The worker takes the old message first (one queue, in order), then this one.
    after = stack.submit(JobKind.SUMMARIZE, "summarize", branch="docs/cancel-queued")
    _succeeded(stack, after)
    assert stack.store.jobs.get(job.id) == cancelled
    assert stack.store.events.read(job.id)[-1].end is JobState.CANCELLED
    assert stack.tool_calls(job.id) == []
    assert stack.sandbox_containers(job.id) == []


def test_a_running_job_is_cancelled_between_calls(stack: Stack) -> None:
    _fix_branch(stack, "docs/cancel-running")
    job = stack.submit(JobKind.SUMMARIZE, "summarize-slow", branch="docs/cancel-running")
    wait_until(lambda: bool(stack.tool_calls(job.id, "git_log")), 15, lambda: "no git_log call")
    asked = stack.cancel(job.id)
    assert asked.state is JobState.RUNNING and asked.cancel_requested
    done = stack.wait_for(job.id, JobState.CANCELLED, timeout=SLOW_SECONDS + 15)
    assert done.error is not None and done.error.code == "BEM-506"
    (diff,) = stack.tool_calls(job.id, "git_diff")  # refused at the hook, never run
    assert diff.error is not None and diff.error.code == "BEM-506"
    assert stack.sandbox_containers(job.id) == []


def test_a_parked_publish_is_cancelled_and_can_no_longer_be_approved(unpublished: Stack) -> None:
    stack = unpublished
    review, _ = _reviewed(stack, "docs/cancel-parked")
    job = stack.submit(JobKind.PUBLISH, "publish", review_job=review.id)
    stack.wait_for(job.id, JobState.AWAITING_APPROVAL)
    done = stack.cancel(job.id)
    assert done.state is JobState.CANCELLED
    withdrawn = stack.store.approvals.get(job.id)
    assert withdrawn is not None and withdrawn.state is ApprovalState.WITHDRAWN
    with pytest.raises(BeamError) as caught:
        stack.decide(job.id, approve=True)
    assert caught.value.code == "BEM-600"
    assert stack.upstream_ref(PUBLISH_REF) is None
    assert stack.sandbox_containers(job.id) == []


def test_cancelling_a_finished_job_changes_nothing(stack: Stack) -> None:
    _fix_branch(stack, "docs/cancel-final")
    job = stack.submit(JobKind.SUMMARIZE, "summarize", branch="docs/cancel-final")
    done = _succeeded(stack, job)
    assert stack.cancel(job.id) == done
    assert stack.store.jobs.get(job.id) == done
    assert stack.sandbox_containers(job.id) == []


# -- redelivery ------------------------------------------------------------------------------


def test_the_same_run_job_message_twice_runs_the_job_once(stack: Stack) -> None:
    """Two workers get the same message at once (a redelivery racing the original)."""
    _fix_branch(stack, "docs/twice")
    stack.start_worker("b")
    try:
        spec = JobSpec(
            kind=JobKind.SUMMARIZE,
            repo=REPO,
            branch="docs/twice",
            requested_by=REQUESTER,
            metadata={"playbook": "summarize"},
        )
        job = stack.store.jobs.create(spec)
        for _ in range(2):
            stack.app.send_task(RUN_JOB, args=[job.id], queue=queue_for(JobKind.SUMMARIZE))
        done = _succeeded(stack, job)
        time.sleep(1.0)
        assert stack.store.jobs.get(job.id) == done
        assert done.attempt == 1
        assert _done_frames(stack, job.id) == 1
        assert len(stack.tool_calls(job.id, "git_log")) == 1
    finally:
        stack.stop_worker("b")


# -- queue order -----------------------------------------------------------------------------


def test_a_decided_push_is_served_before_jobs_that_have_not_started(stack: Stack) -> None:
    parked = stack.submit(JobKind.AUTHOR, "author-fix-install", request="Fix the install page")
    stack.wait_for(parked.id, JobState.AWAITING_APPROVAL)
    stack.stop_worker("a")
    try:
        backlog = [
            stack.submit(JobKind.AUTHOR, "author-fix-install", request="Fix the install page")
            for _ in range(2)
        ]
        stack.decide(parked.id, approve=True)  # queued after the backlog
    finally:
        stack.start_worker("a")
    done = stack.wait_for(parked.id, JobState.SUCCEEDED)
    for job in backlog:
        first = stack.wait_for(job.id, JobState.AWAITING_APPROVAL)
        # The backlog's jobs started (their first frame) after the push landed.
        started = stack.store.events.read(job.id, count=1)[0].id
        assert int(started.split("-")[0]) >= done.updated_at.timestamp() * 1000 - 1
        assert first.attempt == 1
        stack.cancel(job.id)
