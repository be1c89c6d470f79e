"""Commits a job names, resolved in the mirror, and the compare point of a committed change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bot.config import RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from harness.gitkit import commit_all, git, upstream_push, write_files
from sandbox.host.upstream.mirror import sync_mirror
from sandbox.host.workspace.commits import merge_base, resolve_commit
from sandbox.host.workspace.prepare import prepare_workspace
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.worktree import WorkingTree

PIPX = "Install it with pipx.\n"


def _sync(config: RepositoryConfig, settings: WorkspaceSettings) -> Path:
    return sync_mirror("docs", config, settings)


def _rev(upstream: Path, name: str) -> str:
    return git("-C", str(upstream), "rev-parse", name)


@pytest.fixture
def forked(upstream: Path) -> dict[str, str]:
    """docs/fix leaves main with one commit; main then moves on with one of its own."""
    fork = _rev(upstream, "refs/heads/main")
    fix = upstream_push(upstream, "docs/fix", {"docs/install.md": PIPX}, "main")
    moved = upstream_push(upstream, "main", {"README.md": "# Docs, renamed\n"}, "main")
    return {"fork": fork, "fix": fix, "moved": moved}


def _lonely_branch(upstream: Path) -> str:
    """A branch with a history of its own, sharing no commit with main."""
    work = upstream.with_name("lonely-seed")
    git("init", "-q", "--initial-branch=lonely", str(work))
    write_files(work, {"other.md": "Another project.\n"})
    sha = commit_all(work, "Unrelated start")
    git("-C", str(work), "push", "-q", str(upstream), "HEAD:refs/heads/lonely")
    return sha


# -- resolve_commit ----------------------------------------------------------------------


def test_a_branch_resolves_to_its_tip(
    upstream: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    mirror = _sync(repo_config, settings)
    assert resolve_commit(mirror, "main") == _rev(upstream, "refs/heads/main")
    old = _rev(upstream, "refs/heads/docs/old")
    assert resolve_commit(mirror, "docs/old") == old
    assert resolve_commit(mirror, "refs/heads/docs/old") == old


def test_a_commit_id_resolves_in_full_from_any_case_or_a_prefix(
    upstream: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    mirror = _sync(repo_config, settings)
    sha = _rev(upstream, "refs/heads/docs/old")
    for spelling in (sha, sha.upper(), sha[:7], sha[:12]):
        assert resolve_commit(mirror, spelling) == sha, spelling


def test_an_unknown_name_is_bem_341_listing_the_branches(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    mirror = _sync(repo_config, settings)
    for name in ("no/such-branch", "0" * 40, "abcdef0"):
        with pytest.raises(BeamError) as caught:
            resolve_commit(mirror, name)
        assert caught.value.code == "BEM-341", name
        assert repr(name) in caught.value.message
        assert "branches: docs/old, main" in caught.value.message


def test_an_object_that_is_not_a_commit_is_bem_341(
    upstream: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    mirror = _sync(repo_config, settings)
    tree = _rev(upstream, "refs/heads/main^{tree}")
    with pytest.raises(BeamError) as caught:
        resolve_commit(mirror, tree)
    assert caught.value.code == "BEM-341"
    assert "is a tree, not a commit" in caught.value.message


@pytest.mark.parametrize(
    ("name", "code"),
    [("main~1", "BEM-325"), ("HEAD", "BEM-325"), ("-main", "BEM-325"), ("bad name", "BEM-324")],
)
def test_names_no_branch_can_have_are_refused_by_the_ref_rules(
    repo_config: RepositoryConfig, settings: WorkspaceSettings, name: str, code: str
) -> None:
    mirror = _sync(repo_config, settings)
    with pytest.raises(BeamError) as caught:
        resolve_commit(mirror, name)
    assert caught.value.code == code


def test_a_missing_mirror_is_bem_340(settings: WorkspaceSettings) -> None:
    with pytest.raises(BeamError) as caught:
        resolve_commit(settings.mirrors / "never.git", "main")
    assert caught.value.code == "BEM-340"


# -- merge_base --------------------------------------------------------------------------


def test_the_merge_base_is_where_the_branch_left_its_base(
    forked: dict[str, str], repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    mirror = _sync(repo_config, settings)
    assert merge_base(mirror, "docs/fix", "main") == forked["fork"]
    assert merge_base(mirror, "main", "docs/fix") == forked["fork"]
    assert merge_base(mirror, forked["fix"], forked["moved"][:10]) == forked["fork"]
    assert merge_base(mirror, "docs/fix", forked["fork"]) == forked["fork"]


def test_histories_that_never_met_have_no_merge_base(
    upstream: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    lonely = _lonely_branch(upstream)
    mirror = _sync(repo_config, settings)
    with pytest.raises(BeamError) as caught:
        merge_base(mirror, "lonely", "main")
    assert caught.value.code == "BEM-341"
    assert "share no history" in caught.value.message and lonely[:12] in caught.value.message


def test_an_unknown_side_is_bem_341(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    mirror = _sync(repo_config, settings)
    with pytest.raises(BeamError) as caught:
        merge_base(mirror, "docs/gone", "main")
    assert caught.value.code == "BEM-341"


# -- the review set-up, end to end -------------------------------------------------------


def test_a_branch_under_review_shows_only_its_own_change(
    forked: dict[str, str],
    repo_config: RepositoryConfig,
    settings: WorkspaceSettings,
    tmp_path: Path,
) -> None:
    # What the executor does for "review docs/fix against main": the workspace at the
    # branch, the compare point where it left main. main's later commit is not the change.
    workspace = prepare_workspace("job-r", "docs", repo_config, "docs/fix", settings)
    start = merge_base(workspace.mirror, workspace.base_sha, "main")
    assert (workspace.base_sha, start) == (forked["fix"], forked["fork"])

    # A root-owned copy: libgit2 refuses, as git does, a repository another user owns.
    copy = tmp_path / "tree"
    shutil.copytree(workspace.tree, copy, symlinks=True)
    tree = WorkingTree(SandboxRoot(copy), compare_to=start, compare_label="main")
    diff = tree.diff()
    assert [(f.path, f.status) for f in diff.files] == [("docs/install.md", "modified")]
    assert f"+{PIPX}" in diff.patch and "renamed" not in diff.patch
    log = tree.log()
    assert [c.sha for c in log.commits] == [forked["fix"]]
    assert not log.more
    assert WorkingTree(SandboxRoot(copy)).diff().files == []  # a clean checkout: nothing vs HEAD


def test_a_workspace_can_start_at_a_commit_id(
    forked: dict[str, str], repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    # commit-notes for a range A..B: the workspace at B, whichever way B is written.
    for job, base in (("job-a", forked["fix"]), ("job-b", forked["fix"][:8])):
        workspace = prepare_workspace(job, "docs", repo_config, base, settings)
        assert (workspace.base, workspace.base_sha) == (base, forked["fix"])
        assert (workspace.tree / "docs" / "install.md").read_text() == PIPX
