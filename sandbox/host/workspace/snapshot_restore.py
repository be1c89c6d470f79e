"""``restore``: rebuild a parked tree from its snapshot, in a freshly prepared workspace.

Every check (``sandbox.host.workspace.snapshot_checks``) passes before anything is written. Past
them only a snapshot whose paths contradict each other (a file beneath a file) can fail,
half-way: the caller discards that workspace. Nothing is ever written outside the tree.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pygit2
from pygit2.enums import CheckoutStrategy, FileMode, ObjectType

from bot.core.errors import BeamError
from sandbox.host.workspace.outbox import untrusted_odb
from sandbox.host.workspace.prepare import Workspace, hand_over
from sandbox.host.workspace.snapshot_checks import (
    Store,
    check_belongs,
    check_fresh,
    check_names,
    check_objects,
    file_contents,
    unpacked,
)
from sandbox.host.workspace.snapshot_format import (
    DEFAULT_MAX_BYTES,
    FileState,
    SnapshotHeader,
    cannot_resume,
    decode,
)
from sandbox.host.workspace.snapshot_tree import open_parent, open_tree, path_problem, vetted
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.refs import HEADS

__all__ = ["restore"]

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def restore(data: bytes, workspace: Workspace, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
    """Rebuild the parked tree in ``workspace``, freshly prepared at the snapshot's base.

    BEM-502 when the snapshot is damaged, tampered with, of another version or for another
    workspace; BEM-503 when it holds more than ``max_bytes``. Nothing is written before every
    check has passed; the files end up owned by the tree's owner, as prepared.
    """
    decoded = decode(data, max_bytes, header_only=False)
    header = decoded.header
    check_belongs(header, workspace)
    root = SandboxRoot(workspace.tree, max_write_bytes=max(1, max_bytes))
    check_names(header, root)
    gitdir = vetted(root.path)
    check_fresh(gitdir, workspace)
    try:
        # Checked against a read-only view of the object store: nothing is written yet.
        objects = unpacked(decoded.pack, decoded.room)
        store = Store(untrusted_odb(gitdir / "objects"), objects)
        check_objects(header, objects, store)
        contents = file_contents(header, decoded.contents, store)
        _write(open_tree(root.path, gitdir, workers=1)[0], header, objects, contents, root)
    except (pygit2.GitError, OSError) as error:
        raise cannot_resume(f"writing it into the tree failed ({error})") from None
    hand_over(root.path, root.path / ".git" / "objects", os.stat(root.path).st_uid)


def _write(
    repo: pygit2.Repository,
    header: SnapshotHeader,
    objects: dict[str, tuple[ObjectType, bytes]],
    contents: dict[str, bytes],
    root: SandboxRoot,
) -> None:
    for key, (kind, raw) in objects.items():
        if str(repo.odb.write(kind, raw)) != key:
            raise cannot_resume(f"object {key} did not hash to its id when written")
    head = pygit2.Oid(hex=header.head.commit)
    # Checked out while HEAD is still at the base, so files the base has and HEAD has not
    # are removed: libgit2 compares the target with HEAD's tree.
    repo.checkout_tree(repo[head], strategy=CheckoutStrategy.FORCE)  # type: ignore[no-untyped-call]
    for name, tip in header.branches.items():
        repo.references.create(HEADS + name, pygit2.Oid(hex=tip), force=True)
    repo.set_head(HEADS + header.head.branch if header.head.branch else head)
    index = repo.index
    index.read(False)
    # Removals first: an added "a/b" may replace a removed file "a".
    for change in header.index:
        if change.mode is None and change.path in index:
            index.remove(change.path)
    for change in header.index:
        if change.mode is not None and change.blob is not None:
            oid = pygit2.Oid(hex=change.blob)
            index.add(pygit2.IndexEntry(change.path, oid, FileMode(change.mode)))
    _write_files(header, contents, root)
    for entry in header.files:
        # No stat data: the next status hashes the file instead of trusting a timestamp
        # that may match the checkout's.
        if entry.path in index:
            old = index[entry.path]
            index.add(pygit2.IndexEntry(entry.path, old.id, old.mode))
    index.write()


def _write_files(header: SnapshotHeader, contents: dict[str, bytes], root: SandboxRoot) -> None:
    """Removals first (what was left out is absent too), then files and links."""
    for skipped in header.skipped:
        if path_problem(root, skipped.path) is None:
            _remove(root.path, skipped.path.split("/"), keep_file=False)
    for entry in header.files:
        _remove(root.path, entry.path.split("/"), keep_file=entry.kind == "file")
    for entry in header.files:
        if entry.kind != "absent":
            _write_file(entry, contents[entry.path], root)


def _write_file(entry: FileState, data: bytes, root: SandboxRoot) -> None:
    """A file through the jail, or a link, beneath directories reached following no link."""
    parts = entry.path.split("/")
    parent = open_parent(root.path, parts, create=True)
    if parent is None:
        raise cannot_resume(f"it puts {entry.path!r} beneath a file or a symbolic link")
    try:
        if entry.kind == "symlink":
            os.symlink(data, os.fsencode(parts[-1]), dir_fd=parent)
            return
        root.write_bytes(entry.path, data)
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
        try:
            os.fchmod(fd, 0o755 if entry.executable else 0o644)
        finally:
            os.close(fd)
    except BeamError as error:
        raise cannot_resume(f"writing {entry.path!r} failed ({error.message})") from None
    finally:
        os.close(parent)


def _remove(top: Path, parts: list[str], *, keep_file: bool) -> None:
    """Unlink whatever is at ``parts`` (a regular file too unless ``keep_file``), following
    nothing, then the directories it leaves empty, as git does."""
    parent = open_parent(top, parts, create=False)
    if parent is None:
        return
    try:
        info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode) or (keep_file and stat.S_ISREG(info.st_mode)):
            return
        os.unlink(parts[-1], dir_fd=parent)
    except FileNotFoundError:
        return
    finally:
        os.close(parent)
    for depth in range(len(parts) - 1, 0, -1):
        parent = open_parent(top, parts[:depth], create=False)
        if parent is None:
            return
        try:
            os.rmdir(parts[depth - 1], dir_fd=parent)
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                return
            raise
        finally:
            os.close(parent)
