"""Parking and outcomes on real repositories: a prepared workspace whose tree the sandbox uid
commits in, read back by the host as the executor reads it (no container needed)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import JsonValue

from bot.config import RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from bot.core.frames import ErrorInfo, PendingCall, ToolCallRecord
from bot.core.input import AgentInput
from bot.jobs.branch_change import branch_tip, read_change
from bot.jobs.commit_notes import MAX_SUBJECT_CHARS, parse_commit_message
from bot.jobs.kinds import tree_plan
from bot.jobs.kinds.author_job import author_outcome, pushed_sha
from bot.jobs.kinds.commit_notes_job import commit_notes_outcome
from bot.jobs.outcomes import ended_refused
from bot.jobs.parking import PushTarget, approval_for, check_still_bound
from bot.runner.state import CallDecision, RunState
from bot.store.models import Approval, CommitInfo, JobKind, JobRecord, JobSpec
from harness.gitkit import commit_all, git, traversable_dir
from harness.playbooks import FIXED_INSTALL, SEED_PAGES, seed_upstream
from sandbox.host.workspace.prepare import Workspace, prepare_workspace

PROTECTED = ("main", "release/*")


@pytest.fixture
def base_dir() -> Iterator[Path]:
    with traversable_dir("riverbeam-park-test-") as path:
        yield path


@pytest.fixture
def workspace(base_dir: Path) -> Workspace:
    upstream = seed_upstream(base_dir / "upstream.git")
    settings = WorkspaceSettings(root=base_dir / "ws", mirrors=base_dir / "mirrors")
    repo = RepositoryConfig(upstream=str(upstream), protected_refs=PROTECTED)
    return prepare_workspace("job1", "docs", repo, None, settings)


def _record() -> JobRecord:
    spec = JobSpec(kind=JobKind.AUTHOR, repo="docs", request="Fix", requested_by="ann")
    return JobRecord(id="job1", spec=spec)


def _target(workspace: Workspace, max_chars: int = 10_000) -> PushTarget:
    return PushTarget(
        workspace=workspace,
        base_sha=workspace.base_sha,
        protected_refs=PROTECTED,
        diff_max_chars=max_chars,
    )


def _commit(workspace: Workspace, files: dict[str, str], message: str) -> str:
    """What the container's write_file, git_add and git_commit do, as the sandbox uid."""
    for name, body in files.items():
        (workspace.tree / name).write_text(body)
    git("-C", str(workspace.tree), "config", "user.name", "Agent", sandbox=True)
    git("-C", str(workspace.tree), "config", "user.email", "agent@example.com", sandbox=True)
    return commit_all(workspace.tree, message, sandbox=True)


def _push(ref: str | None = None) -> PendingCall:
    return PendingCall(id="call_1", tool="git_push", arguments={} if ref is None else {"ref": ref})


def test_a_push_parks_bound_to_commit_branch_and_diff(workspace: Workspace) -> None:
    sha = _commit(workspace, {"docs/install.md": FIXED_INSTALL}, "Fix the install page")
    approval = approval_for(_record(), _push(), _target(workspace))
    assert isinstance(approval, Approval)
    full = read_change(workspace.tree, workspace.base_sha, sha, max_chars=1 << 20)
    assert approval.model_dump(include={"tool", "call_id", "arguments", "requested_by"}) == {
        "tool": "git_push",
        "call_id": "call_1",
        "arguments": {},
        "requested_by": "ann",
    }
    assert (approval.commit_sha, approval.target_ref) == (sha, "riverbeam/job1")
    assert approval.base_sha == workspace.base_sha
    assert approval.diff_digest == hashlib.sha256(full.patch.encode()).hexdigest()
    assert "+Install the tool with pip:" in approval.diff
    assert "-Instal the tool with pip:" in approval.diff
    assert "docs/install.md" in approval.diff_stat
    assert full.commits == [CommitInfo(sha=sha, subject="Fix the install page")]
    assert full.files == ["docs/install.md"]
    check_still_bound(approval, workspace)


def test_a_long_diff_is_cut_for_people_but_digested_whole(workspace: Workspace) -> None:
    _commit(workspace, {"docs/install.md": FIXED_INSTALL * 50}, "Grow the page")
    approval = approval_for(_record(), _push(), _target(workspace, max_chars=200))
    assert isinstance(approval, Approval)
    assert approval.diff.startswith("diff --git")
    assert "[diff cut at 200 characters; the digest covers all]" in approval.diff
    assert len(approval.diff) < 300


@pytest.mark.parametrize(
    ("ref", "code"),
    [("main", "BEM-328"), ("Release/2", "BEM-328"), ("-f", "BEM-325"), ("other", "BEM-326")],
)
def test_policy_refuses_pushes_that_could_never_land(
    workspace: Workspace, ref: str, code: str
) -> None:
    _commit(workspace, {"docs/install.md": FIXED_INSTALL}, "Fix")
    verdict = approval_for(_record(), _push(ref), _target(workspace))
    assert isinstance(verdict, CallDecision)
    assert (verdict.approved, verdict.decided_by, verdict.call_id) == (False, "policy", "call_1")
    assert verdict.comment.startswith(f"{code}: ")


def test_policy_refuses_a_push_with_nothing_committed(workspace: Workspace) -> None:
    verdict = approval_for(_record(), _push(), _target(workspace))
    assert isinstance(verdict, CallDecision)
    assert verdict.comment.startswith("BEM-321: ")


def test_other_parked_calls_are_bound_to_tool_and_arguments(workspace: Workspace) -> None:
    call = PendingCall(id="c9", tool="publish_docset", arguments={"ref": "docs-live"})
    approval = approval_for(_record(), call, None)
    assert isinstance(approval, Approval)
    assert (approval.tool, approval.arguments, approval.commit_sha) == (
        "publish_docset",
        {"ref": "docs-live"},
        None,
    )


def test_a_tree_that_moved_since_approval_is_bem_603(workspace: Workspace) -> None:
    _commit(workspace, {"docs/install.md": FIXED_INSTALL}, "Fix")
    approval = approval_for(_record(), _push(), _target(workspace))
    assert isinstance(approval, Approval)
    _commit(workspace, {"docs/index.md": "# Changed\n"}, "Sneak in another change")
    with pytest.raises(BeamError) as caught:
        check_still_bound(approval, workspace)
    assert caught.value.code == "BEM-603"
    tampered = approval.model_copy(update={"diff_digest": "0" * 64})
    with pytest.raises(BeamError):
        check_still_bound(tampered, workspace)


def test_the_host_reads_the_tree_as_data(workspace: Workspace) -> None:
    assert branch_tip(workspace.tree, workspace.branch) == workspace.base_sha
    assert branch_tip(workspace.tree, "no-such-branch") is None
    with pytest.raises(BeamError) as caught:
        read_change(workspace.tree, workspace.base_sha, "f" * 40, max_chars=10)
    assert caught.value.code == "BEM-502"


# -- outcomes --------------------------------------------------------------------------------


def _record_of(
    name: str, *, ok: bool = True, result: JsonValue = None, code: str = ""
) -> ToolCallRecord:
    error = None if ok else ErrorInfo(code=code, message="no")
    return ToolCallRecord(id="c", name=name, arguments={}, ok=ok, result=result, error=error)


def _state(records: list[ToolCallRecord], decisions: list[CallDecision]) -> RunState:
    return RunState(
        agent="author",
        tools=[],
        tools_digest="",
        input=AgentInput.of_text("x"),
        messages=[],
        records=records,
        decisions=decisions,
    )


def test_a_run_ends_refused_only_when_no_push_followed_the_refusal() -> None:
    refused = CallDecision(call_id="c", approved=False, decided_by="rev")
    approved = CallDecision(call_id="c", approved=True, decided_by="rev")
    refusal = _record_of("git_push", ok=False, code="BEM-094")
    push = _record_of("git_push", result={"upstream": {"sha": "a" * 40}})
    assert ended_refused(_state([refusal], [refused]))
    assert not ended_refused(_state([refusal, push], [refused]))
    assert not ended_refused(_state([push], [approved]))
    assert not ended_refused(_state([], []))
    assert pushed_sha([push, refusal]) == "a" * 40
    assert pushed_sha([refusal]) is None


def test_author_outcome_lists_the_commits_since_base(workspace: Workspace) -> None:
    first = _commit(workspace, {"docs/install.md": FIXED_INSTALL}, "Fix the install page")
    second = _commit(workspace, {"docs/index.md": "# Docs\n"}, "Shorten the index\n\nWhy.")
    push = _record_of("git_push", result={"upstream": {"sha": second}})
    outcome = author_outcome(workspace, workspace.base_sha, [push], max_chars=100)
    assert outcome.branch == "riverbeam/job1"
    assert outcome.pushed_sha == second
    assert [commit.model_dump() for commit in outcome.commits] == [
        {"sha": first, "subject": "Fix the install page"},
        {"sha": second, "subject": "Shorten the index"},
    ]
    assert "2 files changed" in outcome.diff_stat
    # Nothing beyond the base and nothing pushed: an outcome with no commits.
    untouched = author_outcome(workspace, second, [], max_chars=100)
    assert (untouched.commits, untouched.diff_stat, untouched.pushed_sha) == ([], "", None)


def test_commit_notes_parse_the_fenced_draft() -> None:
    answer = "Here it is:\n\n```text\nClarify proxy settings\n\nReaders missed it.\nSee #3.\n```\n"
    message = parse_commit_message(answer + "Check the link.")
    assert (message.subject, message.body) == (
        "Clarify proxy settings",
        "Readers missed it.\nSee #3.",
    )
    assert not message.subject_truncated
    plain = parse_commit_message("Fix typos\n\nBody text")
    assert (plain.subject, plain.body) == ("Fix typos", "Body text")
    assert parse_commit_message("") == parse_commit_message("```\n\n```")


def test_a_long_subject_is_cut_at_a_word_boundary_and_says_so() -> None:
    subject = "Explain " + "very " * 20 + "carefully how the installer works"
    message = parse_commit_message(subject + "\n\nbody")
    assert message.subject_truncated
    assert len(message.subject) <= MAX_SUBJECT_CHARS
    assert subject.startswith(message.subject) and subject[len(message.subject)] == " "
    one_word = parse_commit_message("x" * 100)
    assert one_word.subject == "x" * MAX_SUBJECT_CHARS and one_word.subject_truncated


def test_commit_notes_outcome_names_the_range() -> None:
    repo = RepositoryConfig(upstream="/nowhere")
    spec = JobSpec(kind=JobKind.COMMIT_NOTES, repo="docs", range="v1..v2")
    plan = tree_plan(spec, repo)
    assert plan is not None and (plan.checkout, plan.compare, plan.merge) == ("v2", "v1", False)
    outcome = commit_notes_outcome(spec, plan, "Subject\n\nBody")
    assert (outcome.range, outcome.subject, outcome.body) == ("v1..v2", "Subject", "Body")
    by_branch = JobSpec(kind=JobKind.COMMIT_NOTES, repo="docs", branch="docs/x")
    branch_plan = tree_plan(by_branch, repo)
    assert branch_plan is not None
    assert commit_notes_outcome(by_branch, branch_plan, "S").range == "main..docs/x"


def test_seed_pages_are_what_the_playbooks_expect(workspace: Workspace) -> None:
    for name, body in SEED_PAGES.items():
        assert (workspace.tree / name).read_text() == body
