"""``git_push`` as a job runs it: into the outbox in the container, then upstream by the relay.

The wrapper keeps the container tool's spec, so a parked run's tool digest matches the agent
that resumes it. It runs only after a person approved the call, and is armed with what they
approved (commit and branch): the container pushes into the job's outbox, and if it pushed
exactly that commit to exactly that branch, the host relay sends the commit upstream with
credentials the container never sees. Anything else is BEM-603 and nothing goes upstream.

The relay answers ``already_there`` when the upstream branch is already at the commit, so a
segment that runs twice (a redelivered task that took the job over) pushes once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import JsonValue

from bot.errors import BeamError
from bot.input import AgentInput
from bot.tools import Tool, ToolSpec
from sandbox.refs import HEADS
from sandbox.workspace.relay import RelayResult

Relay = Callable[[str, str], RelayResult]
"""``relay(approved_sha, branch)``: push the commit from the job's outbox upstream."""


@dataclass(frozen=True)
class ApprovedPush:
    sha: str
    branch: str


class RelayedPush:
    """The ``git_push`` tool of a job: container push, then the host relay."""

    def __init__(self, inner: Tool, relay: Relay) -> None:
        self._inner = inner
        self._relay = relay
        self._approved: ApprovedPush | None = None

    def spec(self) -> ToolSpec:
        return self._inner.spec()

    def arm(self, approved: ApprovedPush) -> None:
        """Allow one push of ``approved`` (set from the approval the resume applies)."""
        self._approved = approved

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        approved, self._approved = self._approved, None
        if approved is None:
            # The loop runs a confirm_required tool only after a decision, and every decision
            # arms the wrapper; reaching this means a decision without an approval record.
            raise BeamError("BEM-603", "git_push ran without an approved commit; nothing pushed")
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


def _pushed(result: JsonValue) -> tuple[str, str]:
    if not isinstance(result, dict):
        raise BeamError("BEM-603", "git_push returned no commit and ref; nothing was relayed")
    sha, ref = result.get("sha"), result.get("ref")
    if not isinstance(sha, str) or not isinstance(ref, str):
        raise BeamError("BEM-603", "git_push returned no commit and ref; nothing was relayed")
    return sha, ref.removeprefix(HEADS)
