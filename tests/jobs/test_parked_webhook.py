"""The parked-push webhook, end to end: a real worker parks an author job on its push (real
Redis, container, upstream), and the outbox task POSTs the repository's ``approval_webhook``
what waits, with its word changes counted and its pages' links checked. A receiver that
fails leaves the approval open and is asked again with the same delivery id; one that drips
its answer is cut off at ``jobs.webhook_timeout_seconds`` and asked again later."""

from __future__ import annotations

import time
from collections.abc import Callable

from bot.jobs.announce import parked_payload
from bot.store.models import JobKind, JobState
from bot.store.store import JobStore
from harness.stack import REPO, job_stack
from tests.jobs.webhook_receiver import Receiver, webhook_receiver


def _wait(what: str, done: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.1)


def _retried(receiver: Receiver, count: int) -> bool:
    return len(receiver.requests) >= count


def test_a_parked_push_is_announced_with_its_prose_review() -> None:
    with (
        webhook_receiver("/hooks/parked?token=s3cret") as receiver,
        webhook_receiver("/hooks/broken") as failing,
        webhook_receiver("/hooks/slow") as dripping,
    ):
        failing.statuses[:] = [500]
        dripping.drip_seconds = 0.5
        repositories = {
            REPO: {"approval_webhook": receiver.url},
            "other": {"approval_webhook": failing.url},
            "slow": {"approval_webhook": dripping.url},
        }
        jobs = {"jobs": {"webhook_timeout_seconds": 2.0}}
        with job_stack(repositories=repositories, more_config=jobs) as stack:
            stack.start_worker("a")
            slow = stack.submit(
                JobKind.AUTHOR, "author-fix-install", repo="slow", request="Fix the page"
            )
            job = stack.submit(JobKind.AUTHOR, "author-fix-install", request="Fix the page")
            other = stack.submit(
                JobKind.AUTHOR, "author-fix-install", repo="other", request="Fix the page"
            )
            for each in (slow, job, other):
                stack.wait_for(each.id, JobState.AWAITING_APPROVAL, timeout=90)
            approval = stack.store.approvals.get(job.id)
            assert approval is not None
            # The receiver that failed did not stop the other job from waiting for a person,
            # and it is asked again (the first retry is 5 s later).
            assert stack.store.approvals.get(other.id) is not None
            _wait("the failed announcement's retry", lambda: _retried(failing, 2))
            # The dripping receiver was hung up on at the deadline; its entry waits to be
            # tried again, with why.
            _wait("the dripping receiver's hang-up", dripping.hung_up.is_set)
            [waiting] = [
                entry
                for entry in map(stack.store.outbox.get, _entry_ids(stack.store))
                if entry is not None and entry.job_id == slow.id
            ]
            assert waiting.last_error is not None
            assert "no complete answer within 2 s" in waiting.last_error.message
            _wait("the delivered entries to go", lambda: len(_entry_ids(stack.store)) == 1)
    first, second = failing.requests
    assert first["body"] == second["body"]
    delivery = first["headers"]["X-Riverbeam-Delivery"]
    assert second["headers"]["X-Riverbeam-Delivery"] == delivery and len(delivery) == 32
    [request] = receiver.requests
    assert request["headers"]["X-Riverbeam-Event"] == "approval.parked"
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


def _entry_ids(store: JobStore) -> list[str]:
    raw = store.gateway.client.zrange(store.gateway.keys.outbox_due, 0, -1)
    return [entry_id.decode() for entry_id in raw]
