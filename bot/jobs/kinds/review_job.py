"""review: reads a branch and delivers a verdict with findings through ``review_change``.

- plan: the tree is the branch under review; the compare point is where it left its base
  (their merge base), so ``git_diff``/``git_log`` show exactly the branch's change;
- tools: the container's read tools, ``review_change`` and ``remember``;
- outcome: the review ``review_change`` collected, on the branch at the commit reviewed,
  with the findings of the repository's docs checks merged in (run by the worker on that
  commit against the merge base once the run ends; docs/checks.md);
- judged: a verdict was delivered (``ReviewOutcome.missing``, BEM-521);
- on the forge: the verdict line in the status comment, and on a pull request a review with
  line comments and the ``riverbeam/review`` commit status (``bot.jobs.forge_posts``).
"""

from __future__ import annotations

from bot.agents.memory import RememberTool
from bot.config import RepositoryConfig
from bot.core.tools import Tool
from bot.jobs.host_tools.review import ReviewChangeTool, ReviewCollector
from bot.jobs.kinds.kind import Ended, Kind, ToolKit
from bot.jobs.plans import TreePlan, branch_plan
from bot.review.check_report import ChecksReport
from bot.store.models import Finding, JobKind, JobSpec, Outcome, ReviewOutcome


class ReviewJob(Kind):
    job_kind = JobKind.REVIEW
    default_request = "Review the change on {branch} against {base}."
    posts_review = True
    checks_at_end = True

    def plan(self, spec: JobSpec, repo: RepositoryConfig) -> TreePlan:
        return branch_plan(spec, repo)

    def tools(self, kit: ToolKit) -> list[Tool]:
        tools: list[Tool] = [RememberTool(kit.memory, kit.scope)]
        if kit.tree is not None:
            tools.append(ReviewChangeTool(ReviewCollector(), kit.tree))
        return tools

    def outcome(self, ended: Ended) -> Outcome | None:
        tool = next((t for t in ended.tools if isinstance(t, ReviewChangeTool)), None)
        if ended.tree is None or tool is None:
            return None
        outcome = tool.collector.outcome(
            branch=ended.tree.plan.branch, commit_sha=ended.tree.workspace.base_sha
        )
        if ended.checks is None:
            return outcome
        merged = [*outcome.findings, *check_findings(ended.checks)]
        return outcome.model_copy(update={"findings": merged, "checks": ended.checks})

    def forge_result(self, outcome: Outcome | None) -> list[str]:
        if not isinstance(outcome, ReviewOutcome) or outcome.verdict is None:
            return []
        verdict = outcome.verdict.replace("_", " ")
        lines = [f"Verdict: **{verdict}**, {len(outcome.findings)} finding(s)."]
        if outcome.checks is not None:
            failing = outcome.checks.failing
            state = f"failing: {', '.join(failing)}" if failing else "all passed"
            lines.append(f"Docs checks: {state}.")
        return lines


def check_findings(report: ChecksReport) -> list[Finding]:
    """The checks' new findings as review findings: each names its check and rule. A check
    that could not say anything is one finding too, so it is never read as a pass."""
    findings = [
        Finding(
            path=found.path,
            line=found.line or None,
            severity="major",
            note=f"{found.check} {found.rule}: {found.message}",
        )
        for run in report.ordered()
        for found in run.new
    ]
    errors = [run for run in report.runs if run.status == "error"]
    findings += [
        Finding(path="", severity="major", note=f"{run.check} could not run: {run.detail}")
        for run in errors
    ]
    return findings
