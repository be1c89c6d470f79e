"""The API's job document from stored records, including records a previous release wrote."""

from __future__ import annotations

from bot.service.schemas import JobView
from bot.store.models import (
    AuthorOutcome,
    JobKind,
    JobRecord,
    JobResult,
    JobSpec,
    JobState,
    SummaryOutcome,
)

AUTHOR = JobSpec(kind=JobKind.AUTHOR, repo="docs", request="Fix it", requested_by="ada")


def test_job_branch_is_the_recorded_branch() -> None:
    record = JobRecord(id="a1b2c3", spec=AUTHOR, branch="riverbeam/a1b2c3")

    assert JobView.of(record).job_branch == "riverbeam/a1b2c3"


def test_a_record_finished_without_a_branch_takes_it_from_its_author_outcome() -> None:
    # What the previous release stored for a pushed author job: no branch on the record.
    outcome = AuthorOutcome(branch="riverbeam/a1b2c3", pushed_sha="0" * 40)
    record = JobRecord(
        id="a1b2c3",
        spec=AUTHOR,
        state=JobState.SUCCEEDED,
        result=JobResult(text="done", outcome=outcome),
    )

    assert JobView.of(record).job_branch == "riverbeam/a1b2c3"


def test_other_kinds_have_no_job_branch() -> None:
    spec = JobSpec(kind=JobKind.SUMMARIZE, repo="docs", branch="main", requested_by="ada")
    outcome = SummaryOutcome(branch="main", base="main~3", summary="Nothing changed.")
    record = JobRecord(
        id="d4e5f6",
        spec=spec,
        state=JobState.SUCCEEDED,
        result=JobResult(text="Nothing changed.", outcome=outcome),
    )

    assert JobView.of(record).job_branch is None
