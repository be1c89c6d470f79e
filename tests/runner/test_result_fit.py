"""A tool result over the loop's cap stays JSON and keeps what tells the model where to go
next (``bot.runner.result_fit``): read_file's continuation, list_tree's directory counts."""

from __future__ import annotations

import json
from typing import Any

from bot.runner.result_fit import fitted_result
from sandbox.inside.sandbox_tools import _lines

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


def test_a_large_listing_keeps_its_directories_and_note() -> None:
    files = [
        f"pages/{section}/page-{n}.md" for section in ("common", "linux", "osx") for n in range(700)
    ]
    result = {
        "path": "",
        "files": files[:2_000],
        "total_files": len(files),
        "truncated": True,
        "directories": [
            {"path": "pages/common", "files": 700},
            {"path": "pages/linux", "files": 700},
        ],
        "note": "showing the first 2000 of 2100 files; narrow with path=<one of 'directories'>",
    }

    fitted = json.loads(fitted_result(json.dumps(result), "list_tree", LIMIT))

    assert len(json.dumps(fitted)) <= LIMIT
    assert fitted["directories"] == result["directories"] and fitted["total_files"] == 2_100
    shown = len(fitted["files"])
    assert 0 < shown < 2_000 and fitted["files"] == files[:shown]
    assert (
        fitted["note"].startswith("showing the first 2000") and f"{shown} of 2000" in fitted["note"]
    )


def test_what_has_no_structure_to_cut_is_cut_as_text() -> None:
    one_line = _read("x" * 60_000)

    fitted = fitted_result(json.dumps(one_line), "read_file", LIMIT)

    assert len(fitted) < LIMIT + 300 and "[cut: the result is" in fitted


def test_a_result_that_fits_is_left_as_it_is() -> None:
    small = json.dumps({"files": ["a.md"], "note": None})
    assert fitted_result(small, "list_tree", LIMIT) == small
