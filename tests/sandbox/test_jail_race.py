"""Check-then-swap: a thread swaps a path component for an outside symlink during the calls.

Another process swaps with ``renameat2(RENAME_EXCHANGE)``, so the name always exists and
flips atomically, on another CPU, between a real directory and a symlink that points
outside: the most hostile timing a process sharing the tree could produce. Every call must
either act inside the root or be refused with BEM-303; the outside must end byte-identical,
with no file created there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bot.core.errors import BeamError
from sandbox.inside.jail import SandboxRoot, _Found
from sandbox.inside.sandbox_tools import call_tool
from sandbox.inside.worktree import WorkingTree
from tests.sandbox.git_kit import PROTECTED, GitEnv, build_git_env
from tests.sandbox.jail_kit import OUTSIDE_SECRET, JailEnv, build_jail_env, snapshot_tree

CALLS = 4000
INSIDE = b"inside\n"

# Runs in a child process, so the swaps happen truly in parallel with the jail (no GIL):
# say "ready", exchange argv[1] and argv[2] atomically until the file argv[3] appears, then
# print the number of swaps.
SWAPPER = """
import ctypes, os, sys
renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
first, second, stop = (arg.encode() for arg in sys.argv[1:4])
print("ready", flush=True)
swaps = 0
while swaps % 256 or not os.path.exists(stop):
    if renameat2(-100, first, -100, second, 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
        raise OSError(ctypes.get_errno(), "renameat2")
    swaps += 1
print(swaps)
"""


@contextmanager
def swapping(first: Path, second: Path) -> Iterator[None]:
    """Keep exchanging ``first`` and ``second`` from another process while the block runs."""
    stop = first.parent.parent / f"stop-{first.name}"
    child = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(first), str(second), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    try:
        # Interpreter start-up can take longer than the calls under test on a loaded machine.
        assert child.stdout.readline() == "ready\n"
        yield
    finally:
        stop.touch()
        try:
            output, _ = child.communicate(timeout=30)
        finally:
            child.kill()  # a no-op once it has exited; never leave a swapper running
            stop.unlink()
    assert child.returncode == 0
    assert int(output) > 1000, "the swapping process barely ran; the test proved nothing"


@pytest.fixture
def env(tmp_path: Path) -> JailEnv:
    env = build_jail_env(tmp_path)
    (env.root / "docs" / "a.md").write_bytes(INSIDE)
    (env.outside / "a.md").write_bytes(OUTSIDE_SECRET)
    return env


def _hammer(call: Callable[[int], object], calls: int = CALLS) -> Counter[str]:
    outcomes = Counter[str]()
    for index in range(calls):
        try:
            call(index)
        except BeamError as refused:
            outcomes[refused.code] += 1
        else:
            outcomes["ok"] += 1
    return outcomes


def _assert_mixed(outcomes: Counter[str]) -> None:
    # Only successes and escapes refused as such; both must occur, or the race never happened.
    assert set(outcomes) == {"ok", "BEM-303"}, outcomes


@pytest.mark.parametrize("target", ["../outside", "{base}/outside"], ids=["relative", "absolute"])
def test_swapping_a_directory_for_an_outside_symlink(env: JailEnv, target: str) -> None:
    (env.root / "spare").symlink_to(target.replace("{base}", str(env.base)))
    outside_before = snapshot_tree(env.outside)
    git_before = snapshot_tree(env.git_dir)

    def call(index: int) -> None:
        if index % 2 == 0:
            assert env.jail.read_bytes("docs/a.md") == INSIDE
        elif index % 4 == 1:
            env.jail.write_bytes("docs/w.md", b"written inside\n")
        else:
            env.jail.write_bytes(f"docs/sub{index % 7}/deep.md", b"deep inside\n")

    with swapping(env.root / "docs", env.root / "spare"):
        outcomes = _hammer(call)

    _assert_mixed(outcomes)
    assert snapshot_tree(env.outside) == outside_before
    assert snapshot_tree(env.git_dir) == git_before
    assert not (env.base / "w.md").exists() and not (env.base / "a.md").exists()
    real = next(path for path in (env.root / "docs", env.root / "spare") if not path.is_symlink())
    assert (real / "w.md").read_bytes() == b"written inside\n"
    assert (real / "a.md").read_bytes() == INSIDE


def test_swapping_the_file_itself_for_an_outside_symlink(env: JailEnv) -> None:
    (env.root / "docs" / "spare.md").symlink_to("../../outside/a.md")
    outside_before = snapshot_tree(env.outside)

    def call(index: int) -> None:
        assert env.jail.read_bytes("docs/a.md") == INSIDE

    with swapping(env.root / "docs" / "a.md", env.root / "docs" / "spare.md"):
        outcomes = _hammer(call)

    _assert_mixed(outcomes)
    assert snapshot_tree(env.outside) == outside_before


# -- the git tools: what libgit2 lists is read through the jail --------------------------

GIT_CALLS = 1500
EDITED = b"edited inside\n"


class RecordingRoot(SandboxRoot):
    """A SandboxRoot that notes the identity of every file it opens for reading."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.opened: set[tuple[int, int]] = set()

    def _open_leaf(self, found: _Found, flags: int) -> int:  # type: ignore[override]
        fd = super()._open_leaf(found, flags)
        info = os.fstat(fd)
        self.opened.add((info.st_dev, info.st_ino))
        return fd


@pytest.fixture
def git_env(tmp_path: Path) -> tuple[GitEnv, RecordingRoot]:
    env = build_git_env(tmp_path)
    env.commit_file("docs/a.md", INSIDE.decode())
    (env.outside / "a.md").write_bytes(OUTSIDE_SECRET)
    (env.work / "spare").symlink_to("../outside")
    env.tree.add("spare")
    env.tree.commit("A link that leads out, committed as a link")
    (env.work / "docs" / "a.md").write_bytes(EDITED)
    return env, RecordingRoot(env.work)


@pytest.mark.parametrize("tool", ["git_add", "git_diff", "git_status"])
def test_swapping_a_directory_under_the_git_tools(
    git_env: tuple[GitEnv, RecordingRoot], tool: str
) -> None:
    env, root = git_env
    tree = WorkingTree(root, PROTECTED)
    secret = (env.outside / "a.md").stat()
    outside_before = snapshot_tree(env.outside)
    args = {"git_add": {"path": "docs/a.md"}, "git_diff": {"path": "docs"}}.get(tool, {})
    shown: list[str] = []
    staged: set[bytes] = set()

    def call(index: int) -> None:
        shown.append(json.dumps(call_tool(tree, tool, args)))
        repo = env.repo
        entries = [entry for entry in repo.index if entry.path == "docs/a.md"]
        staged.update(repo[entry.id].read_raw() for entry in entries)

    with swapping(env.work / "docs", env.work / "spare"):
        outcomes = _hammer(call, GIT_CALLS)

    # Whatever succeeded never carried the outside file, and the jail never opened it.
    assert OUTSIDE_SECRET.decode().strip() not in "".join(shown)
    assert (secret.st_dev, secret.st_ino) not in root.opened
    assert staged <= {INSIDE, EDITED}
    # Refusals are the jail's (BEM-303), or libgit2 stumbling on a directory that turned
    # into a link under it (BEM-320, or BEM-100 for its OS errors); both successes and the
    # jail's refusals must occur, or the race never happened.
    assert outcomes["ok"] and outcomes["BEM-303"], outcomes
    assert set(outcomes) <= {"ok", "BEM-303", "BEM-320", "BEM-100"}, outcomes
    assert snapshot_tree(env.outside) == outside_before
    # The object store never received the outside content, staged or not.
    repo = env.repo
    assert all(OUTSIDE_SECRET not in repo[oid].read_raw() for oid in repo.odb)
