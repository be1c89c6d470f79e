"""Object stores of job repositories: seeded from the mirror, and moved as a git pack.

The mirror's object files (packs and loose objects) are hard-linked into the job's clone and
outbox when the workspace and the mirror share a filesystem, and copied when they do not.
Either way they arrive read-only (git writes them ``0444``) and stay owned by the worker, not
by the sandbox uid, so the container can read them but can neither write into nor ``chmod``
an inode the mirror shares: it can only drop its own directory entry. Objects the container
creates later land in directories it owns. Alternates are not an option: a path to the mirror
in ``objects/info/alternates`` does not resolve inside the container, which never sees it.

``pack_objects`` and ``unpack`` carry chosen objects between hosts (a parked job's new
commits, see ``sandbox.host.workspace.snapshot``) as a standard git pack: compact, with deltas,
and checked by its own checksum. ``unpack`` reads one as untrusted data.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import struct
import tempfile
import zlib
from collections.abc import Iterable
from pathlib import Path

import pygit2
from pygit2.enums import ObjectType

from bot.core import safe_walk
from bot.core.safe_walk import EntryKind

__all__ = ["PackError", "link_objects", "pack_objects", "unpack"]

# Alternates and the commit-graph describe the mirror's store, not the job's copy of it.
_SKIPPED = frozenset({"info"})


def link_objects(source: Path, target: Path) -> int:
    """Link (or copy) every object file under ``source`` into ``target``; returns the count."""
    count = 0
    target.mkdir(exist_ok=True)
    top = safe_walk.open_directory(source)
    try:
        for entry in safe_walk.walk(top, enter=_linked):
            if not _linked(entry):
                continue
            destination = f"{target}/{entry.path}"
            if entry.kind is EntryKind.DIRECTORY:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(destination)
            else:
                _link_or_copy(f"{source}/{entry.path}", destination)
                count += 1
    finally:
        os.close(top)
    return count


def _linked(entry: safe_walk.Entry) -> bool:
    return entry.depth > 0 or entry.name not in _SKIPPED


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        # Another filesystem, or one without hard links: a private read-only copy instead.
        shutil.copy2(source, target, follow_symlinks=False)
        os.chmod(target, 0o444)


# -- moving objects as a git pack ------------------------------------------------------------


class PackError(ValueError):
    """A pack that is damaged, altered or not what it claims; the message says how."""


def pack_objects(repo: pygit2.Repository, oids: Iterable[str], scratch: Path) -> bytes:
    """A git pack of exactly ``oids`` (with deltas between them), made by libgit2.

    libgit2 writes packs only to a directory, so one is made under ``scratch`` and removed.
    """
    builder = pygit2.PackBuilder(repo)
    for oid in oids:
        builder.add(pygit2.Oid(hex=oid))
    if not len(builder):
        return b""
    with tempfile.TemporaryDirectory(prefix=".pack-", dir=scratch) as directory:
        builder.write(directory)
        (written,) = Path(directory).glob("*.pack")
        return written.read_bytes()


def unpack(pack: bytes, room: int) -> dict[str, tuple[ObjectType, bytes]]:
    """Every object of a git pack by its id, deltas resolved within the pack (PackError).

    pygit2 has no indexer, so the pack is read here, as data: ids are computed from the
    content, never taken from the pack, and the pack's trailing checksum must match. Only
    commits, trees and blobs are accepted, whole or as deltas against an earlier object of
    the pack by id (libgit2's pack builder writes no offset deltas, so they are refused),
    and together they may expand to ``room`` bytes.
    """
    if not pack:
        return {}
    try:
        return _PackReader(pack, room).objects()
    except (IndexError, struct.error, zlib.error) as error:
        raise PackError(f"it is damaged ({error or 'truncated'})") from None


_PACK_TYPES = {1: ObjectType.COMMIT, 2: ObjectType.TREE, 3: ObjectType.BLOB}
_TYPE_NAMES = {ObjectType.COMMIT: b"commit", ObjectType.TREE: b"tree", ObjectType.BLOB: b"blob"}
_REF_DELTA = 7
_INFLATE_STEP = 1 << 16


class _PackReader:
    def __init__(self, pack: bytes, room: int) -> None:
        self._pack = pack
        self._view = memoryview(pack)
        self._end = len(pack) - 20
        self._room = room

    def objects(self) -> dict[str, tuple[ObjectType, bytes]]:
        pack, end = self._pack, self._end
        if end < 12 or pack[:4] != b"PACK" or struct.unpack_from(">I", pack, 4)[0] not in (2, 3):
            raise PackError("it is not a git pack")
        if hashlib.sha1(self._view[:end]).digest() != pack[end:]:
            raise PackError("it fails its checksum: it was altered")
        (count,) = struct.unpack_from(">I", pack, 8)
        by_id: dict[str, tuple[ObjectType, bytes]] = {}
        position = 12
        for _ in range(count):
            code, size, position = self._entry_header(position)
            base: tuple[ObjectType, bytes] | None = None
            if code == _REF_DELTA:
                base = by_id.get(pack[position : position + 20].hex())
                position += 20
                if base is None:
                    raise PackError("it holds a delta whose base is not earlier in the pack")
            elif code not in _PACK_TYPES:
                raise PackError(f"it holds an object of type {code}")
            data, position = self._inflate(position, size)
            if base is not None:
                kind, data = base[0], _apply_delta(base[1], data, self._room)
            else:
                kind = _PACK_TYPES[code]
            self._room -= len(data)
            if self._room < 0:
                raise PackError("it expands past the size allowed")
            digest = hashlib.sha1(_TYPE_NAMES[kind] + b" %d\0" % len(data))
            digest.update(data)
            by_id[digest.hexdigest()] = (kind, data)
        if position != end or len(by_id) != count:
            raise PackError("it has extra bytes or repeats an object")
        return by_id

    def _entry_header(self, position: int) -> tuple[int, int, int]:
        byte = self._pack[position]
        code, size, shift = (byte >> 4) & 7, byte & 15, 4
        while byte & 0x80:
            position += 1
            byte = self._pack[position]
            size |= (byte & 0x7F) << shift
            shift += 7
            if size > self._room:
                raise PackError("it declares an object past the size allowed")
        return code, size, position + 1

    def _inflate(self, position: int, size: int) -> tuple[bytes, int]:
        if size > self._room:
            raise PackError("it declares an object past the size allowed")
        inflater = zlib.decompressobj()
        out: list[bytes] = []
        produced, fed = 0, position
        # Fed in slices: zlib copies whatever follows the stream, so keep that small. The
        # first slice fits a typical object whole (deflate rarely grows data by more).
        step = size + size // 1000 + 64
        while not inflater.eof:
            chunk: bytes | memoryview = inflater.unconsumed_tail
            if not chunk:
                if fed >= self._end:
                    raise PackError("it ends inside an object")
                chunk = self._view[fed : min(self._end, fed + step)]
                fed += len(chunk)
                step = _INFLATE_STEP
            # Asking for one byte more than declared is how an oversized object shows.
            piece = inflater.decompress(chunk, size + 1 - produced)
            produced += len(piece)
            out.append(piece)
            if produced > size:
                raise PackError("it holds an object larger than it declares")
        if produced != size:
            raise PackError("it holds an object smaller than it declares")
        return b"".join(out), fed - len(inflater.unused_data) - len(inflater.unconsumed_tail)


class _DeltaReader:
    """Reads a delta one field at a time; running past its end is an IndexError."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    @property
    def done(self) -> bool:
        return self.position >= len(self.data)

    def byte(self) -> int:
        value = self.data[self.position]
        self.position += 1
        return value

    def take(self, size: int) -> bytes:
        chunk = self.data[self.position : self.position + size]
        if len(chunk) != size:
            raise IndexError("delta truncated")
        self.position += size
        return chunk

    def varint(self) -> int:
        value = shift = 0
        while True:
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def little_endian(self, flags: int, width: int) -> int:
        """The bytes of a number whose present bytes ``flags`` marks, lowest first."""
        value = 0
        for bit in range(width):
            if flags & (1 << bit):
                value |= self.byte() << (8 * bit)
        return value


def _apply_delta(base: bytes, delta: bytes, room: int) -> bytes:
    cursor = _DeltaReader(delta)
    if cursor.varint() != len(base):
        raise PackError("it holds a delta for a base of another size")
    size = cursor.varint()
    if size > room:
        raise PackError("it expands past the size allowed")
    out = bytearray()
    while not cursor.done and len(out) <= size:
        op = cursor.byte()
        if op & 0x80:
            offset = cursor.little_endian(op, 4)
            length = cursor.little_endian(op >> 4, 3) or 0x10000
            if offset + length > len(base):
                raise PackError("it holds a delta copying past its base")
            out += base[offset : offset + length]
        elif op:
            out += cursor.take(op)
        else:
            raise PackError("it holds a delta with a reserved instruction")
    if len(out) != size:
        raise PackError("it holds a delta that does not produce what it declares")
    return bytes(out)
