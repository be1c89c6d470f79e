"""The tools a job's agent is built with, per kind.

Container tools run in the job's sandbox (their specs are the static ones, whether or not
the container has started yet); host tools run on the worker. Each kind gets what
its skill's allowlist names (``ToolLoopAgent.for_skill`` drops anything else, so an
allowlist is the single place that decides):

- author: the nine container tools, ``git_push`` wrapped by the relay, and ``remember``;
- review: the container's read tools, ``review_change`` and ``remember``;
- summarize, commit-notes: the container's read tools;
- publish: ``publish_docset``;
- any kind: the MCP tools its skill names or is granted (``bot.jobs.toolbox``).

The set must come out the same in every segment of a job (a parked run refuses an agent
whose tool names or specs differ), so it depends only on the job, never on the segment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.agents.memory import MemoryStore, RememberTool
from bot.core.tools import Tool
from bot.jobs.host_tools.review import ReviewChangeTool, ReviewCollector
from bot.jobs.relayed_push import Relay, RelayedPush
from bot.store.models import JobKind
from sandbox.host.container.deferred import DeferredSandbox
from sandbox.inside.jail import SandboxRoot


@dataclass
class JobTools:
    """A job's tools, and the handles the executor needs after (or before) the run."""

    tools: list[Tool] = field(default_factory=list)
    push: RelayedPush | None = None
    review: ReviewCollector | None = None


def job_tools(
    kind: JobKind,
    *,
    sandbox: DeferredSandbox | None,
    tree: SandboxRoot | None,
    memory: MemoryStore,
    scope: str,
    relay: Relay | None,
    outbox: Path | None = None,
    publish: Tool | None = None,
    mcp: Sequence[Tool] = (),
) -> JobTools:
    """The tools of a job of ``kind``; ``scope`` is where ``remember`` keeps its notes."""
    found = JobTools()
    if sandbox is not None:
        for tool in sandbox.tools():
            if tool.spec().name == "git_push" and relay is not None:
                found.push = RelayedPush(tool, relay, outbox=outbox)
                tool = found.push
            found.tools.append(tool)
    if kind in (JobKind.AUTHOR, JobKind.REVIEW):
        found.tools.append(RememberTool(memory, scope))
    if kind is JobKind.REVIEW and tree is not None:
        found.review = ReviewCollector()
        found.tools.append(ReviewChangeTool(found.review, tree))
    if kind is JobKind.PUBLISH and publish is not None:
        found.tools.append(publish)
    found.tools.extend(mcp)
    return found
