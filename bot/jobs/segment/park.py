"""The segment's last phase when the run stops at a call a person must decide: the park.

The push is staged on the host first (a resume may claim the job the moment it is parked),
the tree captured, then ONE store transaction writes the run state, the snapshot, the
approval, its announcement and the move to ``awaiting_approval`` (``store.jobs.park``), or
none of them. A cancel asked while it parked lands at once: nobody holds the job now."""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import RepositoryConfig, Settings
from bot.jobs.delivery import parked_entry
from bot.jobs.segment.finish import branch_change, run_result
from bot.jobs.segment.workspace import stage_on_host
from bot.runner.state import RunState
from bot.store.models import Approval, JobRecord
from bot.store.store import JobStore
from sandbox.host.workspace.prepare import Workspace
from sandbox.host.workspace.snapshot import capture


@dataclass(frozen=True)
class ParkedTree:
    """What of the segment a park keeps: its workspace and repository (None for a job with
    no tree) and the job's own branch to record."""

    workspace: Workspace | None
    repo: RepositoryConfig | None
    own_branch: str | None


def park(
    store: JobStore,
    settings: Settings,
    worker: str,
    job_id: str,
    tree: ParkedTree,
    state: RunState,
    approval: Approval,
) -> JobRecord | None:
    """Park job ``job_id``, which ``worker`` runs, on the pending ``approval``; None when
    the job is no longer ``worker``'s (nothing is written then)."""
    workspace, repo = tree.workspace, tree.repo
    if workspace is not None and repo is not None:
        stage_on_host(workspace, approval, repo)
    snapshot = None
    if workspace is not None:
        snapshot = capture(workspace, max_bytes=settings.jobs.snapshot_max_bytes)
    # The announcement is delivered by another task, off this segment.
    announce = repo is not None and repo.approval_webhook is not None
    parked = store.jobs.park(
        approval,
        owner=worker,
        run_state=state.model_dump_json(),
        snapshot=snapshot,
        deliveries=[parked_entry(approval)] if announce else [],
        result=run_result(state),
        **branch_change(tree.own_branch),
    )
    if parked is not None and parked.cancel_requested:
        return store.jobs.request_cancel(job_id)
    return parked
