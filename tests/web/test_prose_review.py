"""A docs change read as prose, on the real API server: the approval page and the job page
mark the words a changed line pair changed, name spacing-only and rewrap-only pairs, fold
long unchanged stretches, and the API's approval document carries the same word changes."""

from __future__ import annotations

import httpx
import pytest

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


@pytest.fixture(scope="module")
def prose_job(web: Web) -> str:
    """A job parked on a prose change. It is stored, never queued."""
    store = web.stack.store
    record = store.create(
        JobSpec(kind=JobKind.AUTHOR, repo=REPO, request="Fix typos", requested_by=REQUESTER)
    )
    store.open_approval(
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
        )
    )
    return record.id


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
