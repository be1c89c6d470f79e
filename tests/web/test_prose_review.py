"""A docs change read as prose, on the real API server: the approval page and the job page
mark the words a changed line pair changed, name spacing-only and rewrap-only pairs, fold
long unchanged stretches, and list the changed pages' broken links with page and line; the
API's approval document carries the same word changes and link report."""

from __future__ import annotations

import json

import httpx
import pytest

from bot.review.links import BrokenLink, ExternalLink, LinkReport
from bot.review.preview import PageSource
from bot.store.models import Approval, JobKind, JobSpec
from harness.stack import REPO, REQUESTER, REVIEWER
from tests.web.kit import Web, sign_in

LONG = " ".join(f"word{i}" for i in range(60))
DIFF = (
    "diff --git a/docs/install.md b/docs/install.md\n"
    "--- a/docs/install.md\n+++ b/docs/install.md\n"
    "@@ -1,7 +1,6 @@\n"
    " # Install\n"
    "-Run the instaler with sudo.\n"
    "+Run the installer with sudo.\n"
    " \n"
    "-Trailing  spaces here.\n"
    "+Trailing spaces here.\n"
    " \n"
    "-This sentence is wrapped\n"
    "-badly.\n"
    "+This sentence is wrapped badly.\n"
    "@@ -20 +19 @@\n"
    f"-{LONG} <old> {LONG}\n"
    f"+{LONG} <new> {LONG}\n"
)


BEFORE = "# Install\n\nRun the instaler.\n\n| A | B |\n|---|---|\n| 1 | 2 |\n"
AFTER = (
    "# Install\n\nRun the installer.\n\n| A | B |\n|---|---|\n| 1 | 2 |\n\n"
    '<script>alert("x")</script>\n\n[bad](javascript:alert(1)) [guide](guide.md)\n\n'
    "![pixel](http://evil.example/p.png)\n"
)
REPORT = LinkReport(
    pages=["docs/install.md"],
    broken=[
        BrokenLink(
            page="docs/install.md",
            line=7,
            target="<b>gone</b>.md",
            reason="docs/<b>gone</b>.md is not in the commit",
        )
    ],
    external=[ExternalLink(page="docs/install.md", line=9, url="https://example.com/x")],
)


def store_prose_change(web: Web) -> str:
    """A job parked on a prose change: stored, never queued. Its id."""
    store = web.stack.store
    record = store.jobs.create(
        JobSpec(kind=JobKind.AUTHOR, repo=REPO, request="Fix typos", requested_by=REQUESTER)
    )
    store.approvals.open(
        Approval(
            id=f"{record.id}-approval",
            job_id=record.id,
            repo=REPO,
            requested_by=REQUESTER,
            call_id="call-1",
            tool="git_push",
            arguments={},
            target_ref=f"riverbeam/{record.id}",
            diff_stat=" docs/install.md | 9 ++++-----",
            diff=DIFF,
            links=REPORT,
            pages=[
                PageSource(path="docs/install.md", before=BEFORE, after=AFTER),
                PageSource(
                    path="docs/huge.md", note="over the preview cap of 256 KiB: read the diff"
                ),
            ],
        )
    )
    return record.id


@pytest.fixture(scope="module")
def prose_job(web: Web) -> str:
    return store_prose_change(web)


def test_the_pages_mark_the_changed_words(web: Web, prose_job: str) -> None:
    with sign_in(web, REVIEWER) as client:
        pages = [client.get("/approvals").text, client.get(f"/jobs/{prose_job}").text]
    for page in pages:
        assert (
            '<span class="d-del d-words">-Run the <mark class="w-del">instaler</mark> with sudo.'
            in page
        )
        assert (
            '<span class="d-add d-words">+Run the <mark class="w-add">installer</mark> with sudo.'
            in page
        )
        assert '<span class="d-note">spacing only: the same words on the same lines</span>' in page
        assert '<span class="d-note">rewrapped only: the same words, broken into lines' in page
        # The long unchanged stretch folds, escaped, and keeps its words behind the summary.
        assert '<details class="w-fold"><summary>… 48 unchanged words …</summary>' in page
        assert '<mark class="w-add">&lt;new&gt;</mark>' in page
        assert "<new>" not in page


def test_the_api_document_carries_the_word_changes(web: Web, prose_job: str) -> None:
    reply = httpx.get(f"{web.url}/v1/approvals/{prose_job}", headers=web.api.auth(REVIEWER))
    assert reply.status_code == 200, reply.text
    changes = reply.json()["current"]["word_changes"]
    assert [(c["path"], c["kind"], c["new_start"]) for c in changes] == [
        ("docs/install.md", "words", 2),
        ("docs/install.md", "whitespace", 4),
        ("docs/install.md", "rewrap", 6),
        ("docs/install.md", "words", 19),
    ]
    first = changes[0]
    assert [(line["side"], line["number"]) for line in first["lines"]] == [("old", 2), ("new", 2)]
    changed = [
        s["text"] for line in first["lines"] for s in line["segments"] if s["mark"] == "changed"
    ]
    assert changed == ["instaler", "installer"]
    listed = httpx.get(f"{web.url}/v1/approvals", headers=web.api.auth(REVIEWER)).json()
    [mine] = [a for a in listed["items"] if a["job_id"] == prose_job]
    assert mine["word_changes"] == changes


def test_the_pages_list_each_broken_link_with_page_and_line(web: Web, prose_job: str) -> None:
    with sign_in(web, REVIEWER) as client:
        pages = [client.get("/approvals").text, client.get(f"/jobs/{prose_job}").text]
    for page in pages:
        assert '<h3 class="links-bad">1 broken link</h3>' in page
        assert (
            "<li><code>docs/install.md</code> line 7: <code>&lt;b&gt;gone&lt;/b&gt;.md</code>: "
            "docs/&lt;b&gt;gone&lt;/b&gt;.md is not in the commit</li>"
        ) in page
        # External links are text, never a link the page would follow or fetch.
        assert "<summary>1 external link (listed, not checked)</summary>" in page
        assert "<code>https://example.com/x</code>" in page
        assert 'href="https://example.com/x"' not in page


def test_a_parked_push_checks_its_pages_links_against_its_commit(web: Web) -> None:
    """The real flow: the author job fixes docs/install.md's link and parks; the approval
    carries the check of that page against the commit it would push."""
    parked = web.park(REQUESTER).id
    reply = httpx.get(f"{web.url}/v1/approvals/{parked}", headers=web.api.auth(REVIEWER))
    links = reply.json()["current"]["links"]
    assert links == {
        "pages": ["docs/install.md"],
        "broken": [],
        "external": [],
        "skipped": [],
        "cut": False,
    }
    with sign_in(web, REVIEWER) as client:
        page = client.get(f"/jobs/{parked}").text
    assert "Every relative link and image of the 1 changed page resolves in the commit." in page


def test_an_approval_from_the_previous_release_loads_and_says_links_were_not_checked(
    web: Web,
) -> None:
    store = web.stack.store
    record = store.jobs.create(
        JobSpec(kind=JobKind.AUTHOR, repo=REPO, request="Old", requested_by=REQUESTER)
    )
    approval = Approval(
        id=f"{record.id}-approval",
        job_id=record.id,
        repo=REPO,
        requested_by=REQUESTER,
        call_id="call-1",
        tool="git_push",
        arguments={},
        diff=DIFF,
    )
    store.approvals.open(approval)
    # The document as the previous release stored it: no "links" field at all.
    document = approval.model_dump(mode="json")
    del document["links"]
    store.gateway.client.set(store.gateway.keys.approval(record.id), json.dumps(document))
    loaded = store.approvals.get(record.id)
    assert loaded is not None and loaded.links is None
    with sign_in(web, REVIEWER) as client:
        page = client.get(f"/jobs/{record.id}").text
    assert "Links were not checked: this approval was opened by an earlier release." in page
    reply = httpx.get(f"{web.url}/v1/approvals/{record.id}", headers=web.api.auth(REVIEWER))
    assert reply.json()["current"]["links"] is None


def test_the_job_page_renders_each_changed_page_before_and_after(web: Web, prose_job: str) -> None:
    with sign_in(web, REVIEWER) as client:
        page = client.get(f"/jobs/{prose_job}").text
        queue = client.get("/approvals").text
    assert (
        f'<a href="/jobs/{prose_job}#preview">Rendered preview of the 2 changed pages</a>' in queue
    )
    start = page.index('<section class="previews" id="preview">')
    preview = page[start : page.index("</section>", start)]
    assert (
        '<div class="pv-side pv-before">' in preview and '<div class="pv-side pv-after">' in preview
    )
    assert '<div class="pv-block pv-changed"><p>Run the instaler.</p>' in preview
    assert '<div class="pv-block pv-changed"><p>Run the installer.</p>' in preview
    assert '<div class="pv-block"><h1>Install</h1>' in preview
    assert "<table>" in preview
    # Hostile content: text, inert links, no image, no script.
    assert '<p>&lt;script&gt;alert("x")&lt;/script&gt;</p>' in preview
    assert "<p>[bad](javascript:alert(1)) " in preview
    assert "<script" not in preview and "<img" not in preview and "<a " not in preview
    assert '<span class="pv-link">guide</span><span class="pv-href"> (guide.md)</span>' in preview
    assert '<span class="pv-img">image: pixel (http://evil.example/p.png)</span>' in preview
    assert "Not previewed: over the preview cap of 256 KiB: read the diff." in preview


def test_a_real_parked_push_carries_its_pages_for_the_preview(web: Web) -> None:
    parked = web.park(REQUESTER).id
    with sign_in(web, REVIEWER) as client:
        page = client.get(f"/jobs/{parked}").text
    assert '<div class="pv-block pv-changed"><p>Instal the tool with pip:</p>' in page
    assert '<div class="pv-block pv-changed"><p>Install the tool with pip:</p>' in page
