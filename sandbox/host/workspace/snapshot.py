"""Parking a job's workspace so that any worker can rebuild it: ``capture`` and ``restore``.

A parked job may resume on another host, whose workspace root is empty. ``capture`` turns the
job's tree into bytes the job store keeps; ``restore`` rebuilds the same tree from them in a
workspace freshly prepared at the snapshot's base commit::

    data = capture(workspace, max_bytes=settings.jobs.snapshot_max_bytes)
    # ... on any worker ...
    base = read_header(data).base_sha
    workspace = prepare_workspace(job_id, repo, config, base, settings.workspaces, ...)
    restore(data, workspace, max_bytes=settings.jobs.snapshot_max_bytes)

What a snapshot carries:

* every local branch and HEAD (a branch, or a detached commit), and the objects the
  branches have that the base commit does not: new commits, and of their trees and blobs
  only those that differ from the parents' (unchanged subtrees are pruned, not walked);
* the index where it differs from HEAD: entries (path, mode, blob; the blobs are packed too)
  and removals;
* the working files of every path the index or the files change: regular files with their
  bytes and executable bit, symbolic links as links (their target text, never followed), and
  tracked paths that are gone. Ignored files are not carried, as ``git stash`` leaves them.

Content git cannot record is left out and named in ``SnapshotHeader.skipped``, and ``restore``
leaves such a path absent: special files (FIFOs, sockets, devices), names that are ``.git``
in disguise, nested repositories, index conflicts, and files the jail refuses to read (hard
links).

The parts, one concept each:

* ``sandbox.host.workspace.snapshot_format``: the header's models, the byte format, the cap;
* ``sandbox.host.workspace.snapshot_tree``: vetting, opening and walking the job's tree;
* ``sandbox.host.workspace.snapshot_capture``: ``capture``;
* ``sandbox.host.workspace.snapshot_checks``: what ``restore`` checks before it writes anything;
* ``sandbox.host.workspace.snapshot_restore``: ``restore``.
"""

from sandbox.host.workspace.snapshot_capture import capture
from sandbox.host.workspace.snapshot_format import (
    FORMAT_VERSION,
    MAGIC,
    FileState,
    Head,
    IndexChange,
    SnapshotHeader,
    read_header,
)
from sandbox.host.workspace.snapshot_restore import restore

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "FileState",
    "Head",
    "IndexChange",
    "SnapshotHeader",
    "capture",
    "read_header",
    "restore",
]
