"""The segment's workspace phase: the job's tree, on this host or rebuilt from its snapshot,
and the push a parked job is asked about staged into its outbox on the host."""

from __future__ import annotations

import contextlib
from pathlib import Path

from bot.config import RepositoryConfig, Settings
from bot.core.errors import BeamError
from bot.jobs.parking import approved_commit, holds
from bot.jobs.plans import TreePlan
from bot.jobs.relayed_push import staged
from bot.store.models import Approval, ApprovalState, JobRecord
from bot.store.store import JobStore
from sandbox.host.upstream.credentials import UpstreamCallbacks
from sandbox.host.workspace.outbox_staging import stage_push
from sandbox.host.workspace.prepare import (
    Workspace,
    open_workspace,
    prepare_workspace,
    remove_workspace,
)
from sandbox.host.workspace.snapshot import read_header, restore
from sandbox.inside.tool_schemas import TOOL_NAMES

# A push is staged when the job parks on it (pending) or when a resume restores it (approved).
_STAGED_STATES = (ApprovalState.PENDING, ApprovalState.APPROVED)


def segment_workspace(
    store: JobStore,
    settings: Settings,
    record: JobRecord,
    plan: TreePlan,
    repo: RepositoryConfig,
    callbacks: UpstreamCallbacks,
    approval: Approval | None,
    *,
    staging: Path | None = None,
) -> Workspace:
    """The segment's workspace: for a resume the local one when it still holds the approved
    commit, else a new one (in ``staging``, a spare's directory, when given), with the parked
    snapshot restored into it and the approved push staged on the host."""
    workspaces = settings.workspaces
    cap = settings.jobs.snapshot_max_bytes
    snapshot: bytes | None = None
    checkout = plan.checkout
    if approval is not None:
        local = _local_workspace(record.id, settings)
        if local is not None and holds(local, approval):
            return local
        snapshot = store.blobs.load_snapshot(record.id)
        if snapshot is None:
            raise BeamError(
                "BEM-502",
                f"job {record.id} parked without a workspace this host has, and its "
                "snapshot is gone; submit the job again",
            )
        # The parked tree is rebuilt on the commit it was built on, wherever the
        # branch it came from has moved since.
        checkout = read_header(snapshot, max_bytes=cap).base_sha
    # A first segment taken over from a dead worker on this host, or a local tree that
    # moved past the park: start clean.
    remove_workspace(record.id, workspaces)
    workspace = prepare_workspace(
        record.id,
        record.spec.repo,
        repo,
        checkout,
        workspaces,
        sandbox_uid=settings.sandbox.uid,
        callbacks=callbacks,
        staging=staging,
        revises=plan.revises,
    )
    if snapshot is not None and approval is not None:
        restore(snapshot, workspace, max_bytes=cap)
        stage_on_host(workspace, approval, repo)
    return workspace


def tool_call_coming(approval: Approval | None, workspace: Workspace) -> bool:
    """Whether a segment knows, before its model answers, that it will call a container
    tool: a first segment does (every skill with a tree reads it before it answers), and a
    resume whose approved call runs in the container (an author's ``git_push``), unless the
    push was staged in this host's outbox (when the job parked, or after the restore)."""
    if approval is None:
        return True
    if approval.state is not ApprovalState.APPROVED or approval.tool not in TOOL_NAMES:
        return False
    commit = approved_commit(approval)
    if approval.tool == "git_push" and commit is not None:
        return not staged(workspace.outbox, commit)
    return True


def stage_on_host(workspace: Workspace, approval: Approval, repo: RepositoryConfig) -> None:
    """Stage a ``git_push`` into the job's outbox on the host (``stage_push``), so that the
    approved resume relays it with no container (``staged``): when the job parks on it (the
    push a person is now asked about; the segment's container is gone by then), and after a
    restore on another host (the approved push). Best effort: when it cannot, the resume
    pushes from a container as before. The outbox is the job's own repository on this
    worker: nothing in it goes upstream but through the relay, after the approval, and only
    the approved commit."""
    commit = approved_commit(approval)
    if approval.tool == "git_push" and approval.state in _STAGED_STATES and commit is not None:
        stage_push(workspace, commit.sha, commit.branch, repo.protected_refs)


def _local_workspace(job_id: str, settings: Settings) -> Workspace | None:
    with contextlib.suppress(BeamError):
        return open_workspace(job_id, settings.workspaces)
    return None
