"""``capture``: a job's branches, index and working changes, as snapshot bytes.

What it takes is described in ``sandbox.host.workspace.snapshot``. Capture reads nothing on the
host beyond the tree: the files through ``SandboxRoot``, links with ``readlink`` on a
directory reached without following any link. The objects go into a git pack, and every
size counts against the cap as it is read, so an oversized tree stops the capture early.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, cast

import pygit2
from pygit2.enums import DeltaStatus, FileMode, ObjectType, SortMode

from bot.core.errors import BeamError
from sandbox.host.workspace.objectstore import pack_objects
from sandbox.host.workspace.prepare import Workspace
from sandbox.host.workspace.snapshot_format import (
    EntryMode,
    FileState,
    Head,
    IndexChange,
    Skipped,
    SnapshotHeader,
    encode,
)
from sandbox.host.workspace.snapshot_tree import (
    is_branch_name,
    open_parent,
    open_tree,
    path_problem,
    vetted,
)
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.refs import HEADS
from sandbox.inside.worktree_changes import SCAN_FLAGS, Change, diff_tree_to_index, scan

__all__ = ["capture"]

_FILE_MODES = (FileMode.BLOB, FileMode.BLOB_EXECUTABLE, FileMode.LINK)


def capture(workspace: Workspace, *, max_bytes: int) -> bytes:
    """The job's branches, index and working changes, as bytes ``restore`` accepts.

    BEM-503 when the content is over ``max_bytes``; BEM-329 or BEM-502 when the tree's
    metadata is tampered with or unreadable.
    """
    root = SandboxRoot(workspace.tree, max_read_bytes=max(1, max_bytes))
    budget = _Budget(max_bytes, workspace.job_id)
    repos = open_tree(root.path, vetted(root.path), workers=min(4, len(os.sched_getaffinity(0))))
    repo = repos[0]
    try:
        branches = _branches(repo)
        head = _head(repo, branches)
        tree = repo[pygit2.Oid(hex=head.commit)].peel(pygit2.Tree)
        objects = _new_objects(repo, {*branches.values(), head.commit}, workspace.base_sha, budget)
        index, skipped = _staged(repo, tree, root)
        for change in index:
            if change.blob is not None and change.blob not in objects:
                objects[change.blob] = None
                budget.take(repo.odb.read_header(pygit2.Oid(hex=change.blob))[1])
        unstaged = scan(repos, tree).unstaged
        # The job directory is the worker's own and never mounted.
        pack = pack_objects(repo, objects, workspace.tree.parent)
        files, contents = _working_files(root, index, unstaged, skipped, budget)
    except (pygit2.GitError, OSError) as error:
        raise _unreadable(workspace, error) from None
    header = SnapshotHeader(
        version=1,
        job_id=workspace.job_id,
        repo=workspace.repo,
        branch=workspace.branch,
        base_sha=workspace.base_sha,
        head=head,
        branches=branches,
        objects=list(objects),
        pack_bytes=len(pack),
        index=index,
        files=files,
        skipped=skipped,
    )
    document = header.model_dump_json().encode()
    budget.take(len(document))
    data = encode(document, pack, contents)
    if len(data) > max_bytes:
        raise _over_cap(workspace.job_id, len(data), max_bytes)
    return data


def _head(repo: pygit2.Repository, branches: dict[str, str]) -> Head:
    if repo.head_is_detached:
        return Head(branch=None, commit=str(repo.head.target))
    target = str(repo.references["HEAD"].target)
    branch = target.removeprefix(HEADS)
    if repo.head_is_unborn or branch not in branches:
        raise BeamError(
            "BEM-502",
            f"HEAD of the job's tree is on {target!r}, which is not a branch with a commit; "
            "the tools never leave it so, so the tree was tampered with and cannot be parked",
        )
    return Head(branch=branch, commit=branches[branch])


def _branches(repo: pygit2.Repository) -> dict[str, str]:
    """Every branch that points at a commit, under a name Riverbeam accepts."""
    found: dict[str, str] = {}
    for ref in repo.references:
        name = ref.removeprefix(HEADS)
        target = repo.references[ref].target
        if (
            ref.startswith(HEADS)
            and is_branch_name(name)
            and isinstance(target, pygit2.Oid)
            and repo.odb.read_header(target)[0] == ObjectType.COMMIT
        ):
            found[name] = str(target)
    return found


def _new_objects(
    repo: pygit2.Repository, tips: Iterable[str], base: str, budget: _Budget
) -> dict[str, None]:
    """Commits reachable from ``tips`` but not from ``base``, and what their trees add.

    An entry whose id equals the same name's id in a parent's tree is already in the base's
    history or in this list, so it is not descended into: the walk costs the changed paths.
    """
    walker = repo.walk(None, SortMode.TOPOLOGICAL | SortMode.REVERSE)
    for tip in tips:
        walker.push(pygit2.Oid(hex=tip))
    walker.hide(pygit2.Oid(hex=base))
    found: dict[str, None] = {}
    for commit in walker:
        found[str(commit.id)] = None
        budget.take(len(commit.read_raw()))
        stack = [(commit.tree, [parent.tree for parent in commit.parents])]
        while stack:
            tree, olds = stack.pop()
            if str(tree.id) in found or any(old.id == tree.id for old in olds):
                continue
            found[str(tree.id)] = None
            budget.take(len(tree.read_raw()))
            for entry in tree:
                key = str(entry.id)
                if entry.filemode == FileMode.COMMIT or key in found:
                    continue
                name = entry.name or ""
                same = [old[name] for old in olds if name in old]
                if any(other.id == entry.id for other in same):
                    continue
                if entry.filemode == FileMode.TREE:
                    subtree = repo[entry.id].peel(pygit2.Tree)
                    stack.append(
                        (subtree, [o.peel(pygit2.Tree) for o in same if o.type_str == "tree"])
                    )
                else:
                    found[key] = None
                    budget.take(repo.odb.read_header(entry.id)[1])
    return found


def _staged(
    repo: pygit2.Repository, tree: pygit2.Tree, root: SandboxRoot
) -> tuple[list[IndexChange], list[Skipped]]:
    index = repo.index
    index.read(False)
    changes: list[IndexChange] = []
    skipped: list[Skipped] = []
    for delta in diff_tree_to_index(repo, tree, index, None, SCAN_FLAGS).deltas:
        path, new = delta.new_file.path, delta.new_file
        problem = path_problem(root, path)
        if problem is None and delta.status not in (
            DeltaStatus.ADDED,
            DeltaStatus.MODIFIED,
            DeltaStatus.DELETED,
            DeltaStatus.TYPECHANGE,
        ):
            problem = f"the index holds it as {delta.status.name.lower()}"
        if problem is None and delta.status != DeltaStatus.DELETED and new.mode not in _FILE_MODES:
            problem = "a gitlink (submodule) entry"
        if problem is not None:
            skipped.append(Skipped(path=path, reason=problem))
        elif delta.status == DeltaStatus.DELETED:
            changes.append(IndexChange(path=path))
        else:
            mode = cast(EntryMode, int(new.mode))  # one of _FILE_MODES, checked above
            changes.append(IndexChange(path=path, mode=mode, blob=str(new.id)))
    return changes, skipped


def _working_files(
    root: SandboxRoot,
    index: list[IndexChange],
    unstaged: Sequence[Change],
    skipped: list[Skipped],
    budget: _Budget,
) -> tuple[list[FileState], list[bytes]]:
    """The working state of every path the index or the files change."""
    staged = {change.path: change for change in index}
    tracked = set(staged)
    untracked: set[str] = set()
    for change in unstaged:
        path = change.path
        if path.endswith("/"):
            skipped.append(Skipped(path=path, reason="a nested repository"))
        elif change.status == DeltaStatus.UNTRACKED:
            untracked.add(path)
        else:
            tracked.add(path)
    left_out = {entry.path for entry in skipped}
    files: list[FileState] = []
    contents: list[bytes] = []
    for path in sorted((tracked | untracked) - left_out):
        found = path_problem(root, path) or _on_disk(root, path, budget)
        if isinstance(found, str):
            skipped.append(Skipped(path=path, reason=found))
        elif found is None:
            # Absence matters only where HEAD or the index would put a file back.
            if path in tracked:
                files.append(FileState(path=path, kind="absent"))
        else:
            blob = str(pygit2.hash(found.data))
            entry = staged.get(path)
            # A file left as staged is the staged blob: the pack has its bytes already.
            same = entry is not None and (entry.blob, entry.mode) == (blob, found.mode)
            files.append(
                FileState(
                    path=path,
                    kind=found.kind,
                    executable=found.executable,
                    blob=blob,
                    size=None if same else len(found.data),
                )
            )
            if not same:
                budget.take(len(found.data))
                contents.append(found.data)
    return files, contents


@dataclass(frozen=True)
class _FoundEntry:
    kind: Literal["file", "symlink"]
    data: bytes
    executable: bool = False

    @property
    def mode(self) -> int:
        if self.kind == "symlink":
            return int(FileMode.LINK)
        return int(FileMode.BLOB_EXECUTABLE if self.executable else FileMode.BLOB)


def _on_disk(root: SandboxRoot, path: str, budget: _Budget) -> _FoundEntry | str | None:
    """The file or link at ``path``; None when there is none; or why it is left out."""
    parts = path.split("/")
    parent = open_parent(root.path, parts, create=False)
    if parent is None:
        return None  # beyond a symlink or a file: git sees no file there either
    try:
        try:
            info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode):
            return _FoundEntry("symlink", os.readlink(os.fsencode(parts[-1]), dir_fd=parent))
    finally:
        os.close(parent)
    if stat.S_ISDIR(info.st_mode):
        return None
    if not stat.S_ISREG(info.st_mode):
        return _special(info.st_mode)
    budget.check(info.st_size)
    try:
        data = root.read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except BeamError as error:
        return f"the jail refuses to read it ({error.code}: {error.message})"
    return _FoundEntry("file", data, executable=bool(info.st_mode & stat.S_IXUSR))


def _special(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device or other special file"


class _Budget:
    """The content read so far for a capture, against the cap."""

    def __init__(self, limit: int, job_id: str) -> None:
        self.limit = limit
        self.used = 0
        self.job_id = job_id

    def check(self, size: int) -> None:
        if self.used + size > self.limit:
            raise _over_cap(self.job_id, self.used + size, self.limit, at_least=True)

    def take(self, size: int) -> None:
        self.check(size)
        self.used += size


def _over_cap(job_id: str, size: int, cap: int, *, at_least: bool = False) -> BeamError:
    return BeamError(
        "BEM-503",
        f"parking job {job_id} needs {'at least ' if at_least else ''}{size} bytes of new "
        f"commits and changed files, over the snapshot cap of {cap} bytes "
        "(jobs.snapshot_max_bytes). Keep large generated files out of the working tree and "
        "the commits, or raise the cap.",
    )


def _unreadable(workspace: Workspace, error: Exception) -> BeamError:
    return BeamError(
        "BEM-502",
        f"the tree of job {workspace.job_id} cannot be read to park it ({error}); the job "
        "cannot be resumed later, submit it again",
    )
