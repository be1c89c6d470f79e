"""The MCP tools and resources Riverbeam offers an assistant, over either backend.

Tools: ``submit_job``, ``get_job``, ``wait_for_job`` (each event of the job as an MCP progress
notification), ``list_jobs``, ``list_pending_approvals`` (read-only), ``cancel_job``.
Resources: ``riverbeam://jobs/{job_id}/events`` (a job's event log) and ``riverbeam://skills``
(the skills catalogue). A refusal is an MCP tool error whose text
starts with the BEM code (``BEM-703: ...``).

There is no tool to approve or refuse a push, for any role: an assistant that could approve
would let a model approve its own change (docs/mcp.md)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from bot.core.errors import BeamError
from bot.mcp.backends import Backend, Json
from bot.store.models import JobKind, JobState

# A job in these states is still to do something before a person or its end.
WAITING = frozenset({JobState.QUEUED.value, JobState.RUNNING.value})

BackendFor = Callable[[Context], Backend]
Catalogue = Callable[[], Awaitable[Json]]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
JobId = Annotated[str, Field(min_length=1, max_length=100, description="the job's id")]
# How often waiting for a job reads its new events, and the longest one call waits.
POLL_SECONDS = 1.0
MAX_WAIT_SECONDS = 600
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


async def _result(call: Awaitable[Json]) -> CallToolResult:
    """The answer as JSON text and structured content; a refusal as a tool error whose text
    is ``BEM-nnn: message`` and whose structured content is ``{"code", "message"}`` (the
    SDK's own errors would put the tool's name before the code)."""
    try:
        found = await call
    except BeamError as refused:
        said = {"code": refused.code, "message": refused.message}
        text = TextContent(type="text", text=f"{refused.code}: {refused.message}")
        return CallToolResult(content=[text], structured_content=said, is_error=True)
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(found))], structured_content=found
    )


async def _read(call: Awaitable[Json]) -> str:
    try:
        return json.dumps(await call)
    except BeamError as refused:
        raise ResourceError(f"{refused.code}: {refused.message}") from None


async def _wait(backend: Backend, ctx: Context, job_id: str, seconds: float) -> Json:
    seen, after = 0, "0"
    with anyio.move_on_after(seconds):
        while True:
            log = await backend.log(job_id, after=after)
            for event in log["events"]:
                seen += 1
                after = event["id"] or after
                await ctx.report_progress(seen, message=_said(event))
            if log["state"] not in WAITING:
                break
            await anyio.sleep(POLL_SECONDS)
    return await backend.job(job_id)


def _said(event: Json) -> str:
    """One event in a few words, for a progress notification."""
    if "end" in event:
        return f"ended: {event['end']}"
    frame = event["frame"]
    if frame["type"] == "tool":
        record = frame["record"]
        return f"tool {record['name']}: {'ok' if record['ok'] else 'failed'}"
    return str(frame["type"])


def riverbeam_server(
    backend_for: BackendFor,
    catalogue: Catalogue,
    log_level: LogLevel = "INFO",
) -> MCPServer:
    """The server; ``backend_for(ctx)`` is what one request acts on, as its caller, and
    ``catalogue()`` reads the skills (a static resource has no request context: over HTTP
    the endpoint has checked the token before any request reaches the server). The SDK
    sets the process's root log level to ``log_level`` unless logging is set up already."""
    server = MCPServer(
        log_level=log_level,
        name="riverbeam",
        title="Riverbeam",
        # The SDK's default is an empty version, which tells an assistant's user nothing.
        version=version("riverbeam"),
        instructions="Submit documentation jobs to Riverbeam, follow them and read their "
        "parked changes. Approving a push is for a person, never through MCP.",
    )

    @server.tool(annotations=ToolAnnotations(destructive_hint=False, open_world_hint=False))
    async def submit_job(
        ctx: Context,
        kind: Annotated[JobKind, Field(description="the job kind; your token's role limits it")],
        repo: Annotated[str, Field(description="a registered repository")],
        request: Annotated[str, Field(description="what to do, in words")] = "",
        base: str | None = None,
        branch: Annotated[str | None, Field(description="to review or summarize")] = None,
        range: Annotated[str | None, Field(description="A..B, for commit-notes")] = None,
        review_job: str | None = None,
        pages: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: Annotated[
            str | None, Field(description="repeat it on a retry: the first call's job comes back")
        ] = None,
    ) -> CallToolResult:
        """Queue a job, validated as POST /v1/jobs validates it. Returns the job."""
        body: Json = {"kind": kind, "repo": repo, "request": request, "base": base}
        body.update(branch=branch, range=range, review_job=review_job)
        body.update(pages=pages or [], metadata=metadata or {})
        return await _result(backend_for(ctx).submit(body, idempotency_key))

    @server.tool(annotations=READ_ONLY)
    async def get_job(ctx: Context, job_id: JobId) -> CallToolResult:
        """A job (state, outcome, pushes) and its approval with the parked diff, if any."""
        return await _result(backend_for(ctx).job(job_id))

    @server.tool(annotations=READ_ONLY)
    async def wait_for_job(
        ctx: Context,
        job_id: JobId,
        wait_seconds: Annotated[float, Field(gt=0, le=MAX_WAIT_SECONDS)] = 60,
    ) -> CallToolResult:
        """Wait until the job ends or waits for a person's approval, at most
        ``wait_seconds``, reporting each of its events as an MCP progress notification (when
        the call asked for progress); then what ``get_job`` answers."""
        return await _result(_wait(backend_for(ctx), ctx, job_id, wait_seconds))

    @server.tool(annotations=READ_ONLY)
    async def list_jobs(
        ctx: Context,
        state: JobState | None = None,
        kind: JobKind | None = None,
        repo: str | None = None,
        requested_by: str | None = None,
        mine: Annotated[bool, Field(description="only your own jobs")] = False,
        cursor: Annotated[str | None, Field(description="next_cursor of the last page")] = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 50,
    ) -> CallToolResult:
        """The jobs of the repositories your token may use, newest first."""
        filters: Json = {"state": state, "kind": kind, "repo": repo, "cursor": cursor}
        filters.update(requested_by=requested_by, mine=mine or None, limit=limit)
        return await _result(backend_for(ctx).jobs(filters))

    @server.tool(annotations=READ_ONLY)
    async def list_pending_approvals(ctx: Context, repo: str | None = None) -> CallToolResult:
        """Pushes waiting for a person, with their diffs. Read-only: deciding one is for a
        person, in the web pages, the CLI or the API's approval endpoints."""
        return await _result(backend_for(ctx).approvals(repo))

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
    async def cancel_job(ctx: Context, job_id: JobId) -> CallToolResult:
        """Cancel a job you submitted (an admin: anyone's), as POST /v1/jobs/{id}/cancel."""
        return await _result(backend_for(ctx).cancel(job_id))

    @server.resource(
        "riverbeam://jobs/{job_id}/events", name="job-events", mime_type="application/json"
    )
    async def job_events(job_id: str, ctx: Context) -> str:
        """A job's event log so far: its frames, then its end."""
        return await _read(backend_for(ctx).log(job_id))

    @server.resource("riverbeam://skills", name="skills", mime_type="application/json")
    async def skills() -> str:
        """The built-in skills: what each agent may do."""
        return await _read(catalogue())

    return server
