"""The trees the docs checks read: ``python -I -X utf8 -m sandbox.inside.checks.export``, started
by the host in the job's container as the sandbox uid (not in the tool server: its requests
stay the nine tools).

It reads one JSON request on stdin::

    {"root": "/workspace", "private": ["/outbox"], "head": "worktree" | <commit sha>,
     "base": <commit sha> | null, "full": bool, "max_bytes": n, "max_read_bytes": n}

and writes the head's and the base's trees under ``/checks/trees`` (the checks' uid can
read them, never write them), then one JSON line on stdout: ``{"head": {"tree", "dir"},
"base": ... | null, "changed": [paths]}``. ``"worktree"`` is what a commit of everything
would record now (``WorkingTree.tree_of_changes``): the files as the tools left them, read
through the jail. Only the tree's objects are written out, never ``.git``.

``full`` writes every file (a site build reads them all); otherwise only the changed files
and the repository's top-level files (where the checks' configuration lives), so that the
cost follows the change, not the repository. A symbolic link is written only when it
stays inside the tree; submodules and entries git could not check out are left out. A tree
is written once, to a temporary name renamed into place, and trees no request names any
more are removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2
from pygit2.enums import DeltaStatus, FileMode

from bot.core.errors import BeamError
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.worktree import WorkingTree

__all__ = ["TREES_ROOT", "changed_paths", "main", "write_tree"]

TREES_ROOT = Path("/checks/trees")
_REQUEST_CAP = 1 << 16
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
# Folders whose files are configuration, written even when only the change is.
_CONFIG_FOLDERS = frozenset({".github", ".config"})


@dataclass
class _ExportBudget:
    max_bytes: int
    used: int = 0

    def take(self, size: int) -> None:
        self.used += size
        if self.used > self.max_bytes:
            raise BeamError(
                "BEM-412",
                f"the tree to check is over {self.max_bytes} bytes "
                "(sandbox.checks_trees_size bounds it)",
            )


def main() -> int:
    request: dict[str, Any] = json.loads(sys.stdin.buffer.read(_REQUEST_CAP))
    os.umask(0o022)
    _close_to_checks([request["root"], *request.get("private", [])])
    root = SandboxRoot(request["root"], max_read_bytes=int(request["max_read_bytes"]))
    tree = WorkingTree(root)
    try:
        reply = _export(tree, request)
    except BeamError as error:
        reply = {"error": {"code": error.code, "message": error.message}}
    except (OSError, pygit2.GitError, KeyError, ValueError) as error:
        reply = {"error": {"code": "BEM-412", "message": f"{type(error).__name__}: {error}"}}
    sys.stdout.write(json.dumps(reply) + "\n")
    return 0


def _export(tree: WorkingTree, request: dict[str, Any]) -> dict[str, Any]:
    head = str(request["head"])
    head_tree = tree.tree_of_changes() if head == "worktree" else None
    repo = tree.objects()
    head_id = pygit2.Oid(hex=head_tree) if head_tree else _tree_id(repo, head)
    base = request.get("base")
    base_id = _tree_id(repo, str(base)) if base else None
    changed = changed_paths(repo, base_id, head_id)
    only = None if request.get("full") else set(changed)
    budget = _ExportBudget(int(request["max_bytes"]))
    written = {}
    for role, tree_id in (("head", head_id), ("base", base_id)):
        if tree_id is not None:
            written[role] = _written(repo, tree_id, only, budget)
    _remove_others({Path(entry["dir"]).name for entry in written.values()})
    return {"head": written["head"], "base": written.get("base"), "changed": changed}


def _close_to_checks(folders: list[str]) -> None:
    """Make the job's tree and outbox this uid's alone before any check runs: a check reads
    the exported trees, never the repository the tools write (nor its ``.git``)."""
    for folder in folders:
        os.chmod(folder, 0o700)


def _tree_id(repo: pygit2.Repository, sha: str) -> pygit2.Oid:
    try:
        return repo[sha].peel(pygit2.Tree).id
    except (KeyError, ValueError, pygit2.GitError):
        raise BeamError("BEM-412", f"the commit {sha[:40]!r} is not in the job's tree") from None


def changed_paths(repo: pygit2.Repository, base: pygit2.Oid | None, head: pygit2.Oid) -> list[str]:
    """The files added or changed from ``base`` to ``head`` (every file without a base)."""
    if base is None:
        return sorted(_all_paths(repo, repo[head].peel(pygit2.Tree), ""))
    diff = repo[base].peel(pygit2.Tree).diff_to_tree(repo[head].peel(pygit2.Tree))
    return sorted(
        delta.new_file.path
        for delta in diff.deltas
        if delta.status != DeltaStatus.DELETED and delta.new_file.mode != FileMode.COMMIT
    )


def _all_paths(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str) -> Iterable[str]:
    for entry in tree:
        path = prefix + str(entry.name)
        if entry.filemode == FileMode.TREE:
            yield from _all_paths(repo, repo[entry.id].peel(pygit2.Tree), path + "/")
        elif entry.filemode != FileMode.COMMIT:
            yield path


def _written(
    repo: pygit2.Repository, tree_id: pygit2.Oid, only: set[str] | None, budget: _ExportBudget
) -> dict[str, str]:
    # A tree written whole, or for one set of changed paths, is written once.
    paths = "\0".join(sorted(only)).encode() if only is not None else b""
    name = f"{tree_id}-{'full' if only is None else hashlib.sha256(paths).hexdigest()[:16]}"
    final = TREES_ROOT / name
    if not final.is_dir():
        partial = TREES_ROOT / f"{name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        write_tree(repo, tree_id, partial, only, budget)
        partial.rename(final)
    return {"tree": str(tree_id), "dir": str(final)}


def write_tree(
    repo: pygit2.Repository,
    tree_id: pygit2.Oid,
    destination: Path,
    only: set[str] | None,
    budget: _ExportBudget,
) -> None:
    """Write tree ``tree_id`` at ``destination`` (a new folder): every file, or with
    ``only`` those paths and the configuration files."""
    folders = None if only is None else _folders_of(only)
    destination.mkdir(mode=0o755)
    descriptor = os.open(destination, _DIRECTORY)
    try:
        _write(repo, repo[tree_id].peel(pygit2.Tree), descriptor, "", only, folders, budget)
    finally:
        os.close(descriptor)


def _folders_of(paths: set[str]) -> set[str]:
    folders = set()
    for path in paths:
        parent = posixpath.dirname(path)
        while parent:
            folders.add(parent)
            parent = posixpath.dirname(parent)
    return folders


def _write(
    repo: pygit2.Repository,
    tree: pygit2.Tree,
    folder: int,
    prefix: str,
    only: set[str] | None,
    folders: set[str] | None,
    budget: _ExportBudget,
) -> None:
    for entry in tree:
        name = str(entry.name)
        if not _plain_name(name):
            continue
        path = prefix + name
        mode = entry.filemode
        if mode == FileMode.TREE:
            if folders is not None and path not in folders and name not in _CONFIG_FOLDERS:
                continue
            os.mkdir(name, 0o755, dir_fd=folder)
            inner = os.open(name, _DIRECTORY, dir_fd=folder)
            try:
                subtree = repo[entry.id].peel(pygit2.Tree)
                wanted = None if name in _CONFIG_FOLDERS and not prefix else only
                _write(repo, subtree, inner, path + "/", wanted, folders, budget)
            finally:
                os.close(inner)
        elif only is not None and path not in only and prefix:
            continue
        elif mode in (FileMode.BLOB, FileMode.BLOB_EXECUTABLE):
            data = repo[entry.id].peel(pygit2.Blob).data
            budget.take(len(data))
            permissions = 0o755 if mode == FileMode.BLOB_EXECUTABLE else 0o644
            handle = os.open(name, _NEW_FILE, permissions, dir_fd=folder)
            try:
                _write_all(handle, data)
            finally:
                os.close(handle)
        elif mode == FileMode.LINK:
            target = repo[entry.id].peel(pygit2.Blob).data.decode("utf-8", "replace")
            if _inside(prefix, target):
                os.symlink(target, name, dir_fd=folder)


def _write_all(handle: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(handle, view) :]


def _plain_name(name: str) -> bool:
    """A name git could check out: not empty, no path of its own, never ``.git``."""
    return (
        name not in {"", ".", ".."}
        and "/" not in name
        and "\0" not in name
        and (name.lower() != ".git")
    )


def _inside(prefix: str, target: str) -> bool:
    """Whether a link at ``prefix`` to ``target`` stays in the tree (and out of .git)."""
    if not target or target.startswith("/") or "\0" in target:
        return False
    resolved = posixpath.normpath(posixpath.join(prefix, target))
    first = resolved.split("/")[0]
    return resolved != ".." and not resolved.startswith("../") and first.lower() != ".git"


def _remove_others(kept: set[str]) -> None:
    for entry in TREES_ROOT.iterdir():
        if entry.name not in kept:
            shutil.rmtree(entry, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
