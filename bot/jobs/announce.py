"""The parked-push webhook: when a job parks on a push, the repository's
``approval_webhook`` (when set) gets a JSON POST saying what waits, with the change read as
prose: how many word changes of each kind, and the changed pages' link check. Delivery is
best effort: the approval is open whatever the receiver answers; a failure is logged as
BEM-370 and is not retried (the API's ``GET /v1/approvals`` is the reliable way to poll)."""

from __future__ import annotations

import logging
from collections import Counter

import httpx
from pydantic import JsonValue

from bot.core.errors import JobError
from bot.jobs.webhooks import post_json, public_webhook_url
from bot.review.words import word_changes
from bot.store.models import Approval

log = logging.getLogger(__name__)

EVENT = "approval.parked"


def parked_payload(approval: Approval) -> dict[str, JsonValue]:
    """What the webhook says of ``approval``: what would land, its word changes counted by
    kind, and the link report (``null`` when nothing was checked)."""
    changes = word_changes(approval.diff)
    kinds = Counter(change.kind for change in changes)
    return {
        "event": EVENT,
        "job_id": approval.job_id,
        "approval_id": approval.id,
        "repo": approval.repo,
        "requested_by": approval.requested_by,
        "tool": approval.tool,
        "target_ref": approval.target_ref,
        "commit_sha": approval.commit_sha,
        "base_sha": approval.base_sha,
        "diff_digest": approval.diff_digest,
        "diff_stat": approval.diff_stat,
        "word_changes": {
            "pairs": len(changes),
            "changed_words": sum(change.changed_words for change in changes),
            **{kind: kinds[kind] for kind in ("words", "whitespace", "rewrap", "too_long")},
        },
        "links": None if approval.links is None else approval.links.model_dump(mode="json"),
        "pages": [page.path for page in approval.pages or []],
    }


def announce_parked(url: str, approval: Approval, *, timeout: float) -> JobError | None:
    """POST ``parked_payload`` to ``url``; the BEM-370 error it logged when not delivered."""
    answer = post_json(url, parked_payload(approval), timeout=timeout)
    if isinstance(answer, httpx.Response) and answer.is_success:
        return None
    what = f"answered {answer.status_code}" if isinstance(answer, httpx.Response) else answer
    error = JobError(
        "BEM-370",
        f"the parked-push webhook {public_webhook_url(url)} for job {approval.job_id} {what}; "
        "the approval is open all the same",
    )
    log.warning("%s: %s", error.code, error.message)
    return error
