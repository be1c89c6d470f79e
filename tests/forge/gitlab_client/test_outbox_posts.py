"""The outbox posts to GitLab through the built-in client: a parked job's comment lands on
the merge request it came from, not on the issue with the same number (GitLab numbers the
two apart), and the pull request of a landed push is a merge request opened once and
updated after. Real Redis, the fake GitLab held to GitLab's documented shapes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import Settings
from bot.jobs.delivery import deliver_due, landed_pull_request, parked_comment
from bot.store.models import Approval, ApprovalState, JobKind, JobSpec
from bot.store.store import JobStore
from harness.fake_gitlab import FakeGitLab
from harness.redis_server import redis_server
from tests.forge.gitlab_client.conftest import PROJECT


@pytest.fixture
def settings(gitlab: FakeGitLab, token_file: Path) -> Settings:
    forge = {
        "kind": "gitlab",
        "base_url": gitlab.url,
        "token_file": str(token_file),
        "webhook_secret_file": "/nonexistent",
        "bot_login": "riverbeam-bot",
        "repositories": {PROJECT: {"repository": "docs"}},
    }
    return Settings.model_validate(
        {"repositories": {"docs": {"upstream": "/nonexistent"}}, "forges": {"gl": forge}}
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JobStore]:
    with redis_server(tmp_path) as url:
        jobs = JobStore.from_url(url, prefix="rbtest-gitlab-outbox")
        yield jobs
        jobs.client.close()


def _spec(thread: str) -> JobSpec:
    origin = {"name": "gl", "repository": PROJECT, "number": 1, "thread": thread}
    return JobSpec(
        kind=JobKind.AUTHOR,
        repo="docs",
        request="Fix the install page",
        requested_by="gl:ada",
        metadata={"forge": origin},
    )


def _approval(job_id: str) -> Approval:
    return Approval(
        id="9f1c2b3a4d5e6f708192a3b4c5d6e7f8",
        job_id=job_id,
        repo="docs",
        requested_by="gl:ada",
        call_id="call_1",
        tool="git_push",
        arguments={},
        commit_sha="d" * 40,
        target_ref=f"riverbeam/{job_id}",
        diff_stat=" docs/install.md | 2 +-\n",
        state=ApprovalState.APPROVED,
        decided_by="gl:bob",
    )


def test_a_parked_comment_goes_to_the_merge_request_it_came_from(
    gitlab: FakeGitLab, settings: Settings, store: JobStore
) -> None:
    project = gitlab.add_project(PROJECT)
    gitlab.add_issue(project, "Issue one")
    gitlab.add_merge(project, source_branch="docs")
    record = store.create(_spec("pull_request"))
    entry = parked_comment(settings, record.spec, _approval(record.id))
    assert entry is not None
    store.outbox.add(entry)
    [attempt] = deliver_due(store.outbox, settings)
    assert attempt.outcome == "delivered"
    [note] = project.notes.values()
    assert (note.on, note.iid) == ("pull_request", 1)
    assert "/riverbeam approve 9f1c2b3a4d5e6f708192a3b4c5d6e7f8" in note.body


def test_a_landed_push_opens_one_merge_request_and_updates_it(
    gitlab: FakeGitLab, settings: Settings, store: JobStore
) -> None:
    project = gitlab.add_project(PROJECT)
    gitlab.add_issue(project, "Issue one")
    record = store.create(_spec("issue"))
    for _ in range(2):
        entry = landed_pull_request(settings, record, _approval(record.id), "d" * 40)
        assert entry is not None
        store.outbox.add(entry)
        [attempt] = deliver_due(store.outbox, settings)
        assert attempt.outcome == "delivered", attempt.error
    [merge] = project.merges.values()
    assert (merge.source_branch, merge.target_branch) == (f"riverbeam/{record.id}", "main")
    assert "Closes #1" in merge.description
