"""The whole forge flow end to end, through GitLab: real Redis, a real ``riverbeam api``, real
Celery workers and containers, a real bare upstream; the fake GitLab held to the shapes of
GitLab's API documentation, webhooks from GitLab's documented payloads
(https://docs.gitlab.com/user/project/integrations/webhook_events/) with their token. Only
the model is scripted.

A note on an issue asks for a fix → an author job parks, and its status note on the issue
shows the approval → a maintainer answers ``/riverbeam approve <id>`` → the push lands on
the upstream → the merge request is opened from ``riverbeam/<job-id>`` into ``main`` → a
review job of it posts a diff note on the changed line and the ``riverbeam/review`` commit
status → "address the review" → a second park → approved → the same merge request's branch
moves forward as a fast-forward, and the diff thread gets a reply."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.store.models import JobKind, JobState
from harness.api_server import ApiServer
from harness.fake_gitlab import BOT, FakeGitLab, Merge, Project
from harness.forges import encoded, forge_toml, gitlab_headers
from harness.gitkit import git
from harness.stack import Stack, wait_until
from tests.forge.kit import (
    forge_stack,
    gitlab_payload,
    job_ids,
    wait_for_new_job,
    wait_for_text,
)

pytestmark = pytest.mark.slow

SECRET = "gitlab-webhook-token-for-the-e2e-run"
TOKEN = "glpat-fake0token0for0the0e2e0run"
PROJECT = "gitlab-org/gitlab-test"  # the project of GitLab's documented note payloads
ISSUE = 17  # the issue of GitLab's documented note on an issue
ASKER, REVIEWER = "alice", "bob"
MAINTAINER = 40


@dataclass
class Flow:
    stack: Stack
    api: ApiServer
    gitlab: FakeGitLab
    project: Project

    def send(self, event: str, payload: dict[str, Any]) -> None:
        answer = httpx.post(
            f"{self.api.url}/webhooks/gl",
            content=encoded(payload),
            headers=gitlab_headers(SECRET, event),
            timeout=30,
        )
        assert answer.status_code == 202, answer.text

    def note(self, author: str, body: str, *, merge: Merge | None = None) -> None:
        payload = gitlab_payload("note-issue" if merge is None else "note-merge-request")
        payload["user"]["username"] = author
        payload["object_attributes"]["note"] = body
        if merge is not None:
            payload["merge_request"].update(
                iid=merge.iid, source_branch=merge.source_branch, target_branch="main"
            )
        self.send("Note Hook", payload)

    def notes(self, on: str, iid: int) -> list[str]:
        return [n.body for n in self.project.notes.values() if (n.on, n.iid) == (on, iid)]


@pytest.fixture(scope="module")
def flow() -> Iterator[Flow]:
    def forge(secrets: Path) -> str:
        (secrets / "webhook").write_text(SECRET)
        (secrets / "token").write_text(TOKEN + "\n")
        return forge_toml(
            "gl",
            kind="gitlab",
            secret_file=secrets / "webhook",
            bot_login=BOT,
            base_url=gitlab.url,
            token_file=str(secrets / "token"),
            repositories={PROJECT: {"repository": "docs"}},
        )

    with FakeGitLab() as gitlab, forge_stack(forge) as (stack, api):
        gitlab.tokens.add(TOKEN)
        project = gitlab.add_project(PROJECT, members={ASKER: MAINTAINER, REVIEWER: MAINTAINER})
        project.issues[ISSUE] = "The install page has typos and a broken link"
        yield Flow(stack, api, gitlab, project)
        assert gitlab.violations == [], "a request or reply GitLab's documentation does not allow"


def _merge_request_event(flow: Flow, merge: Merge) -> dict[str, Any]:
    payload = gitlab_payload("merge-request")
    payload["project"] = gitlab_payload("note-issue")["project"]
    payload["user"]["username"] = BOT
    attributes = payload["object_attributes"]
    attributes.update(
        iid=merge.iid,
        source_branch=merge.source_branch,
        target_branch=merge.target_branch,
        source_project_id=flow.project.id,
        target_project_id=flow.project.id,
        action="open",
    )
    attributes["last_commit"]["id"] = merge.sha
    return payload


def test_a_note_on_an_issue_becomes_an_approved_merge_request_reviewed_and_revised(
    flow: Flow,
) -> None:
    stack, project = flow.stack, flow.project
    main = stack.upstream_ref("main")

    # 1. The note: an author job, parked; its status note on the issue shows the approval.
    flow.note(ASKER, "@riverbeam fix the broken links and typos on the install page")
    author = wait_for_new_job(stack.store, set(), JobKind.AUTHOR, JobState.AWAITING_APPROVAL)
    approval = stack.store.approvals.get(author.id)
    assert approval is not None and approval.requested_by == f"gl:{ASKER}"
    on_issue = lambda: flow.notes("issue", ISSUE)  # noqa: E731
    status = wait_for_text(on_issue, f"/riverbeam approve {approval.id}")
    [status_note] = [n for n in project.notes.values() if n.body == status]

    # 2. The asker's own approve is refused; the reviewer's lands the push.
    flow.note(ASKER, f"/riverbeam approve {approval.id}")
    wait_for_text(on_issue, "BEM-602")
    flow.note(REVIEWER, f"/riverbeam approve {approval.id}")
    stack.wait_for(author.id, JobState.SUCCEEDED, timeout=90)
    branch = f"riverbeam/{author.id}"
    first = stack.upstream_ref(branch)
    assert first == approval.commit_sha and stack.upstream_ref("main") == main

    # 3. The merge request, opened once from the job's branch; the status note, edited.
    wait_until(lambda: bool(project.merges), 60, lambda: "no merge request was opened")
    [merge] = project.merges.values()
    assert (merge.source_branch, merge.target_branch) == (branch, "main")
    assert f"Closes #{ISSUE}" in merge.description
    wait_for_text(on_issue, f"Landed commit `{(first or '')[:12]}`")
    assert "Landed commit" in project.notes[status_note.id].body

    # 4. What GitLab works out of the merge request (its head, its diff); then its review.
    patch = git("-C", str(stack.upstream), "diff", "--unified=3", f"{main}..{first}")
    merge.sha, merge.files = first or "", [("docs/install.md", "docs/install.md")]
    merge.diffs = {"docs/install.md": patch[patch.index("@@") :]}
    before = job_ids(stack.store)
    flow.send("Merge Request Hook", _merge_request_event(flow, merge))
    review = wait_for_new_job(stack.store, before, JobKind.REVIEW, JobState.SUCCEEDED)
    assert review.spec.branch == branch

    def diff_notes() -> list[int]:
        return [n.position["new_line"] for n in project.notes.values() if n.position]

    wait_until(lambda: bool(diff_notes()), 60, lambda: "no diff note was posted")
    assert diff_notes() == [3]
    wait_until(
        lambda: any(s["state"] == "success" for s in project.statuses),
        60,
        lambda: f"no success status: {project.statuses}",
    )
    assert {(s["sha"], s["name"]) for s in project.statuses} == {(first, "riverbeam/review")}

    # 5. "Address the review" on the merge request: a second park, approved, landing as a
    # fast-forward of its branch; no second merge request.
    before = job_ids(stack.store)
    flow.note(ASKER, "@riverbeam address the review", merge=merge)
    revision = wait_for_new_job(stack.store, before, JobKind.AUTHOR, JobState.AWAITING_APPROVAL)
    assert revision.spec.branch == branch
    [thread] = [n for n in project.notes.values() if n.position]
    assert f"on docs/install.md:3: {thread.body}" in revision.spec.request
    second = stack.store.approvals.get(revision.id)
    assert second is not None and second.target_ref == branch
    on_merge = lambda: flow.notes("pull_request", merge.iid)  # noqa: E731
    wait_for_text(on_merge, f"/riverbeam approve {second.id}")
    flow.note(REVIEWER, f"/riverbeam approve {second.id}", merge=merge)
    stack.wait_for(revision.id, JobState.SUCCEEDED, timeout=90)
    tip = stack.upstream_ref(branch)
    assert tip == second.commit_sha and tip != first
    assert git("-C", str(stack.upstream), "rev-parse", f"{tip}^") == first
    assert list(project.merges) == [merge.iid]
    wait_for_text(on_merge, "addressed the review")

    # The diff thread it was asked to address gets its reply, once.
    def replies() -> list[str]:
        return [
            n.body
            for n in project.notes.values()
            if n.discussion == thread.discussion and n.id != thread.id
        ]

    wait_until(lambda: bool(replies()), 60, lambda: "no reply in the diff thread")
    [reply] = replies()
    assert f"commit `{(tip or '')[:12]}`" in reply
