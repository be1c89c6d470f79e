"""A tree nested deeper than libgit2 can enter blocks nothing else: ``git_status``,
``git_diff`` and ``git_add`` leave the too-deep directory out and say so (BEM-333 in their
note), and a call naming a path inside it is BEM-333, where libgit2 alone fails every call
with BEM-320."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bot.core.errors import GitError
from sandbox.inside.worktree_changes import MAX_NESTING
from tests.sandbox.git_kit import GitEnv, build_git_env

CHAIN = "/".join(f"d{level}" for level in range(150))
DEEP_FILE = f"{CHAIN}/leaf.md"
MIDDLE_FILE = f"{'/'.join(CHAIN.split('/')[:50])}/middle.md"
SKIPPED = "/".join(CHAIN.split("/")[:MAX_NESTING])


@pytest.fixture
def env(tmp_path: Path) -> GitEnv:
    """A deep file committed by git itself (git enters any depth), then changed; a page and
    a file halfway down the chain changed too."""
    env = build_git_env(tmp_path / "env")
    env.write(DEEP_FILE, "deep\n")
    git = ["git", "-C", str(env.work), "-c", "user.name=Up", "-c", "user.email=up@example.com"]
    subprocess.run([*git, "add", DEEP_FILE], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "A deep page"], check=True)
    env.write(DEEP_FILE, "deep, changed\n")
    env.write(f"{CHAIN}/new-and-deep.md", "new\n")
    env.write("docs/index.md", "# Index\n\nChanged.\n")
    env.write(MIDDLE_FILE, "halfway\n")
    return env


def _skipped_note(note: str | None) -> bool:
    return note is not None and "BEM-333" in note and SKIPPED.split("/", 1)[0] in note


def test_status_lists_the_rest_and_names_what_it_left_out(env: GitEnv) -> None:
    report = env.tree.status()

    assert [(f.path, f.unstaged) for f in report.files] == [
        (MIDDLE_FILE, "untracked"),
        ("docs/index.md", "modified"),
    ]
    assert _skipped_note(report.note), report.note


def test_diff_shows_the_rest_and_a_path_inside_is_bem_333(env: GitEnv) -> None:
    report = env.tree.diff()

    assert [f.path for f in report.files] == [MIDDLE_FILE, "docs/index.md"]
    assert "+halfway" in report.patch and "leaf.md" not in report.patch
    assert _skipped_note(report.note), report.note
    with pytest.raises(GitError) as caught:
        env.tree.diff(DEEP_FILE)
    assert caught.value.code == "BEM-333"


def test_add_stages_the_rest_and_a_commit_records_it(env: GitEnv) -> None:
    staged = env.tree.add(".")

    assert [f.path for f in staged.staged] == [MIDDLE_FILE, "docs/index.md"]
    assert _skipped_note(staged.note), staged.note
    env.tree.commit("Work around the deep directory")
    after = env.tree.status()
    assert after.files == [] and not after.clean and _skipped_note(after.note), after
    with pytest.raises(GitError) as caught:
        env.tree.add(DEEP_FILE)
    assert caught.value.code == "BEM-333"


def test_a_tree_just_within_the_limit_is_scanned_whole(tmp_path: Path) -> None:
    env = build_git_env(tmp_path / "env")
    within = "/".join(f"d{level}" for level in range(MAX_NESTING - 1))
    env.write(f"{within}/leaf.md", "as deep as libgit2 goes\n")

    report = env.tree.status()

    assert [f.path for f in report.files] == [f"{within}/leaf.md"]
    assert report.note is None and not report.clean
