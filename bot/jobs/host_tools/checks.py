"""``run_checks``: the repository's docs checks on the working tree as it is now, for the
author to fix what its change broke before it commits (docs/checks.md).

The checks themselves run in the job's container (``bot.review.docs_checks``); the tool
reports only what the change introduces, with the findings already on the base counted
apart, and caps the findings it lists like any tool result. A repository that declares no
checks gets a result saying so: the tool is in every author job's set whatever the
configuration says, so that a configuration change never stops a parked run from resuming.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import JsonValue

from bot.core.input import AgentInput
from bot.core.tools import ToolSpec, json_params
from bot.review.check_report import ChecksReport
from bot.review.docs_checks import DocsChecks

__all__ = ["RUN_CHECKS", "RunChecksTool", "checks_result"]

RUN_CHECKS = ToolSpec(
    name="run_checks",
    description=(
        "Run the repository's docs checks (Markdown lint, spelling, prose, links, the site "
        "build) on the working tree as it is now, uncommitted edits included. Returns only "
        "the findings your change introduces, each {check, path, line, rule, message}; "
        "findings already on the base branch are counted apart and are not yours to fix. "
        "Run it after your edits look right and before git_commit; fix each new finding and "
        "run it again until 'clean' is true."
    ),
    parameters=json_params({}, []),
)
MAX_LISTED = 50


class RunChecksTool:
    """The ``run_checks`` host tool over a job's ``DocsChecks`` (None: none declared)."""

    def __init__(self, checks: DocsChecks | None) -> None:
        self._checks = checks

    def spec(self) -> ToolSpec:
        return RUN_CHECKS

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        if self._checks is None:
            return {
                "clean": True,
                "checks": [],
                "new": [],
                "note": "this repository declares no docs checks; there is nothing to run",
            }
        report = await asyncio.to_thread(self._checks.run)
        return checks_result(report)


def checks_result(report: ChecksReport) -> dict[str, Any]:
    """What the model reads of a report: each check's state, then the new findings."""
    new = [finding.model_dump() for run in report.ordered() for finding in run.new]
    result: dict[str, Any] = {
        "clean": report.clean,
        "checks": [
            {
                "check": run.check,
                "status": run.status,
                "new": run.new_total,
                "already_on_base": run.existing_total,
                **({"detail": run.detail} if run.detail else {}),
            }
            for run in report.ordered()
        ],
        "new": new[:MAX_LISTED],
    }
    if len(new) > MAX_LISTED:
        result["note"] = f"{len(new) - MAX_LISTED} more new findings; fix these, then run again"
    return result
