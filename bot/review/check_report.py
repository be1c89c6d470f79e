"""A docs-checks report (docs/checks.md): each check's findings on a change, split into those
the change introduces and those already on its base, kept beside the approval.

Findings are matched by check, page, rule and message, not by line (an edit above a warning
moves it), and counted as a multiset: a second copy of an old warning is new. A check that
could not say (``error``: a tool the image lacks, a cap reached, a crash) is never green,
whatever the base did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, Field

from bot.review.links import LinkReport

__all__ = ["CheckFinding", "CheckRun", "ChecksReport", "compare_run", "link_findings"]

Status = Literal["passed", "failed", "error"]


class CheckFinding(BaseModel):
    check: str
    path: str = Field(description="from the repository's root; '' when the tool names none")
    line: int = Field(description="1-based; 0 when the tool names none")
    rule: str
    message: str

    def key(self) -> tuple[str, str, str, str]:
        return (self.check, self.path, self.rule, self.message)


class CheckRun(BaseModel):
    """One check on the change: ``passed`` when it found nothing the base did not have."""

    check: str
    status: Status
    seconds: float = Field(description="the check's time on the change")
    base_seconds: float | None = Field(default=None, description="its time on the base")
    new: list[CheckFinding] = Field(default_factory=list, description="introduced, capped")
    new_total: int = 0
    existing: list[CheckFinding] = Field(
        default_factory=list, description="already on the base, capped"
    )
    existing_total: int = 0
    detail: str = Field(default="", description="why a check could not say (status error)")


class ChecksReport(BaseModel):
    """The checks of one change: the commit (or working tree) checked against its base."""

    commit: str | None = Field(default=None, description="null: the working tree")
    base: str | None = None
    runs: list[CheckRun] = Field(default_factory=list)
    seconds: float = Field(default=0.0, description="the whole run, export included")

    @property
    def clean(self) -> bool:
        return all(run.status == "passed" for run in self.runs)

    @property
    def new_failures(self) -> int:
        """New findings, and checks that could not say."""
        return sum(run.new_total + (run.status == "error") for run in self.runs)

    @property
    def failing(self) -> list[str]:
        """The checks that did not pass, errors first."""
        return [run.check for run in self.ordered() if run.status != "passed"]

    def ordered(self) -> list[CheckRun]:
        """Failures first (errors, then new findings), then the rest, in the configured order."""
        rank = {"error": 0, "failed": 1, "passed": 2}
        return sorted(self.runs, key=lambda run: rank[run.status])


def compare_run(
    check: str,
    head: Iterable[CheckFinding],
    base: Iterable[CheckFinding],
    *,
    seconds: float,
    base_seconds: float | None,
    error: str = "",
    cap: int,
) -> CheckRun:
    """The run of ``check`` from its findings on the change and on the base."""
    head, remaining = list(head), Counter(finding.key() for finding in base)
    new, existing = [], []
    for finding in head:
        if remaining[finding.key()] > 0:
            remaining[finding.key()] -= 1
            existing.append(finding)
        else:
            new.append(finding)
    status: Status = "error" if error else ("failed" if new else "passed")
    return CheckRun(
        check=check,
        status=status,
        seconds=seconds,
        base_seconds=base_seconds,
        new=new[:cap],
        new_total=len(new),
        existing=existing[:cap],
        existing_total=len(existing),
        detail=error,
    )


def link_findings(report: LinkReport) -> list[CheckFinding]:
    """The link report's broken links as findings of the ``links`` check."""
    return [
        CheckFinding(
            check="links",
            path=link.page,
            line=link.line,
            rule="broken-link",
            message=f"{link.target}: {link.reason}",
        )
        for link in report.broken
    ]
