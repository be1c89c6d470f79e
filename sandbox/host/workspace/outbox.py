"""Reading a job's outbox on the host, as the untrusted input it is.

The outbox is writable by the sandbox uid: anything in it may have been written by a hostile
container. So the host never opens it as a repository (no config parsed, no alternates or
``include.path`` honoured, nothing it names is run) and follows no symlink in it:

* a branch is read straight from ``refs/heads/<name>`` (then ``packed-refs``), walking one
  directory descriptor at a time with ``O_NOFOLLOW``, size-capped, and parsed strictly;
* objects are read through an object database made of only a pack and a loose backend on
  ``objects/``, after checking that nothing under ``objects/`` is a symlink.

``import_commit`` copies the approved commit and whatever it needs that the mirror lacks into
the host-owned mirror. Each object is re-hashed as it is written there and must come out
under the id it was asked for, so the outbox can withhold objects but never substitute them:
what reaches the mirror is exactly the tree the approved commit id names.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileMode, ObjectType

from bot.core import safe_walk
from bot.core.errors import BeamError
from bot.core.safe_walk import EntryKind
from sandbox.inside.refs import HEADS

__all__ = [
    "ApprovedCommit",
    "copy_commit",
    "import_commit",
    "off_approved",
    "outbox_branch",
    "untrusted_odb",
]

MAX_LOOSE_REF_BYTES = 1024
MAX_PACKED_REFS_BYTES = 16 << 20
_OID = re.compile(rb"[0-9a-f]{40}")
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def outbox_branch(outbox: Path, branch: str) -> str | None:
    """The commit id ``refs/heads/<branch>`` holds in the outbox, or None when it has none."""
    loose = _read_untrusted(outbox, [*HEADS.strip("/").split("/"), *branch.split("/")])
    if loose is not None:
        return _parse_loose(loose, branch)
    packed = _read_untrusted(outbox, ["packed-refs"], MAX_PACKED_REFS_BYTES)
    return None if packed is None else _lookup_packed(packed, HEADS + branch)


@dataclass(frozen=True)
class ApprovedCommit:
    """What a person approved a push of: commit ``sha`` on branch ``branch``."""

    sha: str
    branch: str


def off_approved(git_dir: Path, approved: ApprovedCommit) -> str | None:
    """THE check that a job's repository is still on the approved commit, used by the park,
    the resume, the relayed push and the relay: None when ``refs/heads/<branch>`` in
    ``git_dir`` (a tree's ``.git`` or the outbox, read as untrusted data) holds the approved
    commit, else where the branch is instead (``points at <sha>``, ``does not exist``)."""
    found = outbox_branch(git_dir, approved.branch)
    if found == approved.sha:
        return None
    return f"points at {found}" if found else "does not exist"


def import_commit(outbox: Path, mirror: pygit2.Repository, sha: str) -> int:
    """Copy commit ``sha`` and its missing closure from the outbox into the mirror.

    BEM-350 when the outbox lacks the commit or an object it needs, or holds something that
    is not what its id says. Returns how many objects were copied.
    """
    return copy_commit(untrusted_odb(outbox / "objects"), mirror.odb, sha)


def copy_commit(source: pygit2.Odb, target: pygit2.Odb, sha: str) -> int:
    """Copy commit ``sha`` and what it needs that ``target`` lacks, each object re-hashed.

    BEM-350 as ``import_commit``. Returns how many objects were copied.
    """
    root = pygit2.Oid(hex=sha)
    if not source.exists(root) or source.read_header(root)[0] != ObjectType.COMMIT:
        raise BeamError(
            "BEM-350",
            f"the job's outbox does not hold commit {sha}; the approved push never landed "
            "there, so there is nothing to relay. Re-run the push from the job.",
        )
    view = pygit2.Repository()
    view.set_odb(source)
    # Children before parents: if the copy stops half-way, every object already in the
    # mirror still has everything it points at, so "present" keeps meaning "complete".
    order = _missing_closure(view, target, root)
    for oid in order:
        try:
            kind, data = source.read(oid)
        except pygit2.GitError:
            raise _corrupt(oid) from None
        # libgit2 verifies hashes on read; checking the id the write computes keeps the
        # guarantee here, whatever the library's settings.
        if target.write(kind, data) != oid:
            raise _corrupt(oid)
    return len(order)


def _missing_closure(
    view: pygit2.Repository, mirror: pygit2.Odb, root: pygit2.Oid
) -> list[pygit2.Oid]:
    """Objects reachable from ``root`` the mirror lacks, each after those it points at."""
    order: list[pygit2.Oid] = []
    seen: set[pygit2.Oid] = set()
    stack: list[tuple[pygit2.Oid, bool]] = [(root, False)]
    while stack:
        oid, expanded = stack.pop()
        if expanded:
            order.append(oid)
            continue
        if oid in seen or oid in mirror:
            continue
        seen.add(oid)
        stack.append((oid, True))
        stack.extend((child, False) for child in _children(view, oid))
    return order


def _children(view: pygit2.Repository, oid: pygit2.Oid) -> Iterator[pygit2.Oid]:
    try:
        obj = view.get(oid)
    except pygit2.GitError:
        raise _corrupt(oid) from None
    if obj is None:
        raise BeamError(
            "BEM-350",
            f"the job's outbox lacks object {oid}, which the approved commit needs; the push "
            "into the outbox was incomplete. Re-run the push from the job.",
        )
    if isinstance(obj, pygit2.Commit):
        yield obj.tree_id
        yield from obj.parent_ids
    elif isinstance(obj, pygit2.Tree):
        # A gitlink (submodule) names a commit of another repository: nothing to copy.
        yield from (entry.id for entry in obj if entry.filemode != FileMode.COMMIT)


def _corrupt(oid: pygit2.Oid) -> BeamError:
    return BeamError(
        "BEM-350",
        f"object {oid} in the job's outbox is unreadable or does not match its id; the "
        "outbox was tampered with. Refusing to relay.",
    )


def untrusted_odb(objects: Path) -> pygit2.Odb:
    """An object database on a store another user writes: its packs and loose objects only.

    BEM-350 when anything under ``objects`` is a symlink or a special file.
    """
    _refuse_links(objects)
    odb = pygit2.Odb()
    # No alternates backend: a path the container wrote must not widen what the host reads.
    odb.add_backend(pygit2.OdbBackendPack(str(objects)), 2)
    # Level -1 (zlib's default): at 0 libgit2 writes loose objects uncompressed, unreadable.
    odb.add_backend(pygit2.OdbBackendLoose(str(objects), -1, False), 1)
    return odb


def _refuse_links(objects: Path) -> None:
    if not stat.S_ISDIR(objects.lstat().st_mode):
        raise _tampered("objects")
    top = safe_walk.open_directory(objects)
    try:
        for entry in safe_walk.walk(top):
            if entry.kind not in (EntryKind.DIRECTORY, EntryKind.FILE):
                raise _tampered(f"objects/{entry.path}")
    finally:
        os.close(top)


def _tampered(where: str) -> BeamError:
    return BeamError(
        "BEM-350",
        f"the job's outbox holds a symlink or special file at {where}; a push never creates "
        "one, so the outbox was tampered with. Refusing to read it.",
    )


def _read_untrusted(
    outbox: Path, parts: list[str], limit: int = MAX_LOOSE_REF_BYTES
) -> bytes | None:
    """The bytes of ``outbox/<parts>``, following no symlink; None when it does not exist."""
    try:
        parent = safe_walk.open_below(outbox, parts[:-1])
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
        finally:
            os.close(parent)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = os.read(fd, limit + 1)
        finally:
            os.close(fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise BeamError(
            "BEM-352",
            f"{'/'.join(parts)} in the job's outbox is a symlink; refusing to follow it",
        ) from None
    if len(data) > limit:
        raise BeamError("BEM-352", f"{'/'.join(parts)} in the job's outbox is too large")
    return data


def _parse_loose(data: bytes, branch: str) -> str:
    text = data.strip()
    if not _OID.fullmatch(text):
        what = "a symbolic ref" if text.startswith(b"ref:") else "not a commit id"
        raise BeamError(
            "BEM-352", f"the outbox's branch {branch!r} is {what}; refusing to relay from it"
        )
    return text.decode()


def _lookup_packed(data: bytes, ref: str) -> str | None:
    wanted = ref.encode()
    for line in data.splitlines():
        sha, _, name = line.partition(b" ")
        if name == wanted and _OID.fullmatch(sha):
            return sha.decode()
    return None
