"""The docs checks in a whole author job: real Redis, a real Celery worker, the real sandbox
container running codespell and the link check, a real bare upstream. The scripted model
runs ``run_checks``, sees the findings its edit introduced, fixes them and runs the checks
again before it commits; the worker then checks the parked commit itself, and a repository
that blocks on new failures refuses the approve until an admin overrides. A review job merges
the checks' new findings into its own (docs/checks.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.core.errors import BeamError
from bot.review.check_report import ChecksReport
from bot.store.models import Approval, JobKind, JobRecord, JobState, ReviewOutcome
from harness.playbooks import (
    AUTHOR_REQUEST,
    CHECKED_FIRST,
    FINDING,
    SEED_PAGES,
    seed_upstream,
    with_install_pages,
)
from harness.snapshots import snapshot_files
from harness.stack import REPO, REVIEWER, Stack, job_stack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    checks = {"run": ["codespell", "links"], "block": True}
    with job_stack(repositories={REPO: {"checks": checks}}) as running:
        running.start_worker("a")
        yield running


def _parked(stack: Stack, playbook: str) -> tuple[JobRecord, Approval]:
    job = stack.submit(JobKind.AUTHOR, playbook, request=AUTHOR_REQUEST)
    parked = stack.wait_for(job.id, JobState.AWAITING_APPROVAL, timeout=90.0)
    approval = stack.store.approvals.get(job.id)
    assert approval is not None and approval.checks is not None
    return parked, approval


def _runs(report: ChecksReport | None) -> dict[str, tuple[str, int, int]]:
    assert report is not None
    return {r.check: (r.status, r.new_total, r.existing_total) for r in report.runs}


def test_the_model_fixes_what_run_checks_found_and_the_park_is_green(stack: Stack) -> None:
    job, approval = _parked(stack, "author-check-and-fix")

    first, second = [call.result for call in stack.tool_calls(job.id, "run_checks")]
    assert isinstance(first, dict) and first["clean"] is False
    assert {item["check"] for item in first["new"]} == {"codespell", "links"}  # type: ignore[index, union-attr]
    assert isinstance(second, dict) and second["clean"] is True
    # The worker's own run on the parked commit: green, the page's old faults kept apart.
    assert approval.checks is not None and approval.checks.commit == approval.commit_sha
    assert _runs(approval.checks) == {"codespell": ("passed", 0, 2), "links": ("passed", 0, 1)}
    assert approval.checks_block and approval.checks_overridden_by is None

    stack.decide(job.id, approve=True)
    stack.wait_for(job.id, JobState.SUCCEEDED)
    assert stack.upstream_ref(f"riverbeam/{job.id}") == approval.commit_sha


def test_a_new_failure_at_the_park_blocks_the_approve_until_an_admin_overrides(
    stack: Stack,
) -> None:
    job, approval = _parked(stack, "author-ignore-checks")
    assert stack.tool_calls(job.id, "run_checks") == []
    assert _runs(approval.checks) == {"codespell": ("failed", 1, 2), "links": ("failed", 1, 1)}
    assert approval.checks is not None
    assert "Recieve" in approval.checks.runs[0].new[0].message

    with pytest.raises(BeamError) as refused:
        stack.decide(job.id, approve=True)
    assert refused.value.code == "BEM-606"
    still = stack.store.approvals.get(job.id)
    assert still is not None and still.decided_by is None
    assert stack.upstream_ref(f"riverbeam/{job.id}") is None

    stack.decide(job.id, approve=True, override_checks=True, comment="The link lands next week")
    stack.wait_for(job.id, JobState.SUCCEEDED)
    decided = stack.store.approvals.get(job.id)
    assert decided is not None and decided.checks_overridden_by == REVIEWER
    assert stack.upstream_ref(f"riverbeam/{job.id}") == approval.commit_sha


def test_a_review_merges_the_checks_new_findings_into_its_own(stack: Stack) -> None:
    branch = "docs/checked-review"
    sha = stack.push_branch(branch, {"docs/install.md": CHECKED_FIRST}, "Mention the changelog")
    job = stack.submit(JobKind.REVIEW, "review-approve", branch=branch)
    done = stack.wait_for(job.id, JobState.SUCCEEDED, timeout=90.0)

    assert done.result is not None
    outcome = done.result.outcome
    assert isinstance(outcome, ReviewOutcome) and outcome.commit_sha == sha
    assert outcome.checks is not None and outcome.checks.commit == sha
    # Compared with the merge base: the page's old faults are counted apart, not merged.
    assert _runs(outcome.checks) == {"codespell": ("failed", 1, 2), "links": ("failed", 1, 1)}
    model, *merged = outcome.findings
    assert model.note == FINDING["note"]
    assert [(f.path, f.severity, f.note.split(" ")[0]) for f in merged] == [
        ("docs/install.md", "major", "codespell"),
        ("docs/install.md", "major", "links"),
    ]
    assert "Recieve" in merged[0].note and merged[0].line == 9


TOCTREE = "Handbook\n========\n\n.. toctree::\n\n   install\n   configuration\n"
# The same fix, found by the repository's own site build: encode/uvicorn's real MkDocs
# documentation with the install page added, and a Sphinx (MyST) sample.
SITES = {
    "mkdocs": (
        with_install_pages(snapshot_files("uvicorn")),
        {"run": ["mkdocs"]},
    ),
    "sphinx": (
        {
            **{page: text for page, text in SEED_PAGES.items() if page != "docs/index.md"},
            "docs/conf.py": 'project = "Handbook"\nextensions = ["myst_parser"]\n',
            "docs/index.rst": TOCTREE,
        },
        {"run": ["sphinx"], "sphinx_source": "docs"},
    ),
}


@pytest.mark.parametrize("site", sorted(SITES))
def test_the_model_fixes_what_the_site_build_found_before_the_park(
    site: str, tmp_path: Path
) -> None:
    pages, checks = SITES[site]
    upstream = seed_upstream(tmp_path / "site.git", pages)
    with job_stack(repositories={"site": {"upstream": str(upstream), "checks": checks}}) as stack:
        stack.start_worker("a")
        job = stack.submit(
            JobKind.AUTHOR, "author-check-and-fix", repo="site", request=AUTHOR_REQUEST
        )
        stack.wait_for(job.id, JobState.AWAITING_APPROVAL, timeout=90.0)
        first, second = [call.result for call in stack.tool_calls(job.id, "run_checks")]
        approval = stack.store.approvals.get(job.id)
    assert isinstance(first, dict) and isinstance(second, dict)
    [found] = first["new"]  # type: ignore[misc]
    assert found["check"] == site and "changelog" in found["message"]  # type: ignore[index]
    assert second["clean"] is True
    assert approval is not None and approval.checks is not None
    assert [(r.check, r.status) for r in approval.checks.runs] == [(site, "passed")]
