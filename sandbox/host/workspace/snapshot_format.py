"""The bytes of a workspace snapshot: the header's models, and encoding and decoding.

Format (``FORMAT_VERSION`` 1)::

    MAGIC, then one zlib stream of:
        8 bytes, big-endian: n
        n bytes: the header, JSON of ``SnapshotHeader``
        the pack: ``header.pack_bytes`` bytes, a git pack made by libgit2's pack builder
        the bytes of each ``header.files`` entry with a ``size``, in header order

The cap ``max_bytes`` bounds the content, uncompressed: the objects' sizes, the files' bytes
and the header. Past it, capture is BEM-503 and names both sizes. The stored snapshot is
smaller (zlib, and the pack's deltas). Decoding bounds every size it reads by the cap before
it allocates, and checks the version and the header's shape: a snapshot that fails is BEM-502
(BEM-503 past this worker's cap).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from bot.config import JobSettings
from bot.core.errors import BeamError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "FORMAT_VERSION",
    "MAGIC",
    "Decoded",
    "EntryMode",
    "FileState",
    "Head",
    "IndexChange",
    "Skipped",
    "SnapshotHeader",
    "cannot_resume",
    "decode",
    "encode",
    "read_header",
]

FORMAT_VERSION = 1
MAGIC = b"riverbeam-workspace-snapshot\n"
DEFAULT_MAX_BYTES: int = JobSettings.model_fields["snapshot_max_bytes"].default
_LENGTH = struct.Struct(">Q")

ObjectId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]
EntryMode = Literal[0o100644, 0o100755, 0o120000]
RepoPath = Annotated[str, StringConstraints(min_length=1, max_length=4096)]


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Head(_Document):
    branch: str | None = Field(description="the branch HEAD is on; None when detached")
    commit: ObjectId


class IndexChange(_Document):
    """An index entry that differs from HEAD's tree; ``mode`` None means removed."""

    path: RepoPath
    mode: EntryMode | None = None
    blob: ObjectId | None = None

    @model_validator(mode="after")
    def _whole(self) -> Self:
        if (self.mode is None) != (self.blob is None):
            raise ValueError("an index change has both a mode and a blob, or neither")
        return self


class FileState(_Document):
    """What the working tree holds at ``path``.

    ``blob`` is the git blob id of the content (a link's target text for a symlink).
    ``size`` is how many bytes of it follow in the snapshot; None when the content is blob
    ``blob`` of the object store, as it is for a staged file left as staged.
    """

    path: RepoPath
    kind: Literal["file", "symlink", "absent"]
    executable: bool = False
    blob: ObjectId | None = None
    size: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        present = self.kind != "absent"
        if present != (self.blob is not None) or (not present and self.size is not None):
            raise ValueError("a present file has a blob id, an absent one has no content")
        if self.executable and self.kind != "file":
            raise ValueError("only a regular file can be executable")
        return self


class Skipped(_Document):
    path: str
    reason: str


class SnapshotHeader(_Document):
    version: Literal[1]  # FORMAT_VERSION
    job_id: str
    repo: str
    branch: str
    base_sha: ObjectId
    head: Head
    branches: dict[str, ObjectId]
    objects: list[ObjectId]
    pack_bytes: int = Field(ge=0)
    index: list[IndexChange]
    files: list[FileState]
    skipped: list[Skipped]

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        branch = self.head.branch
        if branch is not None and self.branches.get(branch) != self.head.commit:
            raise ValueError("HEAD's branch must be listed, with HEAD's commit as its tip")
        for group in (self.index, self.files):
            if len({entry.path for entry in group}) != len(group):
                raise ValueError("a path is listed twice")
        return self


def encode(document: bytes, pack: bytes, contents: Iterable[bytes]) -> bytes:
    """The snapshot: MAGIC, then the zlib stream of the header's JSON ``document`` (framed by
    its length), the git ``pack`` and the files' ``contents``, in header order."""
    payload = b"".join([_LENGTH.pack(len(document)), document, pack, *contents])
    return MAGIC + zlib.compress(payload)


def read_header(data: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES) -> SnapshotHeader:
    """The snapshot's header, validated (BEM-502); to learn the base commit before preparing."""
    return decode(data, max_bytes, header_only=True).header


@dataclass
class Decoded:
    """A snapshot in its parts: the header, the pack and the files' bytes carried inline."""

    header: SnapshotHeader
    pack: bytes = b""
    contents: list[bytes] = field(default_factory=list)
    room: int = 0  # what the pack's objects may expand to, within the cap


def decode(data: bytes, max_bytes: int, *, header_only: bool) -> Decoded:
    """The parts of ``data``, every size bounded by ``max_bytes``; the header alone when
    ``header_only``. BEM-502 when it is not a snapshot this worker reads, BEM-503 past the cap.
    """
    if not isinstance(data, bytes) or not data.startswith(MAGIC):
        raise cannot_resume("it is not a Riverbeam workspace snapshot")
    stream = _Inflater(memoryview(data)[len(MAGIC) :])
    try:
        (length,) = _LENGTH.unpack(stream.take(_LENGTH.size))
        if length > max_bytes:
            raise _over_cap_restore(length, max_bytes)
        header = _parse_header(stream.take(length))
        if header_only:
            return Decoded(header)
        # The pack's framing can exceed the content a little; far past the cap is not ours.
        limit = 2 * max_bytes + (1 << 20)
        rest = stream.take(limit + 1)
        if len(rest) > limit:
            raise _over_cap_restore(len(rest), limit)
        if not stream.ended:
            raise cannot_resume("its compressed data does not end where it should")
    except (zlib.error, struct.error) as error:
        raise cannot_resume(f"its compressed data is damaged ({error})") from None
    return _split(header, rest, max_bytes - length)


class _Inflater:
    """Reads a zlib stream a bounded number of bytes at a time."""

    def __init__(self, data: memoryview) -> None:
        self._zlib = zlib.decompressobj()
        self._pending: bytes | memoryview = data

    def take(self, size: int) -> bytes:
        # A max_length of 0 would mean "no limit" to zlib.
        out = self._zlib.decompress(self._pending, size) if size else b""
        self._pending = self._zlib.unconsumed_tail
        return out

    @property
    def ended(self) -> bool:
        return self._zlib.eof and not self._pending and not self._zlib.unused_data


def _parse_header(document: bytes) -> SnapshotHeader:
    try:
        raw = json.loads(document)
    except ValueError:
        raise cannot_resume("its header is not JSON") from None
    version = raw.get("version") if isinstance(raw, dict) else None
    if version != FORMAT_VERSION:
        raise cannot_resume(
            f"it is format version {version!r} and this worker reads version {FORMAT_VERSION}; "
            "resume it on a worker of the Riverbeam release that parked it"
        )
    try:
        return SnapshotHeader.model_validate(raw)
    except ValidationError as error:
        raise cannot_resume(f"its header is invalid ({error.error_count()} errors)") from None


def _split(header: SnapshotHeader, rest: bytes, room: int) -> Decoded:
    sizes = [entry.size for entry in header.files if entry.size is not None]
    if header.pack_bytes + sum(sizes) != len(rest):
        raise cannot_resume("its parts do not add up to the sizes its header gives")
    inline = sum(sizes)
    if inline > room:
        raise _over_cap_restore(inline, room)
    view = memoryview(rest)
    cursor = header.pack_bytes
    contents = []
    for size in sizes:
        contents.append(bytes(view[cursor : cursor + size]))
        cursor += size
    return Decoded(header, bytes(view[: header.pack_bytes]), contents, room - inline)


def _over_cap_restore(size: int, cap: int) -> BeamError:
    return BeamError(
        "BEM-503",
        f"the parked workspace holds {size} bytes or more, over this worker's snapshot cap of "
        f"{cap} bytes (jobs.snapshot_max_bytes); give every worker the same cap",
    )


def cannot_resume(problem: str) -> BeamError:
    """BEM-502 for a snapshot ``restore`` refuses; ``problem`` says what is wrong with it."""
    return BeamError(
        "BEM-502",
        f"the parked workspace snapshot cannot be restored: {problem}. Discard this "
        "workspace and submit the job again",
    )
