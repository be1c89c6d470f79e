"""Per-job workspaces: branch and base, ownership, origin, and nothing secret inside."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from bot.config import RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from harness.gitkit import git, sandbox_push, walk_files
from sandbox.host.workspace.prepare import (
    CONTAINER_OUTBOX,
    FINISHED,
    SANDBOX_UID,
    open_workspace,
    prepare_workspace,
    release_workspace,
)
from tests.workspace.conftest import assert_secret_absent


def _outbox_refs(outbox: Path) -> dict[str, str]:
    # The outbox belongs to the sandbox uid: libgit2 and git refuse to open it as root.
    listing = git(
        "-C", str(outbox), "for-each-ref", "--format=%(refname) %(objectname)", sandbox=True
    )
    return dict(line.split(" ") for line in listing.splitlines())


def test_the_tree_is_on_the_job_branch_at_the_default_base(
    upstream: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("job-1", "docs", repo_config, None, settings)

    main = git("-C", str(upstream), "rev-parse", "refs/heads/main")
    assert (workspace.branch, workspace.base, workspace.base_sha) == (
        "riverbeam/job-1",
        "main",
        main,
    )
    assert workspace.tree == settings.root / "job-1" / "tree"
    assert workspace.outbox == settings.root / "job-1" / "outbox.git"
    assert (workspace.tree / ".git" / "HEAD").read_text() == "ref: refs/heads/riverbeam/job-1\n"
    assert (workspace.tree / "docs" / "install.md").read_text() == "Install it with pip.\n"
    status = git("-C", str(workspace.tree), "status", "--porcelain", sandbox=True)
    assert status == ""
    assert git("-C", str(workspace.tree), "rev-parse", "HEAD", sandbox=True) == main


def test_a_requested_base_is_used(
    upstream: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("job-2", "docs", repo_config, "docs/old", settings)

    assert workspace.base == "docs/old"
    assert workspace.base_sha == git("-C", str(upstream), "rev-parse", "refs/heads/docs/old")
    assert (workspace.tree / "docs" / "install.md").read_text() == "Install it.\n"


def test_a_missing_base_is_bem_341_and_leaves_nothing_behind(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    with pytest.raises(BeamError) as caught:
        prepare_workspace("job-3", "docs", repo_config, "no/such-branch", settings)

    assert caught.value.code == "BEM-341"
    assert "no/such-branch" in caught.value.message and "main" in caught.value.message
    assert os.listdir(settings.root) == []


def test_a_job_revising_a_branch_of_riverbeams_is_on_it_at_its_head(
    upstream: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    tip = git("-C", str(upstream), "rev-parse", "refs/heads/main")
    git("-C", str(upstream), "update-ref", "refs/heads/riverbeam/job-1", tip)
    workspace = prepare_workspace(
        "job-7", "docs", repo_config, "riverbeam/job-1", settings, revises="riverbeam/job-1"
    )
    assert (workspace.branch, workspace.base_sha) == ("riverbeam/job-1", tip)
    assert (workspace.tree / ".git" / "HEAD").read_text() == "ref: refs/heads/riverbeam/job-1\n"
    assert _outbox_refs(workspace.outbox)["refs/heads/riverbeam/job-1"] == tip


@pytest.mark.parametrize("branch", ["main", "docs/old", "riverbeam/"])
def test_a_job_may_revise_no_branch_but_riverbeams_own(
    branch: str, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    with pytest.raises(BeamError) as caught:
        prepare_workspace("job-8", "docs", repo_config, branch, settings, revises=branch)
    assert caught.value.code == "BEM-328" and repr(branch) in caught.value.message
    assert not (settings.root / "job-8").exists()


def test_the_outbox_is_origin_and_starts_at_the_base(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("job-4", "docs", repo_config, None, settings)

    config = (workspace.tree / ".git" / "config").read_text()
    assert git(
        "config", "--file", str(workspace.tree / ".git" / "config"), "remote.origin.url"
    ) == (CONTAINER_OUTBOX)
    assert '[remote "origin"]' in config and config.count("url =") == 1
    assert (
        git("-C", str(workspace.outbox), "rev-parse", "--is-bare-repository", sandbox=True)
        == "true"
    )
    assert _outbox_refs(workspace.outbox) == {"refs/heads/riverbeam/job-4": workspace.base_sha}
    tree_refs = git("-C", str(workspace.tree), "for-each-ref", "--format=%(refname)", sandbox=True)
    assert tree_refs.splitlines() == [
        "refs/heads/riverbeam/job-4",
        "refs/remotes/origin/riverbeam/job-4",
    ]


def test_the_mount_point_matches_the_container_layout() -> None:
    from sandbox.host.container.hardening import OUTBOX_MOUNT

    assert CONTAINER_OUTBOX == OUTBOX_MOUNT


def test_everything_belongs_to_the_sandbox_uid_but_the_shared_objects(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("job-5", "docs", repo_config, None, settings)

    for top, objects in (
        (workspace.tree, workspace.tree / ".git" / "objects"),
        (workspace.outbox, workspace.outbox / "objects"),
    ):
        assert top.stat().st_uid == SANDBOX_UID
        for directory, dirs, files in os.walk(top):
            for name in dirs:
                assert Path(directory, name).lstat().st_uid == SANDBOX_UID
            for name in files:
                info = Path(directory, name).lstat()
                if Path(directory).is_relative_to(objects):
                    # Shared with the mirror: worker-owned and read-only, so never writable.
                    assert info.st_uid == os.geteuid()
                    assert stat.S_IMODE(info.st_mode) & 0o222 == 0
                else:
                    assert (info.st_uid, info.st_gid) == (SANDBOX_UID, SANDBOX_UID), name
    # The job directory itself stays the worker's: the container never sees it.
    assert (settings.root / "job-5").stat().st_uid == os.geteuid()


def test_the_sandbox_can_commit_and_push_but_not_touch_the_mirror_objects(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("job-6", "docs", repo_config, None, settings)

    sha = sandbox_push(workspace, {"docs/new.md": "New page.\n"})

    assert _outbox_refs(workspace.outbox) == {"refs/heads/riverbeam/job-6": sha}
    pack = next((workspace.tree / ".git" / "objects" / "pack").glob("*.pack"))
    for script in ('echo tampered >> "$1"', 'chmod 666 "$1"', 'truncate -s 0 "$1"'):
        result = subprocess.run(
            ["/bin/sh", "-c", script, "sh", str(pack)],
            user=SANDBOX_UID,
            group=SANDBOX_UID,
            extra_groups=[],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode != 0, script
        assert "denied" in result.stderr or "not permitted" in result.stderr, result.stderr
    mirror_pack = next((workspace.mirror / "objects" / "pack").glob("*.pack"))
    assert mirror_pack.stat().st_ino == pack.stat().st_ino  # linked, not copied


def test_no_credential_upstream_url_or_hook_is_in_the_workspace(
    upstream: Path, token: str, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("job-7", "docs", repo_config, None, settings)

    assert_secret_absent(token, settings.root, settings.mirrors)
    assert_secret_absent(str(upstream), settings.root)
    assert_secret_absent(str(settings.mirrors), workspace.tree, workspace.outbox)
    for gitdir in (workspace.tree / ".git", workspace.outbox):
        assert not (gitdir / "hooks").exists()
        assert not (gitdir / "objects" / "info" / "alternates").exists()
    tree_metadata = sorted(p.name for p in (workspace.tree / ".git").iterdir())
    # A view's branch is written as files: no reflog until the job's first commit.
    logs = [] if workspace.view_of else ["logs"]
    assert tree_metadata == ["HEAD", "config", "index", *logs, "objects", "refs"]
    assert sorted(p.name for p in workspace.outbox.iterdir()) == [
        "HEAD",
        "config",
        "objects",
        "refs",
    ]
    assert not any(p.is_symlink() for p in walk_files(settings.root))


def test_open_and_release(repo_config: RepositoryConfig, settings: WorkspaceSettings) -> None:
    workspace = prepare_workspace("job-8", "docs", repo_config, None, settings)

    assert open_workspace("job-8", settings) == workspace
    release_workspace("job-8", settings)
    release_workspace("job-8", settings)
    assert (settings.root / "job-8" / FINISHED).is_file()
    with pytest.raises(BeamError) as caught:
        open_workspace("job-9", settings)
    assert caught.value.code == "BEM-342"


def test_a_second_prepare_for_the_same_job_is_refused(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    prepare_workspace("job-10", "docs", repo_config, None, settings)

    with pytest.raises(BeamError) as caught:
        prepare_workspace("job-10", "docs", repo_config, None, settings)
    assert caught.value.code == "BEM-342"


@pytest.mark.parametrize("job_id", ["", "../escape", "a/b", ".hidden", "x" * 101, "a..b", "-rf"])
def test_job_ids_that_cannot_name_a_directory_are_refused(
    job_id: str, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    with pytest.raises(BeamError) as caught:
        prepare_workspace(job_id, "docs", repo_config, None, settings)
    assert caught.value.code == "BEM-342"
    assert not settings.root.exists() or os.listdir(settings.root) == []


def test_a_prefix_that_lands_on_a_protected_ref_is_refused(
    repo_config: RepositoryConfig, base_dir: Path
) -> None:
    settings = WorkspaceSettings(
        root=base_dir / "w", mirrors=base_dir / "m", branch_prefix="release/"
    )
    with pytest.raises(BeamError) as caught:
        prepare_workspace("job-11", "docs", repo_config, None, settings)
    assert caught.value.code == "BEM-328"
