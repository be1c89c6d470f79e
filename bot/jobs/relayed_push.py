"""``git_push`` as a job runs it: into the outbox in the container, then upstream by the relay.

The wrapper keeps the container tool's spec, so a parked run's tool digest matches the agent
that resumes it. It runs only after a person approved the call, and is armed with what they
approved (commit and branch): the container pushes into the job's outbox, and if it pushed
exactly that commit to exactly that branch, the host relay sends the commit upstream with
credentials the container never sees. Anything else is BEM-603 and nothing goes upstream.

The segment that parked on the push already staged the branch into the outbox, on the host,
from the tree its container left; a resume on another host does the same from the tree it
restored (``stage_push`` in ``sandbox.host.workspace.outbox_staging``, called by
``bot.jobs.executor``). When the outbox holds the approved commit on the approved branch, the
container's push is not run, and the resume needs no container. The outbox is the job's own
repository on the worker; nothing in it leaves the host but through the relay, after the
approval, and only the approved commit (whatever else the outbox holds).

The relay answers ``already_there`` when the upstream branch is already at the commit, so a
segment that runs twice (a redelivered task that took the job over) pushes once.

Every push upstream (this one, and ``publish_docset``'s) runs under ``recorded_pushes``: the
job record says the push is under way before it starts, and how it ended after, so a cancel
meanwhile is refused (BEM-512) and the record always says what reached the upstream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import JsonValue

from bot.core.errors import BeamError
from bot.core.frames import ErrorInfo
from bot.core.input import AgentInput
from bot.core.tools import Tool, ToolSpec
from sandbox.host.relay import RelayResult
from sandbox.host.workspace.outbox import ApprovedCommit, off_approved
from sandbox.inside.refs import HEADS
from sandbox.inside.reports import PushResult

if TYPE_CHECKING:
    from bot.store.models import OutboxEntry
    from bot.store.store import JobStore

Relay = Callable[[str, str], RelayResult]
"""``relay(approved_sha, branch)``: push the commit from the job's outbox upstream."""

PushGuard = Callable[[str, str, Callable[[], RelayResult]], RelayResult]
"""``guard(sha, ref, push)``: run ``push`` (which sends ``sha`` to ``ref``) and return its
result, recording it with the job."""


def unrecorded(sha: str, ref: str, push: Callable[[], RelayResult]) -> RelayResult:
    """The guard of a push outside a job (a tool used on its own)."""
    return push()


Landed = Callable[[str, str], "OutboxEntry | None"]
"""``landed(sha, ref)``: the outbox entry a landed push queues with its record (the pull
request of a job that came from a forge), or None."""


def recorded_pushes(
    store: JobStore, job_id: str, worker: str, *, landed: Landed | None = None
) -> PushGuard:
    """The guard of ``worker``'s pushes for job ``job_id``: BEM-506 (cancelled) or BEM-507
    (no longer this worker's) before anything is sent; else the push is recorded under way,
    then landed (with what ``landed`` queues, in the same transaction) or failed. An
    unexpected exception leaves it under way until the job ends, which records it as
    unknown: nobody can say whether it landed."""

    def guard(sha: str, ref: str, push: Callable[[], RelayResult]) -> RelayResult:
        store.jobs.begin_push(job_id, worker=worker, sha=sha, ref=ref)
        try:
            result = push()
        except BeamError as error:
            failed = ErrorInfo(code=error.code, message=error.message)
            store.jobs.end_push(job_id, worker=worker, error=failed)
            raise
        queued = None if landed is None else landed(sha, ref)
        store.jobs.end_push(
            job_id,
            worker=worker,
            already_there=result.already_there,
            deliveries=() if queued is None else (queued,),
        )
        return result

    return guard


class RelayedPush:
    """The ``git_push`` tool of a job: container push, then the host relay."""

    def __init__(self, inner: Tool, relay: Relay, *, outbox: Path | None = None) -> None:
        self._inner = inner
        self._relay = relay
        self._outbox = outbox
        self._approved: ApprovedCommit | None = None

    def spec(self) -> ToolSpec:
        return self._inner.spec()

    def arm(self, approved: ApprovedCommit) -> None:
        """Allow one push of ``approved`` (set from the approval the resume applies)."""
        self._approved = approved

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        approved, self._approved = self._approved, None
        if approved is None:
            # The loop runs a confirm_required tool only after a decision, and every decision
            # arms the wrapper; reaching this means a decision without an approval record.
            raise BeamError("BEM-603", "git_push ran without an approved commit; nothing pushed")
        if staged(self._outbox, approved):
            # What the container's push answers when the outbox already holds the commit.
            pushed: JsonValue = PushResult(
                remote="origin", ref=HEADS + approved.branch, sha=approved.sha
            ).as_json()
        else:
            pushed = await self._inner.invoke(args, input)
        sha, branch = _pushed(pushed)
        if (sha, branch) != (approved.sha, approved.branch):
            raise BeamError(
                "BEM-603",
                f"the container pushed {sha[:12]} to {branch!r}, but the approval is for "
                f"{approved.sha[:12]} on {approved.branch!r}; nothing was sent upstream. "
                "Push again to ask for a new approval.",
            )
        relayed = await asyncio.to_thread(self._relay, approved.sha, approved.branch)
        upstream: JsonValue = relayed.model_dump(mode="json")
        return {**pushed, "upstream": upstream} if isinstance(pushed, dict) else pushed


def staged(outbox: Path | None, approved: ApprovedCommit) -> bool:
    """Whether the job's outbox already holds the approved commit on the approved branch
    (read as the untrusted data it is, ``off_approved``)."""
    if outbox is None:
        return False
    try:
        return off_approved(outbox, approved) is None
    except BeamError:
        return False  # unreadable: the container pushes again, and says what is wrong


def _pushed(result: JsonValue) -> tuple[str, str]:
    if not isinstance(result, dict):
        raise BeamError("BEM-603", "git_push returned no commit and ref; nothing was relayed")
    sha, ref = result.get("sha"), result.get("ref")
    if not isinstance(sha, str) or not isinstance(ref, str):
        raise BeamError("BEM-603", "git_push returned no commit and ref; nothing was relayed")
    return sha, ref.removeprefix(HEADS)
