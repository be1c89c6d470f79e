"""The scripted demo model (``bot.demo:demo_model``) drives every kind of job to a real
result, computed from what it reads through the tools: real Redis, a real Celery worker,
real containers and a real bare upstream, and no language model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.demo import DEMO_MODEL_FACTORY, DemoModel
from bot.service.access import Principal
from bot.store.models import (
    AuthorOutcome,
    CommitNotesOutcome,
    Finding,
    JobKind,
    JobRecord,
    JobSpec,
    JobState,
    PublishOutcome,
    ReviewOutcome,
    SummaryOutcome,
)
from harness.playbooks import AUTHOR_REQUEST, FIXED_INSTALL, INSTALL_PAGE
from harness.stack import PUBLISH_REF, REPO, REQUESTER, Stack, job_stack

pytestmark = pytest.mark.slow

FIXED = "docs/fixed"
FAQ = "docs/faq.md"
FAQ_PAGE = (
    "# FAQ\n\n"
    "## Where do I start?\n\n"
    "Read the [install guide](instal.md) first.\n\n"
    "You recieve a message when it is done.\n"
)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack(model_factory=DEMO_MODEL_FACTORY) as running:
        running.push_branch(FIXED, {"docs/install.md": FIXED_INSTALL}, "Fix the install page")
        running.start_worker("a")
        yield running


def _submit(stack: Stack, kind: JobKind, **fields: str) -> JobRecord:
    """A job as a person submits it: no playbook, the demo model plans by its kind."""
    spec = JobSpec(kind=kind, repo=REPO, requested_by=REQUESTER, **fields)
    return stack.service.submit(Principal.operator(REQUESTER), spec)


def _done(stack: Stack, job: JobRecord) -> JobRecord:
    done = stack.wait_for(job.id, JobState.SUCCEEDED)
    assert done.result is not None and done.result.model_used == DemoModel.model
    return done


def test_an_author_job_fixes_the_page_it_reads_and_pushes_it(stack: Stack) -> None:
    job = _submit(stack, JobKind.AUTHOR, request=AUTHOR_REQUEST)
    stack.wait_for(job.id, JobState.AWAITING_APPROVAL)
    stack.decide(job.id, approve=True)
    done = _done(stack, job)

    outcome = done.result.outcome if done.result else None
    assert isinstance(outcome, AuthorOutcome) and outcome.pushed_sha is not None
    assert stack.upstream_ref(f"riverbeam/{job.id}") == outcome.pushed_sha
    (read,) = stack.tool_calls(job.id, "read_file")
    assert isinstance(read.result, dict) and read.result["content"] == INSTALL_PAGE
    (write,) = stack.tool_calls(job.id, "write_file")
    assert write.arguments == {"path": "docs/install.md", "body": FIXED_INSTALL}


def test_a_review_flags_the_misspellings_and_broken_links_it_reads(stack: Stack) -> None:
    stack.push_branch("docs/faq", {FAQ: FAQ_PAGE}, "Add a FAQ")
    done = _done(stack, _submit(stack, JobKind.REVIEW, branch="docs/faq"))

    outcome = done.result.outcome if done.result else None
    assert isinstance(outcome, ReviewOutcome) and outcome.verdict == "request_changes"
    assert outcome.findings == [
        Finding(
            path=FAQ,
            line=5,
            severity="major",
            note="The link to 'instal.md' points at a file that does not exist.",
            suggestion="Read the [install guide](install.md) first.",
        ),
        Finding(
            path=FAQ,
            line=5,
            severity="minor",
            note="Misspelling: 'instal' should be 'install'.",
            suggestion="Read the [install guide](install.md) first.",
        ),
        Finding(
            path=FAQ,
            line=7,
            severity="minor",
            note="Misspelling: 'recieve' should be 'receive'.",
            suggestion="You receive a message when it is done.",
        ),
    ]
    assert outcome.summary.startswith(f"Checked {FAQ} for misspellings and relative links: 1 ")
    assert done.result is not None and done.result.text.startswith("Verdict: request_changes.")
    # What it judged, it read: the diff, the changed page, its folder and its link target.
    assert [call.arguments for call in stack.tool_calls(done.id, "read_file")] == [
        {"path": FAQ},
        {"path": "docs/instal.md", "limit": 1},
    ]


def test_a_review_in_a_folder_larger_than_a_listing_page_looks_up_its_links(
    stack: Stack,
) -> None:
    # tldr's shape: one folder holding far more pages than a listing page. The link to the
    # last page of it is valid; only the link to a page that does not exist is broken.
    pages = {f"pages/common/tool-{n:04d}.md": f"# tool {n}\n" for n in range(1_200)}
    new_page = "# zsh\n\nSee [the last tool](tool-1199.md) and [a missing one](tool-9999.md).\n"
    stack.push_branch("docs/large-base", pages, "Add 1,200 pages")
    stack.push_branch(
        "docs/large", {"pages/common/zsh.md": new_page}, "Add zsh", onto="docs/large-base"
    )
    review = _submit(stack, JobKind.REVIEW, branch="docs/large", base="docs/large-base")
    done = _done(stack, review)

    outcome = done.result.outcome if done.result else None
    assert isinstance(outcome, ReviewOutcome) and outcome.verdict == "request_changes"
    assert [finding.note for finding in outcome.findings] == [
        "The link to 'tool-9999.md' points at a file that does not exist."
    ]
    # The folder's listing is one page of it; the targets were looked up, not searched for.
    (listing,) = stack.tool_calls(done.id, "list_tree")
    assert listing.arguments == {"path": "pages/common"}
    assert isinstance(listing.result, dict) and listing.result["truncated"] is True
    assert "pages/common/tool-1199.md" not in listing.result["files"]
    assert [call.arguments for call in stack.tool_calls(done.id, "read_file")][1:] == [
        {"path": "pages/common/tool-1199.md", "limit": 1},
        {"path": "pages/common/tool-9999.md", "limit": 1},
    ]


def test_a_review_of_a_clean_change_approves_it(stack: Stack) -> None:
    done = _done(stack, _submit(stack, JobKind.REVIEW, branch=FIXED))

    outcome = done.result.outcome if done.result else None
    assert isinstance(outcome, ReviewOutcome)
    assert (outcome.verdict, outcome.findings) == ("approve", [])


def test_a_summary_describes_the_commits_files_and_fixes_it_reads(stack: Stack) -> None:
    done = _done(stack, _submit(stack, JobKind.SUMMARIZE, branch=FIXED))

    outcome = done.result.outcome if done.result else None
    assert isinstance(outcome, SummaryOutcome)
    sha = stack.upstream_ref(FIXED) or ""
    assert outcome.summary == (
        f"### `{FIXED}` compared with `main`\n"
        f"- **Commits** (1): `{sha[:12]}` Fix the install page\n"
        "- **Files touched**: modified: `docs/install.md`\n"
        "- **What changed for readers**:\n"
        "  - `docs/install.md`: corrects 2 misspelling(s) (Instal → Install, teh → the) and "
        "repoints 1 link(s) (configure.md → configuration.md); +2 −2 lines"
    )


def test_commit_notes_name_the_fixes_the_diff_makes(stack: Stack) -> None:
    start = stack.upstream_ref("main") or ""
    done = _done(stack, _submit(stack, JobKind.COMMIT_NOTES, range=f"{start[:12]}..{FIXED}"))

    outcome = done.result.outcome if done.result else None
    assert isinstance(outcome, CommitNotesOutcome)
    assert outcome.subject == "Fix typos and broken links in docs/install.md"
    assert outcome.body.startswith("Readers met misspelled words or links to pages that do not")
    assert "(Instal → Install, teh → the)" in outcome.body.replace("\n  ", " ")
    assert all(len(line) <= 72 for line in outcome.body.splitlines())


def test_a_publish_publishes_the_reviewed_commit_once_approved(stack: Stack) -> None:
    review = _done(stack, _submit(stack, JobKind.REVIEW, branch=FIXED))
    job = _submit(stack, JobKind.PUBLISH, review_job=review.id)
    stack.wait_for(job.id, JobState.AWAITING_APPROVAL)
    stack.decide(job.id, approve=True)
    done = _done(stack, job)

    sha = stack.upstream_ref(FIXED)
    assert stack.upstream_ref(PUBLISH_REF) == sha
    assert done.result is not None
    assert done.result.outcome == PublishOutcome(publish_ref=PUBLISH_REF, sha=sha)
    assert done.result.text == f"Published {sha} to {PUBLISH_REF}."
