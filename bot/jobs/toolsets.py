"""The tools a job's agent is built with.

Container tools run in the job's sandbox (their specs are the static ones, whether or not
the container has started yet), ``git_push`` wrapped by the relay; host tools run on the
worker: those the job's kind adds (``Kind.tools`` in ``bot.jobs.kinds``), and the MCP tools
its skill names or is granted (``bot.jobs.toolbox``). Each kind gets what its skill's
allowlist names (``ToolLoopAgent.for_skill`` drops anything else, so an allowlist is the
single place that decides).

The set must come out the same in every segment of a job (a parked run refuses an agent
whose tool names or specs differ), so it depends only on the job, never on the segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.core.tools import Tool
from bot.jobs.kinds.kind import Kind, ToolKit
from bot.jobs.relayed_push import Relay, RelayedPush
from sandbox.host.container.deferred import DeferredSandbox


@dataclass(frozen=True)
class JobTools:
    """A job's tools, and its relayed ``git_push`` (armed by an approved resume)."""

    tools: list[Tool] = field(default_factory=list)
    push: RelayedPush | None = None


def job_tools(
    kind: Kind,
    kit: ToolKit,
    *,
    sandbox: DeferredSandbox | None,
    relay: Relay | None,
    outbox: Path | None = None,
    mcp: Sequence[Tool] = (),
    started_with: Sequence[str] | None = None,
) -> JobTools:
    """The tools of a job of ``kind``; ``started_with``, the tool names of the parked run a
    resume continues, keeps out a host tool added since it parked (a later release's), so
    that the run resumes with the very set it started with."""
    tools: list[Tool] = []
    push = None
    if sandbox is not None:
        for tool in sandbox.tools():
            if tool.spec().name == "git_push" and relay is not None:
                push = RelayedPush(tool, relay, outbox=outbox)
                tool = push
            tools.append(tool)
    added = kind.tools(kit)
    if started_with is not None:
        added = [tool for tool in added if tool.spec().name in started_with]
    return JobTools(tools=[*tools, *added, *mcp], push=push)
