"""``bot.review.words``: the words each changed line pair changed, on real git diffs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bot.review.words import (
    FOLD_WORDS,
    MAX_COMPARISONS,
    WordChange,
    folded_words,
    line_kinds,
    word_changes,
)


def git_diff(tmp_path: Path, before: str, after: str, name: str = "docs/page.md") -> str:
    """The diff git itself makes between two versions of one file."""
    old, new = tmp_path / "a", tmp_path / "b"
    for root, text in ((old, before), (new, after)):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    # Run beside both trees, without prefixes: the paths read as a repository diff's.
    done = subprocess.run(
        ["git", "diff", "--no-index", "--no-prefix", f"a/{name}", f"b/{name}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout


def marked(change: WordChange, side: str) -> list[str]:
    return [
        s.text
        for line in change.lines
        if line.side == side
        for s in line.segments
        if s.mark == "changed"
    ]


def test_a_one_word_fix_marks_only_that_word(tmp_path: Path) -> None:
    diff = git_diff(
        tmp_path,
        "# Install\n\nRun the instaler with sudo, then restart.\n",
        "# Install\n\nRun the installer with sudo, then restart.\n",
    )
    [change] = word_changes(diff)
    assert change.path == "docs/page.md"
    assert change.kind == "words"
    assert marked(change, "old") == ["instaler"]
    assert marked(change, "new") == ["installer"]
    assert change.changed_words == 2
    new_line = next(line for line in change.lines if line.side == "new")
    assert new_line.number == 3
    assert (
        "".join(s.text for s in new_line.segments) == "Run the installer with sudo, then restart."
    )
    assert diff.splitlines()[new_line.diff_line] == "+Run the installer with sudo, then restart."


def test_adjacent_changed_words_read_as_one_stretch(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, "keep the red old car here\n", "keep the blue new car here\n")
    [change] = word_changes(diff)
    assert marked(change, "old") == ["red old"]
    assert marked(change, "new") == ["blue new"]


def test_spacing_only_is_named_whitespace(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, "One  two three.\nFour\n", "One two three.   \nFour\n")
    [change] = word_changes(diff)
    assert change.kind == "whitespace"
    assert change.changed_words == 0
    assert all(s.mark == "same" for line in change.lines for s in line.segments)


def test_rewrapped_paragraph_is_named_rewrap(tmp_path: Path) -> None:
    before = "This paragraph says one thing\nand wraps at a narrow width\nfor no reason.\n"
    after = "This paragraph says one thing and wraps\nat a narrow width for no reason.\n"
    [change] = word_changes(git_diff(tmp_path, before, after))
    assert change.kind == "rewrap"
    assert change.changed_words == 0


def test_rewrap_with_a_changed_word_is_a_word_change(tmp_path: Path) -> None:
    before = "This paragraph says one thing\nand wraps at a narrow width.\n"
    after = "This paragraph says another thing and wraps\nat a narrow width.\n"
    [change] = word_changes(git_diff(tmp_path, before, after))
    assert change.kind == "words"
    assert marked(change, "old") == ["one"]
    assert marked(change, "new") == ["another"]


def test_long_unchanged_stretches_fold_and_keep_their_text(tmp_path: Path) -> None:
    words = " ".join(f"w{i}" for i in range(80))
    before = f"{words} old {words}\n"
    after = f"{words} new {words}\n"
    [change] = word_changes(git_diff(tmp_path, before, after))
    new_line = next(line for line in change.lines if line.side == "new")
    marks = [s.mark for s in new_line.segments]
    assert marks == ["same", "folded", "same", "changed", "same", "folded", "same"]
    assert "".join(s.text for s in new_line.segments) == after.rstrip("\n")
    folded = [s for s in new_line.segments if s.mark == "folded"]
    assert all(folded_words(s.text) > FOLD_WORDS - 12 for s in folded)


def test_pure_additions_and_removals_are_not_pairs(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, "a\nb\nc\n", "a\nnew line\nb\n")
    # "c" removed at the end and "new line" added between: no removed run meets an added one.
    assert word_changes(diff) == []


def test_pairs_in_two_files_and_two_hunks(tmp_path: Path) -> None:
    body = "".join(f"line {i}\n" for i in range(40))
    diff = git_diff(
        tmp_path,
        body,
        body.replace("line 3\n", "line three\n").replace("line 30\n", "line thirty\n"),
    )
    diff += git_diff(tmp_path / "second", "Hello world\n", "Hello there\n", name="README.md")
    changes = word_changes(diff)
    assert [(c.path, c.old_start, c.new_start) for c in changes] == [
        ("docs/page.md", 4, 4),
        ("docs/page.md", 31, 31),
        ("README.md", 1, 1),
    ]
    assert marked(changes[1], "new") == ["thirty"]


def test_a_huge_block_is_not_compared_word_by_word(tmp_path: Path) -> None:
    before = " ".join(f"a{i}" for i in range(5000)) + "\n"
    after = " ".join(f"b{i}" for i in range(5000)) + "\n"
    [change] = word_changes(git_diff(tmp_path, before, after))
    assert change.kind == "too_long"
    assert change.changed_words == 10000


def test_hostile_text_is_kept_as_text() -> None:
    diff = (
        "diff --git a/x.md b/x.md\n--- a/x.md\n+++ b/x.md\n@@ -1 +1 @@\n"
        "-see <b>this</b>\n+see <script>alert(1)</script>\n"
    )
    [change] = word_changes(diff)
    assert marked(change, "new") == ["<script>alert(1)</script>"]


def test_content_that_looks_like_a_header_is_content(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, "intro\n-- signed, old\nend\n", "intro\n-- signed, new\nend\n")
    assert "\n--- signed, old\n" in diff
    [change] = word_changes(diff)
    assert (change.path, change.old_start) == ("docs/page.md", 2)
    assert marked(change, "old") == ["old"]
    assert marked(change, "new") == ["new"]


def test_a_missing_newline_at_the_end_is_not_a_line(tmp_path: Path) -> None:
    [change] = word_changes(git_diff(tmp_path, "one two", "one three"))
    assert marked(change, "old") == ["two"]
    assert marked(change, "new") == ["three"]


def test_every_line_is_classed_by_the_hunk_it_is_in(tmp_path: Path) -> None:
    diff = git_diff(tmp_path, "intro\n-- old\n++ kept\nend", "intro\n-- new\n++ kept\nend")
    lines = diff.splitlines()
    kinds = dict(zip(lines, line_kinds(lines), strict=True))
    assert kinds["--- a/docs/page.md"] == "file" and kinds["+++ b/docs/page.md"] == "file"
    assert kinds["--- old"] == "del" and kinds["+-- new"] == "add"
    assert kinds[" ++ kept"] == "ctx" and kinds["\\ No newline at end of file"] == "ctx"


def test_the_comparisons_one_diff_may_cost_are_bounded(tmp_path: Path) -> None:
    """Each pair costs old words × new words; once the budget is spent, the pairs left are
    not compared word by word (repetitive text is a word diff's worst case)."""
    side = 1000  # one pair costs a quarter of the budget
    assert side * side * 4 == MAX_COMPARISONS
    paragraphs_before = [" ".join(["a", "b"] * (side // 2)) for _ in range(6)]
    paragraphs_after = [" ".join(["b", "a"] * (side // 2)) for _ in range(6)]
    diff = git_diff(
        tmp_path, "\n\nkeep\n\n".join(paragraphs_before), "\n\nkeep\n\n".join(paragraphs_after)
    )
    kinds = [change.kind for change in word_changes(diff)]
    assert kinds == ["words"] * 4 + ["too_long"] * 2
