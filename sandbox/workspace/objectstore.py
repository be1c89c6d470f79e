"""Seed a new repository's object store from the mirror's, cheaply and safely.

The mirror's object files (packs and loose objects) are hard-linked into the job's clone and
outbox when the workspace and the mirror share a filesystem, and copied when they do not.
Either way they arrive read-only (git writes them ``0444``) and stay owned by the worker, not
by the sandbox uid, so the container can read them but can neither write into nor ``chmod``
an inode the mirror shares: it can only drop its own directory entry. Objects the container
creates later land in directories it owns. Alternates are not an option: a path to the mirror
in ``objects/info/alternates`` does not resolve inside the container, which never sees it.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

__all__ = ["link_objects"]

# Alternates and the commit-graph describe the mirror's store, not the job's copy of it.
_SKIPPED = frozenset({"info"})


def link_objects(source: Path, target: Path) -> int:
    """Link (or copy) every object file under ``source`` into ``target``; returns the count."""
    count = 0
    for directory, dirs, files in os.walk(source):
        relative = Path(directory).relative_to(source)
        if relative == Path("."):
            dirs[:] = [name for name in dirs if name not in _SKIPPED]
        destination = target / relative
        destination.mkdir(exist_ok=True)
        for name in files:
            _link_or_copy(Path(directory) / name, destination / name)
            count += 1
    return count


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        # Another filesystem, or one without hard links: a private read-only copy instead.
        shutil.copy2(source, target, follow_symlinks=False)
        target.chmod(0o444)
