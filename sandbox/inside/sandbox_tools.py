"""The nine sandbox tools: a synchronous dispatcher (``sandbox.inside.bound_tools`` wraps it as
``bot.Tool`` objects).

``call_tool(tree, name, args)`` is the whole implementation: it checks the arguments against
the tool's schema (``sandbox.inside.tool_schemas``, BEM-090), runs the tool under the tree's
lock, and returns a JSON object. Every failure leaves as a ``BeamError``: libgit2 errors as
BEM-320, a missing file as BEM-100, refusals with their own codes. The in-container tool
server calls the dispatcher directly; the wrappers, with the specs and the agent's types
(pydantic, JSON Schema), live apart so that the server never loads them (an import contract
in pyproject.toml holds it).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pygit2

from bot.core.authors import utf8
from bot.core.errors import BeamError
from sandbox.inside.tool_schemas import (
    MAX_LIST_ENTRIES,
    MAX_READ_CHARS,
    TOOL_NAMES,
    check_tool_arguments,
)
from sandbox.inside.worktree import WorkingTree

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = ["call_tool", "decode_text"]
MAX_DIRECTORY_SUMMARY = 200
# The names one list_tree page holds at most: with its directories it stays under the loop's
# default cap on a tool result (model.max_result_chars, 24,000).
LIST_PAGE_CHARS = 16_000
# git's own test for binary content: a NUL byte in the first 8000 bytes.
_BINARY_PROBE = 8000

Result = dict[str, "JsonValue"]
Handler = Callable[[WorkingTree, dict[str, Any]], Result]


def call_tool(tree: WorkingTree, name: str, args: Mapping[str, Any]) -> Result:
    """Run sandbox tool ``name`` with ``args`` on ``tree``; a JSON object or a BeamError."""
    if name not in TOOL_NAMES:
        raise BeamError(
            "BEM-089", f"there is no sandbox tool {name!r}; the tools are {', '.join(TOOL_NAMES)}"
        )
    checked = check_tool_arguments(name, dict(args) if isinstance(args, Mapping) else args)
    with tree.lock:
        try:
            return _HANDLERS[name](tree, checked)
        except (FileNotFoundError, NotADirectoryError) as error:
            raise BeamError(
                "BEM-100",
                f"{name}: {error.filename!r} does not exist; use list_tree to see the files",
            ) from error
        except pygit2.GitError as error:
            raise BeamError("BEM-320", f"{name}: git failed: {error}") from error
        except OSError as error:
            raise BeamError("BEM-100", f"{name}: {error.strerror or error}") from error


# -- file tools ------------------------------------------------------------------------


def _list_tree(tree: WorkingTree, args: dict[str, Any]) -> Result:
    root = tree.root
    path = root.normalize(args.get("path", ""))
    files = list(root.walk(path))
    offset = min(args.get("offset", 0), len(files))
    page = _page(files, offset)
    following = offset + len(page)
    more = following < len(files)
    return {
        "path": path,
        # First, so that the structure survives any cut of what follows. The files are
        # named where they are: under the folder a symlinked path leads to.
        "directories": _directory_summary(root.resolve(path), files),
        "files": page,
        "total_files": len(files),
        "offset": offset,
        "next_offset": following if more else None,
        "truncated": more,
        "note": (
            f"files {offset + 1}-{following} of {len(files)} are shown; call again with "
            f"offset={following} for the next page, or narrow with path=<a directory>"
            if more
            else None
        ),
    }


def _page(files: list[str], offset: int) -> list[JsonValue]:
    """The files from ``offset``: at most ``MAX_LIST_ENTRIES``, and no more than
    ``LIST_PAGE_CHARS`` of names, so that a page fits the loop's default result cap."""
    page: list[JsonValue] = []
    size = 0
    for name in files[offset : offset + MAX_LIST_ENTRIES]:
        size += len(name) + 4  # its quotes, comma and space in the JSON
        if page and size > LIST_PAGE_CHARS:
            break
        page.append(name)
    return page


def _directory_summary(path: str, files: list[str]) -> list[JsonValue]:
    """Files per immediate subdirectory of ``path``, largest first, at most
    ``MAX_DIRECTORY_SUMMARY`` of them.

    ``files`` is sorted, so each subdirectory's files are one contiguous run: a binary search
    finds its end instead of a pass over every path.
    """
    prefix = f"{path}/" if path else ""
    counts: list[tuple[str, int]] = []
    position = 0
    while position < len(files):
        name = files[position]
        head, slash, _ = name[len(prefix) :].partition("/")
        if not slash or not name.startswith(prefix):
            position += 1
            continue
        directory = prefix + head
        # "0" sorts right after "/": every path from "dir/" up to "dir0" lies under dir/.
        end = bisect.bisect_left(files, directory + "0", position)
        counts.append((directory, end - position))
        position = max(end, position + 1)
    counts.sort(key=lambda item: -item[1])
    return [{"path": name, "files": count} for name, count in counts[:MAX_DIRECTORY_SUMMARY]]


def _read_file(tree: WorkingTree, args: dict[str, Any]) -> Result:
    root = tree.root
    path = root.normalize(args["path"])
    data = root.read_bytes(path)
    described: Result = {"path": path, "size": len(data), "sha": str(pygit2.hash(data))}
    text = decode_text(data)
    if text is None:
        return {
            **described,
            "binary": True,
            "content": None,
            "start_line": None,
            "end_line": None,
            "total_lines": None,
            "truncated": False,
            "note": "binary file: its content is not shown",
        }
    window = _lines(text, args.get("start_line", 1), args.get("limit"))
    return {**described, "binary": False, **window}


def decode_text(data: bytes) -> str | None:
    """``data`` as text, or None when it is binary: a NUL byte in the first 8,000 bytes
    (git's own test) or bytes that are not UTF-8. The host tools use the same rule, so the
    model sees one notion of a text file."""
    if b"\0" in data[:_BINARY_PROBE]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _lines(text: str, start: int, limit: int | None) -> Result:
    """Lines from ``start`` while they fit in ``MAX_READ_CHARS`` (always at least one), at
    most ``limit`` of them."""
    # Lines end at "\n" only, as editors and git count them (splitlines would also break
    # at form feeds and U+2028).
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    if start > max(len(lines), 1):
        raise BeamError(
            "BEM-090",
            f"read_file: start_line {start} is past the end; the file has {len(lines)} lines",
        )
    taken: list[str] = []
    size = 0
    cut = False
    for line in lines[start - 1 : None if limit is None else start - 1 + limit]:
        if taken and size + len(line) > MAX_READ_CHARS:
            break
        if len(line) > MAX_READ_CHARS:
            line, cut = line[:MAX_READ_CHARS], True
        taken.append(line)
        size += len(line)
    end = start - 1 + len(taken)
    truncated = cut or end < len(lines)
    note: str | None = None
    if cut:
        note = f"line {end} is over {MAX_READ_CHARS} characters and was cut"
    elif truncated and limit is not None and len(taken) == limit:
        more = f"call read_file with start_line={end + 1} for more"
        note = f"lines {start}-{end} of {len(lines)}; {more}"
    elif truncated:
        note = (
            f"content is capped at {MAX_READ_CHARS} characters; "
            f"call read_file with start_line={end + 1} for the rest"
        )
    return {
        "content": "".join(taken),
        "start_line": start,
        "end_line": end,
        "total_lines": len(lines),
        "truncated": truncated,
        "note": note,
    }


def _write_file(tree: WorkingTree, args: dict[str, Any]) -> Result:
    root = tree.root
    path = root.normalize(args["path"])
    data = utf8(args["body"], "body")
    created = not root.exists(path)
    root.write_bytes(path, data)
    return {"path": path, "bytes": len(data), "created": created}


# -- git tools -------------------------------------------------------------------------


def _git_status(tree: WorkingTree, args: dict[str, Any]) -> Result:
    return tree.status().as_json()


def _git_diff(tree: WorkingTree, args: dict[str, Any]) -> Result:
    return tree.diff(args.get("path")).as_json()


def _git_log(tree: WorkingTree, args: dict[str, Any]) -> Result:
    return tree.log(args.get("limit", 20), args.get("path", "")).as_json()


def _git_add(tree: WorkingTree, args: dict[str, Any]) -> Result:
    return tree.add(args["path"]).as_json()


def _git_commit(tree: WorkingTree, args: dict[str, Any]) -> Result:
    return tree.commit(args["message"]).as_json()


def _git_push(tree: WorkingTree, args: dict[str, Any]) -> Result:
    return tree.push(args.get("ref")).as_json()


_HANDLERS: dict[str, Handler] = {
    "list_tree": _list_tree,
    "read_file": _read_file,
    "write_file": _write_file,
    "git_status": _git_status,
    "git_diff": _git_diff,
    "git_log": _git_log,
    "git_add": _git_add,
    "git_commit": _git_commit,
    "git_push": _git_push,
}
