"""Checked-out base trees, one per repository and commit, that job trees are views of.

A base is made the first time a job starts on its commit, and every later job on that
commit gets a view of it (``sandbox.host.workspace.overlay``) instead of a checkout of its
own: what a job costs then no longer grows with the number of files. A base is checked out
by the sandbox uid (``check_out_as``), so its index's stat cache holds in every view: a
view shows each file of the base with its inode, times and owner. Its HEAD is detached at
the commit; a job's view gets its own branch, refs and config on top.

Layout, under ``WorkspaceSettings.root``::

    .bases/                     0711, worker
        <repo>/<commit>/        0711, worker; its mtime: when a job last took it
            tree/               sandbox uid: the checkout, with .git (objects from the mirror)
        <repo>/.staging-*       a base still being built

A base is complete or absent: it is built in a staging directory and renamed into place,
and a worker that loses the race to another uses the winner's. Nothing writes into a base
once it is in place (a view's changes go to the job's own layer), and retention removes one
that no job's workspace names and no job took within ``STAGING_GRACE`` (``collect_bases``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path

from sandbox.host.workspace.checkout import check_out_as

__all__ = ["BASES", "base_directory", "collect_bases", "take_base"]

BASES = ".bases"
_STAGING = ".staging-"
# A base no workspace names is kept this long after a job last took it: a prepare that took
# it may not have written its workspace record yet.
BASE_GRACE = 3600.0

log = logging.getLogger(__name__)


def base_directory(root: Path, repo: str, commit: str) -> Path:
    """``<root>/.bases/<repo>/<commit>``: where the base of ``commit`` is, or would be."""
    return root / BASES / repo / commit


def take_base(root: Path, repo: str, commit: str, uid: int, build: Callable[[Path], None]) -> Path:
    """The base tree of ``commit``, made now when there is none: ``build(tree)`` lays out
    the repository (its objects and a HEAD at ``commit``), owned by ``uid``, and this checks
    it out as ``uid``. Marks the base as just taken, so that retention keeps it."""
    directory = base_directory(root, repo, commit)
    if not directory.is_dir():
        parent = directory.parent
        for path in (root / BASES, parent):
            path.mkdir(mode=0o711, exist_ok=True)
            path.chmod(0o711)
        staging = Path(tempfile.mkdtemp(prefix=f"{_STAGING}{commit}-", dir=parent))
        try:
            staging.chmod(0o711)
            tree = staging / "tree"
            build(tree)
            check_out_as(tree, uid)
            os.rename(staging, directory)
        except OSError as error:
            shutil.rmtree(staging, ignore_errors=True)
            # Another worker put the same base in place first: take theirs.
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                _prune(parent, root / BASES)
                raise
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            _prune(parent, root / BASES)
            raise
    os.utime(directory)
    return directory / "tree"


def _prune(*directories: Path) -> None:
    """Remove the directories that are empty (a failed first base leaves nothing)."""
    for directory in directories:
        with contextlib.suppress(OSError):
            directory.rmdir()


def collect_bases(root: Path, named: Collection[Path], now: float | None = None) -> list[str]:
    """Remove the bases no workspace names (``named``: their tree paths) and no job took
    within ``BASE_GRACE``, and staging directories as old; returns what went, relative to
    the root."""
    clock = time.time() if now is None else now
    removed: list[str] = []
    top = root / BASES
    if not top.is_dir():
        return removed
    kept = {os.path.normpath(path) for path in named}
    for repo in sorted(top.iterdir()):
        if not repo.is_dir() or repo.is_symlink():
            continue
        for entry in sorted(repo.iterdir()):
            with contextlib.suppress(FileNotFoundError):
                if os.path.normpath(entry / "tree") in kept:
                    continue
                if clock - entry.lstat().st_mtime < BASE_GRACE:
                    continue
                try:
                    shutil.rmtree(entry)
                except OSError as error:
                    log.warning("could not remove base %s: %s", entry, error)
                    continue
                removed.append(entry.relative_to(root).as_posix())
    return removed
