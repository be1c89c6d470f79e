"""Where a job stands, in words a writer understands: what happened, and what to try next.

The job page leads with this; the codes and frames below it are for whoever digs deeper.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from bot.core.errors import CODES
from bot.core.frames import ErrorInfo
from bot.store.models import (
    Approval,
    ApprovalState,
    AuthorOutcome,
    CommitNotesOutcome,
    JobRecord,
    JobState,
    PublishOutcome,
    PushState,
    ReviewOutcome,
    SummaryOutcome,
)

Tone = Literal["wait", "ok", "bad"]

ASK_ADMIN = "Send an admin the job id; retrying will not help until they fix it."
TRY_AGAIN = "Submit the request again; if it fails the same way, send an admin the job id."

# The failures a writer meets most, each as (what happened, what to try). Any other code
# says what the code means and suggests trying again.
FAILURES: dict[str, tuple[str, str]] = {
    "BEM-060": ("The language model could not be reached.", "Try again in a few minutes."),
    "BEM-062": ("The language model was overloaded.", "Try again in a few minutes."),
    "BEM-064": ("No language model is configured for Riverbeam.", ASK_ADMIN),
    "BEM-508": ("No language model is configured for the workers.", ASK_ADMIN),
    "BEM-088": (
        "The assistant ran out of steps before it finished.",
        "Ask for something smaller, or name the pages it concerns.",
    ),
    "BEM-328": (
        "The assistant tried to change a protected branch.",
        "Submit again; the change is always made on a branch of its own.",
    ),
    "BEM-327": ("The branch changed upstream while the job ran.", TRY_AGAIN),
    "BEM-351": ("The branch changed upstream while the push waited for approval.", TRY_AGAIN),
    "BEM-341": (
        "A branch or commit named in the request does not exist upstream.",
        "Check the base branch name (leave it empty for the default branch).",
    ),
    "BEM-340": ("The repository could not be fetched.", ASK_ADMIN),
    "BEM-343": ("The repository's credentials are missing.", ASK_ADMIN),
    "BEM-344": ("The repository's server is not trusted yet (its SSH host key).", ASK_ADMIN),
    "BEM-345": ("The repository's server presented an unexpected SSH host key.", ASK_ADMIN),
    "BEM-353": ("Pushing the approved change failed.", TRY_AGAIN),
    "BEM-354": ("The approved change was not pushed: the server is not trusted.", ASK_ADMIN),
    "BEM-400": ("The sandbox service (Docker) is not running.", ASK_ADMIN),
    "BEM-401": ("The sandbox image is missing or out of date.", ASK_ADMIN),
    "BEM-402": ("The sandbox did not start.", TRY_AGAIN),
    "BEM-403": ("A step took too long in the sandbox.", "Ask for something smaller."),
    "BEM-405": ("The sandbox ran out of memory.", "Ask for something smaller."),
    "BEM-503": ("The change grew too large to wait for approval.", "Ask for a smaller change."),
    "BEM-505": ("The job ran past its time limit.", "Ask for something smaller."),
    "BEM-507": ("The machine running the job stopped.", TRY_AGAIN),
    "BEM-509": ("The worker failed unexpectedly.", TRY_AGAIN),
}


class Outcome(BaseModel):
    tone: Tone
    headline: str
    details: list[str] = []
    hint: str | None = None
    code: str | None = None


def describe(record: JobRecord, approval: Approval | None) -> Outcome:
    """The job's state and result in plain words."""
    state = record.state
    if state is JobState.QUEUED:
        return Outcome(tone="wait", headline="Queued: waiting for a worker to start it.")
    if state is JobState.RUNNING:
        return Outcome(tone="wait", headline="Running: the log below grows as it works.")
    if state is JobState.AWAITING_APPROVAL:
        target = approval.target_ref if approval is not None else None
        where = f" to branch {target}" if target else ""
        return Outcome(
            tone="wait",
            headline="Waiting for a reviewer.",
            details=[
                f"The change below is ready; it will be pushed{where} once a reviewer approves."
            ],
        )
    if state is JobState.SUCCEEDED:
        return _succeeded(record)
    if state is JobState.REFUSED:
        return _refused(record, approval)
    if state is JobState.CANCELLED:
        sent = _sent(record)
        if not sent:
            return Outcome(
                tone="bad", headline="Cancelled: nothing was pushed; nothing more will happen."
            )
        return Outcome(
            tone="bad",
            headline="Cancelled after pushing upstream; nothing more will happen.",
            details=sent,
        )
    failed = _failed(record.error)
    # A job that failed after a push landed still says what reached the upstream.
    return failed.model_copy(update={"details": [*failed.details, *_sent(record)]})


def _sent(record: JobRecord) -> list[str]:
    """Each push that reached (or may have reached) the upstream, one line each."""
    return [
        f"{push.sha} on branch {push.ref}: "
        + ("landed upstream" if push.state is PushState.LANDED else "unknown, check upstream")
        for push in record.pushes
        if push.state is not PushState.FAILED
    ]


def _succeeded(record: JobRecord) -> Outcome:
    result = record.result
    outcome = result.outcome if result is not None else None
    match outcome:
        case AuthorOutcome(pushed_sha=str(sha), branch=branch):
            return Outcome(
                tone="ok",
                headline=f"Pushed to branch {branch} at commit {sha}.",
                details=[f"{commit.sha[:12]} {commit.subject}" for commit in outcome.commits],
            )
        case AuthorOutcome():
            return Outcome(tone="ok", headline="Finished without pushing a change.")
        case ReviewOutcome(verdict=verdict):
            words = (verdict or "no verdict").replace("_", " ")
            return Outcome(
                tone="ok",
                headline=f"Review of {outcome.branch} at {outcome.commit_sha[:12]}: {words}.",
                details=[outcome.summary] if outcome.summary else [],
            )
        case SummaryOutcome():
            return Outcome(
                tone="ok",
                headline=f"Summary of {outcome.branch} against {outcome.base} is ready.",
                details=outcome.files,
            )
        case CommitNotesOutcome():
            return Outcome(tone="ok", headline="Commit notes are ready.", details=[outcome.subject])
        case PublishOutcome(sha=str(sha)):
            return Outcome(tone="ok", headline=f"Published {outcome.publish_ref} at {sha}.")
        case _:
            return Outcome(tone="ok", headline="Finished.")


def _refused(record: JobRecord, approval: Approval | None) -> Outcome:
    refusal = record.result.refusal if record.result is not None else None
    if refusal is not None:
        return Outcome(
            tone="bad",
            headline="The model declined the request; nothing was changed.",
            details=[f"It said: “{refusal}”"],
            hint="Submit a request reworded so the model can take it on.",
        )
    if approval is None or approval.state is not ApprovalState.REFUSED:
        return Outcome(tone="bad", headline="The change was refused; nothing was pushed.")
    said = f": “{approval.comment}”" if approval.comment else "."
    return Outcome(
        tone="bad",
        headline=f"{approval.decider} refused the change; nothing was pushed.",
        details=[f"Their comment{said}"],
        hint="Submit a new request that addresses the comment.",
    )


def _failed(error: ErrorInfo | None) -> Outcome:
    if error is None:
        return Outcome(tone="bad", headline="It failed.", hint=TRY_AGAIN)
    known = FAILURES.get(error.code)
    meaning = CODES[error.code].meaning if error.code in CODES else error.message
    what, hint = known if known is not None else (f"It failed: {meaning}.", TRY_AGAIN)
    return Outcome(tone="bad", headline=what, details=[error.message], hint=hint, code=error.code)
