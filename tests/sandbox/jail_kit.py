"""A hostile neighbourhood for jail tests: a working tree, its ``.git``, and things outside.

``build_jail_env`` lays out::

    base/
      root/                 the jail (a real repository: pygit2.init_repository)
        .git/ ...
        .gitignore .gitattributes .gitmodules README.md
        docs/index.md  docs/guide/install.md
      outside/              what an escape would reach: secret.txt, dir/inner.txt
      root2/secret.txt      a sibling sharing the root's name as a prefix

With ``view=True`` the root is instead a job's view of a base in ``base/lower``, its
changes in ``base/layer`` (``base/work`` is overlayfs' own).

``Snapshot`` records every entry under ``base`` (type, mode, content hash or link target) so a
test can assert that a refused call changed nothing: not outside, not in ``.git``, not in
the working tree.
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import pygit2

from sandbox.host.workspace.overlay import mount_view
from sandbox.inside.jail import SandboxRoot

INSIDE_INDEX = b"# Inside\n"
OUTSIDE_SECRET = b"TOP SECRET: outside the jail\n"


def describe(path: Path) -> str:
    """What an entry is, without following symlinks or opening anything but regular files."""
    st = path.lstat()
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return f"link -> {os.readlink(path)}"
    if stat.S_ISREG(mode):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        return f"file {stat.S_IMODE(mode):o} nlink={st.st_nlink} {digest}"
    if stat.S_ISDIR(mode):
        return f"dir {stat.S_IMODE(mode):o}"
    return f"special {stat.S_IFMT(mode):o} rdev={st.st_rdev}"


def snapshot_tree(top: Path) -> dict[str, str]:
    """Every entry under ``top`` (not following symlinks), by relative path."""
    entries: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            entries[str(path.relative_to(top))] = describe(path)
    return entries


@dataclass(frozen=True)
class Snapshot:
    outside: dict[str, str]
    git: dict[str, str]
    tree: dict[str, str]


@dataclass(frozen=True)
class JailEnv:
    base: Path
    root: Path
    outside: Path
    jail: SandboxRoot
    view: bool = False

    @property
    def git_dir(self) -> Path:
        return self.root / ".git"

    def snapshot(self) -> Snapshot:
        # A view's layer holds what the root shows changed: the tree's snapshot covers it.
        inside = ("root", "layer", "work") if self.view else ("root",)
        outside = {
            key: value
            for key, value in snapshot_tree(self.base).items()
            if key.partition("/")[0] not in inside
        }
        tree = {
            key: value
            for key, value in snapshot_tree(self.root).items()
            if key != ".git" and not key.startswith(".git/")
        }
        return Snapshot(outside=outside, git=snapshot_tree(self.git_dir), tree=tree)

    def assert_unchanged(self, before: Snapshot) -> None:
        after = self.snapshot()
        assert after.outside == before.outside, "something outside the root changed"
        assert after.git == before.git, "the .git directory changed"
        assert after.tree == before.tree, "the working tree changed"

    def link(self, rel: str, target: str | Path) -> None:
        """Create the symlink ``root/rel -> target`` (parents made as needed)."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)


def build_jail_env(base: Path, *, view: bool = False, **limits: int) -> JailEnv:
    """With ``view``, the root is a job's view (``sandbox.host.workspace.overlay``): its
    files are laid out in ``base/lower``, "outside" for the snapshot (a case that changes the
    base fails), and the view's changes go to ``base/layer``."""
    root = base / "root"
    outside = base / "outside"
    if view:
        lower = base / "lower"
        _lay_out(lower)
        for name in ("layer", "work", "root"):
            (base / name).mkdir()
        mount_view(lower, base / "layer", base / "work", root)
    else:
        _lay_out(root)
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_bytes(OUTSIDE_SECRET)
    (outside / "dir" / "inner.txt").write_bytes(OUTSIDE_SECRET)
    (base / "root2").mkdir()
    (base / "root2" / "secret.txt").write_bytes(OUTSIDE_SECRET)
    return JailEnv(
        base=base, root=root, outside=outside, jail=SandboxRoot(root, **limits), view=view
    )


def _lay_out(root: Path) -> None:
    pygit2.init_repository(str(root))
    (root / "docs" / "guide").mkdir(parents=True)
    (root / "docs" / "index.md").write_bytes(INSIDE_INDEX)
    (root / "docs" / "guide" / "install.md").write_bytes(b"# Install\n")
    (root / "README.md").write_bytes(b"# Readme\n")
    for name in (".gitignore", ".gitattributes", ".gitmodules"):
        (root / name).write_bytes(f"# {name}\n".encode())


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail with TimeoutError if the block runs longer than ``seconds`` (say, a blocked open).

    SIGALRM interrupts a blocking system call in the main thread, so a jail that blocks on a
    FIFO fails the test instead of hanging the run.
    """

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still running after {seconds} s: the call blocked")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
