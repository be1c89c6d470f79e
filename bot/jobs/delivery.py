"""Delivering the outbox (``bot.store.outgoing``): the ``riverbeam.deliver_outbox`` task takes
the due entries and makes each call, off every segment's path: a park queues its
announcement in its own transaction and the task that ran the segment only sends this one.

Each call has one deadline for the whole exchange (``jobs.webhook_timeout_seconds``), so a
receiver that drips its answer is cut off when it passes. What comes of an attempt:

- a 2xx: delivered, the entry is dropped;
- no answer (refused, reset, past the deadline), 408, 425, 429 or a 5xx: tried again after
  ``RETRY_SECONDS`` (5 s, 30 s, 2 min, 10 min, 30 min), then given up;
- any other answer (a 3xx is not followed, a 4xx says no): given up at once;
- a repository or webhook no longer configured: given up.

A given-up entry is logged as BEM-370, keeps its last error and is kept for a week; the
approval is open whatever the receiver did. Each POST carries ``X-Riverbeam-Event`` and
``X-Riverbeam-Delivery`` (the entry's id, the same on every attempt), so a receiver can tell
a second delivery of one announcement from a new one.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from bot.config import Settings
from bot.core.frames import ErrorInfo
from bot.jobs.announce import EVENT, parked_payload
from bot.jobs.webhooks import WebhookAnswer, post_json, public_webhook_url
from bot.store.models import Approval, OutboxEntry
from bot.store.outgoing import Outbox

log = logging.getLogger(__name__)

RETRY_SECONDS = (5.0, 30.0, 120.0, 600.0, 1800.0)
MAX_ATTEMPTS = len(RETRY_SECONDS) + 1
_RETRIED_STATUSES = frozenset({408, 425, 429})
# A claim outlives one call's deadline by this much: its worker is presumed dead past it.
_CLAIM_MARGIN_SECONDS = 30.0


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt: the entry as it was tried, and what came of it."""

    entry: OutboxEntry
    outcome: str  # "delivered", "retry" or "given_up"
    retry_after: float | None = None
    error: ErrorInfo | None = None


def parked_entry(approval: Approval) -> OutboxEntry:
    """The outbox entry announcing ``approval`` on its repository's ``approval_webhook``."""
    return OutboxEntry(
        id=uuid.uuid4().hex,
        channel="approval_webhook",
        repo=approval.repo,
        job_id=approval.job_id,
        event=EVENT,
        payload=parked_payload(approval),
        created_at=datetime.now(UTC),
    )


def deliver_due(outbox: Outbox, settings: Settings) -> list[Attempt]:
    """Deliver every entry due now, one after the other, until none is."""
    lease = settings.jobs.webhook_timeout_seconds + _CLAIM_MARGIN_SECONDS
    attempts: list[Attempt] = []
    while entries := outbox.claim(lease_seconds=lease):
        for entry in entries:
            attempts.append(_settle(outbox, entry, _attempt(entry, settings)))
    return attempts


def _attempt(entry: OutboxEntry, settings: Settings) -> Attempt:
    repo = settings.repositories.get(entry.repo)
    url = None if repo is None or repo.approval_webhook is None else str(repo.approval_webhook)
    if url is None:
        return _given_up(entry, f"repository {entry.repo!r} has no approval_webhook any more")
    headers = {"X-Riverbeam-Event": entry.event, "X-Riverbeam-Delivery": entry.id}
    answer = post_json(
        url, entry.payload, timeout=settings.jobs.webhook_timeout_seconds, headers=headers
    )
    if isinstance(answer, WebhookAnswer) and answer.is_success:
        return Attempt(entry, "delivered")
    what = f"answered HTTP {answer.status_code}" if isinstance(answer, WebhookAnswer) else answer
    message = (
        f"the parked-push webhook {public_webhook_url(url)} for job {entry.job_id} {what} "
        f"(attempt {entry.attempts} of {MAX_ATTEMPTS})"
    )
    retried = not isinstance(answer, WebhookAnswer) or _retried(answer.status_code)
    if retried and entry.attempts < MAX_ATTEMPTS:
        error = ErrorInfo(code="BEM-370", message=f"{message}; it is tried again")
        return Attempt(entry, "retry", RETRY_SECONDS[entry.attempts - 1], error)
    return _given_up(entry, message)


def _retried(status: int) -> bool:
    return status >= 500 or status in _RETRIED_STATUSES


def _given_up(entry: OutboxEntry, message: str) -> Attempt:
    error = ErrorInfo(
        code="BEM-370", message=f"{message}; given up, the approval is open all the same"
    )
    return Attempt(entry, "given_up", error=error)


def _settle(outbox: Outbox, entry: OutboxEntry, attempt: Attempt) -> Attempt:
    if attempt.outcome == "delivered":
        outbox.delivered(entry)
        log.info("delivered %s of job %s (attempt %d)", entry.event, entry.job_id, entry.attempts)
    elif attempt.outcome == "retry" and attempt.error is not None:
        outbox.retry(entry, error=attempt.error, after_seconds=attempt.retry_after or 0.0)
        log.info("%s: %s", attempt.error.code, attempt.error.message)
    elif attempt.error is not None:
        outbox.give_up(entry, error=attempt.error)
        log.warning("%s: %s", attempt.error.code, attempt.error.message)
    return attempt
