"""Job trees as views of one base per commit: what a job does in its view stays its own.

Every case acts as the sandbox uid, as the container does, through the view's path on the
host (the container binds that same mount at /workspace).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from bot.config import RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from harness.gitkit import git, upstream_push
from sandbox.host.workspace.bases import BASE_GRACE, base_directory
from sandbox.host.workspace.overlay import is_mounted, unmount_view
from sandbox.host.workspace.prepare import (
    SANDBOX_UID,
    Workspace,
    open_workspace,
    prepare_workspace,
    release_workspace,
    remove_workspace,
)
from sandbox.host.workspace.retention import collect_workspaces
from tests.workspace.conftest import bases_named


@pytest.fixture
def views(base_dir: Path) -> WorkspaceSettings:
    # Always, not auto: a worker that cannot make a view fails the test (BEM-342).
    return WorkspaceSettings(
        root=base_dir / "workspaces", mirrors=base_dir / "mirrors", views="always"
    )


def view(job_id: str, repo_config: RepositoryConfig, views: WorkspaceSettings) -> Workspace:
    """A job's workspace, which must be a view."""
    workspace = prepare_workspace(job_id, "docs", repo_config, None, views)
    assert workspace.view_of is not None
    return workspace


def as_sandbox(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        user=SANDBOX_UID,
        group=SANDBOX_UID,
        extra_groups=[],
        env={"HOME": "/tmp", "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=False,
    )


def digest(top: Path) -> dict[str, str]:
    """Every entry under ``top``: a file's bytes, a link's target, a directory's mode."""
    found = {}
    for directory, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            path = Path(directory, name)
            info = path.lstat()
            if path.is_symlink():
                found[str(path.relative_to(top))] = "-> " + os.readlink(path)
            elif path.is_file():
                found[str(path.relative_to(top))] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[str(path.relative_to(top))] = oct(info.st_mode)
    return found


def test_two_jobs_on_one_commit_share_a_base_and_see_nothing_of_each_other(
    repo_config: RepositoryConfig, views: WorkspaceSettings
) -> None:
    gone = {"docs/gone.md": "Job A deletes it.\n"}
    upstream_push(Path(repo_config.upstream), "main", gone, "main")
    first = prepare_workspace("view-a", "docs", repo_config, None, views)
    second = prepare_workspace("view-b", "docs", repo_config, None, views)
    assert (
        first.view_of
        == second.view_of
        == base_directory(views.root, "docs", first.base_sha) / "tree"
    )
    assert first.view_of is not None
    before = digest(first.view_of)
    page = "docs/install.md"

    # Job A changes, adds, deletes, chmods and hard-links in its own view.
    script = (
        f"cd {first.tree} && printf 'changed\\n' > {page} && printf 'new\\n' > docs/new.md"
        " && rm docs/gone.md && chmod 600 README.md && ln README.md docs/hard-link"
        " && printf 'through the link\\n' >> docs/hard-link"
        " && git add -A && git -c user.name=a -c user.email=a@a commit -qm change"
    )
    done = as_sandbox("sh", "-c", script)
    assert done.returncode == 0, done.stderr

    assert (first.tree / page).read_text() == "changed\n"
    assert (second.tree / page).read_text() == "Install it with pip.\n"
    assert not (second.tree / "docs" / "new.md").exists()
    assert (second.tree / "docs" / "gone.md").is_file()
    assert (second.tree / "README.md").stat().st_mode & 0o777 != 0o600
    assert "through the link" not in (second.tree / "README.md").read_text()
    # The base is as it was, and B's branch and index know nothing of A's commit.
    assert digest(first.view_of) == before
    assert git("-C", str(second.tree), "rev-parse", "HEAD", sandbox=True) == second.base_sha
    assert as_sandbox("git", "-C", str(second.tree), "status", "--porcelain").stdout == ""
    assert git("-C", str(first.tree), "rev-parse", "HEAD", sandbox=True) != first.base_sha
    head = git("-C", str(first.tree), "symbolic-ref", "HEAD", sandbox=True)
    assert head == f"refs/heads/{first.branch}"


def test_a_fresh_view_is_clean_on_its_own_branch_and_its_index_is_trusted(
    repo_config: RepositoryConfig, views: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("view-clean", "docs", repo_config, None, views)
    # Only the job's own files are in its layer: nothing was checked out for it.
    layer = workspace.tree.parent / "layer"
    assert sorted(str(path.relative_to(layer)) for path in layer.rglob("*") if path.is_file()) == [
        ".git/HEAD",
        ".git/config",
        f".git/refs/heads/{workspace.branch}",
        f".git/refs/remotes/origin/{workspace.branch}",
    ]
    assert all(path.stat().st_uid == SANDBOX_UID for path in layer.rglob("*"))
    status = as_sandbox("git", "-C", str(workspace.tree), "status", "--porcelain", "--branch")
    assert status.returncode == 0, status.stderr
    assert status.stdout == f"## {workspace.branch}...origin/{workspace.branch}\n"


def test_a_view_lost_with_a_reboot_is_mounted_again_with_the_jobs_changes(
    repo_config: RepositoryConfig, views: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("view-reboot", "docs", repo_config, None, views)
    done = as_sandbox("sh", "-c", f"printf 'kept\\n' > {workspace.tree}/docs/install.md")
    assert done.returncode == 0, done.stderr
    unmount_view(workspace.tree)
    assert not is_mounted(workspace.tree)

    again = open_workspace("view-reboot", views)

    assert is_mounted(again.tree)
    assert (again.tree / "docs" / "install.md").read_text() == "kept\n"


def test_a_view_whose_base_is_gone_cannot_be_opened(
    repo_config: RepositoryConfig, views: WorkspaceSettings
) -> None:
    workspace = view("view-orphan", repo_config, views)
    unmount_view(workspace.tree)
    assert workspace.view_of is not None
    os.rename(workspace.view_of.parent, workspace.view_of.parent.with_name("elsewhere"))

    with pytest.raises(BeamError, match=r"BEM-342.*base"):
        open_workspace("view-orphan", views)


def test_removing_a_workspace_detaches_its_view_and_leaves_the_base(
    repo_config: RepositoryConfig, views: WorkspaceSettings
) -> None:
    workspace = view("view-gone", repo_config, views)
    assert workspace.view_of is not None
    before = digest(workspace.view_of)

    remove_workspace("view-gone", views)

    assert not workspace.tree.parent.exists()
    assert digest(workspace.view_of) == before


def test_a_base_goes_once_no_workspace_names_it_and_no_job_took_it_lately(
    repo_config: RepositoryConfig, views: WorkspaceSettings
) -> None:
    workspace = view("view-old", repo_config, views)
    release_workspace("view-old", views)
    base = base_directory(views.root, "docs", workspace.base_sha)
    stale = time.time() - BASE_GRACE - 1
    os.utime(base, (stale, stale))

    # Named by a workspace (not expired yet): kept, however stale.
    assert collect_workspaces(views, lambda _: True, time.time()) == []
    assert base.is_dir()

    removed = collect_workspaces(views, lambda _: True, time.time() + 25 * 3600)

    assert removed == ["view-old", f".bases/docs/{workspace.base_sha}"]
    assert not base.exists()


def test_a_base_taken_lately_stays_though_no_workspace_names_it_yet(
    repo_config: RepositoryConfig, views: WorkspaceSettings
) -> None:
    remove_workspace(view("view-young", repo_config, views).job_id, views)

    assert collect_workspaces(views, lambda _: True, time.time()) == []
    assert bases_named(views, "docs") != []
