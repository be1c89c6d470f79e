"""What each kind of job produced, read from its run and its tree when the run ends.

The model's final text is kept as it is in ``JobResult.text``; the outcome is the structured
part a program can rely on, built from what the host can check (the tree's commits, the relay's
answer, the review tool's record), not from what the model says it did.
"""

from __future__ import annotations

from bot.frames import ToolCallRecord
from bot.jobs.changes import branch_tip, read_change
from bot.jobs.commit_notes import parse_commit_message
from bot.jobs.models import (
    AuthorOutcome,
    CommitNotesOutcome,
    JobSpec,
    SummaryOutcome,
)
from bot.jobs.plans import ComparePoint, TreePlan
from bot.runner.state import RunState
from sandbox.workspace.prepare import Workspace

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
    tip = pushed or branch_tip(workspace.tree, workspace.branch) or base_sha
    outcome = AuthorOutcome(branch=workspace.branch, pushed_sha=pushed)
    if tip == base_sha:
        return outcome
    change = read_change(workspace.tree, base_sha, tip, max_chars=max_chars)
    return outcome.model_copy(update={"commits": change.commits, "diff_stat": change.stat})


def summary_outcome(
    plan: TreePlan, workspace: Workspace, compare: ComparePoint | None, text: str
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
