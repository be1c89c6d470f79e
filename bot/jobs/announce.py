"""The parked-push webhook's document: when a job parks on a push, the repository's
``approval_webhook`` (when set) gets a JSON POST saying what waits, with the change read as
prose: how many word changes of each kind, and the changed pages' link check. The park
queues it in the outbox; ``bot.jobs.delivery`` delivers it, tries again and gives up."""

from __future__ import annotations

from collections import Counter

from pydantic import JsonValue

from bot.review.words import word_changes
from bot.store.models import Approval

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
        "checks": None if approval.checks is None else _checks(approval),
        "pages": [page.path for page in approval.pages or []],
    }


def _checks(approval: Approval) -> dict[str, JsonValue]:
    """The docs checks as the webhook shows them: new failures first, then the findings
    already on the base, then each check's time."""
    report = approval.checks
    assert report is not None
    runs = report.ordered()
    return {
        "clean": report.clean,
        "blocks_approve": approval.checks_block and not report.clean,
        "new": [
            {**finding.model_dump(mode="json"), "status": run.status}
            for run in runs
            for finding in run.new
        ],
        "errors": [{"check": run.check, "detail": run.detail} for run in runs if run.detail],
        "already_on_base": {run.check: run.existing_total for run in runs},
        "seconds": {run.check: run.seconds for run in runs},
    }
