"""The outbox posts to GitLab through the built-in client: a job's status note lands on
the merge request it came from, not on the issue with the same number (GitLab numbers the
two apart), and the pull request of a landed push is a merge request opened once and
updated after. Real Redis, the fake GitLab held to GitLab's documented shapes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import Settings
from bot.jobs.delivery import deliver_due
from bot.jobs.forge_posts import landed_pull_request
from bot.store.models import (
    Approval,
    ApprovalState,
    Finding,
    JobKind,
    JobResult,
    JobSpec,
    JobState,
    ReviewOutcome,
)
from bot.store.store import JobStore
from harness.fake_gitlab import FakeGitLab
from harness.redis_server import redis_server
from tests.forge.gitlab_client.conftest import PROJECT
from tests.forge.kit import push_approval


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
        jobs.gateway.client.close()


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
    return push_approval(job_id, "gl:ada", state=ApprovalState.APPROVED, decided_by="gl:bob")


def test_the_status_comment_is_one_note_on_the_merge_request_it_came_from(
    gitlab: FakeGitLab, settings: Settings, store: JobStore
) -> None:
    project = gitlab.add_project(PROJECT)
    gitlab.add_issue(project, "Issue one")
    gitlab.add_merge(project, source_branch="docs")
    record = store.jobs.create(_spec("pull_request"))
    [attempt] = deliver_due(store, settings)
    assert attempt.outcome == "delivered", attempt.error
    pending = _approval(record.id).model_copy(update={"state": ApprovalState.PENDING})
    assert store.jobs.claim(record.id, worker="w1", lease_seconds=60) is not None
    assert store.jobs.park(pending, owner="w1", run_state="{}", snapshot=None) is not None
    [attempt] = deliver_due(store, settings)
    assert attempt.outcome == "delivered", attempt.error
    [note] = project.notes.values()
    assert (note.on, note.iid) == ("pull_request", 1)
    assert "/riverbeam approve 9f1c2b3a4d5e6f708192a3b4c5d6e7f8" in note.body


def test_a_review_job_s_findings_become_diff_notes_on_the_lines_the_diff_shows(
    gitlab: FakeGitLab, settings: Settings, store: JobStore
) -> None:
    project = gitlab.add_project(PROJECT)
    merge = gitlab.add_merge(project, source_branch="docs", files=["docs/install.md"])
    merge.diffs["docs/install.md"] = "@@ -4,2 +4,2 @@\n same\n-installr\n+installer\n"
    origin = {"name": "gl", "repository": PROJECT, "number": merge.iid, "thread": "pull_request"}
    spec = JobSpec(
        kind=JobKind.REVIEW,
        repo="docs",
        branch="docs",
        requested_by="gl:ada",
        metadata={"forge": {**origin, "head_sha": merge.sha}},
    )
    record = store.jobs.create(spec)
    store.jobs.claim(record.id, worker="w1", lease_seconds=60)
    findings = [
        Finding(path="docs/install.md", line=5, note="Typo"),
        Finding(path="docs/install.md", line=90, note="Not in the diff"),
    ]
    outcome = ReviewOutcome(
        branch="docs", commit_sha=merge.sha, verdict="approve_with_suggestions", findings=findings
    )
    store.jobs.transition(
        record.id,
        JobState.SUCCEEDED,
        from_states=[JobState.RUNNING],
        result=JobResult(outcome=outcome),
    )
    attempts = deliver_due(store, settings)
    assert all(a.outcome == "delivered" for a in attempts), [a.error for a in attempts]
    diff_notes = [n for n in project.notes.values() if n.position is not None]
    assert [n.position["new_line"] for n in diff_notes if n.position] == [5]
    assert any("docs/install.md:90" in n.body for n in project.notes.values())
    assert project.statuses[-1]["state"] == "success"


def test_a_landed_push_opens_one_merge_request_and_updates_it(
    gitlab: FakeGitLab, settings: Settings, store: JobStore
) -> None:
    project = gitlab.add_project(PROJECT)
    gitlab.add_issue(project, "Issue one")
    record = store.jobs.create(_spec("issue"))
    [status] = deliver_due(store, settings)
    assert status.entry.channel == "forge_status"
    for _ in range(2):
        entry = landed_pull_request(settings, record, _approval(record.id), "d" * 40)
        assert entry is not None
        store.outbox.add(entry)
        [attempt] = deliver_due(store, settings)
        assert attempt.outcome == "delivered", attempt.error
    [merge] = project.merges.values()
    assert (merge.source_branch, merge.target_branch) == (f"riverbeam/{record.id}", "main")
    assert "Closes #1" in merge.description
