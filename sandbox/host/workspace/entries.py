"""Every entry under a directory, for the walks a worker makes per job segment.

The object stores a job's workspace links from the mirror, hands to the sandbox uid and
checks before reading what the container wrote hold a few hundred files each, walked several
times per job. ``os.walk`` plus a ``Path`` per name spent most of their CPU building paths
(about 7 % of a worker's CPU per author job); this walk keeps the ``os.DirEntry`` of each
name, whose type comes from the directory listing itself (no ``lstat``), and plain strings.
"""

from __future__ import annotations

import os
from collections.abc import Iterator


def walk_entries(top: str, *, skip: frozenset[str] = frozenset()) -> Iterator[os.DirEntry[str]]:
    """Every entry below ``top``, a directory before what it holds; symlinks are yielded,
    never followed. ``skip``: names of ``top`` itself to leave out with all below them. A
    directory that cannot be listed is passed over, as ``os.walk`` does."""
    pending = [top]
    while pending:
        directory = pending.pop()
        try:
            listing = os.scandir(directory)
        except OSError:
            continue
        with listing:
            for entry in listing:
                if directory == top and entry.name in skip:
                    continue
                yield entry
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
