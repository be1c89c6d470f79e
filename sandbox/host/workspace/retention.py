"""Garbage collection of workspaces: finished ones after the retention, unknown ones at once.

What goes, for each entry directly under ``WorkspaceSettings.root``:

* a workspace (``<job-id>/workspace.json``) whose job is finished, once ``retention_hours``
  have passed since the job released it (the ``finished`` marker), or since it was prepared
  when a crashed worker never released it;
* a ``.staging-*`` directory older than ``STAGING_GRACE``: a prepare that died half-way
  (younger ones may be a prepare still running);
* a spare's directory (``sandbox.host.workspace.spare_dirs``) once the deadline its name
  carries has passed: its container is gone by then, or is going with the next reaping
  (before it, the spare may be live, or claimed by a job whose workspace it is becoming);
* anything else: a directory without a workspace record, a stray file or symlink;
* then, under ``.bases/``, a base no remaining workspace is a view of, once no job has
  taken it for an hour (``sandbox.host.workspace.bases.collect_bases``).

A view is detached before its workspace is deleted.

A workspace whose job is not finished is kept however old it is. Deleting never follows a
symlink: a hostile tree may hold links to anywhere on the host. ``shutil.rmtree`` walks with
directory descriptors and unlinks symlinks as entries; a symlink at the top is unlinked itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path

from bot.config import WorkspaceSettings
from bot.core.errors import BeamError
from bot.core.jobids import is_job_id
from sandbox.host.workspace.bases import BASES, collect_bases
from sandbox.host.workspace.overlay import unmount_all
from sandbox.host.workspace.prepare import FINISHED, METADATA, STAGING_PREFIX, TREE, open_record
from sandbox.host.workspace.spare_dirs import spare_deadline

__all__ = ["STAGING_GRACE", "collect_workspaces"]

STAGING_GRACE = 3600.0
# lost+found: made by mkfs when the root is a mount point, the filesystem's, not ours;
# the bases have their own collection (``collect_bases``).
_KEPT = frozenset({"lost+found", BASES})

log = logging.getLogger(__name__)


def collect_workspaces(
    settings: WorkspaceSettings,
    is_finished: Callable[[str], bool],
    now: float | None = None,
) -> list[str]:
    """Remove what has expired under the root; returns the names removed.

    ``is_finished(job_id)`` must answer True for jobs in a final state *and* for jobs the job
    store no longer knows, so their workspaces age out like any finished one.
    """
    root = settings.root
    if not root.is_dir():
        return []
    clock = time.time() if now is None else now
    retention = settings.retention_hours * 3600.0
    removed = []
    for entry in sorted(os.scandir(root), key=lambda item: item.name):
        if entry.name in _KEPT:
            continue
        path = Path(entry.path)
        try:
            expired = _expired(path, entry.name, is_finished, clock, retention)
        except FileNotFoundError:
            continue  # another collector (or a rename) got there first
        if expired and _remove(path):
            removed.append(entry.name)
    removed += collect_bases(root, _views_named(root), clock)
    return removed


def _views_named(root: Path) -> list[Path]:
    """The bases the workspaces left under ``root`` are views of."""
    named = []
    for entry in os.scandir(root):
        if is_job_id(entry.name):
            with contextlib.suppress(BeamError):
                view_of = open_record(Path(entry.path)).view_of
                if view_of is not None:
                    named.append(view_of)
    return named


def _expired(
    path: Path, name: str, is_finished: Callable[[str], bool], now: float, retention: float
) -> bool:
    info = path.lstat()
    if name.startswith(STAGING_PREFIX) and stat.S_ISDIR(info.st_mode):
        return now - info.st_mtime >= STAGING_GRACE
    deadline = spare_deadline(name)
    if deadline is not None and stat.S_ISDIR(info.st_mode):
        return now >= deadline.timestamp()
    record = path / METADATA
    if not (stat.S_ISDIR(info.st_mode) and is_job_id(name) and _is_file(record)):
        return True
    if not is_finished(name):
        return False
    marker = path / FINISHED
    since = marker.lstat().st_mtime if _is_file(marker) else record.lstat().st_mtime
    return now - since >= retention


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except FileNotFoundError:
        return False


def _remove(path: Path) -> bool:
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink()
        else:
            # A view is detached first: a rmtree through it would only whiteout its base.
            unmount_all(path / TREE)
            shutil.rmtree(path)
    except OSError as error:
        # A mount still held by a container, say: the next collection tries again.
        log.warning("could not remove workspace entry %s: %s", path, error)
        return False
    return True
