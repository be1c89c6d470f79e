"""Property: every working-tree file libgit2 opens during a git tool is one the jail vetted.

Each git tool runs in a subprocess under ``strace -f``, on trees that plant links, hard
links and in-tree links at the places libgit2 reads rules from. Every ``open``/``openat`` of
a path in the working tree (outside ``.git``) must name, without any symlink on the way,
a regular file with one link inside the root: a rule file (``.gitignore``,
``.gitattributes``, ``.gitmodules``) or a tracked file libgit2 hashes to see whether it
changed.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.inside.repo_guard import RULE_FILES
from tests.sandbox.git_kit import GitEnv, build_git_env

TOOLS = ["git_status", "git_diff", "git_add", "git_commit", "git_log", "git_push"]
_OPEN = re.compile(r'^\d+\s+(?:open|openat|openat2)\((?:AT_FDCWD, )?"([^"]+)", ([A-Z_|]+)')
_MARK = "/riverbeam-mark/"
# The mark is a path stat()ed before each tool, so the trace shows where each one starts.
_RUNNER = """
import os, sys
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.worktree import WorkingTree
from sandbox.inside.sandbox_tools import call_tool
tree = WorkingTree(SandboxRoot(sys.argv[1]), workers=1)
tree.add_origin(sys.argv[2])
args = {"git_add": {"path": "."}, "git_commit": {"message": "x"}}
for name in sys.argv[4:]:
    try:
        os.stat(sys.argv[3] + name)
    except OSError:
        pass
    try:
        call_tool(tree, name, args.get(name, {}))
    except Exception as error:
        print(name, error, file=sys.stderr)
"""


def _plain(env: GitEnv) -> None:
    env.write(".gitignore", "*.log\n")
    env.write("docs/.gitattributes", "*.md text\n")


def _outside_links(env: GitEnv) -> None:
    _plain(env)
    os.symlink(env.outside / "secret.txt", env.work / "docs" / ".gitignore")


def _inside_link(env: GitEnv) -> None:
    env.write("rules.txt", "*.tmp\n")
    os.symlink("rules.txt", env.work / ".gitattributes")


def _hard_link(env: GitEnv) -> None:
    os.link(env.outside / "secret.txt", env.work / "docs" / ".gitattributes")


def _linked_directory(env: GitEnv) -> None:
    _plain(env)
    (env.outside / "dir").mkdir()
    (env.outside / "dir" / ".gitignore").write_text("*\n")
    os.symlink(env.outside / "dir", env.work / "linked")


TREES: dict[str, Callable[[GitEnv], None]] = {
    "plain rule files": _plain,
    "an outside symlink at docs/.gitignore": _outside_links,
    "an in-tree symlink at .gitattributes": _inside_link,
    "a hard link at docs/.gitattributes": _hard_link,
    "a directory symlinked outside": _linked_directory,
}


def _opened(env: GitEnv, trace: Path) -> dict[str, list[str]]:
    """Working-tree paths opened (not as directories, not O_PATH), per tool."""
    strace = ["strace", "-f", "-qq", "-e", "trace=open,openat,openat2,stat,newfstatat"]
    runner = [sys.executable, "-c", _RUNNER, str(env.work), str(env.upstream), _MARK, *TOOLS]
    subprocess.run(
        [*strace, "-o", str(trace), *runner],
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    per_tool: dict[str, list[str]] = {}
    current = None
    prefix = f"{env.work}/"
    for line in trace.read_text().splitlines():
        if _MARK in line:
            current = line.split(_MARK, 1)[1].split('"', 1)[0]
            per_tool[current] = []
            continue
        match = _OPEN.match(line)
        if current is None or match is None:
            continue
        path, flags = match.groups()
        if not path.startswith(prefix) or "O_DIRECTORY" in flags or "O_PATH" in flags:
            continue
        if path[len(prefix) :].split("/", 1)[0] != ".git":
            per_tool[current].append(path)
    return per_tool


@pytest.mark.parametrize("plant", list(TREES))
def test_libgit2_opens_only_vetted_working_files(tmp_path: Path, plant: str) -> None:
    env = build_git_env(tmp_path / "env")
    env.write("docs/index.md", "# Index\n\nChanged.\n")
    env.write("docs/new.md", "new\n")
    TREES[plant](env)
    tracked = {entry.path for entry in env.repo.index}
    opened = _opened(env, tmp_path / "trace")
    assert set(opened) == set(TOOLS)
    for tool, paths in opened.items():
        for path in paths:
            rel = os.path.relpath(path, env.work)
            info = os.lstat(path)
            assert os.path.realpath(path) == path, (tool, rel, "reached through a symlink")
            assert stat.S_ISREG(info.st_mode) and info.st_nlink == 1, (tool, rel)
            assert os.path.basename(rel) in RULE_FILES or rel in tracked, (
                tool,
                rel,
            )
    if plant == "plain rule files":
        # The property has something to hold for: libgit2 does read rule files.
        assert f"{env.work}/.gitignore" in opened["git_status"]
