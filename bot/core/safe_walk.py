"""One walk of a directory tree that follows no symlink, for trees someone hostile can change.

The sandbox's working tree, a job's ``.git`` and the outbox the container wrote are all
written by code Riverbeam does not trust, while Riverbeam reads them. A walk by path can be
led outside by a directory swapped for a symlink between listing it and entering it. This
walk opens every directory relative to its parent's descriptor with ``O_NOFOLLOW``: a swap
makes the open fail (the directory is then passed over), never followed.

Entries are yielded with their kind, taken from the listing without following (an ``lstat``
only where the filesystem's listing does not say). Nothing is ever opened but directories:
a FIFO or device is reported, never read. What to do with symlinks, special files, depth and
size is the caller's: it says which directories to enter. Stdlib only, because the tool
server inside the container imports it on every job's path.
"""

from __future__ import annotations

import contextlib
import enum
import os
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

# The one way a directory is opened: read its listing, never through a symlink, not inherited.
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class EntryKind(enum.Enum):
    DIRECTORY = "directory"
    FILE = "file"
    SYMLINK = "symlink"
    OTHER = "other"  # a FIFO, socket or device: reported, never opened


@dataclass(frozen=True, slots=True)
class Entry:
    """One name found by the walk. ``path`` is ``/``-joined below the top; ``depth`` is 0 for
    the top's own entries. ``dir_fd`` is its directory's descriptor, valid only until the walk
    is resumed."""

    path: str
    name: str
    kind: EntryKind
    depth: int
    dir_fd: int

    def lstat(self) -> os.stat_result:
        """The entry's own metadata, not what a symlink points at."""
        return os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)


def open_directory(name: str | os.PathLike[str], dir_fd: int | None = None) -> int:
    """A descriptor of the directory ``name`` (relative to ``dir_fd`` when given).

    Raises ``OSError`` (ELOOP for a symlink, ENOTDIR for anything else) instead of following.
    """
    return os.open(name, DIRECTORY_FLAGS, dir_fd=dir_fd)


def open_below(
    top: str | os.PathLike[str] | int, parts: Sequence[str], *, create: bool = False
) -> int:
    """A descriptor of ``top/parts[0]/parts[1]/...``, each directory opened relative to the
    one before, none through a symlink (``top`` itself: a path, or a descriptor borrowed).

    With ``create``, a missing directory is made (mode 0755). Raises ``OSError`` like
    ``open_directory``: ENOENT for a missing one, ELOOP or ENOTDIR for a symlink or a file.
    """
    fd = os.dup(top) if isinstance(top, int) else open_directory(top)
    try:
        for part in parts:
            try:
                child = open_directory(part, fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                child = open_directory(part, fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def walk(
    top: int,
    *,
    enter: Callable[[Entry], bool] | None = None,
    max_depth: int | None = None,
) -> Generator[Entry, None, None]:
    """Every entry below the directory descriptor ``top`` (borrowed, not closed), depth
    first, each directory yielded before what it holds.

    A directory is entered when ``enter`` (default: always) says so and its depth is below
    ``max_depth`` (0: only the top's own entries); one that cannot be opened any more
    (removed, or swapped for a symlink or a file since it was listed) is passed over.
    Iterative, one descriptor per level of depth (a hostile tree may be hundreds of levels
    deep), all closed however the walk ends: finished, raised through, or closed early.
    """
    fds: list[int] = []  # parallel to ``frames`` below the top
    try:
        frames = [(top, "", 0, iter(_listing(top)))]  # (fd, path, depth, entries left)
        while frames:
            dir_fd, base, depth, items = frames[-1]
            item = next(items, None)
            if item is None:
                frames.pop()
                if fds:
                    os.close(fds.pop())
                continue
            entry = _entry(item, base, depth, dir_fd)
            yield entry
            if entry.kind is not EntryKind.DIRECTORY:
                continue
            if max_depth is not None and depth >= max_depth:
                continue
            if enter is not None and not enter(entry):
                continue
            child = _open_child(dir_fd, entry.name)
            if child is not None:
                fds.append(child)
                frames.append((child, entry.path, depth + 1, iter(_listing(child))))
    finally:
        for fd in fds:
            os.close(fd)


def _listing(dir_fd: int) -> list[os.DirEntry[str]]:
    # Listed whole and closed at once: scandir holds a duplicate of the fd while open.
    with os.scandir(dir_fd) as listing:
        return list(listing)


def _entry(item: os.DirEntry[str], base: str, depth: int, dir_fd: int) -> Entry:
    path = f"{base}/{item.name}" if base else item.name
    return Entry(path, item.name, _kind(item), depth, dir_fd)


def _kind(item: os.DirEntry[str]) -> EntryKind:
    if item.is_symlink():
        return EntryKind.SYMLINK
    if item.is_dir(follow_symlinks=False):
        return EntryKind.DIRECTORY
    if item.is_file(follow_symlinks=False):
        return EntryKind.FILE
    return EntryKind.OTHER


def _open_child(dir_fd: int, name: str) -> int | None:
    try:
        return open_directory(name, dir_fd)
    except OSError:
        # Removed, or replaced by a symlink or a file, since it was listed.
        return None


# -- a walk that remembers listings ------------------------------------------------------

SETTLE_NS = 2_000_000_000
"""How old a directory's last change must be before its listing is remembered: two changes
within one tick of the filesystem's clock can leave the same ctime."""

_Identity = tuple[int, int, int]  # st_dev, st_ino, st_ctime_ns


class SettledListings(Generic[T]):
    """What a ``settled_walk`` made of each directory, by its path below the walk's root,
    remembered under the directory's identity: device, inode and ctime. An entry added,
    removed, renamed or replaced in a directory changes its ctime, so a remembered listing
    is used exactly while the directory holds what it held when listed."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[_Identity, T, tuple[str, ...]]] = {}

    def __len__(self) -> int:
        return len(self._known)

    def _find(self, path: str, identity: _Identity) -> tuple[T, tuple[str, ...]] | None:
        known = self._known.get(path)
        return None if known is None or known[0] != identity else (known[1], known[2])

    def _keep(self, path: str, identity: _Identity, made: T, directories: tuple[str, ...]) -> None:
        if identity[2] < time.time_ns() - SETTLE_NS:
            self._known[path] = (identity, made, directories)

    def _forget_all_but(self, seen: set[str]) -> None:
        for gone in self._known.keys() - seen:
            del self._known[gone]


Listing = Callable[[int, str], tuple[T, Sequence[str]]]
"""Makes something of one directory (its descriptor and path): what the caller wants of it,
and the names of the subdirectories to enter."""


def settled_walk(
    top: int,
    listing: Listing[T],
    settled: SettledListings[T] | None = None,
    *,
    base: str = "",
) -> Generator[tuple[int, str, T], None, None]:
    """``(dir_fd, path, made)`` for the directory ``top`` (borrowed, not closed; at ``base``
    below the root ``settled`` is kept for) and every subdirectory ``listing`` names, top
    down, each opened relative to its parent's descriptor as ``walk`` does (one swapped for
    a symlink or a file is passed over). ``dir_fd`` is valid until the walk is resumed.

    A directory whose identity ``settled`` remembers costs an ``fstat``; only one that
    changed is listed again. A walk from the root that finishes forgets the directories it
    did not meet."""
    seen: set[str] = set()
    fds: list[int] = []
    try:
        made, directories = _settled_listing(top, base, listing, settled)
        seen.add(base)
        yield top, base, made
        frames = [(top, base, iter(directories))]
        while frames:
            dir_fd, path, names = frames[-1]
            name = next(names, None)
            if name is None:
                frames.pop()
                if fds:
                    os.close(fds.pop())
                continue
            child = _open_child(dir_fd, name)
            if child is None:
                continue
            fds.append(child)
            child_path = f"{path}/{name}" if path else name
            made, directories = _settled_listing(child, child_path, listing, settled)
            seen.add(child_path)
            yield child, child_path, made
            frames.append((child, child_path, iter(directories)))
    finally:
        for fd in fds:
            os.close(fd)
    if settled is not None and not base:
        settled._forget_all_but(seen)


def _settled_listing(
    dir_fd: int, path: str, listing: Listing[T], settled: SettledListings[T] | None
) -> tuple[T, tuple[str, ...]]:
    if settled is None:
        made, directories = listing(dir_fd, path)
        return made, tuple(directories)
    info = os.fstat(dir_fd)
    identity = (info.st_dev, info.st_ino, info.st_ctime_ns)
    found = settled._find(path, identity)
    if found is not None:
        return found
    made, names = listing(dir_fd, path)
    directories = tuple(names)
    settled._keep(path, identity, made, directories)
    return made, directories
