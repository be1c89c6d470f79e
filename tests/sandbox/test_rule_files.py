"""Ignore, attribute and module files libgit2 reads by path: held to the jail's rules.

libgit2 opens ``.gitignore``, ``.gitattributes`` and ``.gitmodules`` in any directory by path,
following links and blocking on a FIFO. Each git tool must refuse such a tree (BEM-329) within
a couple of seconds, never obey an outside file, and answer the next call as well.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.core import safe_walk
from bot.core.errors import BeamError
from sandbox.inside.sandbox_tools import call_tool
from tests.sandbox.git_kit import GitEnv, build_git_env
from tests.sandbox.jail_kit import deadline

GIT_TOOLS = [
    ("git_status", {}),
    ("git_diff", {}),
    ("git_add", {"path": "."}),
]
SPOTS = [".gitignore", ".gitattributes", "docs/.gitignore", "docs/.gitattributes", ".gitmodules"]


@pytest.fixture
def env(tmp_path: Path) -> GitEnv:
    return build_git_env(tmp_path)


@pytest.mark.parametrize("spot", SPOTS)
@pytest.mark.parametrize(("tool", "args"), GIT_TOOLS)
def test_a_fifo_rule_file_is_refused_not_waited_on(
    env: GitEnv, spot: str, tool: str, args: dict[str, str]
) -> None:
    os.mkfifo(env.work / spot)
    for _ in range(2):  # the next call is answered too: nothing stays blocked
        with deadline(2), pytest.raises(BeamError) as refused:
            call_tool(env.tree, tool, args)
        assert refused.value.code == "BEM-329"
        assert spot in refused.value.message


@pytest.mark.parametrize("spot", SPOTS)
def test_an_outside_symlinked_rule_file_is_not_obeyed(env: GitEnv, spot: str) -> None:
    (env.outside / "rules").write_text("*.md\n* -diff\n")
    env.write("docs/new.md", "new\n")
    (env.work / spot).symlink_to(env.outside / "rules")
    with pytest.raises(BeamError) as refused:
        call_tool(env.tree, "git_status", {})
    assert refused.value.code == "BEM-329"
    (env.work / spot).unlink()
    listed = _listed(env)
    assert "docs/new.md" in listed


def test_a_committed_symlink_gitignore_is_refused(env: GitEnv) -> None:
    env.write("secret.log", "x\n")
    os.symlink("../outside/secret.txt", env.work / ".gitignore")
    with pytest.raises(BeamError) as refused:
        call_tool(env.tree, "git_add", {"path": "."})
    assert refused.value.code == "BEM-329"


def test_a_hard_linked_rule_file_is_refused(env: GitEnv) -> None:
    os.link(env.outside / "secret.txt", env.work / ".gitattributes")
    with pytest.raises(BeamError) as refused:
        call_tool(env.tree, "git_diff", {})
    assert refused.value.code == "BEM-329"


def test_plain_rule_files_are_obeyed(env: GitEnv) -> None:
    env.write("docs/.gitignore", "*.tmp\n")
    env.write("docs/x.tmp", "x\n")
    listed = _listed(env)
    assert "docs/x.tmp" not in listed and "docs/.gitignore" in listed


def _listed(env: GitEnv) -> list[str]:
    return [entry.path for entry in env.tree.status().files]


# -- a tree checked before: the listings it remembers -------------------------------------

_CHANGES = {
    "a symlink planted in a deep folder": lambda env: (env.work / "deep/er/.gitignore").symlink_to(
        env.outside / "rules"
    ),
    "a rule file swapped for a FIFO": lambda env: (
        (env.work / "deep/.gitattributes").unlink(),
        os.mkfifo(env.work / "deep/.gitattributes"),
    ),
    "a rule file grown in place past the cap": lambda env: (
        env.work / "deep/.gitattributes"
    ).write_bytes(b"#" * (2 << 20)),
    "a rule file hard-linked from elsewhere": lambda env: os.link(
        env.work / "deep/.gitattributes", env.work / "twin"
    ),
    "a new folder holding a FIFO": lambda env: (
        (env.work / "deep/er/new").mkdir(),
        os.mkfifo(env.work / "deep/er/new/.gitmodules"),
    ),
}


@pytest.fixture
def settled(env: GitEnv, monkeypatch: pytest.MonkeyPatch) -> GitEnv:
    """A tree of folders whose listings the check remembers: every directory counts as
    settled, however recently it changed."""
    monkeypatch.setattr(safe_walk, "SETTLE_NS", 0)
    (env.outside / "rules").write_text("*.md\n")
    env.write("deep/er/page.md", "page\n")
    env.write("deep/.gitattributes", "*.md text\n")
    call_tool(env.tree, "git_status", {})
    return env


@pytest.mark.parametrize("change", _CHANGES)
def test_a_change_after_the_listings_were_remembered_is_still_refused(
    settled: GitEnv, change: str
) -> None:
    _CHANGES[change](settled)
    with deadline(2), pytest.raises(BeamError) as refused:
        call_tool(settled.tree, "git_status", {})
    assert refused.value.code == "BEM-329"


def test_an_unchanged_tree_is_checked_without_listing_its_folders(
    settled: GitEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed: list[str] = []
    real_scandir = os.scandir
    git_dir = str(settled.work / ".git")

    def counting(fd: int) -> object:
        # The working tree's folders only; the .git walk (check_layout) lists its own.
        where = os.readlink(f"/proc/self/fd/{fd}")
        if not where.startswith(git_dir):
            listed.append(where)
        return real_scandir(fd)

    monkeypatch.setattr(safe_walk.os, "scandir", counting)
    call_tool(settled.tree, "git_status", {})
    assert listed == []
    settled.write("deep/er/another.md", "more\n")  # changes deep/er only
    call_tool(settled.tree, "git_status", {})
    assert listed == [str(settled.work / "deep/er")]
