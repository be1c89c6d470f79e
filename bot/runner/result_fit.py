"""A tool result over the per-result cap, cut so the model can still read it as what it is.

The loop caps every tool result (``ContextBudget.max_result_chars``). A result cut as text
is no longer JSON, and whatever it said after the cut is lost: ``list_tree``'s directory
counts and note, ``read_file``'s continuation note. So a JSON object is cut by its own
structure first, and stays a JSON object that fits:

- ``read_file``: whole lines from the start of its ``content``, with ``end_line``,
  ``truncated`` and a ``note`` saying where to continue, all true of what is shown;
- ``list_tree``: its ``directories`` whole and the start of its page of ``files``, with the
  ``next_offset`` the rest of the page starts at;
- any other object: its longest list (``list_tree``'s ``files``, ``git_log``'s commits)
  shortened from the end, everything else kept, and a ``note`` saying how many are shown.

Only what cannot be cut that way (one line longer than the cap, a bare string) is cut as
text (``bot.runner.budget.cap_result``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bot.runner.budget import cap_result


def fitted_result(content: str, tool: str, limit: int) -> str:
    """``content`` (a tool message's JSON text) within ``limit`` characters."""
    if len(content) <= limit:
        return content
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    if isinstance(value, dict):
        fitted = _read_window(value, limit) if tool == "read_file" else None
        fitted = fitted or (_list_page(value, limit) if tool == "list_tree" else None)
        fitted = fitted or _shorter_list(value, limit)
        if fitted is not None:
            return fitted
    return cap_result(content, tool, limit)


def _read_window(value: dict[str, Any], limit: int) -> str | None:
    text, start, total = value.get("content"), value.get("start_line"), value.get("total_lines")
    if not isinstance(text, str) or not isinstance(start, int) or not isinstance(total, int):
        return None
    # Lines end at "\n" only, as read_file counts them.
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])

    def shown(count: int) -> dict[str, Any]:
        end = start + count - 1
        return {
            **value,
            "content": "".join(lines[:count]),
            "end_line": end,
            "truncated": True,
            "note": (
                f"lines {start}-{end} of {total} are shown (the result cap,"
                f" model.max_result_chars={limit}); call read_file with start_line={end + 1}"
                " for the rest"
            ),
        }

    return _largest_fit(len(lines) - 1, shown, limit, least=1)


def _list_page(value: dict[str, Any], limit: int) -> str | None:
    files, offset, total = value.get("files"), value.get("offset"), value.get("total_files")
    if not isinstance(files, list) or not isinstance(offset, int) or not isinstance(total, int):
        return None

    def shown(count: int) -> dict[str, Any]:
        following = offset + count
        return {
            **value,
            "files": files[:count],
            "next_offset": following,
            "truncated": True,
            "note": (
                f"files {offset + 1}-{following} of {total} are shown (the result cap,"
                f" model.max_result_chars={limit}); call list_tree with offset={following}"
                " for the next page, or narrow with path=<a directory>"
            ),
        }

    return _largest_fit(len(files) - 1, shown, limit, least=1)


def _shorter_list(value: dict[str, Any], limit: int) -> str | None:
    lists = [(len(json.dumps(item)), key) for key, item in value.items() if isinstance(item, list)]
    if not lists:
        return None
    key = max(lists)[1]
    items: list[Any] = value[key]
    earlier = value.get("note")

    def shown(count: int) -> dict[str, Any]:
        said = (
            f"{count} of {len(items)} '{key}' are shown (the result cap,"
            f" model.max_result_chars={limit})"
        )
        note = f"{earlier}; {said}" if isinstance(earlier, str) and earlier else said
        return {**value, key: items[:count], "note": note}

    return _largest_fit(len(items) - 1, shown, limit, least=0)


def _largest_fit(
    most: int, shown: Callable[[int], dict[str, Any]], limit: int, *, least: int
) -> str | None:
    """The JSON of ``shown(count)`` for the largest count in [least, most] that fits."""
    low, high, best = least, most, None
    while low <= high:
        middle = (low + high) // 2
        text = json.dumps(shown(middle))
        if len(text) <= limit:
            best, low = text, middle + 1
        else:
            high = middle - 1
    return best
