"""author: edits pages on a branch of its own and pushes it, after a person approves.

- plan: the tree starts at the base branch (the repository's default unless the job names
  one) with no compare point: ``git_diff`` shows the edit being made against HEAD. A job
  that names a ``branch`` (one of Riverbeam's own: a pull request's, whose review it
  addresses) works on that branch from its head, and its push is a fast-forward of it;
- tools: the nine container tools (``git_push`` wrapped by the relay), ``remember`` and
  ``run_checks`` (the repository's docs checks, docs/checks.md);
- prompt values: ``branch`` is the job's own branch;
- outcome: the branch, its commits since the base, their diff stat and what was pushed;
- judged: no unpushed commit (``AuthorOutcome.missing``); a job that committed nothing wrote
  no file either (BEM-524) and says why (BEM-526).
"""

from __future__ import annotations

from typing import Any, ClassVar

from bot.agents.memory import RememberTool
from bot.config import RepositoryConfig
from bot.core.errors import JobError
from bot.core.frames import ToolCallRecord
from bot.core.tools import Tool
from bot.jobs.branch_change import branch_tip, read_change
from bot.jobs.host_tools.checks import RunChecksTool
from bot.jobs.kinds.kind import Ended, Kind, ToolKit
from bot.jobs.parking import PublishTarget
from bot.jobs.plans import Tree, TreePlan
from bot.store.models import AuthorOutcome, JobKind, JobSpec, Outcome
from sandbox.host.workspace.prepare import Workspace


class AuthorJob(Kind):
    job_kind = JobKind.AUTHOR
    owns_branch = True
    stand_in_fields: ClassVar[dict[str, str]] = {"request": "Check the model"}

    def plan(self, spec: JobSpec, repo: RepositoryConfig) -> TreePlan:
        if spec.branch:
            # Addressing a review: on the pull request's own branch, from its head.
            return TreePlan(
                checkout=spec.branch,
                branch=spec.branch,
                base=spec.branch,
                compare=None,
                merge=False,
                revises=spec.branch,
            )
        base = spec.base or repo.default_branch
        return TreePlan(checkout=base, branch="", base=base, compare=None, merge=False)

    def tools(self, kit: ToolKit) -> list[Tool]:
        return [RememberTool(kit.memory, kit.scope), RunChecksTool(kit.checks)]

    def prompt_values(self, tree: Tree | None, publish: PublishTarget | None) -> dict[str, Any]:
        values = super().prompt_values(tree, publish)
        if tree is not None:
            values["branch"] = tree.workspace.branch
        return values

    def outcome(self, ended: Ended) -> Outcome | None:
        tree = ended.tree
        if tree is None:
            return None
        return author_outcome(
            tree.workspace, tree.base_sha, ended.state.records, max_chars=ended.diff_max_chars
        )

    def judge(self, ended: Ended, outcome: Outcome | None) -> JobError | None:
        missing = super().judge(ended, outcome)
        if missing is not None or not isinstance(outcome, AuthorOutcome) or outcome.commits:
            return missing
        state = ended.state
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
