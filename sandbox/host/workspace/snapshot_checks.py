"""The checks ``restore`` makes on a snapshot, which it treats as hostile, before writing.

The bytes cross Redis and were written by a worker; still, before anything is written: the
snapshot must be this workspace's, and the workspace as ``prepare_workspace`` left it; every
path must be one the jail accepts and every branch name a plain one; the pack is parsed here
(pygit2 has no indexer) and every object hashed, and they must be exactly the set the header
lists; every reference from a new commit or tree, every branch tip, index blob and file blob
must resolve to an object of the right type, in the pack or in the workspace's store; and
every file's bytes must hash to the blob id the header gives. A failure is BEM-502.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pygit2
from pygit2.enums import ObjectType

from bot.core.errors import BeamError
from sandbox.host.workspace.objectstore import PackError, unpack
from sandbox.host.workspace.outbox import outbox_branch
from sandbox.host.workspace.prepare import Workspace
from sandbox.host.workspace.snapshot_format import SnapshotHeader, cannot_resume
from sandbox.host.workspace.snapshot_tree import RULE_FILES, is_branch_name, path_problem
from sandbox.inside.jail import SandboxRoot, is_repository_metadata
from sandbox.inside.refs import HEADS

__all__ = [
    "Store",
    "check_belongs",
    "check_fresh",
    "check_names",
    "check_objects",
    "file_contents",
    "unpacked",
]

_TREE_MODES = {
    b"40000": ObjectType.TREE,
    b"100644": ObjectType.BLOB,
    b"100755": ObjectType.BLOB,
    b"120000": ObjectType.BLOB,
    b"160000": None,  # a gitlink names a commit of another repository
}


def check_belongs(header: SnapshotHeader, workspace: Workspace) -> None:
    """The snapshot is this workspace's: the same job, repository, branch and base commit."""
    mine = (workspace.job_id, workspace.repo, workspace.branch)
    theirs = (header.job_id, header.repo, header.branch)
    if mine != theirs:
        raise cannot_resume(
            f"it was taken from job {header.job_id} of {header.repo!r} on {header.branch!r}, "
            f"not from job {workspace.job_id} of {workspace.repo!r} on {workspace.branch!r}"
        )
    if header.base_sha != workspace.base_sha:
        raise cannot_resume(
            f"the job parked on base commit {header.base_sha} and this workspace was prepared "
            f"at {workspace.base_sha}; prepare it with base={header.base_sha!r} "
            "(read_header(data).base_sha) so that the job's commits build on what they did"
        )


def check_names(header: SnapshotHeader, root: SandboxRoot) -> None:
    """Every branch a plain name, every path one the jail accepts as it is spelled."""
    for name in header.branches:
        if not is_branch_name(name):
            raise cannot_resume(f"it names a branch {name[:200]!r} that is not a plain name")
    for path in [*(change.path for change in header.index), *(f.path for f in header.files)]:
        problem = path_problem(root, path)
        if problem is not None:
            raise cannot_resume(f"it names {path[:200]!r}, which the jail refuses ({problem})")
    for entry in header.files:
        if entry.kind == "symlink" and entry.path.rpartition("/")[2] in RULE_FILES:
            raise cannot_resume(f"it makes {entry.path!r} a symlink, which git reads through")


def check_fresh(gitdir: Path, workspace: Workspace) -> None:
    """The tree is on the job branch at the base, as prepared: read as data, not opened."""
    try:
        at_base = outbox_branch(gitdir, workspace.branch) == workspace.base_sha
        on_branch = (gitdir / "HEAD").read_bytes() == f"ref: {HEADS}{workspace.branch}\n".encode()
    except (BeamError, OSError):
        at_base = on_branch = False
    if not (at_base and on_branch):
        raise cannot_resume(
            f"the workspace of job {workspace.job_id} is not as prepare_workspace leaves it; "
            "restore only into a freshly prepared workspace"
        )


class Store:
    """Objects from the pack first, then from the workspace's object store."""

    def __init__(self, odb: pygit2.Odb, packed: dict[str, tuple[ObjectType, bytes]]) -> None:
        self._odb = odb
        self._packed = packed

    def kind(self, oid: str) -> ObjectType | None:
        if oid in self._packed:
            return self._packed[oid][0]
        try:
            return ObjectType(self._odb.read_header(pygit2.Oid(hex=oid))[0])
        except (KeyError, ValueError, pygit2.GitError):
            return None

    def blob(self, oid: str) -> bytes:
        if oid in self._packed:
            return self._packed[oid][1]
        return self._odb.read(pygit2.Oid(hex=oid))[1]

    def require(self, oid: str, kind: ObjectType, what: str) -> None:
        found = self.kind(oid)
        if found != kind:
            state = "is missing" if found is None else f"is a {found.name.lower()}"
            raise cannot_resume(f"{what} {oid} {state}, not a {kind.name.lower()}")


def check_objects(
    header: SnapshotHeader, objects: dict[str, tuple[ObjectType, bytes]], store: Store
) -> None:
    """The pack is exactly the listed objects, and everything named resolves to its type."""
    listed = set(header.objects)
    if len(listed) != len(header.objects) or listed != set(objects):
        extra = sorted(set(objects) - listed)[:3]
        missing = sorted(listed - set(objects))[:3]
        raise cannot_resume(
            "its pack does not hold exactly the objects its header lists "
            f"(unlisted: {extra or 'none'}; missing: {missing or 'none'})"
        )
    for oid, (kind, raw) in objects.items():
        for target, expected, what in _links(kind, raw, oid):
            store.require(target, expected, what)
    for name, tip in header.branches.items():
        store.require(tip, ObjectType.COMMIT, f"the tip of {name!r}")
    store.require(header.head.commit, ObjectType.COMMIT, "HEAD")
    for change in header.index:
        if change.blob is not None:
            store.require(change.blob, ObjectType.BLOB, f"the staged {change.path!r}")
    for entry in header.files:
        if entry.blob is not None and entry.size is None:
            store.require(entry.blob, ObjectType.BLOB, f"the content of {entry.path!r}")


def _links(kind: ObjectType, raw: bytes, oid: str) -> Iterator[tuple[str, ObjectType, str]]:
    """What a packed commit or tree points at: id, the type it must have, a description."""
    if kind == ObjectType.COMMIT:
        tree, parents = _commit_links(raw, oid)
        yield tree, ObjectType.TREE, f"the tree of commit {oid}"
        for parent in parents:
            yield parent, ObjectType.COMMIT, f"a parent of commit {oid}"
    elif kind == ObjectType.TREE:
        for name, expected, target in _tree_entries(raw, oid):
            if expected is not None:
                yield target, expected, f"{name!r} in tree {oid}"


def unpacked(pack: bytes, room: int) -> dict[str, tuple[ObjectType, bytes]]:
    """The pack's objects by id (``objectstore.unpack``); an unusable pack is BEM-502."""
    try:
        return unpack(pack, room)
    except PackError as error:
        raise cannot_resume(f"its pack is unusable: {error}") from None


def _commit_links(raw: bytes, oid: str) -> tuple[str, list[str]]:
    lines = raw.split(b"\n\n", 1)[0].split(b"\n")
    tree = lines[0].removeprefix(b"tree ") if lines[0].startswith(b"tree ") else b""
    parents = [line.removeprefix(b"parent ") for line in lines[1:] if line.startswith(b"parent ")]
    ids = [tree, *parents]
    if not all(len(value) == 40 and value == value.lower() for value in ids):
        raise cannot_resume(f"commit {oid} is malformed")
    try:
        return tree.decode("ascii"), [parent.decode("ascii") for parent in parents]
    except UnicodeDecodeError:
        raise cannot_resume(f"commit {oid} is malformed") from None


def _tree_entries(raw: bytes, oid: str) -> Iterator[tuple[str, ObjectType | None, str]]:
    """Each entry's name, the type its mode requires (None: gitlink) and its id."""
    position = 0
    while position < len(raw):
        space = raw.find(b" ", position)
        nul = raw.find(b"\0", space + 1)
        if space < 0 or nul < 0 or nul + 21 > len(raw) or raw[position:space] not in _TREE_MODES:
            raise cannot_resume(f"tree {oid} is malformed")
        mode, name = raw[position:space], raw[space + 1 : nul].decode("utf-8", "surrogateescape")
        entry = raw[nul + 1 : nul + 21].hex()
        position = nul + 21
        if name in ("", ".", "..") or "/" in name or is_repository_metadata(name):
            raise cannot_resume(f"tree {oid} has an entry named {name[:100]!r}")
        if name in RULE_FILES and mode not in (b"100644", b"100755"):
            raise cannot_resume(f"tree {oid} holds {name} as something other than a file")
        yield name, _TREE_MODES[mode], entry


def file_contents(header: SnapshotHeader, inline: list[bytes], store: Store) -> dict[str, bytes]:
    """Every present file's bytes, each checked against the blob id the header gives."""
    found: dict[str, bytes] = {}
    carried = iter(inline)
    for entry in header.files:
        if entry.kind == "absent" or entry.blob is None:
            continue
        data = next(carried) if entry.size is not None else store.blob(entry.blob)
        if str(pygit2.hash(data)) != entry.blob:
            raise cannot_resume(f"the bytes of {entry.path!r} do not match blob {entry.blob}")
        if entry.kind == "symlink" and (not data or b"\0" in data or len(data) > 4095):
            raise cannot_resume(f"the symlink {entry.path!r} has an impossible target")
        found[entry.path] = data
    return found
