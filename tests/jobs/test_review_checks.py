"""How a review's outcome carries the docs checks: their new findings merged into the
review's, an error that is never a pass, and the verdict line on the forge (docs/checks.md)."""

from __future__ import annotations

from bot.jobs.kinds.review_job import ReviewJob, check_findings
from bot.review.check_report import CheckFinding, CheckRun, ChecksReport
from bot.store.models import Finding, ReviewOutcome

NEW = CheckFinding(check="codespell", path="docs/a.md", line=4, rule="misspelling", message="x")
OLD = CheckFinding(check="codespell", path="docs/a.md", line=0, rule="misspelling", message="y")


def _report(*runs: CheckRun) -> ChecksReport:
    return ChecksReport(commit="a" * 40, base="b" * 40, runs=list(runs))


def test_only_new_findings_and_errors_become_review_findings() -> None:
    report = _report(
        CheckRun(check="links", status="passed", seconds=0.0),
        CheckRun(check="mkdocs", status="error", seconds=0.1, detail="mkdocs exited 1"),
        CheckRun(
            check="codespell",
            status="failed",
            seconds=0.1,
            new=[NEW],
            new_total=1,
            existing=[OLD],
            existing_total=1,
        ),
    )
    assert check_findings(report) == [
        Finding(path="docs/a.md", line=4, severity="major", note="codespell misspelling: x"),
        Finding(path="", severity="major", note="mkdocs could not run: mkdocs exited 1"),
    ]


def test_the_forge_verdict_line_says_which_checks_fail() -> None:
    outcome = ReviewOutcome(branch="b", commit_sha="a" * 40, verdict="approve")
    assert ReviewJob().forge_result(outcome) == ["Verdict: **approve**, 0 finding(s)."]
    failing = _report(CheckRun(check="codespell", status="failed", seconds=0.1, new_total=1))
    checked = outcome.model_copy(update={"checks": failing})
    assert ReviewJob().forge_result(checked)[1] == "Docs checks: failing: codespell."
    passing = outcome.model_copy(update={"checks": _report()})
    assert ReviewJob().forge_result(passing)[1] == "Docs checks: all passed."
