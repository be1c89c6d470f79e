"""The segment's tree phase, for a kind with a tree: the job's workspace (in a spare's
directories when one is free, for a first segment), its compare point and the commit its
change starts from, and the container that will hold it, started ahead or at once as
``jobs.container_start`` says (``ContainerStart``, ``DeferredSandbox``)."""

from __future__ import annotations

from dataclasses import dataclass

import docker

from bot.config import RepositoryConfig, Settings
from bot.core.identity import Trailer
from bot.jobs.parking import check_still_bound
from bot.jobs.plans import Baseline, TreePlan, compare_point
from bot.jobs.segment.container_start import ContainerStart
from bot.jobs.segment.workspace import segment_workspace, tool_call_coming
from bot.jobs.spares import SparePool
from bot.jobs.timings import SegmentTimings
from bot.store.models import Approval, ApprovalState, JobRecord
from bot.store.store import JobStore
from sandbox.host.container.deferred import DeferredSandbox
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.upstream.credentials import UpstreamCallbacks
from sandbox.host.workspace.prepare import Workspace, release_workspace


@dataclass(frozen=True)
class TreeSite:
    """Where trees are set up: the store, the settings, the engine, the spare pool (None:
    no spares) and the sandbox image of this segment."""

    store: JobStore
    settings: Settings
    docker: docker.DockerClient
    spares: SparePool | None
    image: str


@dataclass(frozen=True)
class OpenedTree:
    workspace: Workspace
    compare: Baseline | None
    base_sha: str
    sandbox: DeferredSandbox


def open_tree(
    site: TreeSite,
    record: JobRecord,
    plan: TreePlan,
    repo: RepositoryConfig,
    callbacks: UpstreamCallbacks,
    approval: Approval | None,
    timings: SegmentTimings,
) -> OpenedTree:
    """The job's tree and its container. An approved resume's tree must still hold the
    approved commit (``check_still_bound``). Whatever fails here leaves nothing behind: a
    spare taken and not used is discarded, a container stopped, a workspace released."""
    settings, deployment = site.settings, site.store.gateway.deployment()
    spare = None
    if site.spares is not None and approval is None:
        # Timed on its own: one still starting is waited for.
        with timings.phase("spare"):
            spare = site.spares.take(site.image, settings.sandbox, deployment)
    try:
        with timings.phase("workspace"):
            staging = spare.directory if spare else None
            workspace = segment_workspace(
                site.store, settings, record, plan, repo, callbacks, approval, staging=staging
            )
            compare = compare_point(plan, workspace)
    except BaseException:
        if spare is not None:
            spare.discard()
        raise
    base_sha = (approval.base_sha if approval else None) or workspace.base_sha
    sandbox = None
    try:
        if approval is not None and approval.state is ApprovalState.APPROVED:
            check_still_bound(approval, workspace)
        start = ContainerStart(
            job_id=record.id,
            tree=workspace.tree,
            outbox=workspace.outbox,
            protected_refs=repo.protected_refs,
            limits=settings.sandbox,
            time_limit_seconds=settings.jobs.time_limit_seconds,
            identity=settings.identity,
            trailers=(Trailer.requested_by(record.spec.requested_by),),
            compare=compare,
            deployment=deployment,
        )
        container = spare.sandbox if spare else ContainerSandbox(site.docker, site.image)
        sandbox = DeferredSandbox(container, start)
        mode = settings.jobs.container_start
        if mode == "eager":
            sandbox.ready()
        elif mode == "ahead" and tool_call_coming(approval, workspace):
            sandbox.begin()
    except BaseException:
        # The segment never holds what failed here: its container goes, and its workspace
        # is released, as the segment's clean-up does for one it holds.
        if sandbox is not None:
            sandbox.stop()
        elif spare is not None:
            spare.discard()
        release_workspace(record.id, settings.workspaces)
        raise
    return OpenedTree(workspace, compare, base_sha, sandbox)
