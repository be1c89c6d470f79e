"""summarize: says what changed on a branch since it left its base.

- plan: as a review's (the branch, compared with its merge base with the base);
- tools: the container's read tools;
- outcome: the branch's commits and files since its compare point, and the model's summary;
- judged: the summary is not empty (``SummaryOutcome.missing``, BEM-522);
- on the forge: the summary, as a fenced block, in the status comment.
"""

from __future__ import annotations

from bot.config import RepositoryConfig
from bot.jobs.branch_change import read_change
from bot.jobs.kinds.kind import Ended, Kind, quoted
from bot.jobs.plans import Tree, TreePlan, branch_plan
from bot.store.models import JobKind, JobSpec, Outcome, SummaryOutcome


class SummarizeJob(Kind):
    job_kind = JobKind.SUMMARIZE
    default_request = "Summarize what changed on {branch} since {base}."

    def plan(self, spec: JobSpec, repo: RepositoryConfig) -> TreePlan:
        return branch_plan(spec, repo)

    def outcome(self, ended: Ended) -> Outcome | None:
        return None if ended.tree is None else summary_outcome(ended.tree, ended.state.text)

    def forge_result(self, outcome: Outcome | None) -> list[str]:
        if not isinstance(outcome, SummaryOutcome):
            return []
        return ["The summary:", "", *quoted(outcome.summary)]


def summary_outcome(tree: Tree, text: str) -> SummaryOutcome:
    """The branch's commits and files since it left its base, and the model's summary."""
    plan, workspace, compare = tree.plan, tree.workspace, tree.compare
    outcome = SummaryOutcome(branch=plan.branch, base=plan.base, summary=text)
    if compare is None or compare.sha == workspace.base_sha:
        return outcome
    change = read_change(workspace.tree, compare.sha, workspace.base_sha, max_chars=0)
    return outcome.model_copy(update={"commits": change.commits, "files": change.files})
