"""commit-notes: drafts the commit message for a range or a branch.

- plan: for a range ``A..B`` the tree is at B and the compare point is A; for a branch, as
  for summarize;
- tools: the container's read tools;
- outcome: the drafted message, split into subject and body (``bot.jobs.commit_notes``);
- judged: it has a subject line (``CommitNotesOutcome.missing``, BEM-523);
- on the forge: on a pull request, one comment for every commit-notes job of it, kept up to
  date as the pull request changes; the notes in it as a fenced block.
"""

from __future__ import annotations

from bot.config import RepositoryConfig
from bot.jobs.commit_notes import parse_commit_message
from bot.jobs.kinds.kind import Ended, Kind, quoted
from bot.jobs.plans import TreePlan, branch_plan
from bot.store.models import CommitNotesOutcome, ForgeThreadRef, JobKind, JobSpec, Outcome


class CommitNotesJob(Kind):
    job_kind = JobKind.COMMIT_NOTES
    default_request = "Draft the commit message for the change on {branch} since {base}."

    def plan(self, spec: JobSpec, repo: RepositoryConfig) -> TreePlan:
        ends = spec.range_ends()
        if ends is None:
            return branch_plan(spec, repo)
        start, end = ends
        return TreePlan(checkout=end, branch=end, base=start, compare=start, merge=False)

    def outcome(self, ended: Ended) -> Outcome | None:
        if ended.tree is None:
            return None
        return commit_notes_outcome(ended.spec, ended.tree.plan, ended.state.text)

    def status_slot(self, job_id: str, target: ForgeThreadRef) -> str:
        if target.thread != "pull_request":
            return super().status_slot(job_id, target)
        return f"commit-notes:{target.forge}:{target.repository}:{target.number}"

    def forge_result(self, outcome: Outcome | None) -> list[str]:
        if not isinstance(outcome, CommitNotesOutcome):
            return []
        message = outcome.subject + (f"\n\n{outcome.body}" if outcome.body else "")
        return ["The commit message drafted:", "", *quoted(message)]


def commit_notes_outcome(spec: JobSpec, plan: TreePlan, text: str) -> CommitNotesOutcome:
    """The drafted message, split into subject and body (a long subject is cut, and says so)."""
    message = parse_commit_message(text)
    return CommitNotesOutcome(
        range=spec.range or f"{plan.base}..{plan.branch}",
        subject=message.subject,
        body=message.body,
        subject_truncated=message.subject_truncated,
    )
