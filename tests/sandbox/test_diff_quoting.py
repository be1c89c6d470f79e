"""A file name cannot forge lines in a patch: ``git_diff`` writes the names in its header as
git does (quoted, with C escapes, when they hold anything but plain printable ASCII), and the
approval's diff, which libgit2 writes whole, stays so too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bot.jobs.branch_change import read_change
from sandbox.inside.staging import quoted_path
from tests.sandbox.git_kit import GitEnv, build_git_env

# Each would break a line, close a quote or be mistaken for another file's header unquoted.
FORGING = "evil.md\n+++ b/README.md\n@@ -1 +1 @@\n+injected"
NAMES = [
    "new\nline.md",
    "tab\there.md",
    'quo"te.md',
    "back\\slash.md",
    "caf\u00e9.md",
    " lead and trail .md",
    "del\x7f.md",
    "bell\x07.md",
    "docs/with space.md",
    FORGING,
]
NAME_LINES = ("diff --git ", "--- ", "+++ ", "Binary files ")


@pytest.fixture
def env(tmp_path: Path) -> GitEnv:
    env = build_git_env(tmp_path / "env")
    for number, name in enumerate(NAMES):
        env.write(name, f"line {number}\n")
    env.write("bin\nary.dat", b"\x00binary\x00")
    env.tree.add(".")
    env.tree.commit("Hostile names")
    return env


def _name_lines(patch: str) -> list[str]:
    # git ends a ---/+++ name holding a space with a tab, libgit2 does not: it says nothing.
    return [line.removesuffix("\t") for line in patch.splitlines() if line.startswith(NAME_LINES)]


def test_quoting_follows_git_quote_c_style() -> None:
    assert quoted_path("a/", "docs/plain name.md") == "a/docs/plain name.md"
    assert quoted_path("b/", "x\ny") == '"b/x\\ny"'
    assert quoted_path("a/", 'q"\\') == '"a/q\\"\\\\"'
    assert quoted_path("a/", "\u00e9\x01\x7f") == '"a/\\303\\251\\001\\177"'


def test_the_tool_patch_names_files_exactly_as_git_diff_does(env: GitEnv) -> None:
    for number, name in enumerate(NAMES):
        env.write(name, f"line {number}, changed\n")
    env.write("bin\nary.dat", b"\x00binary, changed\x00")

    ours = _name_lines(env.tree.diff().patch)
    gits = subprocess.run(
        ["git", "-c", "core.quotePath=true", "diff", "--no-color", "--no-ext-diff", "HEAD"],
        cwd=env.work,
        capture_output=True,
        check=True,
    ).stdout.decode()

    assert ours == _name_lines(gits)
    assert len([line for line in ours if line.startswith("diff --git ")]) == len(NAMES) + 1


def test_a_forging_name_adds_no_line_to_the_patch(env: GitEnv) -> None:
    env.write(FORGING, "changed\n")

    patch = env.tree.diff().patch

    assert "+injected" not in patch.splitlines()
    assert patch.count("\ndiff --git ") + patch.startswith("diff --git ") == 1
    assert [line for line in patch.splitlines() if line.startswith("+")] == [
        f"+++ {quoted_path('b/', FORGING)}",
        "+changed",
    ]


def test_the_approval_diff_of_a_forging_name_holds_only_its_own_lines(env: GitEnv) -> None:
    base = env.tree.head_sha()
    head = env.commit_file(FORGING, "approved text\n", "Change the hostile file")

    change = read_change(env.work, base, head, max_chars=100_000)

    lines = change.patch.splitlines()
    assert "+injected" not in lines
    assert [line for line in lines if line.startswith("diff --git ")] == [
        f"diff --git {quoted_path('a/', FORGING)} {quoted_path('b/', FORGING)}"
    ]
    assert [line for line in lines if line.startswith(("+", "-"))] == [
        f"--- {quoted_path('a/', FORGING)}",
        f"+++ {quoted_path('b/', FORGING)}",
        f"-line {NAMES.index(FORGING)}",
        "+approved text",
    ]
