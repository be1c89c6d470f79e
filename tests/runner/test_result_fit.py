"""A tool result over the loop's cap stays JSON and keeps what tells the model where to go
next (``bot.runner.result_fit``): read_file's continuation, list_tree's directory counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.runner.result_fit import fitted_result
from sandbox.inside.sandbox_tools import _lines, call_tool
from tests.sandbox.git_kit import build_git_env

LIMIT = 24_000


def _page(lines: int) -> str:
    return "".join(
        f"Line {n}: a sentence of the page, long enough to count.\n" for n in range(1, lines + 1)
    )


def _read(text: str, start: int = 1) -> dict[str, Any]:
    return {
        "path": "docs/long.md",
        "size": len(text),
        "sha": "0" * 40,
        "binary": False,
        **_lines(text, start, None),
    }


def test_a_long_read_file_result_is_whole_lines_with_a_true_continuation() -> None:
    text = _page(3_000)  # about 170,000 characters: read_file returns its first 100,000
    result = _read(text)

    fitted = json.loads(fitted_result(json.dumps(result), "read_file", LIMIT))

    assert len(json.dumps(fitted)) <= LIMIT
    end = fitted["end_line"]
    assert 100 < end < result["end_line"] and fitted["truncated"] is True
    assert fitted["content"] == "".join(text.splitlines(keepends=True)[:end])
    assert f"start_line={end + 1}" in fitted["note"]
    following = _read(text, end + 1)
    assert following["content"].startswith(f"Line {end + 1}:")


def test_a_listing_page_cut_to_the_cap_keeps_its_directories_and_goes_on_where_it_stopped(
    tmp_path: Path,
) -> None:
    env = build_git_env(tmp_path)
    for section in ("common", "linux", "osx"):
        for n in range(300):
            env.write(f"pages/{section}/a-page-with-a-long-descriptive-name-{n:04d}.md", "")
    result = call_tool(env.tree, "list_tree", {})
    limit = 6_000  # an operator's smaller model.max_result_chars

    fitted = json.loads(fitted_result(json.dumps(result), "list_tree", limit))

    assert len(json.dumps(fitted)) <= limit
    assert fitted["directories"] == result["directories"] and fitted["total_files"] == 902
    shown = len(fitted["files"])
    assert 0 < shown < len(result["files"]) and fitted["files"] == result["files"][:shown]
    assert fitted["next_offset"] == shown and fitted["truncated"] is True
    assert f"offset={shown}" in fitted["note"] and "max_result_chars=6000" in fitted["note"]
    following = call_tool(env.tree, "list_tree", {"offset": fitted["next_offset"]})
    assert following["files"][0] == result["files"][shown]


def test_what_has_no_structure_to_cut_is_cut_as_text() -> None:
    one_line = _read("x" * 60_000)

    fitted = fitted_result(json.dumps(one_line), "read_file", LIMIT)

    assert len(fitted) < LIMIT + 300 and "[cut: the result is" in fitted


def test_a_result_that_fits_is_left_as_it_is() -> None:
    small = json.dumps({"files": ["a.md"], "note": None})
    assert fitted_result(small, "list_tree", LIMIT) == small
