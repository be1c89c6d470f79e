"""The path jail: turn a model-supplied relative path into a file the tools may touch.

Both the model and the repository content are hostile. Every path goes through two stages:

*Lexical checks* (``normalize``), in this order: BEM-300 empty, NUL, not UTF-8 or over-long
(whole path and per name); BEM-301 absolute (``/``, ``\\``, a drive like ``C:``); BEM-302 a
``..`` component (``\\`` counts as a separator here); BEM-304 a component that is ``.git`` in
any disguise (see ``sandbox.inside.metadata_names``). Nothing is ever URL-decoded: ``%2e%2e``
is a name.

*Resolution* walks the tree one component at a time from a directory file descriptor, opening
each name with ``O_PATH | O_NOFOLLOW`` so the kernel never follows a symlink for us. Symlinks
are read and re-walked by the jail itself: an absolute target, a ``..`` that climbs above the
root (even if it would come back), or more than 40 hops is BEM-303; a target component that is
metadata is BEM-304 (so ``docs/x -> ../.git/config`` is 304: the real reason, not an escape).
Because every step is relative to an fd already inside the root, swapping a component for an
outside symlink mid-call can only make the call fail, never escape. The final file is opened
``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat``: a regular file (else BEM-305), one link
(a hard link may share its inode with a file outside: BEM-303), within the size cap (BEM-305).

Missing files and non-directories in the middle of a path are not refusals: they raise
``FileNotFoundError`` and ``NotADirectoryError`` like the rest of Python's file API.

``git_file`` reads a path git listed the way git sees it (no symlink followed anywhere on
the way, a symlink at the end read as its target), for the git tools, which must never let
libgit2 read working files by path (see ``sandbox.inside.staging``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bot.core import safe_walk
from bot.core.errors import BeamError
from sandbox.inside.metadata_names import is_repository_metadata

__all__ = ["GitFile", "SandboxRoot", "is_repository_metadata"]

MAX_SYMLINK_HOPS = 40
MAX_NAME_BYTES = 255
NEW_FILE_MODE = 0o644
NEW_DIR_MODE = 0o755
# The modes git records for a file, an executable file and a symlink.
FILE_MODE = 0o100644
EXECUTABLE_MODE = 0o100755
LINK_MODE = 0o120000

# O_PATH opens without reading: no FIFO blocks, no device driver runs, and with O_NOFOLLOW a
# symlink is opened as itself, so fstat tells us its type without a second lookup.
_PROBE_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DRIVE = re.compile(r"[A-Za-z]:")
_SEPARATORS = re.compile(r"[/\\]")
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class SandboxRoot:
    """A directory the tools may read and write inside, and nothing outside it."""

    path: Path
    max_read_bytes: int
    max_write_bytes: int
    max_path_bytes: int

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_read_bytes: int = 1 << 20,
        max_write_bytes: int = 1 << 20,
        max_path_bytes: int = 1024,
    ) -> None:
        if min(max_read_bytes, max_write_bytes, max_path_bytes) < 1:
            raise ValueError("SandboxRoot limits must be positive")
        if not os.fspath(path):
            # Path("") is the current directory: never jail whatever that happens to be.
            raise ValueError("sandbox root path is empty")
        try:
            self.path = Path(path).resolve(strict=True)
        except OSError as exc:
            raise ValueError(f"sandbox root {os.fspath(path)!r} does not exist") from exc
        if not self.path.is_dir():
            raise ValueError(f"sandbox root {os.fspath(path)!r} is not a directory")
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        self.max_path_bytes = max_path_bytes
        # A resolved path cannot be nameable if it is deeper than the longest nameable path;
        # the bound also caps how many directory fds one resolution holds open.
        self._max_depth = max_path_bytes // 2 + 1
        # Each directory's files and subdirectories as the last listing found them.
        self._listings: safe_walk.SettledListings[tuple[str, ...]] = safe_walk.SettledListings()

    def __repr__(self) -> str:
        return f"SandboxRoot({str(self.path)!r})"

    def __getstate__(self) -> dict[str, object]:
        # A copy or a pickle starts with no remembered listings: they describe directories
        # by device and inode, which mean nothing on another machine or filesystem.
        return {**self.__dict__, "_listings": safe_walk.SettledListings()}

    # -- public API ------------------------------------------------------------------------

    def normalize(self, rel: str) -> str:
        """Lexical checks only (BEM-300, 301, 302, 304); the canonical relative path."""
        return "/".join(self._components(rel))

    def read_bytes(self, rel: str) -> bytes:
        """The content of the regular file at ``rel``, after every check."""
        parts = self._file_components(rel)
        with self._cursor() as cursor:
            found = self._find(cursor, parts, create=False)
            st = found.existing()
            # Checked before opening as well as after, so a device is never opened at all.
            self._require_plain_file(st, found.shown)
            self._require_size(st.st_size, self.max_read_bytes, found.shown, "read")
            return self._read_found(found, st)

    def git_file(self, rel: str, *, read: bool = True) -> GitFile:
        """The file at index path ``rel`` as git records it, read through the jail's fds.

        git never follows a symlink on the way to a path it tracks, so neither does this:
        every directory on the way must be a real one, and the last name must be a regular
        file (one link, as for ``read_bytes``) or a symlink, whose target is its content.
        The path is one git has just listed as a file, so a directory on the way that is
        now a symlink, a file or missing, or a last name that is gone or a directory, means
        the tree changed meanwhile: BEM-303. With ``read`` False, or for a file over the
        read cap, ``data`` is None.
        """
        parts = self._file_components(rel)
        with self._cursor() as cursor:
            for name in parts[:-1]:
                probed = _probe(cursor.fd, name)
                if probed is None or not stat.S_ISDIR(probed[1].st_mode):
                    if probed is not None:
                        os.close(probed[0])
                    raise _changed_error(cursor.shown(name))
                self._descend(cursor, name, probed[0])
            found = _Found(cursor.fd, parts[-1], cursor.shown(parts[-1]), None)
            probed = _probe(cursor.fd, found.leaf)
            if probed is None:
                raise _changed_error(found.shown)
            fd, st = probed
            if stat.S_ISDIR(st.st_mode):
                os.close(fd)
                raise _changed_error(found.shown)
            if stat.S_ISLNK(st.st_mode):
                # readlinkat on the probed fd: the very link whose stat we hold.
                try:
                    target = os.fsencode(os.readlink("", dir_fd=fd))
                finally:
                    os.close(fd)
                return GitFile(LINK_MODE, st, target if read else None)
            os.close(fd)
            self._require_plain_file(st, found.shown)
            mode = EXECUTABLE_MODE if st.st_mode & stat.S_IXUSR else FILE_MODE
            if not read or st.st_size > self.max_read_bytes:
                return GitFile(mode, st, None)
            return GitFile(mode, st, self._read_found(found, st))

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Replace (or create) the file at ``rel`` atomically, creating parent directories."""
        parts = self._file_components(rel)
        if not isinstance(data, bytes):
            raise TypeError(f"write_bytes needs bytes, not {type(data).__name__}")
        # The cap is checked before resolution, which may create directories.
        self._require_size(len(data), self.max_write_bytes, "/".join(parts), "write")
        with self._cursor() as cursor:
            found = self._find(cursor, parts, create=True)
            mode = NEW_FILE_MODE
            if found.st is not None:
                self._require_plain_file(found.st, found.shown)
                # Never recreate set-id or sticky bits, whatever the old file had.
                mode = stat.S_IMODE(found.st.st_mode) & 0o777
            _replace(found.dir_fd, found.leaf, data, mode)

    def resolve(self, rel: str) -> str:
        """The canonical relative path of an existing file or directory, symlinks followed."""
        with self._cursor() as cursor:
            found = self._find(cursor, self._components(rel), create=False)
            st = found.existing()
            if not stat.S_ISDIR(st.st_mode):
                self._require_plain_file(st, found.shown)
            return found.shown

    def is_dir(self, rel: str) -> bool:
        """True for an existing directory; False when missing. Refusals still raise."""
        st = self._stat_or_none(rel)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def exists(self, rel: str) -> bool:
        """True when ``rel`` resolves, inside the jail, to something that exists."""
        return self._stat_or_none(rel) is not None

    def walk(self, rel: str = "") -> Iterator[str]:
        """Regular files and symlinks under ``rel`` (a directory), sorted, metadata skipped."""
        with self._cursor() as cursor:
            found = self._find(cursor, self._components(rel), create=False)
            st = found.existing()
            if not stat.S_ISDIR(st.st_mode):
                raise BeamError(
                    "BEM-305",
                    f"{found.shown!r} is {_kind(st.st_mode)}, not a directory; "
                    "list a directory, or read the file with read_file",
                )
            top = self._open_leaf(found, safe_walk.DIRECTORY_FLAGS)
        paths = self._collect(top, found.shown)
        # Built eagerly: a lazy generator would hold directory fds open for as long as the
        # caller keeps it unfinished.
        return iter(sorted(paths))

    # -- lexical checks --------------------------------------------------------------------

    def _components(self, rel: str) -> list[str]:
        if not isinstance(rel, str):
            raise BeamError("BEM-300", f"path must be a string, not {type(rel).__name__}")
        pieces = rel.split("/")
        self._check_size(rel, pieces)
        # Judged on the first real component: "./C:" is as absolute as "C:", so the
        # canonical form normalize() returns is accepted again.
        first = next((piece for piece in pieces if piece not in ("", ".")), "")
        if rel.startswith("/") or first.startswith("\\") or _DRIVE.match(first):
            raise BeamError(
                "BEM-301",
                f"{_show(rel)} is absolute; give a path relative to the working tree root, "
                "like 'docs/index.md'",
            )
        if ".." in _SEPARATORS.split(rel):
            raise BeamError(
                "BEM-302",
                f"{_show(rel)} contains a '..' component; paths cannot climb out of the "
                "working tree. Give the path from the root, like 'docs/index.md'",
            )
        parts = [piece for piece in pieces if piece not in ("", ".")]
        for part in parts:
            if is_repository_metadata(part):
                raise _metadata_error(_show(rel))
        return parts

    def _check_size(self, rel: str, pieces: list[str]) -> None:
        if "\x00" in rel:
            raise BeamError("BEM-300", f"{_show(rel)} contains a NUL character; remove it")
        try:
            size = len(rel.encode("utf-8"))
        except UnicodeEncodeError:
            raise BeamError("BEM-300", f"{_show(rel)} is not valid UTF-8") from None
        if size > self.max_path_bytes:
            raise BeamError(
                "BEM-300",
                f"path is {size} bytes of UTF-8, over the limit of {self.max_path_bytes}; "
                "use a shorter path",
            )
        for piece in pieces:
            if len(piece.encode("utf-8")) > MAX_NAME_BYTES:
                raise BeamError(
                    "BEM-300",
                    f"the name {_show(piece)} is over {MAX_NAME_BYTES} bytes; "
                    "use a shorter file or directory name",
                )

    def _file_components(self, rel: str) -> list[str]:
        parts = self._components(rel)
        if not parts:
            what = "is empty" if rel == "" else "names the working tree root, not a file"
            raise BeamError("BEM-300", f"path {what}; give a file path like 'docs/index.md'")
        return parts

    # -- resolution ------------------------------------------------------------------------

    def _cursor(self) -> _Cursor:
        # The root is reopened on every call rather than held for the object's life: the jail
        # then always works on the directory at ``self.path``, the same one libgit2 opens by
        # path, copies and pickles of a SandboxRoot hold no fd, and the cost is one openat.
        return _Cursor(os.open(self.path, _ROOT_FLAGS))

    def _find(self, cursor: _Cursor, parts: list[str], *, create: bool) -> _Found:
        """Walk ``parts`` from the root, following in-jail symlinks, up to the last name.

        Returns the last name's directory (held by ``cursor``) and its lstat, or the directory
        itself (``leaf == ""``) when the walk ends on one. With ``create``, missing
        directories named by the request (never those named by a symlink) are made.
        """
        # A stack, top = next name, each with the symlink it came from (None: the request).
        pending: list[tuple[str, str | None]] = [(part, None) for part in reversed(parts)]
        hops = 0
        while pending:
            name, link = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                # Lexical ".." never gets here (BEM-302); handled anyway so that the walk alone
                # never lets openat(fd, "..") step out of the root.
                cursor.climb(link)
                continue
            if link is not None and is_repository_metadata(name):
                raise _metadata_error(f"{link!r} (a symlink to {cursor.shown(name)!r})")
            probed = _probe(cursor.fd, name)
            if probed is None:
                if pending and create and link is None:
                    _mkdir(cursor.fd, name)
                    # Probe whatever is there now (a racing symlink, say); tagged as not from
                    # the request so that a vanished directory is reported, never remade.
                    pending.append((name, cursor.shown(name)))
                    continue
                if pending:
                    raise FileNotFoundError(errno.ENOENT, "No such directory", cursor.shown(name))
                return _Found(cursor.fd, name, cursor.shown(name), None)
            fd, st = probed
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                shown = cursor.shown(name)
                target = _read_link(fd, shown, hops)
                pending.extend((piece, shown) for piece in reversed(target.split("/")))
            elif not pending:
                os.close(fd)
                return _Found(cursor.fd, name, cursor.shown(name), st)
            elif stat.S_ISDIR(st.st_mode):
                self._descend(cursor, name, fd)
            else:
                os.close(fd)
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", cursor.shown(name))
        return _Found(cursor.fd, "", cursor.shown(""), os.fstat(cursor.fd))

    def _descend(self, cursor: _Cursor, name: str, fd: int) -> None:
        if len(cursor.names) >= self._max_depth:
            os.close(fd)
            raise BeamError(
                "BEM-300",
                f"the path resolves deeper than {self._max_depth} directories; use a shorter path",
            )
        cursor.push(name, fd)

    def _stat_or_none(self, rel: str) -> os.stat_result | None:
        parts = self._components(rel)
        with self._cursor() as cursor:
            try:
                return self._find(cursor, parts, create=False).st
            except (FileNotFoundError, NotADirectoryError):
                return None

    @staticmethod
    def _open_leaf(found: _Found, flags: int) -> int:
        try:
            return os.open(found.leaf or ".", flags, dir_fd=found.dir_fd)
        except OSError as exc:
            # The name was checked a moment ago; ELOOP/ENOTDIR mean it was replaced since.
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                raise _changed_error(found.shown) from None
            raise

    # -- file checks -----------------------------------------------------------------------

    def _read_found(self, found: _Found, st: os.stat_result) -> bytes:
        """Open the checked file ``found`` (lstat ``st``), check it again from its fd, read."""
        fd = self._open_leaf(found, _READ_FLAGS)
        try:
            opened = os.fstat(fd)
            _require_same_inode(st, opened, found.shown)
            self._require_plain_file(opened, found.shown)
            self._require_size(opened.st_size, self.max_read_bytes, found.shown, "read")
            return self._read_capped(fd, found.shown)
        finally:
            os.close(fd)

    @staticmethod
    def _require_plain_file(st: os.stat_result, shown: str) -> None:
        if not stat.S_ISREG(st.st_mode):
            raise BeamError(
                "BEM-305",
                f"{shown!r} is {_kind(st.st_mode)}, not a regular file; "
                "only regular files can be read or written (use list_tree to see the files)",
            )
        if st.st_nlink > 1:
            raise BeamError(
                "BEM-303",
                f"{shown!r} has {st.st_nlink} hard links; hard links are refused because they "
                "can share content with files outside the working tree",
            )

    @staticmethod
    def _require_size(size: int, cap: int, shown: str, action: str) -> None:
        if size <= cap:
            return
        if action == "read":
            advice = "it cannot be read whole; work with smaller files"
            subject = f"{shown!r} is"
        else:
            advice = "split the content into smaller files"
            subject = f"the body for {shown!r} is"
        raise BeamError(
            "BEM-305", f"{subject} {size} bytes, over the {action} cap of {cap} bytes; {advice}"
        )

    def _read_capped(self, fd: int, shown: str) -> bytes:
        # Read one byte past the cap so a file that grew after fstat is still caught.
        limit = self.max_read_bytes + 1
        chunks: list[bytes] = []
        total = 0
        while total < limit:
            chunk = os.read(fd, limit - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        self._require_size(total, self.max_read_bytes, shown, "read")
        return b"".join(chunks)

    # -- walking ---------------------------------------------------------------------------

    def _collect(self, top: int, prefix: str) -> list[str]:
        """The files and symlinks under the directory fd ``top`` (named ``prefix``).

        Takes ownership of ``top``. Depth stays bounded because paths longer than
        ``max_path_bytes`` are not descended into (the model could not name them anyway).
        A directory unchanged since the last listing is not listed again (``_listings``).
        """

        def listing(dir_fd: int, path: str) -> tuple[tuple[str, ...], list[str]]:
            files, directories = [], []
            with os.scandir(dir_fd) as entries:
                for entry in entries:
                    name = entry.name
                    shown = f"{path}/{name}" if path else name
                    if is_repository_metadata(name) or not self._nameable(shown, top=not path):
                        continue
                    if entry.is_symlink() or entry.is_file(follow_symlinks=False):
                        files.append(shown)
                    elif entry.is_dir(follow_symlinks=False):
                        directories.append(name)
            return tuple(files), directories

        try:
            return [
                name
                for _, _, files in safe_walk.settled_walk(top, listing, self._listings, base=prefix)
                for name in files
            ]
        finally:
            os.close(top)

    def _nameable(self, path: str, *, top: bool) -> bool:
        # Only report paths the jail would accept back: valid UTF-8 (names from disk may carry
        # surrogate escapes), within the length limit, and not looking absolute at the top.
        if path.isascii():
            size = len(path)
        else:
            try:
                size = len(path.encode("utf-8"))
            except UnicodeEncodeError:
                return False
        if size > self.max_path_bytes:
            return False
        return not (top and (path.startswith("\\") or _DRIVE.match(path)))


@dataclass(frozen=True, slots=True)
class GitFile:
    """A working file as git records it: its git mode, its lstat, and its content (for a
    symlink, the target) when it was read."""

    mode: int
    st: os.stat_result
    data: bytes | None


@dataclass(frozen=True, slots=True)
class _Found:
    """Where a resolution ended: ``leaf`` inside ``dir_fd`` ("" = the directory itself)."""

    dir_fd: int
    leaf: str
    shown: str
    st: os.stat_result | None

    def existing(self) -> os.stat_result:
        if self.st is None:
            raise FileNotFoundError(errno.ENOENT, "No such file in the working tree", self.shown)
        return self.st


class _Cursor:
    """The directories entered so far: owned fds from the root down, with their names."""

    __slots__ = ("fds", "names")

    def __init__(self, root_fd: int) -> None:
        self.fds = [root_fd]
        self.names: list[str] = []

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()

    @property
    def fd(self) -> int:
        return self.fds[-1]

    def shown(self, name: str) -> str:
        return "/".join([*self.names, name] if name else self.names)

    def push(self, name: str, fd: int) -> None:
        self.fds.append(fd)
        self.names.append(name)

    def climb(self, link: str | None) -> None:
        # Kept fds, not openat(".."): the kernel's ".." of a directory moved outside the root
        # meanwhile would be outside too.
        if not self.names:
            culprit = "the path" if link is None else f"the symlink {link!r}"
            raise BeamError(
                "BEM-303",
                f"{culprit} points above the working tree root; only symlinks that stay "
                "inside the working tree are followed",
            )
        os.close(self.fds.pop())
        self.names.pop()


def _probe(dir_fd: int, name: str) -> tuple[int, os.stat_result] | None:
    """An O_PATH fd for ``name`` (a symlink opened as itself) and its stat; None if missing."""
    try:
        fd = os.open(name, _PROBE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def _read_link(fd: int, shown: str, hops: int) -> str:
    """The target of the symlink opened as ``fd`` (which is closed), if the jail follows it."""
    try:
        # readlinkat(fd, "") reads the very link we probed; a second lookup by name could
        # read a different one swapped in meanwhile.
        target = os.readlink("", dir_fd=fd)
    finally:
        os.close(fd)
    if hops > MAX_SYMLINK_HOPS:
        raise BeamError(
            "BEM-303",
            f"too many symlinks (more than {MAX_SYMLINK_HOPS}) while resolving {shown!r}; "
            "there is probably a symlink loop",
        )
    if target.startswith("/"):
        raise BeamError(
            "BEM-303",
            f"{shown!r} is a symlink to an absolute path; only relative symlinks that stay "
            "inside the working tree are followed",
        )
    return target


def _mkdir(dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, NEW_DIR_MODE, dir_fd=dir_fd)


def _replace(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Write ``data`` to a fresh temporary file beside ``name``, then rename it over."""
    temp = f".riverbeam-{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, _TEMP_FLAGS, mode, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)  # the umask must not change the mode we preserve
            _write_all(fd, data)
        finally:
            os.close(fd)
        # rename() replaces a symlink swapped in at ``name`` rather than following it.
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _require_same_inode(checked: os.stat_result, opened: os.stat_result, shown: str) -> None:
    if (checked.st_dev, checked.st_ino) != (opened.st_dev, opened.st_ino):
        raise _changed_error(shown)


def _changed_error(shown: str) -> BeamError:
    return BeamError(
        "BEM-303",
        f"{shown!r} changed while it was being resolved (possibly swapped for a symlink); "
        "try again",
    )


def _metadata_error(shown: str) -> BeamError:
    return BeamError(
        "BEM-304",
        f"{shown} is inside repository metadata (.git); files there cannot be read or "
        "written with file tools. Use the git_* tools instead",
    )


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "a special file")


def _show(text: str) -> str:
    # Paths come from the model and may be huge; quote a bounded prefix in messages.
    return repr(text if len(text) <= 80 else text[:80] + "...")
