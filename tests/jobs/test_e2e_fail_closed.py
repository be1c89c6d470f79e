"""A job is ``succeeded`` only with what its kind must produce, for every kind: real Redis, a
real Celery worker, real containers and a real bare upstream; only the model is scripted
(``harness.playbooks``). Each run below ends without its result, or right after a tool
error, and must end ``failed`` with the BEM code that says what is missing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bot.store.models import (
    AuthorOutcome,
    CommitNotesOutcome,
    JobKind,
    JobRecord,
    JobState,
    PublishOutcome,
    ReviewOutcome,
    SummaryOutcome,
)
from harness.playbooks import AUTHOR_REQUEST, FIXED_INSTALL, NOTHING_TO_CHANGE
from harness.stack import PUBLISH_REF, Stack, job_stack

pytestmark = pytest.mark.slow

BRANCH = "docs/fix-install"


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack() as running:
        running.push_branch(BRANCH, {"docs/install.md": FIXED_INSTALL}, "Fix the install page")
        running.start_worker("a")
        yield running


def _failed(stack: Stack, kind: JobKind, playbook: str, code: str, **fields: Any) -> JobRecord:
    job = stack.submit(kind, playbook, **fields)
    done = stack.wait_for(job.id, JobState.FAILED, JobState.SUCCEEDED)
    assert done.state is JobState.FAILED, done.model_dump_json(indent=2)
    assert done.error is not None and done.error.code == code, done.error
    assert done.result is not None  # what the run produced is kept for a person to read
    assert stack.sandbox_containers(job.id) == []
    return done


def test_a_review_without_a_verdict_fails_with_bem_521(stack: Stack) -> None:
    done = _failed(stack, JobKind.REVIEW, "review-no-verdict", "BEM-521", branch=BRANCH)
    assert done.error is not None and "no verdict" in done.error.message
    assert done.result is not None and done.result.text == "Looks fine to me."
    outcome = done.result.outcome
    assert isinstance(outcome, ReviewOutcome) and outcome.verdict is None


def test_an_empty_summary_fails_closed(stack: Stack) -> None:
    # The model's reply of nothing fails the run itself (BEM-071), before the kind's own rule
    # (BEM-522, tests/jobs/test_kinds.py) is asked; no summary is reported.
    done = _failed(stack, JobKind.SUMMARIZE, "summarize-empty", "BEM-071", branch=BRANCH)
    outcome = done.result.outcome if done.result else None
    assert not (isinstance(outcome, SummaryOutcome) and outcome.summary)


def test_commit_notes_without_a_subject_fail_with_bem_523(stack: Stack) -> None:
    done = _failed(stack, JobKind.COMMIT_NOTES, "commit-notes-no-subject", "BEM-523", branch=BRANCH)
    outcome = done.result.outcome if done.result else None
    assert isinstance(outcome, CommitNotesOutcome) and outcome.subject == ""


def test_commit_notes_after_unknown_tools_fail_with_bem_520(stack: Stack) -> None:
    """The issue's case: two BEM-089 calls, then an answer that reads like a subject."""
    done = _failed(
        stack, JobKind.COMMIT_NOTES, "commit-notes-unknown-tools", "BEM-520", branch=BRANCH
    )
    assert done.error is not None
    assert "after read_file failed (BEM-089: there is no tool named 'read_file'" in (
        done.error.message
    )
    assert [call.error.code for call in stack.tool_calls(done.id) if call.error] == [
        "BEM-089",
        "BEM-089",
    ]


def test_an_author_run_that_ends_right_after_a_failed_read_fails_with_bem_520(
    stack: Stack,
) -> None:
    done = _failed(stack, JobKind.AUTHOR, "author-read-missing", "BEM-520", request=AUTHOR_REQUEST)
    assert done.error is not None and "after read_file failed (BEM-" in done.error.message


def test_an_author_commit_that_was_never_pushed_fails_with_bem_524(stack: Stack) -> None:
    done = _failed(
        stack, JobKind.AUTHOR, "author-commit-no-push", "BEM-524", request=AUTHOR_REQUEST
    )
    outcome = done.result.outcome if done.result else None
    assert isinstance(outcome, AuthorOutcome) and outcome.pushed_sha is None
    assert len(outcome.commits) == 1
    assert done.error is not None and "never pushed" in done.error.message
    assert stack.upstream_ref(f"riverbeam/{done.id}") is None


def test_an_author_edit_that_was_never_committed_fails_with_bem_524(stack: Stack) -> None:
    done = _failed(
        stack, JobKind.AUTHOR, "author-write-no-commit", "BEM-524", request=AUTHOR_REQUEST
    )
    assert done.error is not None and "committed and pushed nothing" in done.error.message


def test_an_author_job_that_changes_nothing_must_say_why(stack: Stack) -> None:
    _failed(stack, JobKind.AUTHOR, "author-nothing-silent", "BEM-071", request=AUTHOR_REQUEST)

    said = stack.submit(JobKind.AUTHOR, "author-nothing-to-change", request=AUTHOR_REQUEST)
    done = stack.wait_for(said.id, JobState.SUCCEEDED)
    assert done.result is not None and done.result.text == NOTHING_TO_CHANGE
    outcome = done.result.outcome
    assert isinstance(outcome, AuthorOutcome)
    assert (outcome.commits, outcome.pushed_sha) == ([], None)


def test_a_publish_that_never_publishes_fails_with_bem_525(stack: Stack) -> None:
    review = stack.submit(JobKind.REVIEW, "review-approve", branch=BRANCH)
    stack.wait_for(review.id, JobState.SUCCEEDED)
    done = _failed(
        stack, JobKind.PUBLISH, "publish-without-calling", "BEM-525", review_job=review.id
    )
    assert done.result is not None
    assert done.result.outcome == PublishOutcome(publish_ref=PUBLISH_REF)
    assert stack.upstream_ref(PUBLISH_REF) is None
