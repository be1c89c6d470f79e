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

A given-up entry is logged as BEM-370, keeps its last error and is kept for a week, and
its job's record keeps the error (``posts_given_up``); the approval is open whatever the
receiver did. Each POST carries ``X-Riverbeam-Event`` and
``X-Riverbeam-Delivery`` (the entry's id, the same on every attempt), so a receiver can tell
a second delivery of one announcement from a new one.

A forge post (``forge_comment``, ``forge_status``, ``forge_review``, ``forge_pull_request``)
goes through the workers' client of its forge and is retried as the forge says
(``Retry-After``, rate limits). A job's status entry is rendered when it is delivered, from
the job and its approval as they stand then (``bot.jobs.forge_posts``): the comment posted
before is edited, or one is posted and kept to be edited next time. Once a review job has
ended, its review is queued, once (``Outbox.add_once``), and its commit status set.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import JsonValue

from bot.config import Settings
from bot.core.errors import ForgeClientError, ForgeRefused, ForgeRetryLater
from bot.core.frames import ErrorInfo
from bot.forge.clients.choice import client_for
from bot.forge.clients.contract import CommentRef, ForgeClient
from bot.forge.clients.http import DEFAULT_DEADLINE_SECONDS
from bot.jobs.announce import EVENT, parked_payload
from bot.jobs.forge_posts import (
    CHECKS_CONTEXT,
    STATUS_CONTEXT,
    checks_status,
    job_page,
    review_entry,
    review_status,
    split_findings,
    status_comment,
    thread_replies,
)
from bot.jobs.kinds import kind_of
from bot.jobs.webhooks import WebhookAnswer, post_json, public_webhook_url
from bot.store.models import Approval, Finding, ForgeThreadRef, OutboxEntry
from bot.store.store import JobStore

ForgePost = Callable[[ForgeClient, ForgeThreadRef], None]

log = logging.getLogger(__name__)

RETRY_SECONDS = (5.0, 30.0, 120.0, 600.0, 1800.0)
MAX_ATTEMPTS = len(RETRY_SECONDS) + 1
_RETRIED_STATUSES = frozenset({408, 425, 429})
# A claim outlives one call's deadline by this much: its worker is presumed dead past it.
_CLAIM_MARGIN = 30.0
# A forge comment may take three calls (an App's installation, its token, the comment).
_FORGE_CALL_SECONDS = 3 * DEFAULT_DEADLINE_SECONDS


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


def deliver_due(store: JobStore, settings: Settings) -> list[Attempt]:
    """Deliver every entry due now in ``store``'s outbox, one after the other, until none
    is."""
    lease = max(settings.jobs.webhook_timeout_seconds, _FORGE_CALL_SECONDS) + _CLAIM_MARGIN
    attempts: list[Attempt] = []
    while entries := store.outbox.claim(lease_seconds=lease):
        for entry in entries:
            attempts.append(_settle(store, entry, _attempt(entry, settings, store)))
    return attempts


def _attempt(entry: OutboxEntry, settings: Settings, store: JobStore) -> Attempt:
    if entry.channel == "approval_webhook":
        return _webhook_attempt(entry, settings)
    if entry.channel == "forge_status":
        return _forge_attempt(entry, settings, lambda c, t: _status(c, t, entry, settings, store))
    if entry.channel == "forge_review":
        return _forge_attempt(entry, settings, lambda c, t: _review(c, t, entry.payload))
    if entry.channel == "forge_reply":
        return _forge_attempt(entry, settings, lambda c, t: _reply(c, t, entry.payload))
    if entry.channel == "forge_pull_request":
        return _forge_attempt(entry, settings, lambda c, t: _pull_request(c, t, entry.payload))
    return _forge_attempt(entry, settings, lambda c, t: _comment(c, t, entry, store))


def _webhook_attempt(entry: OutboxEntry, settings: Settings) -> Attempt:
    repo = settings.repositories.get(entry.repo)
    url = None if repo is None or repo.approval_webhook is None else str(repo.approval_webhook)
    if url is None:
        return _given_up(
            entry, "BEM-370", f"repository {entry.repo!r} has no approval_webhook any more"
        )
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
        return _again(entry, "BEM-370", message, RETRY_SECONDS[entry.attempts - 1])
    return _given_up(entry, "BEM-370", message)


def _forge_attempt(entry: OutboxEntry, settings: Settings, post: ForgePost) -> Attempt:
    """A post to the forge's thread, through the workers' client of that forge: what the
    forge cannot take now is tried again (after the wait it named, if any), what it refuses
    is given up with the client's code."""
    target = entry.forge
    if target is None:
        return _given_up(entry, "BEM-810", "the entry names no forge thread")
    where = f"{target.forge}: {target.repository}#{target.number}"
    config = settings.forges.get(target.forge)
    client = None if config is None else client_for(target.forge, config)
    if not isinstance(client, ForgeClient):
        return _given_up(entry, "BEM-810", f"{where}: no forge client can post comments")
    try:
        post(client, target)
    except ForgeRetryLater as error:
        message = f"{where}: {error.message} (attempt {entry.attempts} of {MAX_ATTEMPTS})"
        if entry.attempts >= MAX_ATTEMPTS:
            return _given_up(entry, error.code, message)
        wait = error.retry_after_seconds
        after = RETRY_SECONDS[entry.attempts - 1] if wait is None else wait
        return _again(entry, error.code, message, after)
    except ForgeClientError as error:
        return _given_up(entry, error.code, f"{where}: {error.message}")
    return Attempt(entry, "delivered")


def _comment(
    client: ForgeClient, target: ForgeThreadRef, entry: OutboxEntry, store: JobStore
) -> None:
    body = entry.payload.get("body")
    if not isinstance(body, str):
        raise ForgeRefused("BEM-810", "the entry holds no comment")
    client.post_comment(target.repository, target.number, body, on=target.thread)
    for reply in thread_replies(entry):
        store.outbox.add_once(reply)


def _reply(client: ForgeClient, target: ForgeThreadRef, payload: dict[str, JsonValue]) -> None:
    thread, body = payload.get("thread"), payload.get("body")
    if not isinstance(thread, str) or not isinstance(body, str):
        raise ForgeRefused("BEM-810", "the entry names no review thread")
    client.reply_to_thread(target.repository, target.number, thread, body)


def _status(
    client: ForgeClient,
    target: ForgeThreadRef,
    entry: OutboxEntry,
    settings: Settings,
    store: JobStore,
) -> None:
    """Bring the job's status comment in line with the job as it stands now: edit the one
    posted before, or post it (again, when the one before is gone). A review job's commit
    status goes with it; once it has ended, its review is queued, once."""
    record = None if entry.job_id is None else store.jobs.find(entry.job_id)
    if record is None:
        raise ForgeRefused("BEM-810", f"job {entry.job_id} is no longer in the store")
    approval = store.approvals.get(record.id)
    body = status_comment(settings, record, approval)
    slot = kind_of(record.spec).status_slot(record.id, target)
    kept = store.outbox.posted_comment(slot)
    posted = None if kept is None else CommentRef.model_validate_json(kept)
    if posted is not None:
        try:
            client.edit_comment(target.repository, posted, body)
        except ForgeRefused:
            # Deleted by a person, or hidden: a new one tells the thread all the same.
            posted = None
    if posted is None:
        posted = client.post_comment(target.repository, target.number, body, on=target.thread)
    # Kept (again) after each edit: it is edited in place for 90 days after the last one.
    store.outbox.keep_comment(slot, posted.model_dump_json())
    statuses = {
        STATUS_CONTEXT: review_status(record),
        CHECKS_CONTEXT: checks_status(record, approval),
    }
    for context, status in statuses.items():
        if status is not None:
            sha, state, description = status
            page = job_page(settings, record.id)
            client.set_status(target.repository, sha, context, state, description, page)
    review = review_entry(record)
    if review is not None:
        store.outbox.add_once(review)


def _review(client: ForgeClient, target: ForgeThreadRef, payload: dict[str, JsonValue]) -> None:
    """The review, with a line comment for each finding on a line the diff shows."""
    findings = [Finding.model_validate(item) for item in _items(payload.get("findings"))]
    comments, listed = split_findings(
        findings, dict(client.commentable_lines(target.repository, target.number))
    )
    body = str(payload.get("body") or "")
    if listed:
        body += "\n\nOn lines this change does not show:\n\n" + "\n".join(listed)
    sha = str(payload["commit_sha"])
    client.post_review(target.repository, target.number, sha, body, comments)


def _items(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


def _pull_request(
    client: ForgeClient, target: ForgeThreadRef, payload: dict[str, JsonValue]
) -> None:
    """Open the pull request, or update the one open for its branch (a push that landed
    again, a revision of the same branch)."""
    repository = target.repository
    head, base = str(payload["head"]), str(payload["base"])
    title, body = str(payload["title"]), str(payload["body"])
    found = client.find_pull_request(repository, head, base)
    if found is None:
        client.open_pull_request(repository, head, base, title, body)
    else:
        client.update_pull_request(repository, found.number, title, body)


def _retried(status: int) -> bool:
    return status >= 500 or status in _RETRIED_STATUSES


def _again(entry: OutboxEntry, code: str, message: str, after: float) -> Attempt:
    error = ErrorInfo(code=code, message=f"{message}; it is tried again")
    return Attempt(entry, "retry", after, error)


def _given_up(entry: OutboxEntry, code: str, message: str) -> Attempt:
    kept = "the approval is open all the same" if entry.channel == "approval_webhook" else ""
    error = ErrorInfo(code=code, message=f"{message}; given up" + (f", {kept}" if kept else ""))
    return Attempt(entry, "given_up", error=error)


def _settle(store: JobStore, entry: OutboxEntry, attempt: Attempt) -> Attempt:
    outbox = store.outbox
    if attempt.outcome == "delivered":
        outbox.delivered(entry)
        log.info("delivered %s of job %s (attempt %d)", entry.event, entry.job_id, entry.attempts)
    elif attempt.outcome == "retry" and attempt.error is not None:
        outbox.retry(entry, error=attempt.error, after_seconds=attempt.retry_after or 0.0)
        log.info("%s: %s", attempt.error.code, attempt.error.message)
    elif attempt.error is not None:
        outbox.give_up(entry, error=attempt.error)
        log.warning("%s: %s", attempt.error.code, attempt.error.message)
        if entry.job_id is not None:
            store.jobs.record_given_up_post(entry.job_id, attempt.error)
    return attempt
