"""A workspace's repositories are laid out directly (``prepare.git_layout``), no longer by
``git_repository_init`` and removing its template: the result must be the same repository,
and a prepared workspace must hold nothing of the template."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pygit2
import pytest

from bot.config import RepositoryConfig, WorkspaceSettings
from harness.gitkit import git
from sandbox.host.workspace.prepare import git_layout, prepare_workspace

CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"


def _listing(top: Path) -> dict[str, tuple[bool, int, bytes]]:
    """Every entry under ``top``: directory or not, its permission bits, its content."""
    found = {}
    for path in top.rglob("*"):
        info = path.lstat()
        content = b"" if path.is_dir() else path.read_bytes()
        found[str(path.relative_to(top))] = (path.is_dir(), info.st_mode & 0o7777, content)
    return found


@pytest.mark.parametrize("bare", [True, False])
def test_the_layout_is_libgit2s_init_without_its_template(base_dir: Path, bare: bool) -> None:
    branch = "riverbeam/job-1"
    made = base_dir / "made"
    git_layout(made, branch, CONFIG)
    init = base_dir / "init"
    pygit2.init_repository(str(init), bare=bare, initial_head=branch)
    gitdir = init if bare else init / ".git"
    for template in ("hooks", "description", "info"):
        if (gitdir / template).is_dir():
            shutil.rmtree(gitdir / template)
        else:
            (gitdir / template).unlink()
    (gitdir / "config").write_text(CONFIG)

    assert _listing(made) == _listing(gitdir)
    repo = pygit2.Repository(str(made))
    assert repo.head_is_unborn
    assert repo.references["HEAD"].target == f"refs/heads/{branch}"


def test_a_prepared_workspace_holds_nothing_of_the_template(
    upstream: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("job-layout", "docs", repo_config, None, settings)

    main = git("-C", str(upstream), "rev-parse", "refs/heads/main")
    for gitdir in (workspace.tree / ".git", workspace.outbox):
        assert not {"hooks", "description", "info"} & set(os.listdir(gitdir))
        assert (gitdir / "HEAD").read_text() == "ref: refs/heads/riverbeam/job-layout\n"
        assert git("--git-dir", str(gitdir), "rev-parse", "HEAD", sandbox=True) == main
    assert git("-C", str(workspace.tree), "status", "--porcelain", sandbox=True) == ""
