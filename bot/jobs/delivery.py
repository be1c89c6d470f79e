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

from pydantic import JsonValue

from bot.config import Settings
from bot.core.errors import ForgeClientError, ForgeRetryLater
from bot.core.frames import ErrorInfo
from bot.forge.clients.choice import client_for
from bot.forge.clients.contract import ForgeClient
from bot.forge.clients.http import DEFAULT_DEADLINE_SECONDS
from bot.jobs.announce import EVENT, parked_payload
from bot.jobs.webhooks import WebhookAnswer, post_json, public_webhook_url
from bot.store.models import Approval, ForgeThreadRef, JobRecord, JobSpec, OutboxEntry
from bot.store.outgoing import Outbox

log = logging.getLogger(__name__)

_STAT_LINES = 30
_REQUEST_LINES = 20
_TITLE_CHARS = 120
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


def _forge_origin(settings: Settings, spec: JobSpec) -> tuple[ForgeThreadRef, str] | None:
    """The thread a job came from (``metadata["forge"]``, set by the forge handler) and the
    decide command of its repository (``/riverbeam``), or None for a job from elsewhere."""
    origin = spec.metadata.get("forge")
    if not isinstance(origin, dict):
        return None
    try:
        target = ForgeThreadRef(
            forge=str(origin["name"]),
            repository=str(origin["repository"]),
            number=int(str(origin["number"])),
            thread="pull_request" if origin.get("thread") == "pull_request" else "issue",
        )
    except (KeyError, ValueError):
        return None
    config = settings.forges.get(target.forge)
    entry = None if config is None else config.repository_for(target.repository)
    if entry is None:
        return None
    return target, "/" + entry.command.lstrip("@/")


def _job_page(settings: Settings, job_id: str) -> str | None:
    # The page where the whole diff, the previews and the decide buttons are; only under an
    # address the operator configured, never one guessed from a request.
    public = settings.api.public_url
    return None if public is None else f"{str(public).rstrip('/')}/jobs/{job_id}"


def _inert(text: str) -> str:
    # Text from the repository or the thread (paths, a request) shown in Markdown: no
    # backtick can close or open a code span or a fence Riverbeam wrote, and no @ mentions
    # anyone (a word joiner after it).
    return text.replace("`", "'").replace("@", "@\u2060")


def landed_pull_request(
    settings: Settings, record: JobRecord, approval: Approval | None, sha: str
) -> OutboxEntry | None:
    """For an approved push of a job that came from a forge issue, the pull request from
    the pushed branch to the repository's default branch, opened (or updated when one is
    open for that branch) once the push has landed; None for any other push. Its body says
    what was asked, by whom, who approved what (commit and diff digest), the link report,
    and closes the issue."""
    found = _forge_origin(settings, record.spec)
    if found is None or approval is None or approval.target_ref is None:
        return None
    target, _ = found
    if target.thread != "issue":
        return None
    repo = settings.repositories.get(record.spec.repo)
    base = record.spec.base or (repo.default_branch if repo is not None else "main")
    asked = _inert(record.spec.request.strip().splitlines()[0] if record.spec.request else "")
    title = (asked or f"Riverbeam job {record.id}")[:_TITLE_CHARS]
    broken = None if approval.links is None else len(approval.links.broken)
    body = "\n".join(
        [
            f"Riverbeam job `{record.id}`, asked for by {_inert(record.spec.requested_by)}:",
            "",
            *(f"> {_inert(line)}" for line in record.spec.request.splitlines()[:_REQUEST_LINES]),
            "",
            f"Approved by {_inert(approval.decider)}: commit `{sha[:12]}`, "
            f"diff digest `{approval.diff_digest[:16]}`.",
            "" if broken is None else f"Links checked on the changed pages: {broken} broken.",
            *([] if (page := _job_page(settings, record.id)) is None else [f"The job: {page}"]),
            "",
            f"Closes #{target.number}",
        ]
    )
    return OutboxEntry(
        id=uuid.uuid4().hex,
        channel="forge_pull_request",
        repo=record.spec.repo,
        job_id=record.id,
        event="forge.landed",
        forge=target,
        payload={"head": approval.target_ref, "base": base, "title": title, "body": body},
        created_at=datetime.now(UTC),
    )


def parked_comment(settings: Settings, spec: JobSpec, approval: Approval) -> OutboxEntry | None:
    """For a job that came from a forge thread (``metadata["forge"]``, set by the forge
    handler), the comment there saying what waits and how a reviewer decides it; None for
    any other job. Names from the repository (the diff's paths) are hostile text: they are
    shown in a fenced block with backticks taken out, so they cannot close it."""
    found = _forge_origin(settings, spec)
    if found is None:
        return None
    target, decide = found
    stat = "\n".join(_inert(approval.diff_stat).splitlines()[:_STAT_LINES])
    broken = len(approval.links.broken) if approval.links is not None else None
    links = "" if broken is None else f"\n\nLinks checked on the changed pages: {broken} broken."
    page = _job_page(settings, approval.job_id)
    whole = "" if page is None else f"\n\nThe whole change, its previews and links: {page}"
    body = (
        f"Riverbeam job `{approval.job_id}` has a change ready; it waits for a person.\n\n"
        f"It would push commit `{(approval.commit_sha or '')[:12]}` to `{approval.target_ref}`:\n\n"
        f"```text\n{stat}\n```{links}{whole}\n\n"
        f"A reviewer decides it here: `{decide} approve {approval.id}`, or "
        f"`{decide} refuse {approval.id} <reason>`. Whoever asked for it cannot approve it."
    )
    return OutboxEntry(
        id=uuid.uuid4().hex,
        channel="forge_comment",
        repo=approval.repo,
        job_id=approval.job_id,
        event="forge.parked",
        forge=target,
        payload={"body": body},
        created_at=datetime.now(UTC),
    )


def deliver_due(outbox: Outbox, settings: Settings) -> list[Attempt]:
    """Deliver every entry due now, one after the other, until none is."""
    lease = max(settings.jobs.webhook_timeout_seconds, _FORGE_CALL_SECONDS) + _CLAIM_MARGIN
    attempts: list[Attempt] = []
    while entries := outbox.claim(lease_seconds=lease):
        for entry in entries:
            attempts.append(_settle(outbox, entry, _attempt(entry, settings)))
    return attempts


def _attempt(entry: OutboxEntry, settings: Settings) -> Attempt:
    if entry.channel == "approval_webhook":
        return _webhook_attempt(entry, settings)
    return _forge_attempt(entry, settings)


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


def _forge_attempt(entry: OutboxEntry, settings: Settings) -> Attempt:
    """A comment on the forge's thread, through the workers' client of that forge: what
    the forge cannot take now is tried again (after the wait it named, if any), what it
    refuses is given up with the client's code."""
    target = entry.forge
    body = entry.payload.get("body")
    if target is None or not isinstance(body, str):
        return _given_up(entry, "BEM-810", "the entry names no forge thread or no comment")
    where = f"{target.forge}: {target.repository}#{target.number}"
    config = settings.forges.get(target.forge)
    client = None if config is None else client_for(target.forge, config)
    if not isinstance(client, ForgeClient):
        return _given_up(entry, "BEM-810", f"{where}: no forge client can post comments")
    try:
        if entry.channel == "forge_pull_request":
            _pull_request(client, target.repository, entry.payload)
        else:
            client.post_comment(target.repository, target.number, body, on=target.thread)
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


def _pull_request(client: ForgeClient, repository: str, payload: dict[str, JsonValue]) -> None:
    """Open the pull request, or update the one open for its branch (a push that landed
    again, a revision of the same branch)."""
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
