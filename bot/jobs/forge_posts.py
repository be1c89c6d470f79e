"""What Riverbeam posts on a forge for a job that came from one of its threads:

- the job's status comment, one per job, edited in place as the job moves (queued, running,
  parked with what waits and how a reviewer decides it, landed, failed with its BEM code).
  The store queues a refresh with every change of the job (``records.queue_status``); the
  body is made here when it is delivered, from the job as it stands then;
- the pull request (GitLab: merge request) a landed push opens, or updates;
- a review job's review of its pull request, with line comments, and its verdict as the
  commit status ``riverbeam/review``. Never an approval: a bot's approval could satisfy a
  branch protection meant for people;
- the docs checks' commit status ``riverbeam/checks``: on the commit a review checked, and
  on the commit a landed push put on the branch, checked as it parked.

Text from the repository, the thread or the model is hostile: it is shown inert (no
backtick opens or closes a span or a fence Riverbeam wrote, no @ mentions anyone).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import JsonValue

from bot.config import Settings
from bot.forge.clients.contract import CommitState, LineComment
from bot.jobs.kinds import kind_of
from bot.review.check_report import ChecksReport
from bot.review.words import WordChange, word_changes
from bot.store.models import (
    Approval,
    ApprovalState,
    Finding,
    ForgeThreadRef,
    JobRecord,
    JobSpec,
    JobState,
    OutboxEntry,
    PushState,
    ReviewOutcome,
)

STATUS_CONTEXT = "riverbeam/review"
CHECKS_CONTEXT = "riverbeam/checks"
# GitHub takes a comment of up to 65,536 characters; what is past this is cut.
MAX_BODY_CHARS = 60_000
_STAT_LINES = 30
_WORD_CHANGES = 10
_WORD_LINE_CHARS = 300
_REQUEST_LINES = 20
_TITLE_CHARS = 120
_ERROR_CHARS = 600
_FINDING_CHARS = 2000


@dataclass(frozen=True)
class ForgeOrigin:
    """The thread a job came from, and the decide command of its repository."""

    target: ForgeThreadRef
    decide: str


def forge_origin(settings: Settings, spec: JobSpec) -> ForgeOrigin | None:
    """Where a job came from, when that forge and repository are still configured."""
    target = ForgeThreadRef.of_job(spec)
    config = None if target is None else settings.forges.get(target.forge)
    entry = None if target is None or config is None else config.repository_for(target.repository)
    if target is None or entry is None:
        return None
    return ForgeOrigin(target, "/" + entry.command.lstrip("@/"))


def job_page(settings: Settings, job_id: str) -> str | None:
    # The page where the whole diff, the previews and the decide buttons are; only under an
    # address the operator configured, never one guessed from a request.
    public = settings.api.public_url
    return None if public is None else f"{str(public).rstrip('/')}/jobs/{job_id}"


def inert(text: str) -> str:
    """Text from the repository, the thread or the model, safe inside Riverbeam's Markdown."""
    return text.replace("`", "'").replace("@", "@\u2060")


# -- the status comment ---------------------------------------------------------------------


def status_comment(settings: Settings, record: JobRecord, approval: Approval | None) -> str:
    """The job's status comment as the job stands: a headline, what its state shows, and the
    job page's link when the operator configured its address."""
    origin = forge_origin(settings, record.spec)
    decide = "/riverbeam" if origin is None else origin.decide
    headline, lines = _state_lines(record, approval, decide)
    page = job_page(settings, record.id)
    body = "\n".join(
        [
            f"**Riverbeam** job `{record.id}` ({record.spec.kind.value}): {headline}",
            "",
            *lines,
            *([] if page is None else ["", f"The job: {page}"]),
            "",
            f"<sub>Asked for by {inert(record.spec.requested_by)}. "
            "Riverbeam edits this comment as the job moves.</sub>",
        ]
    )
    return body if len(body) <= MAX_BODY_CHARS else body[:MAX_BODY_CHARS] + "\n\n[... cut]"


def _state_lines(
    record: JobRecord, approval: Approval | None, decide: str
) -> tuple[str, list[str]]:
    state = record.state
    if state is JobState.QUEUED:
        return "**queued**", ["A worker takes it next."]
    if state is JobState.RUNNING:
        pushing = record.push_under_way
        if pushing is not None:
            return "**pushing**", [f"Pushing commit `{pushing.sha[:12]}` to `{pushing.ref}`."]
        return "**running**", [f"Attempt {record.attempt}."]
    if state is JobState.AWAITING_APPROVAL and approval is not None:
        return _parked(approval, decide)
    if state is JobState.SUCCEEDED:
        landed = [
            f"Landed commit `{push.sha[:12]}` on `{push.ref}`."
            for push in record.pushes
            if push.state is PushState.LANDED
        ]
        outcome = record.result.outcome if record.result is not None else None
        return "**done**", [*landed, *kind_of(record.spec).forge_result(outcome)]
    if state is JobState.REFUSED and approval is not None:
        why = inert(approval.comment)[:_ERROR_CHARS]
        return "**refused**", [f"Refused by {inert(approval.decider)}: {why or 'no reason'}."]
    if state in (JobState.FAILED, JobState.REFUSED) and record.error is not None:
        message = inert(record.error.message)[:_ERROR_CHARS]
        return f"**{state.value}** ({record.error.code})", [f"{record.error.code}: {message}"]
    return f"**{state.value}**", []


def _parked(approval: Approval, decide: str) -> tuple[str, list[str]]:
    sha = (approval.commit_sha or "")[:12]
    if approval.state is ApprovalState.APPROVED:
        return "**approved**", [f"Approved by {inert(approval.decider)}; it goes on shortly."]
    if approval.state is not ApprovalState.PENDING:
        return f"**{approval.state.value}**", []
    stat = "\n".join(inert(approval.diff_stat).splitlines()[:_STAT_LINES])
    lines = [
        "It has a change ready and waits for a person.",
        "",
        f"It would push commit `{sha}` to `{approval.target_ref}`:",
        "",
        "```text",
        stat,
        "```",
    ]
    changes = word_changes(approval.diff)
    if changes:
        shown = [_word_line(change) for change in changes[:_WORD_CHANGES]]
        more = len(changes) - len(shown)
        lines += ["", "Words changed:", "", "```text", *shown, "```"]
        if more > 0:
            lines.append(f"And {more} more.")
    if approval.links is not None:
        broken = approval.links.broken
        lines += ["", f"Links checked on the changed pages: {len(broken)} broken."]
        lines += [f"- {inert(b.page)}:{b.line} {inert(b.target)} ({b.reason})" for b in broken[:10]]
    lines += [
        "",
        f"A reviewer decides it here: `{decide} approve {approval.id}`, or "
        f"`{decide} refuse {approval.id} <reason>`. Whoever asked for it cannot approve it.",
    ]
    return "**parked: waits for a reviewer**", lines


def _word_line(change: WordChange) -> str:
    """``path:line [-old-] {+new+}``, git's plain word-diff marks."""
    where = f"{inert(change.path)}:{change.new_start}"
    if change.kind != "words":
        return f"{where} ({change.kind.replace('_', ' ')})"
    marks = [
        f"{opening}{inert(segment.text)}{closing}"
        for side, opening, closing in (("old", "[-", "-]"), ("new", "{+", "+}"))
        for line in change.lines
        for segment in line.segments
        if line.side == side and segment.mark == "changed"
    ]
    text = f"{where} {' '.join(marks)}"
    return text if len(text) <= _WORD_LINE_CHARS else text[:_WORD_LINE_CHARS] + " ..."


# -- the pull request of a landed push ------------------------------------------------------


def landed_pull_request(
    settings: Settings, record: JobRecord, approval: Approval | None, sha: str
) -> OutboxEntry | None:
    """For an approved push of a job that came from a forge issue, the pull request from
    the pushed branch to the repository's default branch, opened (or updated when one is
    open for that branch) once the push has landed; None for any other push. Its body says
    what was asked, by whom, who approved what (commit and diff digest), the link report,
    and closes the issue. For a job that addressed the review of a pull request (its push
    moved that pull request's branch), a reply on the pull request saying so."""
    origin = forge_origin(settings, record.spec)
    if origin is None or approval is None or approval.target_ref is None:
        return None
    if origin.target.thread != "issue":
        return _revised(origin.target, record, approval, sha)
    repo = settings.repositories.get(record.spec.repo)
    base = record.spec.base or (repo.default_branch if repo is not None else "main")
    asked = inert(record.spec.request.strip().splitlines()[0] if record.spec.request else "")
    title = (asked or f"Riverbeam job {record.id}")[:_TITLE_CHARS]
    broken = None if approval.links is None else len(approval.links.broken)
    body = "\n".join(
        [
            f"Riverbeam job `{record.id}`, asked for by {inert(record.spec.requested_by)}:",
            "",
            *(f"> {inert(line)}" for line in record.spec.request.splitlines()[:_REQUEST_LINES]),
            "",
            f"Approved by {inert(approval.decider)}: commit `{sha[:12]}`, "
            f"diff digest `{approval.diff_digest[:16]}`.",
            "" if broken is None else f"Links checked on the changed pages: {broken} broken.",
            *([] if (page := job_page(settings, record.id)) is None else [f"The job: {page}"]),
            "",
            f"Closes #{origin.target.number}",
        ]
    )
    payload: dict[str, JsonValue] = {
        "head": approval.target_ref,
        "base": base,
        "title": title,
        "body": body,
    }
    return _post("forge_pull_request", "forge.landed", record, origin.target, payload)


def _revised(
    target: ForgeThreadRef, record: JobRecord, approval: Approval, sha: str
) -> OutboxEntry | None:
    if not record.spec.branch or approval.target_ref != record.spec.branch:
        return None
    body = (
        f"Riverbeam job `{record.id}` addressed the review: commit `{sha[:12]}` is on "
        f"`{approval.target_ref}` as a fast-forward, so this pull request shows it. "
        f"Approved by {inert(approval.decider)}, diff digest `{approval.diff_digest[:16]}`."
    )
    origin = record.spec.metadata.get("forge")
    threads = origin.get("threads") if isinstance(origin, dict) else None
    payload: dict[str, JsonValue] = {"body": body, "commit": sha[:12]}
    if isinstance(threads, list) and threads:
        payload["threads"] = [str(thread) for thread in threads]
    return _post("forge_comment", "forge.revised", record, target, payload)


def thread_replies(entry: OutboxEntry) -> list[OutboxEntry]:
    """For the comment of a push that addressed a review, a reply in each review thread the
    job was asked to address, once each (their ids follow from the job's and the thread's,
    ``Outbox.add_once``)."""
    threads, commit = entry.payload.get("threads"), entry.payload.get("commit")
    if entry.forge is None or entry.job_id is None or not isinstance(threads, list):
        return []
    body = (
        f"Riverbeam job `{entry.job_id}` addressed this in commit `{commit}`, now on this branch."
    )
    return [
        entry.model_copy(
            update={
                "id": _once_id("forge-reply", entry.job_id, str(thread)),
                "channel": "forge_reply",
                "event": "forge.replied",
                "payload": {"thread": str(thread), "body": body},
                "attempts": 0,
            }
        )
        for thread in threads
    ]


def _once_id(*parts: str) -> str:
    """The outbox id of a post made once: it follows from what it is about."""
    return hashlib.sha256(":".join(parts).encode()).hexdigest()[:32]


def _post(
    channel: Literal["forge_comment", "forge_pull_request"],
    event: str,
    record: JobRecord,
    target: ForgeThreadRef,
    payload: dict[str, JsonValue],
) -> OutboxEntry:
    return OutboxEntry(
        id=uuid.uuid4().hex,
        channel=channel,
        repo=record.spec.repo,
        job_id=record.id,
        event=event,
        forge=target,
        payload=payload,
        created_at=datetime.now(UTC),
    )


# -- a review job's review and commit status ------------------------------------------------


def review_status(record: JobRecord) -> tuple[str, CommitState, str] | None:
    """For a review job of a pull request: the commit, the ``riverbeam/review`` state and its
    description. Pending while it runs; success only for a delivered verdict that asks for
    no change; failure for one that does, and for a job that ended without a verdict (fail
    closed: a review that did not happen never passes)."""
    target = ForgeThreadRef.of_job(record.spec)
    if target is None or target.thread != "pull_request" or not kind_of(record.spec).posts_review:
        return None
    origin = record.spec.metadata.get("forge")
    head = origin.get("head_sha") if isinstance(origin, dict) else None
    outcome = record.result.outcome if record.result is not None else None
    reviewed = outcome.commit_sha if isinstance(outcome, ReviewOutcome) else None
    sha = reviewed or (head if isinstance(head, str) else None)
    if sha is None:
        return None
    if not record.state.is_final:
        return sha, "pending", "Riverbeam is reviewing this change"
    verdict = outcome.verdict if isinstance(outcome, ReviewOutcome) else None
    if record.state is JobState.SUCCEEDED and verdict in ("approve", "approve_with_suggestions"):
        return sha, "success", f"Riverbeam's review: {verdict.replace('_', ' ')}"
    if verdict == "request_changes":
        return sha, "failure", "Riverbeam's review asks for changes"
    code = f" ({record.error.code})" if record.error is not None else ""
    return sha, "failure", f"Riverbeam's review did not complete{code}"


def checks_status(
    record: JobRecord, approval: Approval | None
) -> tuple[str, CommitState, str] | None:
    """For a finished job of a forge thread whose commit the docs checks looked at: the
    commit, the ``riverbeam/checks`` state and its description. A review's checks are on the
    commit it reviewed; an author's, on the commit its landed push put upstream. Success only
    for a report with no new failure (an admin's override is said, and stays a failure)."""
    if ForgeThreadRef.of_job(record.spec) is None or record.state is not JobState.SUCCEEDED:
        return None
    outcome = record.result.outcome if record.result is not None else None
    sha: str | None = None
    report: ChecksReport | None = None
    overridden: str | None = None
    if isinstance(outcome, ReviewOutcome):
        sha, report = outcome.commit_sha, outcome.checks
    elif approval is not None and approval.applied:
        sha, report = approval.commit_sha, approval.checks
        overridden = approval.checks_overridden_by
    if sha is None or report is None:
        return None
    if report.clean:
        return sha, "success", "Docs checks: no new failure"
    failing = ", ".join(report.failing)
    why = f"; approved over them by {overridden}" if overridden else ""
    return sha, "failure", f"Docs checks fail: {failing}{why}"[:140]


def review_entry(record: JobRecord) -> OutboxEntry | None:
    """A finished review job's review of its pull request, once: its id follows from the
    job's, so however often it is queued it is posted once (``Outbox.add_once``)."""
    target = ForgeThreadRef.of_job(record.spec)
    outcome = record.result.outcome if record.result is not None else None
    if target is None or target.thread != "pull_request" or not kind_of(record.spec).posts_review:
        return None
    if record.state is not JobState.SUCCEEDED or not isinstance(outcome, ReviewOutcome):
        return None
    verdict = (outcome.verdict or "").replace("_", " ")
    summary = inert(outcome.summary)[: _FINDING_CHARS * 4]
    return OutboxEntry(
        id=_once_id("forge-review", record.id),
        channel="forge_review",
        repo=record.spec.repo,
        job_id=record.id,
        event="forge.review",
        forge=target,
        payload={
            "commit_sha": outcome.commit_sha,
            "body": f"**Riverbeam's review** (job `{record.id}`): {verdict}\n\n{summary}".strip(),
            "findings": [finding.model_dump(mode="json") for finding in outcome.findings],
        },
        created_at=datetime.now(UTC),
    )


def split_findings(
    findings: list[Finding], shown: dict[str, frozenset[int]]
) -> tuple[tuple[LineComment, ...], list[str]]:
    """Findings on a line the pull request's diff shows become line comments; the rest are
    listed in the review's body (a forge refuses a comment anywhere else)."""
    comments: list[LineComment] = []
    listed: list[str] = []
    for finding in findings:
        text = _finding_text(finding)
        if finding.line is not None and finding.line in shown.get(finding.path, frozenset()):
            comments.append(LineComment(path=finding.path, line=finding.line, body=text))
        else:
            where = inert(finding.path) + ("" if finding.line is None else f":{finding.line}")
            listed.append(f"- `{where}`: {text}")
    return tuple(comments), listed


def _finding_text(finding: Finding) -> str:
    text = f"**{finding.severity}**: {inert(finding.note)[:_FINDING_CHARS]}"
    if finding.suggestion:
        text += "\n\nSuggested:\n\n```text\n" + inert(finding.suggestion)[:_FINDING_CHARS] + "\n```"
    return text
