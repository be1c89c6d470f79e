"""What each kind of job produced, read from its run and its tree when the run ends.

The model's final text is kept as it is in ``JobResult.text``; the outcome is the structured
part a program can rely on, built from what the host can check (the tree's commits, the relay's
answer, the review tool's record), not from what the model says it did.

A run that ended is ``succeeded`` only when ``shortfall`` finds nothing: no call of the model's
last tool-calling turn failed (BEM-520: it answered without trying again), and the kind's
required result is there (``Outcome.missing``: a verdict, a summary, a subject, a publish, no
unpushed commit), and an author job that changed nothing wrote no file either (BEM-524) and
says why (BEM-526).
"""

from __future__ import annotations

from bot.core.errors import JobError
from bot.core.frames import ToolCallRecord
from bot.jobs.branch_change import branch_tip, read_change
from bot.jobs.commit_notes import parse_commit_message
from bot.jobs.plans import Baseline, TreePlan
from bot.runner.state import RunState
from bot.store.models import (
    AuthorOutcome,
    CommitNotesOutcome,
    JobSpec,
    Outcome,
    SummaryOutcome,
)
from sandbox.host.workspace.prepare import Workspace

REFUSED_CODE = "BEM-094"


def ended_refused(state: RunState) -> bool:
    """The last decision was a refusal and no later call of the refused tool succeeded."""
    if not state.decisions or state.decisions[-1].approved:
        return False
    refusals = [
        index
        for index, record in enumerate(state.records)
        if record.error is not None and record.error.code == REFUSED_CODE
    ]
    if not refusals:
        return False
    refused = state.records[refusals[-1]]
    later = state.records[refusals[-1] + 1 :]
    return not any(record.ok and record.name == refused.name for record in later)


def unrecovered_failure(state: RunState) -> ToolCallRecord | None:
    """The first failed call of the model's last tool-calling turn: after it the model only
    answered, so nothing it said was built on what that call should have returned. A failure
    of an earlier turn counts as recovered: the model saw it and called tools again. A refusal
    (BEM-094) is not a failure here; ``ended_refused`` decides about it."""
    turns = [m for m in state.messages if m.get("role") == "assistant" and m.get("tool_calls")]
    if not turns:
        return None
    last = {call["id"] for call in turns[-1]["tool_calls"]}
    failed = (record for record in state.records if record.id in last and not record.ok)
    return next((r for r in failed if r.error is None or r.error.code != REFUSED_CODE), None)


def shortfall(state: RunState, outcome: Outcome | None) -> JobError | None:
    """Why an ended run may not be ``succeeded``, or None when nothing is missing."""
    failed = unrecovered_failure(state)
    if failed is not None:
        error = failed.error
        reason = f"{error.code}: {error.message}" if error is not None else "it failed"
        return JobError(
            "BEM-520",
            f"the run ended right after {failed.name} failed ({reason}); the model answered "
            "without trying again, so its answer was not checked against anything",
        )
    if outcome is None:
        return None
    missing = outcome.missing()
    if missing is not None or not isinstance(outcome, AuthorOutcome) or outcome.commits:
        return missing
    written = [r for r in state.records if r.ok and r.name == "write_file"]
    if written:
        return JobError(
            "BEM-524",
            f"the job wrote files ({len(written)} write_file calls) on {outcome.branch} but "
            "committed and pushed nothing",
        )
    if not state.text.strip():
        return JobError(
            "BEM-526", "the job changed nothing and its final answer is empty: it must say why"
        )
    return None


def pushed_sha(records: list[ToolCallRecord]) -> str | None:
    """The commit the relay last put upstream (or found already there), if any."""
    for record in reversed(records):
        if record.name != "git_push" or not record.ok or not isinstance(record.result, dict):
            continue
        upstream = record.result.get("upstream")
        if isinstance(upstream, dict) and isinstance(upstream.get("sha"), str):
            return str(upstream["sha"])
    return None


def author_outcome(
    workspace: Workspace, base_sha: str, records: list[ToolCallRecord], *, max_chars: int
) -> AuthorOutcome:
    """The job branch, its commits since the base, their diff stat, and what was pushed."""
    pushed = pushed_sha(records)
    # The local tip, not the pushed one: commits made after the push show (and are missing).
    tip = branch_tip(workspace.tree, workspace.branch) or pushed or base_sha
    outcome = AuthorOutcome(branch=workspace.branch, pushed_sha=pushed)
    if tip == base_sha:
        return outcome
    change = read_change(workspace.tree, base_sha, tip, max_chars=max_chars)
    return outcome.model_copy(update={"commits": change.commits, "diff_stat": change.stat})


def summary_outcome(
    plan: TreePlan, workspace: Workspace, compare: Baseline | None, text: str
) -> SummaryOutcome:
    """The branch's commits and files since it left its base, and the model's summary."""
    outcome = SummaryOutcome(branch=plan.branch, base=plan.base, summary=text)
    if compare is None or compare.sha == workspace.base_sha:
        return outcome
    change = read_change(workspace.tree, compare.sha, workspace.base_sha, max_chars=0)
    return outcome.model_copy(update={"commits": change.commits, "files": change.files})


def commit_notes_outcome(spec: JobSpec, plan: TreePlan, text: str) -> CommitNotesOutcome:
    """The drafted message, split into subject and body (a long subject is cut, and says so)."""
    message = parse_commit_message(text)
    return CommitNotesOutcome(
        range=spec.range or f"{plan.base}..{plan.branch}",
        subject=message.subject,
        body=message.body,
        subject_truncated=message.subject_truncated,
    )
