"""What changed in a working tree: HEAD → index (staged) and index → files (unstaged).

Both ``git_status`` and ``git_diff`` start here. Comparing the index with the files costs one
``lstat`` per tracked file, and libgit2 makes them one after another: on a 20,000-file tree
that is nearly all of the time. git hides the same cost with threads (``core.preloadIndex``).
We do the equivalent: ``plan_groups`` splits the tree into groups of paths that together
cover every tracked path *and* every name on disk, and ``scan`` diffs the groups on parallel
threads, each with its own ``pygit2.Repository`` (libgit2 objects are not shared between
threads; cffi releases the GIL while libgit2 works).

pygit2 has no pathspec argument on its diff methods, so the two diffs are bound here through
pygit2's own cffi layer, the way pygit2 itself calls them. Pathspecs are always *literal*
(``DISABLE_PATHSPEC_MATCH``): a file named ``*.md`` matches only itself.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pygit2
from pygit2.enums import DeltaStatus, DiffOption, FileMode
from pygit2.errors import check_error
from pygit2.ffi import C, ffi

from bot.core import safe_walk
from bot.core.safe_walk import EntryKind

__all__ = [
    "MAX_NESTING",
    "SCAN_FLAGS",
    "Change",
    "Changes",
    "TooDeep",
    "diff_index_to_workdir",
    "diff_tree_to_index",
    "files_on_disk",
    "plan_groups",
    "scan",
    "skipping_deep",
]

SCAN_FLAGS = (
    DiffOption.INCLUDE_UNTRACKED
    | DiffOption.RECURSE_UNTRACKED_DIRS
    | DiffOption.INCLUDE_TYPECHANGE
    | DiffOption.DISABLE_PATHSPEC_MATCH
)
# Below this many index entries a single libgit2 call is faster than any thread hand-off.
PARALLEL_MIN_ENTRIES = 2_000
# Planning splits directories until none holds more than 1/(groups x this) of the files,
# and gives up on a directory wider than _MAX_FANOUT or after _MAX_EXPANSIONS splits.
_PIECES_PER_GROUP = 4
_MAX_EXPANSIONS = 64
_MAX_FANOUT = 512
# libgit2's working-directory iterator refuses to enter a directory this many levels down
# ("directory nesting too deep"), and the whole diff fails with it.
MAX_NESTING = 100
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Change:
    """One changed path in one of the two comparisons."""

    path: str
    old_path: str
    status: DeltaStatus
    mode: int  # of the new side: a gitlink (submodule) is 0o160000

    @property
    def is_file_on_disk(self) -> bool:
        """True for an unstaged change whose new side is a file (not a deletion, a
        submodule's commit, or an untracked nested repository ending in ``/``)."""
        return (
            self.status != DeltaStatus.DELETED
            and self.mode != FileMode.COMMIT
            and not self.path.endswith("/")
        )


@dataclass(frozen=True, slots=True)
class Changes:
    staged: tuple[Change, ...]
    unstaged: tuple[Change, ...]
    # Directories MAX_NESTING levels down, left out of both comparisons (see skipping_deep).
    skipped: tuple[str, ...] = ()

    def paths(self) -> list[str]:
        """Every path either comparison touches, old and new names, sorted."""
        names = {c.path for c in self.staged + self.unstaged}
        names.update(c.old_path for c in self.staged + self.unstaged)
        return sorted(names)


def diff_tree_to_index(
    repo: pygit2.Repository,
    tree: pygit2.Tree | None,
    index: pygit2.Index,
    paths: Sequence[bytes] | None,
    flags: DiffOption,
    max_size: int = 0,
) -> pygit2.Diff:
    """HEAD's tree (None: unborn, the empty tree) against the index, limited to ``paths``.

    When another diff is merged into this one, its patches are generated with *these*
    options: pass the flags and ``max_size`` the merged patches need.
    """
    ctree = ffi.new("git_tree **")
    if tree is not None:
        ffi.buffer(ctree)[:] = tree._pointer[:]
    return _diff(repo, paths, flags, max_size, C.git_diff_tree_to_index, ctree[0], index._index)


def diff_index_to_workdir(
    repo: pygit2.Repository,
    index: pygit2.Index,
    paths: Sequence[bytes] | None,
    flags: DiffOption,
    max_size: int = 0,
) -> pygit2.Diff:
    """The index against the files on disk, limited to ``paths``.

    Files over ``max_size`` bytes (0: libgit2's default, 512 MiB) are treated as binary, so
    their content is never loaded to build a patch.
    """
    return _diff(repo, paths, flags, max_size, C.git_diff_index_to_workdir, index._index)


def _diff(
    repo: pygit2.Repository,
    paths: Sequence[bytes] | None,
    flags: DiffOption,
    max_size: int,
    function: Any,
    *args: Any,
) -> pygit2.Diff:
    options = ffi.new("git_diff_options *")
    check_error(C.git_diff_options_init(options, 1))
    options.flags = int(flags | DiffOption.DISABLE_PATHSPEC_MATCH)
    options.max_size = max_size
    # The char buffers must outlive the call: cffi frees them with these Python objects.
    strings = [ffi.new("char[]", path) for path in paths or ()]
    array = ffi.new("char *[]", strings)
    if strings:
        options.pathspec.strings = array
        options.pathspec.count = len(strings)
    out = ffi.new("git_diff **")
    check_error(function(out, repo._repo, *args, options))
    return pygit2.Diff.from_c(bytes(ffi.buffer(out)[:]), repo)


def scan(
    repos: Sequence[pygit2.Repository],
    tree: pygit2.Tree | None,
    paths: Sequence[bytes] | None = None,
    *,
    min_parallel: int = PARALLEL_MIN_ENTRIES,
) -> Changes:
    """Staged and unstaged changes; ``repos`` (one per thread) all open the same repository.

    The whole tree (``paths`` None) is split across ``repos`` once the index has at least
    ``min_parallel`` entries. Directories nested too deep for libgit2 are left out and named
    in ``skipped``; TooDeep when every path asked for lies in one.
    """

    def run(covered: Sequence[bytes] | None) -> Changes:
        return _scan(repos, tree, covered, min_parallel)

    changes, skipped = skipping_deep(repos[0], paths, run)
    return dataclasses.replace(changes, skipped=skipped) if skipped else changes


class TooDeep(Exception):
    """Every path a scan was asked for lies in a directory nested too deep for libgit2."""

    def __init__(self, skipped: tuple[str, ...]) -> None:
        super().__init__(skipped)
        self.skipped = skipped


def skipping_deep(
    repo: pygit2.Repository,
    paths: Sequence[bytes] | None,
    run: Callable[[Sequence[bytes] | None], _T],
) -> tuple[_T, tuple[str, ...]]:
    """``run(paths)``, and the directories it had to leave out (none, mostly).

    When libgit2 gives up on a directory nested ``MAX_NESTING`` levels down (a hostile tree
    can hold one), ``run`` is called again with literal pathspecs that cover ``paths``
    (None: the whole tree) except each such directory: the rest of the tree stays usable.
    Only that failure pays for the walk that finds them.
    """
    try:
        return run(paths), ()
    except pygit2.GitError as error:
        if "nesting too deep" not in str(error):
            raise
        workdir = os.fsencode(repo.workdir)
        deep = _deep_directories(workdir)
        if not deep:
            raise
    skipped = tuple(sorted(os.fsdecode(path) for path in deep))
    covered = _covering(_SortedPaths(_fresh_index(repo)), workdir, list(paths or [b""]), deep)
    if not covered:
        raise TooDeep(skipped)
    return run(covered), skipped


def _deep_directories(workdir: bytes) -> set[bytes]:
    """Each directory ``MAX_NESTING`` levels down, not entered; links are not followed."""
    found: set[bytes] = set()
    stack: list[tuple[bytes, int]] = [(b"", 0)]
    while stack:
        prefix, depth = stack.pop()
        for name, is_dir in _on_disk(workdir, prefix):
            if not is_dir:
                continue
            if depth + 1 >= MAX_NESTING:
                found.add(name)
            else:
                stack.append((name + b"/", depth + 1))
    return found


def _covering(
    paths: _SortedPaths, workdir: bytes, roots: list[bytes], deep: set[bytes]
) -> list[bytes]:
    """Literal pathspecs naming everything under ``roots`` (``b""``: the tree) but ``deep``:
    a directory holding one is replaced by its children, down to the deep ones."""
    covered: list[bytes] = []
    while roots:
        root = roots.pop()
        if any(root == d or root.startswith(d + b"/") for d in deep):
            continue
        if not any(not root or d.startswith(root + b"/") for d in deep):
            covered.append(root)
            continue
        roots.extend(_children(paths, workdir, root, max_fanout=None) or ())
    return sorted(covered)


def _scan(
    repos: Sequence[pygit2.Repository],
    tree: pygit2.Tree | None,
    paths: Sequence[bytes] | None,
    min_parallel: int,
) -> Changes:
    main = repos[0]
    index = _fresh_index(main)
    staged = _changes(diff_tree_to_index(main, tree, index, paths, SCAN_FLAGS))
    groups: list[list[bytes] | None] = [list(paths) if paths else None]
    if paths is None and len(repos) > 1 and len(index) >= min_parallel:
        workdir = os.fsencode(main.workdir)
        groups = [*plan_groups(_SortedPaths(index), workdir, len(repos))]
    if len(groups) == 1:
        unstaged = _unstaged(main, groups[0])
    else:
        # Imported here: only a large tree scans in parallel, and concurrent.futures (with
        # logging) would be a share of every tool server's start.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(groups) - 1) as pool:
            others = pool.map(_unstaged, repos[1 : len(groups)], groups[1:])
            first = _unstaged(main, groups[0])
            unstaged = first + tuple(change for part in others for change in part)
    return Changes(staged, tuple(sorted(unstaged, key=lambda c: c.path)))


def _unstaged(repo: pygit2.Repository, paths: list[bytes] | None) -> tuple[Change, ...]:
    return _changes(diff_index_to_workdir(repo, _fresh_index(repo), paths, SCAN_FLAGS))


def _fresh_index(repo: pygit2.Repository) -> pygit2.Index:
    index: pygit2.Index = repo.index
    index.read(False)  # reload only if another writer changed the file on disk
    return index


def files_on_disk(diff: pygit2.Diff) -> set[str]:
    """The paths of an index-to-files ``diff`` whose new side is a file on disk."""
    return {change.path for change in _changes(diff) if change.is_file_on_disk}


def _changes(diff: pygit2.Diff) -> tuple[Change, ...]:
    return tuple(
        Change(delta.new_file.path, delta.old_file.path, delta.status, delta.new_file.mode)
        for delta in diff.deltas
    )


class _SortedPaths:
    """The index's paths (sorted by bytes) read one at a time through libgit2.

    Copying 20,000 entries into Python costs more than the scan saves; planning needs only
    a few hundred lookups by position.
    """

    def __init__(self, index: pygit2.Index) -> None:
        self._pointer = index._index
        self._size = int(C.git_index_entrycount(self._pointer))

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, position: int) -> bytes:
        return bytes(ffi.string(C.git_index_get_byindex(self._pointer, position).path))

    def first_at_or_after(self, key: bytes, low: int = 0) -> int:
        return bisect.bisect_left(self, key, low)


def plan_groups(paths: _SortedPaths, workdir: bytes, groups: int) -> list[list[bytes]]:
    """Up to ``groups`` lists of literal pathspecs that together cover the whole tree.

    Starting from the root, the heaviest directory (by tracked files) is replaced by its
    children until units are small enough to balance. A directory's children are the names
    the index has under it *and* the names on disk, so tracked files deleted from disk and
    untracked files are covered as well as the rest.
    """
    total = len(paths)
    units: dict[bytes, int] = {b"": total}
    heap: list[tuple[int, bytes]] = [(-total, b"")]
    expansions = 0
    while (
        heap and expansions < _MAX_EXPANSIONS and -heap[0][0] * groups * _PIECES_PER_GROUP > total
    ):
        _, directory = heapq.heappop(heap)
        children = _children(paths, workdir, directory)
        if children is None:
            continue
        del units[directory]
        expansions += 1
        for name, (weight, is_dir) in children.items():
            units[name] = weight
            if is_dir and weight > 1:
                heapq.heappush(heap, (-weight, name))
    if b"" in units:
        return [[]]  # the root could not be split: one group, no pathspec
    return _balance(units, groups)


def _children(
    paths: _SortedPaths, workdir: bytes, directory: bytes, *, max_fanout: int | None = _MAX_FANOUT
) -> dict[bytes, tuple[int, bool]] | None:
    """Each child of ``directory``: its tracked-file count and whether it is a directory;
    None when there are more than ``max_fanout``."""
    limit = math.inf if max_fanout is None else max_fanout
    prefix = directory + b"/" if directory else b""
    children: dict[bytes, tuple[int, bool]] = {}
    position = paths.first_at_or_after(prefix) if prefix else 0
    end = paths.first_at_or_after(directory + b"0") if prefix else len(paths)
    while position < end:
        head, slash, _ = paths[position][len(prefix) :].partition(b"/")
        name = prefix + head
        # Every path from name/ up to (not including) name0 lies under name/.
        after = paths.first_at_or_after(name + b"0", position) if slash else position + 1
        children[name] = (after - position, bool(slash))
        position = after
        if len(children) > limit:
            return None
    for name, is_dir in _on_disk(workdir, prefix):
        children.setdefault(name, (1, is_dir))
    return children if len(children) <= limit else None


def _on_disk(workdir: bytes, prefix: bytes) -> Iterator[tuple[bytes, bool]]:
    try:
        parts = [os.fsdecode(part) for part in prefix.split(b"/") if part]
        fd = safe_walk.open_below(os.fsdecode(workdir), parts)
    except OSError:
        return  # gone, or not a directory any more: the index names are all that is left
    try:
        listed = [
            (os.fsencode(entry.name), entry.kind is EntryKind.DIRECTORY)
            for entry in safe_walk.walk(fd, max_depth=0)
        ]
    finally:
        os.close(fd)
    for name, is_dir in listed:
        if prefix or name != b".git":
            yield prefix + name, is_dir


def _balance(units: dict[bytes, int], groups: int) -> list[list[bytes]]:
    """Longest-processing-time first: each unit, heaviest first, to the lightest group."""
    loads = [(0, number) for number in range(groups)]
    members: list[list[bytes]] = [[] for _ in range(groups)]
    for name, weight in sorted(units.items(), key=lambda item: (-item[1], item[0])):
        load, number = heapq.heappop(loads)
        members[number].append(name)
        heapq.heappush(loads, (load + weight, number))
    return [sorted(group) for group in members if group]
