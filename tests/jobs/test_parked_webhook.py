"""The parked-push webhook, end to end: a real worker parks an author job on its push (real
Redis, container, upstream) and POSTs the repository's ``approval_webhook`` what waits, with
its word changes counted and its pages' links checked; a receiver that fails leaves the
approval open."""

from __future__ import annotations

from bot.jobs.announce import parked_payload
from bot.store.models import JobKind, JobState
from harness.stack import REPO, job_stack
from tests.jobs.webhook_receiver import webhook_receiver


def test_a_parked_push_is_announced_with_its_prose_review() -> None:
    with (
        webhook_receiver("/hooks/parked?token=s3cret") as receiver,
        webhook_receiver("/hooks/broken") as failing,
    ):
        failing.status = 500
        repositories = {
            REPO: {"approval_webhook": receiver.url},
            "other": {"approval_webhook": failing.url},
        }
        with job_stack(repositories=repositories) as stack:
            stack.start_worker("a")
            job = stack.submit(JobKind.AUTHOR, "author-fix-install", request="Fix the page")
            other = stack.submit(
                JobKind.AUTHOR, "author-fix-install", repo="other", request="Fix the page"
            )
            stack.wait_for(job.id, JobState.AWAITING_APPROVAL, timeout=90)
            stack.wait_for(other.id, JobState.AWAITING_APPROVAL, timeout=90)
            approval = stack.store.approval(job.id)
            assert approval is not None
            # The receiver that failed did not stop the other job from waiting for a person.
            assert stack.store.approval(other.id) is not None
    [request] = receiver.requests
    assert request["path"] == "/hooks/parked?token=s3cret"
    body = request["body"]
    assert body == parked_payload(approval)
    assert (body["event"], body["job_id"], body["approval_id"]) == (
        "approval.parked",
        job.id,
        approval.id,
    )
    assert body["commit_sha"] == approval.commit_sha and body["diff_digest"]
    # Two changed lines (a typo; a typo and the link target), each a word change.
    assert body["word_changes"]["pairs"] == 2 and body["word_changes"]["words"] == 2
    assert body["links"] == {
        "pages": ["docs/install.md"],
        "broken": [],
        "external": [],
        "skipped": [],
        "cut": False,
    }
    assert body["pages"] == ["docs/install.md"]
    assert len(failing.requests) == 1
