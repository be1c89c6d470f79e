"""The whole forge flow end to end, through GitHub: real Redis, a real ``riverbeam api``, real
Celery workers and containers, a real bare upstream; the fake GitHub held to
``api.github.com.json`` (every request and reply validated), webhooks from GitHub's
published examples signed with real HMAC. Only the model is scripted (a forge job's kind
picks its playbook, ``harness.playbooks``).

An issue comment asks for a fix → an author job parks, and its status comment on the issue
shows the approval → a reviewer answers ``/riverbeam approve <id>`` → the push lands on the
upstream → the pull request is opened from ``riverbeam/<job-id>`` into ``main`` → a review
job of it posts a review with a line comment and the ``riverbeam/review`` status → a
reviewer's "address the review" → a second park → approved → the same pull request's
branch moves forward as a fast-forward, and the review thread gets a reply."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.store.models import JobKind, JobState
from harness.api_server import ApiServer
from harness.fake_github import FakeGitHub, Pull, Repository
from harness.forges import check_github, encoded, forge_toml, github_example, github_headers
from harness.gitkit import git
from harness.stack import Stack, wait_until
from tests.forge.kit import (
    BOT,
    GITHUB_REPO,
    forge_stack,
    job_ids,
    wait_for_new_job,
    wait_for_text,
    with_has_discussions,
)

pytestmark = pytest.mark.slow

SECRET = "It's a Secret to Everybody"
TOKEN = "github_pat_11AAAAAAA0fake0token0for0the0e2e0run"
ASKER, REVIEWER = "Codertocat", "ada"


@dataclass
class Flow:
    stack: Stack
    api: ApiServer
    github: FakeGitHub
    repository: Repository

    def send(self, event: str, payload: dict[str, Any]) -> None:
        body = encoded(payload)
        answer = httpx.post(
            f"{self.api.url}/webhooks/gh",
            content=body,
            headers=github_headers(SECRET, body, event),
            timeout=30,
        )
        assert answer.status_code == 202, answer.text

    def comment(self, author: str, body: str, *, pull: int | None = None) -> None:
        payload = github_example("issue_comment", "created", 3)  # installation 1
        payload["comment"]["body"] = body
        payload["comment"]["user"]["login"] = payload["sender"]["login"] = author
        if pull is not None:
            payload["issue"]["number"] = pull
            payload["issue"]["pull_request"] = {
                "url": f"https://api.github.com/repos/{GITHUB_REPO}/pulls/{pull}",
                "html_url": f"https://github.com/{GITHUB_REPO}/pull/{pull}",
                "diff_url": f"https://github.com/{GITHUB_REPO}/pull/{pull}.diff",
                "patch_url": f"https://github.com/{GITHUB_REPO}/pull/{pull}.patch",
                "merged_at": None,
            }
        check_github("issue_comment", "created", payload)
        self.send("issue_comment", payload)

    def comments(self, number: int) -> list[str]:
        return [c.body for c in self.repository.comments.values() if c.number == number]


@pytest.fixture(scope="module")
def flow() -> Iterator[Flow]:
    def forge(secrets: Path) -> str:
        (secrets / "webhook").write_text(SECRET + "\n")
        (secrets / "token").write_text(TOKEN + "\n")
        return forge_toml(
            "gh",
            kind="github",
            secret_file=secrets / "webhook",
            bot_login=BOT,
            base_url=github.url,
            token_file=str(secrets / "token"),
            installations=[1],
            repositories={GITHUB_REPO: {"repository": "docs"}},
        )

    with FakeGitHub() as github, forge_stack(forge) as (stack, api):
        github.tokens.add(TOKEN)
        repository = github.add_repository(
            GITHUB_REPO, collaborators={ASKER: "maintain", REVIEWER: "maintain"}, installation=1
        )
        repository.issues[1] = "The install page has typos and a broken link"
        yield Flow(stack, api, github, repository)
        assert github.violations == [], "a request or reply api.github.com.json does not allow"


def _pull_request_event(pull: Pull, head_sha: str) -> dict[str, Any]:
    payload = with_has_discussions(github_example("pull_request", "opened", 1))
    document = payload["pull_request"]
    document["number"] = payload["number"] = pull.number
    document["head"]["ref"], document["head"]["sha"] = pull.head, head_sha
    document["base"]["ref"] = pull.base
    document["user"]["login"] = payload["sender"]["login"] = BOT
    check_github("pull_request", "opened", payload)
    return payload


def test_an_issue_comment_becomes_an_approved_pull_request_reviewed_and_revised(
    flow: Flow,
) -> None:
    stack, repository = flow.stack, flow.repository
    main = stack.upstream_ref("main")

    # 1. The issue comment: an author job, parked; the status comment shows the approval.
    flow.comment(ASKER, "@riverbeam fix the broken links and typos on the install page")
    author = wait_for_new_job(stack.store, set(), JobKind.AUTHOR, JobState.AWAITING_APPROVAL)
    approval = stack.store.approvals.get(author.id)
    assert approval is not None and approval.requested_by == f"gh:{ASKER}"
    status = wait_for_text(lambda: flow.comments(1), f"/riverbeam approve {approval.id}")
    assert f"job `{author.id}`" in status and "docs/install.md" in status
    [status_comment] = [c for c in repository.comments.values() if c.body == status]

    # 2. The asker cannot approve their own push, though their permission would let them
    # decide; a reviewer can, from the thread.
    flow.comment(ASKER, f"/riverbeam approve {approval.id}")
    wait_for_text(lambda: flow.comments(1), "BEM-602")
    flow.comment(REVIEWER, f"/riverbeam approve {approval.id}")
    landed = stack.wait_for(author.id, JobState.SUCCEEDED, timeout=90)
    branch = f"riverbeam/{author.id}"
    first = stack.upstream_ref(branch)
    assert first == approval.commit_sha and stack.upstream_ref("main") == main
    decided = stack.store.approvals.get(author.id)
    assert decided is not None and decided.decided_by == f"gh:{REVIEWER}"
    assert landed.result is not None

    # 3. The pull request, opened once, with the right head, base and body; the status
    # comment is the same comment, edited to say it landed.
    wait_until(lambda: bool(repository.pulls), 60, lambda: "no pull request was opened")
    [pull] = repository.pulls.values()
    assert (pull.head, pull.base) == (branch, "main")
    assert "Closes #1" in pull.body and f"Approved by gh:{REVIEWER}" in pull.body
    wait_for_text(lambda: flow.comments(1), f"Landed commit `{(first or '')[:12]}`")
    assert f"Landed commit `{(first or '')[:12]}`" in repository.comments[status_comment.id].body

    # 4. A review job of the pull request: a line comment where the diff shows the line,
    # and the riverbeam/review status on the commit it reviewed.
    patch = git("-C", str(stack.upstream), "diff", "--unified=3", f"{main}..{first}")
    pull.files = ["docs/install.md"]
    # What GitHub computes of the pull request: its file and the file's patch, hunks only.
    pull.patches = {"docs/install.md": patch[patch.index("@@") :]}
    before = job_ids(stack.store)
    flow.send("pull_request", _pull_request_event(pull, first or ""))
    review = wait_for_new_job(stack.store, before, JobKind.REVIEW, JobState.SUCCEEDED)
    assert review.spec.branch == branch
    wait_until(lambda: bool(repository.reviews), 60, lambda: "no review was posted")
    [posted] = repository.reviews
    assert posted["event"] == "COMMENT" and posted["commit_id"] == first
    assert [(c["path"], c["line"]) for c in posted["comments"]] == [("docs/install.md", 3)]
    wait_until(
        lambda: any(s["state"] == "success" for s in repository.statuses),
        60,
        lambda: f"no success status: {repository.statuses}",
    )
    assert {(s["sha"], s["context"]) for s in repository.statuses} == {(first, "riverbeam/review")}

    # 5. "Address the review": an author job on the pull request's branch, parked, approved,
    # landing as a fast-forward of that branch; the same pull request moves.
    before = job_ids(stack.store)
    flow.comment(ASKER, "@riverbeam address the review", pull=pull.number)
    revision = wait_for_new_job(stack.store, before, JobKind.AUTHOR, JobState.AWAITING_APPROVAL)
    assert revision.spec.branch == branch
    [thread] = [c for c in repository.review_comments.values() if c.in_reply_to is None]
    assert f"on docs/install.md:3: {thread.body}" in revision.spec.request
    second = stack.store.approvals.get(revision.id)
    assert second is not None and second.target_ref == branch
    wait_for_text(lambda: flow.comments(pull.number), f"/riverbeam approve {second.id}")
    flow.comment(REVIEWER, f"/riverbeam approve {second.id}", pull=pull.number)
    stack.wait_for(revision.id, JobState.SUCCEEDED, timeout=90)
    tip = stack.upstream_ref(branch)
    assert tip == second.commit_sha and tip != first
    parent = git("-C", str(stack.upstream), "rev-parse", f"{tip}^")
    assert parent == first, "a fast-forward of the pull request's branch"
    assert list(repository.pulls) == [pull.number], "the same pull request, no second one"
    wait_for_text(lambda: flow.comments(pull.number), "addressed the review")
    # The review thread it was asked to address gets its reply, once.
    wait_until(
        lambda: any(c.in_reply_to == thread.id for c in repository.review_comments.values()),
        60,
        lambda: f"no reply in the review thread: {repository.review_comments}",
    )
    [reply] = [c for c in repository.review_comments.values() if c.in_reply_to == thread.id]
    assert f"commit `{(tip or '')[:12]}`" in reply.body
