"""``stage_push``: put a job's push into its outbox, on the host, from the job's tree.

A ``git_push`` has two halves: the job's branch goes into the job's outbox (a bare repository
on the worker), and after the approval the relay sends the approved commit from there
upstream (``sandbox.host.relay``). The host makes the first half itself, with no container:

* when the job parks on the push: from the tree the segment's container left (the container
  is removed first, so nothing changes the tree meanwhile), into the job's own outbox, for
  the commit and branch the person is asked about; nothing leaves the outbox but through the
  relay, after the approval, and only the approved commit;
* when a resume on another host rebuilt the tree from the parked snapshot
  (``sandbox.host.workspace.snapshot``): into its fresh outbox, for the approved commit.

Both read the tree as the untrusted data it is (the container wrote it, or the snapshot
carried what the container wrote), and write only what the approval names:

* only that branch, re-checked with the ref policy the relay applies
  (``ProtectedRefs.check_branch``) and taken only as spelled, set to exactly that commit
  (a full, lower-case id), and only when the tree's branch is at it;
* objects read through ``untrusted_odb`` (packs and loose objects, no alternates, nothing of
  the tree's config, no symlink anywhere under ``objects/``) and re-hashed as they are
  written (``copy_commit``): exactly what the commit reaches that the outbox lacks; a tree
  that claims an object it lacks stages nothing;
* the branch written last, following no symlink, through a lock file renamed into place.

The relay then reads the outbox as it always does (``bot.jobs.relayed_push.staged`` and
``sandbox.host.relay``). Any failure leaves the outbox's branch as it was (objects copied
before it are unreferenced and harmless) and returns False: the resume pushes from a
container as before, so a failure here never loses the push.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence

import pygit2

from bot.core.errors import BeamError
from sandbox.host.workspace.outbox import (
    ApprovedCommit,
    copy_commit,
    off_approved,
    untrusted_odb,
)
from sandbox.host.workspace.prepare import Workspace, hand_over
from sandbox.host.workspace.snapshot_tree import open_parent
from sandbox.inside.refs import HEADS, ProtectedRefs

__all__ = ["stage_push"]

log = logging.getLogger(__name__)

_COMMIT_ID = re.compile(r"[0-9a-f]{40}")
_LOCK_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def stage_push(workspace: Workspace, sha: str, branch: str, protected_refs: Sequence[str]) -> bool:
    """Set the job's outbox's ``branch`` to ``sha``, copied from the job's tree; whether it
    was done (a refusal or failure is logged at INFO)."""
    try:
        copied = _stage(workspace, sha, branch, protected_refs)
    except (BeamError, OSError, pygit2.GitError, ValueError) as error:
        reason = f"{error.code}: {error.message}" if isinstance(error, BeamError) else error
        log.info("job %s: push not staged on the host (%s)", workspace.job_id, reason)
        return False
    log.info("job %s: push staged on the host (%d objects)", workspace.job_id, copied)
    return True


def _stage(workspace: Workspace, sha: str, branch: str, protected_refs: Sequence[str]) -> int:
    if ProtectedRefs(protected_refs).check_branch(branch) != branch:
        raise BeamError("BEM-324", f"the branch {branch!r} is not a plain branch name")
    if not _COMMIT_ID.fullmatch(sha):
        raise BeamError("BEM-350", f"{sha!r} is not a full 40-character commit id")
    gitdir = workspace.tree / ".git"
    # Read as the outbox is: straight from the ref file, following no link, parsed strictly.
    where = off_approved(gitdir, ApprovedCommit(sha=sha, branch=branch))
    if where is not None:
        raise BeamError("BEM-352", f"the tree's branch {branch!r} {where}, not at {sha}")
    target = untrusted_odb(workspace.outbox / "objects")
    copied = copy_commit(untrusted_odb(gitdir / "objects"), target, sha)
    _write_branch(workspace, branch, sha)
    # New directories (and the ref) go to the sandbox uid, as the container's push makes
    # them; the object files stay the worker's and read-only, as prepared.
    hand_over(workspace.outbox, workspace.outbox / "objects", os.stat(workspace.outbox).st_uid)
    return copied


def _write_branch(workspace: Workspace, branch: str, sha: str) -> None:
    parts = [*HEADS.strip("/").split("/"), *branch.split("/")]
    parent = open_parent(workspace.outbox, parts, create=True)
    if parent is None:
        raise BeamError("BEM-352", f"the outbox has a file or a link where {branch!r} goes")
    lock = parts[-1] + ".lock"
    try:
        fd = os.open(lock, _LOCK_FLAGS, 0o644, dir_fd=parent)
        try:
            os.write(fd, f"{sha}\n".encode())
        finally:
            os.close(fd)
        try:
            os.rename(lock, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
        except OSError:
            os.unlink(lock, dir_fd=parent)
            raise
    finally:
        os.close(parent)
