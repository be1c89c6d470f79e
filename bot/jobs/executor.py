"""One segment of a job: from a claimed record to a parked or finished job.

A job runs in segments. The first starts the agent; each later one applies a person's
decision to the parked run and drives it on. A segment, on the worker that claimed the job:

1. checks the sandbox image (BEM-401) and finds the job's model (BEM-508);
2. gets the job's workspace: a new one for the first segment; for a resume the local one
   when it still holds the approved commit, else a new one with the parked snapshot restored
   into it (the job parked on another host) and an approved push staged into its outbox
   from there, on the host (``sandbox.host.workspace.outbox_staging``);
3. prepares the hardened container on it, with the kind's compare point, started when the
   segment needs it (``jobs.container_start``): by default on a background thread as soon as
   the segment knows a tool call is coming (a first segment; a resume whose approved call
   runs in the container), else at the first tool call; a segment that calls no tool never
   starts one (``sandbox.host.container.deferred``); with ``jobs.spare_containers``, a first
   segment builds its workspace in the directory of a spare its worker process started ahead
   and claims that container instead of creating one (``bot.jobs.spares``);
4. builds the agent for the kind's skill, with its tools (``bot.jobs.toolsets``), prompt
   values (house-style notes recalled for the repository) and hooks: every frame goes to the
   job's event stream; before each model call and tool call the job is checked for a cancel
   (BEM-506) or a takeover (BEM-507);
5. runs it. When it stops on a call that needs a person, policy refuses at once what could
   never be pushed (``bot.jobs.parking``) and the run goes on; otherwise it PARKS, once
   the container is gone: a push staged into the job's outbox on the host (as after a
   restore), run state and workspace snapshot saved, approval opened, job moved to
   ``awaiting_approval``;
6. or, when the run ends, FINISHES: the kind's outcome, the final state (``failed`` when
   the kind's required result is missing or the run ended on a tool error, see
   ``bot.jobs.outcomes.shortfall``).

The container is stopped on every path (a start under way is waited for, then removed), and
the workspace released on every path but a park (a resume on this host reuses it). A start
that failed fails the segment with its own error, as when it ran in line. A failure is the
job's ``error`` and state ``failed``; a cancel is ``cancelled``. Every write of the job
names this worker as its owner, so a worker that lost the job (its lease ran out and another
took over) changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import docker
from celery.exceptions import SoftTimeLimitExceeded

from bot.agents.memory import MemoryStore
from bot.agents.redis_memory import RedisMemoryStore
from bot.clients.base import CompletionClient
from bot.config import SandboxLimits, Settings
from bot.core.errors import BeamError
from bot.core.frames import Frame, ResultStatus
from bot.core.input import AgentContext, AgentInput
from bot.jobs.forge_posts import landed_pull_request
from bot.jobs.host_tools.publish import PublishDocsetTool
from bot.jobs.kinds import kind_of, request_text
from bot.jobs.kinds.kind import Ended, Kind, ToolKit
from bot.jobs.lease import LeaseKeeper, StopCheck
from bot.jobs.model_client import context_budget_for, model_client_for, run_limits_for
from bot.jobs.parking import (
    PublishTarget,
    PushTarget,
    approval_for,
    approved_commit,
    check_publish_still_bound,
    checked_approval,
)
from bot.jobs.plans import TreePlan
from bot.jobs.relayed_push import PushGuard, Relay, RelayedPush, recorded_pushes
from bot.jobs.segment.finish import Ending, final_state, finish
from bot.jobs.segment.ground import Ground, SegmentStart
from bot.jobs.segment.held import HeldResources
from bot.jobs.segment.park import ParkedTree, park
from bot.jobs.segment.segment_hooks import segment_hooks
from bot.jobs.segment.tree_setup import OpenedTree, TreeSite, open_tree
from bot.jobs.spares import SparePool
from bot.jobs.timings import SegmentTimings
from bot.jobs.toolbox import Toolbox, servers_for
from bot.jobs.toolsets import JobTools, job_tools
from bot.review.check_report import ChecksReport
from bot.review.docs_checks import DocsChecks
from bot.runner.interrupts import RunAborted
from bot.runner.loop import ToolLoopAgent
from bot.runner.state import CallDecision, RunState
from bot.store.models import (
    Approval,
    ApprovalState,
    JobRecord,
    JobState,
)
from bot.store.store import JobStore
from sandbox.host.image.build import check_image
from sandbox.host.relay import RelayResult, relay_push
from sandbox.host.upstream.credentials import upstream_callbacks
from sandbox.host.upstream.mirror import sync_mirror
from sandbox.host.workspace.prepare import (
    Workspace,
)
from sandbox.inside.jail import SandboxRoot
from skills.loader import skill_by_name

log = logging.getLogger(__name__)

STYLE_NOTES = 20


class ImageCheck:
    """The sandbox image one worker process starts its containers from.

    The first segment finds the image built from the code (``check_image`` hashes the sources,
    about 10 ms of CPU, and asks the engine); later segments reuse that reference with no
    engine call: a container start names the image, and the engine refuses one removed
    meanwhile, which the start reports as BEM-401 (as the first check does), while a segment
    that starts no container (a resume whose push was staged) never needed it. The process
    runs the code it imported, so its containers must run the image of that code, whatever
    the files on disk say later: a deploy that changes them restarts the workers.
    """

    def __init__(self) -> None:
        self._refs: dict[SandboxLimits, str] = {}

    def current(self, client: docker.DockerClient, settings: Settings) -> str:
        ref = self._refs.get(settings.sandbox)
        if ref is None:
            ref = check_image(client, settings).ref
            self._refs[settings.sandbox] = ref
        return ref


@dataclass(frozen=True)
class Driven:
    """How the run phase left the segment: the run's state, the approval it parks on (None
    when the run ended) and the tools it ran with (the outcome reads its host tools)."""

    state: RunState
    approval: Approval | None
    tools: JobTools
    checks: ChecksReport | None = None


class Executor:
    """Runs segments of claimed jobs for one worker (``worker`` is its lease owner name)."""

    def __init__(
        self,
        settings: Settings,
        store: JobStore,
        *,
        worker: str,
        docker_client: docker.DockerClient,
        images: ImageCheck | None = None,
        spares: SparePool | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._worker = worker
        self._docker = docker_client
        self._images = images or ImageCheck()
        self._spares = spares

    def execute(self, record: JobRecord) -> JobRecord | None:
        """Run the next segment of ``record``, which this worker has just claimed: the first
        one, or a resume when the job has an approval. Returns the job as the segment left
        it, or None when the job was no longer this worker's to change."""
        held = HeldResources(record.id, kind_of(record.spec), SegmentTimings(record.id))
        lease = LeaseKeeper(
            self._store,
            record.id,
            worker=self._worker,
            seconds=self._settings.jobs.lease_seconds,
        )
        with lease:
            stop = StopCheck(self._store, record.id, lease)
            try:
                return self._run(record, held, stop)
            except SoftTimeLimitExceeded:
                held.stop_container()
                limit = self._settings.jobs.soft_time_limit_seconds
                error = BeamError(
                    "BEM-505", f"the job segment ran past {limit} s (jobs.soft_time_limit_seconds)"
                )
                return self._ending(record, held).end(JobState.FAILED, error=error)
            except BeamError as error:
                held.stop_container()
                return self._ending(record, held).end(final_state(error.code), error=error)
            except Exception as error:
                held.stop_container()
                log.exception("job %s failed unexpectedly", record.id)
                unexpected = BeamError(
                    "BEM-509",
                    f"the worker failed while running the job ({type(error).__name__}: "
                    f"{error}); see the worker's log",
                )
                return self._ending(record, held).end(JobState.FAILED, error=unexpected)
            finally:
                held.give_back(self._settings.workspaces)
                held.timings.log(self._store_state(record.id))

    # -- the segment --------------------------------------------------------------------

    def _store_state(self, job_id: str) -> str:
        """The job's state for the timings line; never fails the segment."""
        try:
            return self._store.jobs.get(job_id).state.value
        except BeamError:
            return "unknown"

    def _run(self, record: JobRecord, held: HeldResources, stop: StopCheck) -> JobRecord | None:
        settings, timings = self._settings, held.timings
        with timings.phase("image"):
            image = self._images.current(self._docker, settings)
        with timings.phase("model"):
            client = model_client_for(settings, record)
        start = self._start(record, held.kind)
        # The skill's MCP tools resolve before anything starts (BEM-725).
        wanted = servers_for(settings.mcp, skill_by_name(record.spec.kind.skill))
        held.toolbox = toolbox = Toolbox(settings.mcp, wanted)
        opened = None
        if start.plan is not None:
            opened = self._open_tree(start, start.plan, image, timings)
            held.hold_tree(opened)
        publish = self._publish_target(start) if start.kind.publishes else None
        ground = Ground(start, toolbox, opened, publish)
        with timings.phase("agent"):
            driven = asyncio.run(self._drive(ground, client, stop))
        # Gone before the job moves: a parked or finished job never has a container.
        with timings.phase("stop"):
            sandbox = held.stop_container()
        if sandbox is not None:
            # A start that failed fails the segment as it did when it ran in line, whatever
            # the run made of it meanwhile (it stopped at its next frame or model call).
            sandbox.raise_if_failed()
        if driven.approval is not None:
            with timings.phase("park"):
                return self._park(ground, held, driven.state, driven.approval)
        with timings.phase("finish"):
            return self._finish(ground, held, driven)

    def _start(self, record: JobRecord, kind: Kind) -> SegmentStart:
        repo = self._settings.repository(record.spec.repo)
        approval = self._decided_approval(record) if record.approval_id is not None else None
        plan = kind.plan(record.spec, repo)
        # Every kind reaches the upstream: a tree's workspace and relay, or a publish's mirror.
        callbacks = upstream_callbacks(record.spec.repo, repo, self._settings.workspaces)
        return SegmentStart(record, kind, repo, callbacks, plan, approval)

    def _decided_approval(self, record: JobRecord) -> Approval:
        """The decision this resume applies; the claim already marked it applied."""
        current = self._store.approvals.get(record.id)
        if current is None or current.id != record.approval_id:
            raise BeamError(
                "BEM-603", f"job {record.id} waits on approval {record.approval_id}, not found"
            )
        return current

    def _open_tree(
        self, start: SegmentStart, plan: TreePlan, image: str, timings: SegmentTimings
    ) -> OpenedTree:
        return open_tree(
            TreeSite(self._store, self._settings, self._docker, self._spares, image),
            start.record,
            plan,
            start.repo,
            start.callbacks,
            start.approval,
            timings,
        )

    def _publish_target(self, start: SegmentStart) -> PublishTarget:
        """The publish tool, checked before the model runs: a review that does not approve
        (BEM-360) or a publish ref that cannot be moved (BEM-361) fails the job at once."""
        record, settings, callbacks = start.record, self._settings, start.callbacks
        tool = PublishDocsetTool.for_job(
            record,
            settings,
            lookup=self._store.jobs.get,
            callbacks=callbacks,
            guard=self._guard(record),
        )
        plan = tool.plan()
        approval = start.approval
        if approval is not None and approval.state is ApprovalState.APPROVED:
            check_publish_still_bound(approval, plan)
        mirror = sync_mirror(record.spec.repo, start.repo, settings.workspaces, callbacks)
        return PublishTarget(
            tool=tool,
            plan=plan,
            mirror=mirror,
            diff_max_chars=settings.jobs.diff_max_chars,
            site=start.repo.site,
        )

    async def _drive(self, ground: Ground, client: CompletionClient, stop: StopCheck) -> Driven:
        """Run the agent until it ends or parks on a call a person must decide, with the
        segment's MCP servers started for it and stopped after, whatever happens."""
        try:
            async with ground.toolbox:
                return await self._drive_agent(ground, client, stop)
        except RunAborted as abort:
            raise abort.error from None

    async def _drive_agent(
        self, ground: Ground, client: CompletionClient, stop: StopCheck
    ) -> Driven:
        record = ground.start.record
        # The store's own client: no connection of the segment's own to open and close.
        memory = RedisMemoryStore(self._store.gateway.client, key=self._store.gateway.keys.memory)
        checks = self._docs_checks(ground)
        parked = self._parked_state(ground.start)
        tools = self._tools(ground, memory, checks, parked)
        agent = await self._agent(ground, client, memory, stop, tools)
        # A resume of an approved push arms the job's relayed git_push here, with the commit
        # the person approved, right before the decision reaches the agent.
        frames, state = self._first_frames(ground.start, agent, tools.push, parked)
        while True:
            async with aclosing(frames) as running:
                async for _ in running:
                    pass
            pending = state.pending
            if state.status is not ResultStatus.INTERRUPTED or pending is None:
                ended = state.status is ResultStatus.COMPLETED
                report = await self._checks_at_end(ground, checks) if ended else None
                return Driven(state, None, tools, report)
            verdict = approval_for(record, pending, self._push_target(ground))
            if isinstance(verdict, Approval):
                return Driven(state, await checked_approval(verdict, checks), tools)
            frames = agent.resume(state, verdict)

    async def _checks_at_end(
        self, ground: Ground, checks: DocsChecks | None
    ) -> ChecksReport | None:
        """The docs checks of the tree's commit, for a kind checked as its run ends."""
        if checks is None or ground.opened is None or not ground.start.kind.checks_at_end:
            return None
        return await asyncio.to_thread(checks.checked, ground.opened.base_sha)

    def _parked_state(self, start: SegmentStart) -> RunState | None:
        """The run a resume continues (None for a first segment)."""
        if start.approval is None:
            return None
        return RunState.load(self._store.blobs.load_run_state(start.record.id))

    def _docs_checks(self, ground: Ground) -> DocsChecks | None:
        opened, repo = ground.opened, ground.start.repo
        if opened is None or repo.checks is None:
            return None
        # A kind checked as its run ends compares the tree's commit with the compare point
        # (a review: the merge base); an author's edits, with the commit it started from.
        compare = opened.compare if ground.start.kind.checks_at_end else None
        return DocsChecks(
            opened.sandbox,
            repo.checks,
            self._settings.sandbox,
            base_sha=compare.sha if compare is not None else opened.base_sha,
            objects=opened.workspace.tree / ".git" / "objects",
            site=repo.site,
        )

    def _first_frames(
        self,
        start: SegmentStart,
        agent: ToolLoopAgent,
        push: RelayedPush | None,
        parked: RunState | None,
    ) -> tuple[AsyncGenerator[Frame, None], RunState]:
        approval = start.approval
        if approval is None or parked is None:
            text = request_text(start.record.spec, start.plan)
            state = agent.start(AgentInput.of_text(text), AgentContext())
            return agent.run(state), state
        state = parked
        approved = approval.state is ApprovalState.APPROVED
        commit = approved_commit(approval)
        if approved and push is not None and commit is not None:
            push.arm(commit)
        decision = CallDecision(
            call_id=approval.call_id,
            approved=approved,
            comment=approval.comment,
            decided_by=approval.decider,
        )
        return agent.resume(state, decision), state

    def _tools(
        self,
        ground: Ground,
        memory: MemoryStore,
        checks: DocsChecks | None,
        parked: RunState | None,
    ) -> JobTools:
        start, opened = ground.start, ground.opened
        tree = (
            SandboxRoot(opened.workspace.tree, max_read_bytes=self._settings.sandbox.max_read_bytes)
            if opened is not None
            else None
        )
        publish = ground.publish.tool if ground.publish is not None else None
        kit = ToolKit(
            memory=memory, scope=start.record.spec.repo, tree=tree, publish=publish, checks=checks
        )
        return job_tools(
            start.kind,
            kit,
            started_with=parked.tools if parked is not None else None,
            sandbox=opened.sandbox if opened is not None else None,
            relay=self._relay(start, opened.workspace) if opened is not None else None,
            outbox=opened.workspace.outbox if opened is not None else None,
            mcp=ground.toolbox.tools,
        )

    async def _agent(
        self,
        ground: Ground,
        client: CompletionClient,
        memory: MemoryStore,
        stop: StopCheck,
        tools: JobTools,
    ) -> ToolLoopAgent:
        record, spec = ground.start.record, ground.start.record.spec
        notes = await memory.recall(spec.repo, STYLE_NOTES)
        sandbox = ground.opened.sandbox if ground.opened is not None else None
        return ToolLoopAgent.for_skill(
            spec.kind.skill,
            client,
            tools.tools,
            granted=self._settings.mcp.skills.get(spec.kind.skill, ()),
            hooks=segment_hooks(self._store, record.id, stop, sandbox),
            prompt_values=self._prompt_values(ground, [note.text for note in notes]),
            # Streamed: a long generation is no read timeout, and its text reaches the live
            # job page as it arrives.
            stream_tokens=True,
            budget=context_budget_for(self._settings),
            limits=run_limits_for(self._settings),
            max_rounds=self._settings.model.max_rounds,
        )

    def _prompt_values(self, ground: Ground, notes: list[str]) -> dict[str, Any]:
        spec, repo = ground.start.record.spec, ground.start.repo
        values: dict[str, Any] = {
            "repository": spec.repo,
            "protected_refs": list(repo.protected_refs),
            "style_notes": notes,
            "publish_ref": repo.publish_ref or "",
        }
        return {**values, **ground.start.kind.prompt_values(ground.tree, ground.publish)}

    def _relay(self, start: SegmentStart, workspace: Workspace) -> Relay:
        record, approval = start.record, start.approval
        repo, callbacks = start.repo, start.callbacks
        guard = recorded_pushes(
            self._store,
            record.id,
            self._worker,
            # The push lands with its pull request queued, in one transaction.
            landed=lambda sha, ref: landed_pull_request(self._settings, record, approval, sha),
        )

        def relay(sha: str, branch: str) -> RelayResult:
            return guard(
                sha, branch, lambda: relay_push(workspace, sha, branch, repo, callbacks=callbacks)
            )

        return relay

    def _guard(self, record: JobRecord) -> PushGuard:
        return recorded_pushes(self._store, record.id, self._worker)

    def _push_target(self, ground: Ground) -> PushTarget | PublishTarget | None:
        if ground.publish is not None:
            return ground.publish
        if ground.opened is None:
            return None
        return PushTarget(
            workspace=ground.opened.workspace,
            base_sha=ground.opened.base_sha,
            protected_refs=ground.start.repo.protected_refs,
            diff_max_chars=self._settings.jobs.diff_max_chars,
            site=ground.start.repo.site,
        )

    # -- park and finish ----------------------------------------------------------------

    def _park(
        self, ground: Ground, held: HeldResources, state: RunState, approval: Approval
    ) -> JobRecord | None:
        workspace = ground.opened.workspace if ground.opened is not None else None
        tree = ParkedTree(workspace, ground.start.repo, held.own_branch())
        job_id = ground.start.record.id
        parked = park(self._store, self._settings, self._worker, job_id, tree, state, approval)
        # Parked (or cancelled as it parked): the workspace stays, for the resume.
        held.parked = parked is not None
        return parked

    def _finish(self, ground: Ground, held: HeldResources, driven: Driven) -> JobRecord | None:
        ended = Ended(
            spec=ground.start.record.spec,
            state=driven.state,
            tree=ground.tree,
            publish=ground.publish,
            tools=driven.tools.tools,
            diff_max_chars=self._settings.jobs.diff_max_chars,
            checks=driven.checks,
        )
        return finish(self._ending(ground.start.record, held), ground.start.kind, ended)

    def _ending(self, record: JobRecord, held: HeldResources) -> Ending:
        return Ending(self._store, self._worker, record.id, held.own_branch())
