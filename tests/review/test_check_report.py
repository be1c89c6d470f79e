"""A checks report's sorting of findings into new and already on the base."""

from __future__ import annotations

from bot.review.check_report import CheckFinding, ChecksReport, compare_run


def finding(path: str, line: int, message: str = "teh ==> the") -> CheckFinding:
    return CheckFinding(
        check="codespell", path=path, line=line, rule="misspelling", message=message
    )


def test_an_old_finding_moved_by_an_edit_stays_old_and_a_second_copy_is_new() -> None:
    base = [finding("a.md", 3)]
    head = [finding("a.md", 9), finding("a.md", 12), finding("b.md", 1)]
    run = compare_run("codespell", head, base, seconds=0.5, base_seconds=0.4, cap=10)
    assert run.status == "failed"
    assert [(f.path, f.line) for f in run.existing] == [("a.md", 9)]
    assert [(f.path, f.line) for f in run.new] == [("a.md", 12), ("b.md", 1)]
    assert (run.new_total, run.existing_total) == (2, 1)


def test_only_old_findings_pass_and_the_lists_are_capped_with_whole_counts() -> None:
    base = [finding("a.md", line) for line in range(400)]
    run = compare_run("codespell", base, base, seconds=1.0, base_seconds=1.0, cap=5)
    assert run.status == "passed" and run.new_total == 0
    assert len(run.existing) == 5 and run.existing_total == 400
    assert ChecksReport(runs=[run]).clean


def test_a_check_that_could_not_say_is_never_green() -> None:
    run = compare_run(
        "mdbook", [], [], seconds=0.0, base_seconds=None, error="not in the image", cap=5
    )
    report = ChecksReport(
        runs=[run, compare_run("codespell", [], [], seconds=0, base_seconds=0, cap=5)]
    )
    assert run.status == "error" and not report.clean and report.new_failures == 1
    assert [r.check for r in report.ordered()] == ["mdbook", "codespell"]
