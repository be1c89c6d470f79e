"""Property: every working-tree file libgit2 opens during a git tool is one the jail vetted.

Each git tool runs in a subprocess under ``strace -f``, on trees that plant links, hard
links and in-tree links at the places libgit2 reads rules from, and gitlinks, submodules and
embedded repositories that point it elsewhere. No path outside the root is opened, and every
``open``/``openat`` of a path in the working tree (outside ``.git``) must name, without any
symlink on the way, a regular file with one link inside the root: a rule file
(``.gitignore``, ``.gitattributes``, ``.gitmodules``) or a tracked file libgit2 hashes to see
whether it changed.
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


def _outside_repository(env: GitEnv) -> Path:
    """A repository outside the root, whose config and index a planted gitlink would read."""
    repo = env.outside / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "leak.md").write_text("outside the root\n")
    subprocess.run(["git", "-C", str(repo), "add", "leak.md"], check=True)
    return repo


def _gitlink_file(env: GitEnv) -> None:
    _plain(env)
    (env.work / "docs" / "sub").mkdir()
    env.write("docs/sub/.git", f"gitdir: {_outside_repository(env) / '.git'}\n")


def _embedded_repository(env: GitEnv) -> None:
    _plain(env)
    subprocess.run(["git", "init", "-q", str(env.work / "docs" / "nested")], check=True)
    env.write("docs/nested/page.md", "nested\n")
    env.write("docs/nested/.gitignore", "*.md\n")


def _submodule(env: GitEnv) -> None:
    repo = _outside_repository(env)
    env.write(".gitmodules", f'[submodule "sub"]\n\tpath = sub\n\turl = {repo}\n')
    (env.work / "sub").mkdir()
    env.write("sub/.git", f"gitdir: {repo / '.git'}\n")


TREES: dict[str, Callable[[GitEnv], None]] = {
    "plain rule files": _plain,
    "an outside symlink at docs/.gitignore": _outside_links,
    "an in-tree symlink at .gitattributes": _inside_link,
    "a hard link at docs/.gitattributes": _hard_link,
    "a directory symlinked outside": _linked_directory,
    "a gitlink file naming a repository outside": _gitlink_file,
    "an embedded repository": _embedded_repository,
    "a submodule whose gitdir is outside": _submodule,
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
        if path.startswith(f"{env.outside}/"):
            per_tool[current].append(path)  # never vetted: the property fails on it
            continue
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
    # The tools that read refs and objects alone skip the rule-file check: they must open no
    # working file at all, whatever the tree holds.
    assert opened["git_log"] == [] and opened["git_push"] == []
    if plant == "plain rule files":
        # The property has something to hold for: libgit2 does read rule files.
        assert f"{env.work}/.gitignore" in opened["git_status"]
