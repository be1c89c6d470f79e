"""Keep repository configuration Riverbeam did not write from steering libgit2.

libgit2 runs no hooks, no fsmonitor and no configured filter, textconv, credential helper or
ssh command: it has no code that would start one. It does *honour* configuration, though:
``core.worktree`` moves the working tree, ``include.path`` pulls in other files,
``url.<x>.insteadOf`` and ``remote.*.pushurl`` rewrite where a push goes, and global, XDG and
system files are read as well. A repository can arrive with any of that in ``.git/config``
(a tarball, a clone step, a process that wrote there). The guard makes it irrelevant:

1. **Process-wide**: libgit2's system, XDG, global and ProgramData search paths are emptied
   (``isolate_process_config``), so only the repository's own file is ever read. This is
   a libgit2 setting for the whole process, done once.
2. **Per repository**: ``.git/config`` is a generated file with constant content,
   ``CANONICAL_CONFIG``. Before every operation ``enforce_config`` compares the file's bytes
   with it and atomically replaces anything else (extra keys, includes, a symlink, a missing
   file). Riverbeam's own settings (the origin URL, the commit identity) live in the
   ``WorkingTree`` object, never in the file, so there is nothing in it worth reading.
3. **Layout**: ``.git`` must be a real directory, with no ``commondir`` or object
   ``alternates``, which would make libgit2 read another repository's objects or refs, and
   nothing in it may lead a write elsewhere (BEM-329): the whole directory is walked before
   every operation, and holds only directories and regular files, no symlink, FIFO, socket
   or device at any depth, and no regular file with a second hard link (libgit2 appends to
   reflogs in place, so ``logs/HEAD`` linked to a file outside would grow that file). Object
   files are the one exception to the link rule (see ``_walk``).
4. **Open**: the repository is opened by its ``.git`` path without searching parent
   directories or the environment, and refused unless libgit2 agrees the working tree is the
   root and the repository is not bare.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from pathlib import Path

import pygit2
from pygit2.enums import ConfigLevel, Option, RepositoryOpenFlag

from bot.core import safe_walk
from bot.core.errors import BeamError
from bot.core.safe_walk import EntryKind

__all__ = [
    "CANONICAL_CONFIG",
    "MAX_RULE_FILE_BYTES",
    "RULE_FILES",
    "SettledDirectories",
    "SettledListings",
    "check_layout",
    "check_rule_files",
    "enforce_config",
    "isolate_process_config",
    "open_repository",
]

CANONICAL_CONFIG = (
    b"# Written by Riverbeam, which replaces this file with exactly this content before every\n"
    b"# operation: repository configuration from anywhere else is never read.\n"
    b"[core]\n"
    b"\trepositoryformatversion = 0\n"
    b"\tbare = false\n"
    b"\tfilemode = true\n"
    b"\tsymlinks = true\n"
    b"\tignorecase = false\n"
    b"\tlogallrefupdates = true\n"
    # Refuse to stage or check out names HFS+ or NTFS would fold to .git (git~1, .GIT\u200c):
    # the tree is pushed and checked out on those filesystems too.
    b"\tprotectHFS = true\n"
    b"\tprotectNTFS = true\n"
)

# Files libgit2 opens by path while it scans a tree, in any directory, following links and
# blocking on a FIFO: a link to an outside file would be obeyed (an oracle on its lines
# through ``-diff``), a FIFO would hang the call that holds the tree lock.
RULE_FILES = frozenset({".gitignore", ".gitattributes", ".gitmodules"})
MAX_RULE_FILE_BYTES = 1 << 20
_OUTSIDE_LEVELS = (
    ConfigLevel.PROGRAMDATA,
    ConfigLevel.SYSTEM,
    ConfigLevel.XDG,
    ConfigLevel.GLOBAL,
)
# Files that make libgit2 read objects or refs of another repository.
_REDIRECTS = ("commondir", "objects/info/alternates", "objects/info/http-alternates")
_Identity = tuple[int, int, int]  # st_dev, st_ino, st_ctime_ns of a directory
SettledDirectories = dict[str, _Identity]
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def isolate_process_config() -> None:
    """Give libgit2 no search path for global, XDG, system or ProgramData config, and make it
    verify every object it reads against the object's name.

    An empty path means "search nowhere", so no file anyone plants is ever read. Applied
    again before every repository is opened: the setting is process-wide, and other code
    in the process could have changed it since.
    """
    for level in _OUTSIDE_LEVELS:
        pygit2.settings.search_path[level] = ""
    # libgit2's default, set all the same: hard-linked object files rely on it.
    pygit2.option(Option.ENABLE_STRICT_HASH_VERIFICATION, 1)


def check_layout(workdir: Path, settled: SettledDirectories | None = None) -> Path:
    """The ``.git`` directory of ``workdir``, once its layout redirects nothing (BEM-329).

    ``settled`` remembers object directories found clean, so that a tree checked before
    every operation lists each of them again only once it changed (see ``_walk``).
    """
    gitdir = workdir / ".git"
    try:
        mode = os.lstat(gitdir).st_mode
    except FileNotFoundError:
        raise BeamError(
            "BEM-329", f"{workdir} is not a git repository; call init() to create one"
        ) from None
    if not stat.S_ISDIR(mode):
        raise _layout_error(".git is not a plain directory (a gitfile or symlink)")
    for name in _REDIRECTS:
        if os.path.lexists(gitdir / name):
            raise _layout_error(f".git/{name} points git at another repository's data")
    _walk(gitdir, {} if settled is None else settled)
    return gitdir


SettledListings = safe_walk.SettledListings[tuple[str, ...]]
"""The rule files and subdirectories of each directory of a working tree, remembered."""


def check_rule_files(workdir: Path, settled: SettledListings | None = None) -> None:
    """BEM-329 unless every ignore, attribute and module file of the tree is a plain file.

    Each must be a regular file with one link, of at most ``MAX_RULE_FILE_BYTES``: no
    symlink (git >= 2.32 refuses those too), FIFO, socket, device or hard link; so are
    ``.git/info/exclude`` and ``.git/info/attributes``. Checked before every operation, under the
    tree's lock: the tools run one at a time, so nothing of the model's changes a file
    between this check and libgit2's read.

    Every rule file is checked on every call; they are found by ``safe_walk.settled_walk``,
    which lists a directory again only once what it holds changed (``settled``), so an
    unchanged directory costs an open and an ``fstat``, not a listing of every file in it.
    """
    for name in ("exclude", "attributes"):
        _check_rule_file(workdir, workdir / ".git" / "info" / name)
    top = safe_walk.open_directory(workdir)
    try:
        for dir_fd, path, rule_files in safe_walk.settled_walk(top, _rule_listing, settled):
            for name in rule_files:
                _check_rule_file(workdir, workdir / path / name, dir_fd=dir_fd)
    finally:
        os.close(top)


def _rule_listing(dir_fd: int, path: str) -> tuple[tuple[str, ...], list[str]]:
    rule_files, directories = [], []
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if entry.name in RULE_FILES:
                rule_files.append(entry.name)
            elif entry.is_dir(follow_symlinks=False) and (path or entry.name != ".git"):
                directories.append(entry.name)
    return tuple(rule_files), directories


def _check_rule_file(workdir: Path, path: Path, dir_fd: int | None = None) -> None:
    try:
        # With ``dir_fd``: the name in that directory, reached through no path at all.
        info = os.stat(
            path.name if dir_fd is not None else path, dir_fd=dir_fd, follow_symlinks=False
        )
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > MAX_RULE_FILE_BYTES:
        raise _layout_error(
            f"{path.relative_to(workdir)} is a symlink, a special file, a hard link or over "
            f"{MAX_RULE_FILE_BYTES} bytes, and libgit2 would read it by path"
        )


def _walk(gitdir: Path, settled: SettledDirectories) -> None:
    """Walk ``gitdir``: only directories and regular files, each file with one link.

    ``config``, whatever it is, is left to ``enforce_config``, which replaces it rather than
    refusing it. Entry types come from the listings themselves; only files outside
    ``objects`` cost an ``lstat`` for their link count. A clone may hold thousands of loose
    objects, and listing them costs more than the operation being guarded, so a directory
    under ``objects`` that held only files is remembered by its inode and ctime: any entry
    added, removed, renamed or replaced in it changes its ctime, and then it is listed
    again. One that changed in the last ``safe_walk.SETTLE_NS`` is not remembered, because two
    changes within one tick of the filesystem's clock can leave the same ctime.
    """
    settle_before = time.time_ns() - safe_walk.SETTLE_NS
    identities: dict[str, _Identity] = {}  # object directories entered, by path
    holding_directories: set[str] = set()

    def enter(entry: safe_walk.Entry) -> bool:
        if not entry.path.startswith("objects/"):
            return entry.path != "config"
        # Taken before the listing: a change during it leaves a stale identity, listed again.
        info = entry.lstat()
        identity = (info.st_dev, info.st_ino, info.st_ctime_ns)
        if settled.get(entry.path) == identity:
            return False
        identities[entry.path] = identity
        return True

    top = safe_walk.open_directory(gitdir)
    try:
        for entry in safe_walk.walk(top, enter=enter):
            _check_entry(entry)
            if entry.kind is EntryKind.DIRECTORY:
                holding_directories.add(entry.path.rpartition("/")[0])
    finally:
        os.close(top)
    for path, identity in identities.items():
        if path not in holding_directories and identity[2] < settle_before:
            settled[path] = identity


def _check_entry(entry: safe_walk.Entry) -> None:
    path = entry.path
    if path == "config" or entry.kind is EntryKind.DIRECTORY:
        return
    if entry.kind is EntryKind.SYMLINK:
        raise _layout_error(f".git/{path} is a symlink")
    if entry.kind is not EntryKind.FILE:
        raise _layout_error(f".git/{path} is not a regular file or directory")
    if path.startswith("objects/"):
        # Object files may have more links: workspaces hard-link the mirror's on purpose
        # (sandbox.host.workspace.objectstore). libgit2 never writes into an existing object
        # file (a new one is written aside and renamed into place) and checks each object it
        # reads against its name (strict hash verification), so a shared inode only ever
        # yields the object it names.
        return
    links = entry.lstat().st_nlink
    if links != 1:
        raise _layout_error(
            f".git/{path} has {links} hard links (it shares its content with "
            "another file, and a write to it would change that file too)"
        )


def enforce_config(gitdir: Path) -> bool:
    """Make ``.git/config`` exactly ``CANONICAL_CONFIG``; True when it had to be rewritten."""
    if _read_plain(gitdir / "config") == CANONICAL_CONFIG:
        return False
    temp = f"config.riverbeam-{secrets.token_hex(8)}.tmp"
    try:
        fd = os.open(gitdir / temp, _TEMP_FLAGS, 0o644)
        try:
            os.write(fd, CANONICAL_CONFIG)
        finally:
            os.close(fd)
        # rename() replaces a symlink or hard link at config instead of writing through it.
        os.replace(gitdir / temp, gitdir / "config")
    except OSError as error:
        _remove_quietly(gitdir / temp)
        raise _layout_error(f".git/config cannot be replaced ({error.strerror})") from error
    return True


def open_repository(workdir: Path, gitdir: Path) -> pygit2.Repository:
    """Open the repository at ``gitdir``; refuse it unless its working tree is ``workdir``."""
    isolate_process_config()
    try:
        repo = pygit2.Repository(str(gitdir), flags=RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError as error:
        raise BeamError("BEM-329", f"{workdir} cannot be opened as a repository: {error}") from None
    if repo.is_bare or repo.workdir is None or Path(repo.workdir).resolve() != workdir:
        raise _layout_error(f"libgit2 places its working tree at {repo.workdir!r}")
    return repo


def _read_plain(path: Path) -> bytes | None:
    """The bytes of a regular, unlinked-elsewhere file; None for anything else."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None  # missing, or a symlink (ELOOP): replaced either way
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return None
        return os.read(fd, len(CANONICAL_CONFIG) + 1)
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        return


def _layout_error(problem: str) -> BeamError:
    return BeamError(
        "BEM-329",
        f"the repository's metadata would redirect git outside the working tree: {problem}. "
        "Riverbeam refuses to work in it; recreate the working tree from a plain clone",
    )
