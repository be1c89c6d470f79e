"""MCP toolboxes: the MCP servers a job's agent may call, run on the worker for one segment.

A skill names an MCP tool ``server.tool``, in its own allowlist or in the operator's grant
(``[mcp.skills]``); ``servers_for`` resolves those names against ``[[mcp.servers]]`` before
anything starts (BEM-725). ``Toolbox`` starts each named server when the segment's agent is
built and stops it when the segment ends, on every path: an answer, a park, a failure, a
cancel (its ``async with`` closes the SDK's client, which ends a stdio server's process
tree), a time limit (``kill_leftovers`` from the executor's clean-up) and a dead worker (a
stdio server is started through a launcher that asks the kernel to kill it when the worker
process dies, ``PR_SET_PDEATHSIG``).

Why a server never reaches what the container guards: it runs on the host, not in the job's
container, in a fresh empty directory of its own (its ``HOME`` too), never in the job's
working tree or workspace; its environment is the configured ``env`` over the SDK's short
list of harmless variables (``PATH``, ``USER``, ...), never the worker's own, where the
Redis password, the model key and upstream credentials live.

Each call runs as a tool of the loop (a tool frame on the job, like any other), with the
server's ``call_timeout_seconds`` (BEM-723, the model reads it) and ``max_output_bytes``: a
longer result reaches the model as the start of its JSON text, flagged ``truncated``. A tool
that answers with an error is BEM-724 for the model. A server that cannot start, or does
not offer a configured tool, is BEM-721 or BEM-726, and one that dies mid-call BEM-722: the
job fails (``RunAborted``), since a dead server cannot answer the next call either.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TextIO

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from pydantic import JsonValue, ValidationError

from bot.config import McpServerConfig, McpSettings
from bot.core.errors import BeamError
from bot.core.input import AgentInput
from bot.core.tools import Tool, ToolSpec, mcp_tool_name
from bot.runner.interrupts import RunAborted
from skills.loader import Skill, builtin_skills

STDERR_TAIL: Final = 600
"""How much of a server's standard error a BEM-721 or BEM-722 message quotes."""

# Run by the worker's Python, isolated (-I -S: no site, no PYTHONPATH), before the server:
# it asks the kernel to kill it when the worker dies, gives up if the worker is already
# gone, records its pid (also its process group: the SDK starts it in a new session), then
# becomes the server.
_LAUNCHER: Final = """\
import ctypes, os, signal, sys
pidfile, parent, command, *args = sys.argv[1:]
ctypes.CDLL(None).prctl(1, signal.SIGKILL)
if os.getppid() != int(parent):
    sys.exit(1)
with open(pidfile, "w") as out:
    out.write(str(os.getpid()))
try:
    os.execvp(command, [command, *args])
except OSError as error:
    print(f"cannot run {command!r}: {error}", file=sys.stderr)
    sys.exit(127)
"""


def servers_for(settings: McpSettings, skill: Skill) -> dict[str, tuple[str, ...]]:
    """The MCP tools ``skill``'s agent gets, by server, sorted; BEM-725 for a name in its
    allowlist or its grant that no configured server offers, or a grant to no skill."""
    known = {each.name for each in builtin_skills()}
    strangers = sorted(set(settings.skills) - known)
    if strangers:
        raise BeamError(
            "BEM-725",
            f"mcp.skills grants tools to {strangers}, which are not skills "
            f"(the skills are {', '.join(sorted(known))})",
        )
    entries = {entry for entry in skill.tools if "." in entry}
    entries |= set(settings.skills.get(skill.name, ()))
    found: dict[str, list[str]] = {}
    for entry in sorted(entries):
        problem = settings.unresolved(entry)
        if problem is not None:
            raise BeamError("BEM-725", f"skill {skill.name!r}: {problem}")
        server, _, tool = entry.partition(".")
        found.setdefault(server, []).append(tool)
    return {server: tuple(tools) for server, tools in sorted(found.items())}


class McpTool:
    """One MCP tool of a started server, as the loop calls it (``server__tool``)."""

    def __init__(self, server: _Server, tool: str, spec: ToolSpec) -> None:
        self._server = server
        self._tool = tool
        self._spec = spec

    def spec(self) -> ToolSpec:
        return self._spec

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        return await self._server.call(self._tool, args)


class Toolbox:
    """The MCP servers of one job segment: ``async with`` starts them (BEM-721, BEM-726)
    and stops them; ``tools`` are theirs, in a stable order."""

    def __init__(self, settings: McpSettings, wanted: Mapping[str, Sequence[str]]) -> None:
        self._servers = [_Server(_config(settings, name), tuple(wanted[name])) for name in wanted]
        self._stack = AsyncExitStack()
        self.tools: list[Tool] = []

    async def __aenter__(self) -> Toolbox:
        try:
            for server in self._servers:
                self.tools.extend(await server.start(self._stack))
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        try:
            # The SDK's own shutdown: close stdin, wait, then kill the process tree.
            with contextlib.suppress(Exception):
                await self._stack.aclose()
        finally:
            self.kill_leftovers()

    def kill_leftovers(self) -> None:
        """Kill what is left of every server's process group and remove its directory: safe
        to call more than once, and from synchronous code (the executor's clean-up)."""
        for server in self._servers:
            server.kill()


class _Server:
    """One configured server for one segment: its client, directory and standard error."""

    def __init__(self, config: McpServerConfig, tools: tuple[str, ...]) -> None:
        self.config = config
        self._tools = tools
        self._client: Client | None = None
        self._home: Path | None = None
        self._errlog: TextIO | None = None

    async def start(self, stack: AsyncExitStack) -> list[Tool]:
        config = self.config
        try:
            transport = await self._transport(stack)
            client = Client(transport, read_timeout_seconds=config.startup_timeout_seconds)
            self._client = await stack.enter_async_context(client)
            listed = {tool.name: tool for tool in await self._list_tools()}
        except Exception as error:
            raise BeamError(
                "BEM-721",
                f"MCP server {config.name!r} did not start within "
                f"{config.startup_timeout_seconds:g} s ({_reason(error)}){self._stderr()}",
            ) from None
        return [self._tool(name, listed.get(name)) for name in self._tools]

    async def _transport(self, stack: AsyncExitStack) -> Any:
        config = self.config
        if config.url is not None:
            # The SDK leaves a client it is given open: the stack closes it.
            http = create_mcp_http_client(headers=dict(config.headers))
            http = await stack.enter_async_context(http)
            return streamable_http_client(config.url, http_client=http)
        self._home = Path(tempfile.mkdtemp(prefix=f"riverbeam-mcp-{config.name}-"))
        self._errlog = (self._home / ".stderr").open("w", encoding="utf-8", errors="replace")
        assert config.command is not None  # the configuration has a command or a url
        server = StdioServerParameters(
            command=sys.executable,
            args=[
                "-I",
                "-S",
                "-c",
                _LAUNCHER,
                str(self._home / ".pid"),
                str(os.getpid()),
                config.command,
                *config.args,
            ],
            env={"HOME": str(self._home), **config.env},
            cwd=self._home,
        )
        return stdio_client(server, errlog=self._errlog)

    async def _list_tools(self) -> list[Any]:
        assert self._client is not None
        found: list[Any] = []
        cursor: str | None = None
        while True:
            page = await self._client.list_tools(cursor=cursor)
            found.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return found

    def _tool(self, name: str, listed: Any) -> Tool:
        config = self.config
        if listed is None:
            raise BeamError(
                "BEM-726",
                f"MCP server {config.name!r} offers no tool {name!r}, which its tools "
                "allowlist names; fix the allowlist or the server",
            )
        try:
            spec = ToolSpec(
                name=mcp_tool_name(config.name, name),
                description=f"[MCP {config.name}.{name}] {listed.description or ''}".strip(),
                confirm_required=name in config.confirm_required,
                parameters=dict(listed.input_schema),
            )
        except ValidationError as error:
            raise BeamError(
                "BEM-726",
                f"MCP tool {config.name}.{name}: its input schema is not a JSON Schema "
                f"object ({error.errors()[0]['msg']})",
            ) from None
        return McpTool(self, name, spec)

    async def call(self, tool: str, args: dict[str, JsonValue]) -> JsonValue:
        config, client = self.config, self._client
        assert client is not None  # tools exist only once the server started
        where = f"{config.name}.{tool}"
        try:
            result = await client.call_tool(
                tool, args, read_timeout_seconds=config.call_timeout_seconds
            )
        except MCPError as error:
            if error.code == REQUEST_TIMEOUT:
                raise BeamError(
                    "BEM-723",
                    f"MCP tool {where} did not answer within {config.call_timeout_seconds:g} s "
                    "(call_timeout_seconds)",
                ) from None
            if error.code != CONNECTION_CLOSED:
                raise BeamError(
                    "BEM-724", f"MCP tool {where} refused the call: {error.code}: {error}"
                ) from None
            raise RunAborted(self._died(where, error)) from None
        except Exception as error:
            raise RunAborted(self._died(where, error)) from None
        answer = _answer(result.content, result.structured_content)
        if result.is_error:
            text = json.dumps(answer, ensure_ascii=False)[: config.max_output_bytes]
            raise BeamError("BEM-724", f"MCP tool {where} answered with an error: {text}")
        return _capped(answer, config.max_output_bytes)

    def _died(self, where: str, error: BaseException) -> BeamError:
        return BeamError(
            "BEM-722",
            f"MCP server {self.config.name!r} stopped answering during a call of {where} "
            f"({_reason(error)}){self._stderr()}",
        )

    def _stderr(self) -> str:
        if self._errlog is None or self._home is None:
            return ""
        with contextlib.suppress(OSError):
            self._errlog.flush()
            tail = (self._home / ".stderr").read_text(errors="replace")[-STDERR_TAIL:].strip()
            if tail:
                return f"; its standard error ends: {tail}"
        return ""

    def kill(self) -> None:
        home, self._home = self._home, None
        if home is None:
            return
        with contextlib.suppress(OSError, ValueError):
            pid = int((home / ".pid").read_text())
            # The launcher is its session's leader: its pid names the whole group.
            os.killpg(pid, signal.SIGKILL)
        if self._errlog is not None:
            self._errlog.close()
        shutil.rmtree(home, ignore_errors=True)


def _config(settings: McpSettings, name: str) -> McpServerConfig:
    config = settings.server(name)
    if config is None:  # servers_for resolved every name
        raise BeamError("BEM-725", f"MCP server {name!r} is not configured")
    return config


def _reason(error: BaseException) -> str:
    """The innermost message of an error (the SDK's task groups wrap them in groups)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"


def _answer(content: Sequence[Any], structured: Any) -> dict[str, JsonValue]:
    """What the model reads of a result: each content block as the protocol has it, with
    binary data (images, audio, blobs) replaced by its size; structured content as given."""
    blocks: list[JsonValue] = []
    for block in content:
        shown = block.model_dump(mode="json", by_alias=True, exclude_none=True)
        _omit_binary(shown)
        blocks.append(shown)
    answer: dict[str, JsonValue] = {"content": blocks}
    if structured is not None:
        answer["structured_content"] = structured
    return answer


def _omit_binary(shown: dict[str, Any]) -> None:
    for key in ("data", "blob"):
        if isinstance(shown.get(key), str):
            shown[key] = f"[{len(shown[key])} base64 characters omitted]"
    inner = shown.get("resource")
    if isinstance(inner, dict):
        _omit_binary(inner)


def _capped(answer: dict[str, JsonValue], limit: int) -> JsonValue:
    """``answer``, or when its JSON text is over ``limit`` bytes, the start of that text
    flagged ``truncated`` (the tool frame shows the same)."""
    text = json.dumps(answer, ensure_ascii=False)
    size = len(text.encode())
    if size <= limit:
        return answer
    kept = text.encode()[:limit].decode(errors="ignore")
    return {
        "truncated": True,
        "output_bytes": size,
        "max_output_bytes": limit,
        "output_start": kept,
    }
