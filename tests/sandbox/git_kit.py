"""Real repositories for working-tree tests: a tree, a bare upstream, and a decoy.

``build_git_env`` lays out::

    base/
      work/            the sandbox root: a repository whose first commit is on main,
                       checked out on branch 'feature'; origin = upstream.git
      upstream.git/    bare; holds main, master, release/1.0 and tag v1 (pushed with
                       plain pygit2, since Riverbeam itself refuses protected refs)
      decoy.git/       bare; where a hostile config would like pushes to go
      outside/         files a redirected working tree or an escape would touch

``refs_of`` lists every ref of a repository (symbolic ones by target) for before/after
comparisons, and ``snapshot`` every file under a directory except the sandbox root.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pygit2

from bot.core.identity import Identity
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.worktree import WorkingTree

PROTECTED = ("main", "master", "release/*")
_AUTHOR = pygit2.Signature("Upstream", "upstream@example.com", 1_700_000_000, 0)


@dataclass(frozen=True)
class GitEnv:
    base: Path
    work: Path
    upstream: Path
    decoy: Path
    outside: Path
    tree: WorkingTree

    @property
    def repo(self) -> pygit2.Repository:
        """A separate pygit2 view of the working tree's repository, for assertions."""
        return pygit2.Repository(str(self.work / ".git"))

    def write(self, rel: str, text: str | bytes) -> Path:
        path = self.work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        return path

    def commit_file(self, rel: str, text: str, message: str = "Edit") -> str:
        self.write(rel, text)
        self.tree.add(rel)
        return self.tree.commit(message).commit

    def outside_snapshot(self) -> dict[str, str]:
        """Every entry under ``base`` except the sandbox root itself."""
        return {
            key: value
            for key, value in snapshot(self.base).items()
            if key != "work" and not key.startswith("work/")
        }


def refs_of(path: Path) -> dict[str, str]:
    """Every reference of the repository at ``path``: name to target (sha or ref name)."""
    repo = pygit2.Repository(str(path))
    refs = {name: str(repo.references[name].target) for name in repo.references}
    refs["HEAD"] = str(repo.references["HEAD"].target)
    return refs


def snapshot(top: Path) -> dict[str, str]:
    """Type, mode and content hash (or link target) of every entry under ``top``."""
    entries: dict[str, str] = {}
    for directory, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(directory, name)
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                described = f"link {os.readlink(path)}"
            elif stat.S_ISREG(info.st_mode):
                described = f"file {info.st_mode:o} {hashlib.sha256(path.read_bytes()).hexdigest()}"
            else:
                described = f"dir {info.st_mode:o}"
            entries[str(path.relative_to(top))] = described
    return entries


def build_git_env(
    base: Path,
    protected: tuple[str, ...] = PROTECTED,
    *,
    identity: Identity | None = None,
    workers: int | None = None,
) -> GitEnv:
    work, outside = base / "work", base / "outside"
    for directory in (work, outside):
        directory.mkdir(parents=True)
    (outside / "secret.txt").write_text("outside the root\n")
    upstream, decoy = base / "upstream.git", base / "decoy.git"
    pygit2.init_repository(str(upstream), bare=True, initial_head="main")
    pygit2.init_repository(str(decoy), bare=True, initial_head="main")
    tree = WorkingTree(SandboxRoot(work), protected, identity=identity, workers=workers)
    tree.init()
    env = GitEnv(base, work, upstream, decoy, outside, tree)
    env.write("README.md", "# Docs\n")
    env.write("docs/index.md", "# Index\n\nWelcome.\n")
    tree.add(".")
    tree.commit("Initial import")
    _seed_upstream(env)
    tree.checkout_branch("feature", create=True)
    tree.add_origin(str(upstream))
    return env


def _seed_upstream(env: GitEnv) -> None:
    """Protected branches and a tag upstream, pushed around Riverbeam's policy on purpose."""
    repo = env.repo
    head = repo.head.peel(pygit2.Commit)
    release = repo.create_commit(None, _AUTHOR, _AUTHOR, "Release 1.0", head.tree_id, [head.id])
    repo.references.create("refs/heads/master", head.id)
    repo.references.create("refs/heads/release/1.0", release)
    repo.references.create("refs/tags/v1", head.id)
    specs = [f"refs/{kind}:refs/{kind}" for kind in ("heads/main", "heads/master", "tags/v1")]
    specs.append("refs/heads/release/1.0:refs/heads/release/1.0")
    repo.remotes.create_anonymous(str(env.upstream)).push(specs)
    # Keep only main locally, as a fresh job clone would have it.
    for name in ("refs/heads/master", "refs/heads/release/1.0", "refs/tags/v1"):
        repo.references.delete(name)
