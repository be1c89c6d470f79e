"""MCP toolboxes: the MCP servers a job's agent may call, run on the worker for one segment.

A skill names an MCP tool ``server.tool``, in its own allowlist or in the operator's grant
(``[mcp.skills]``); ``servers_for`` resolves those names against ``[[mcp.servers]]`` before
anything starts (BEM-725). ``Toolbox`` starts each named server when the segment's agent is
built and stops it when the segment ends, on every path: an answer, a park, a failure, a
cancel (its ``async with`` closes the SDK's client, which ends a stdio server's process
tree), a time limit (``kill_leftovers`` from the executor's clean-up) and a dead worker (a
stdio server is started through a launcher that asks the kernel to kill it when the worker
process dies, ``PR_SET_PDEATHSIG``).

What the worker kills is known only to the worker's memory, never read from a file: the
launcher connects to a socket the worker listens on, the kernel names the connecting
process (``SO_PEERCRED``), and the worker keeps a pidfd of it once it has checked that it is
its own child leading its own session and group. The kill signals the group of that pidfd
(``PIDFD_SIGNAL_PROCESS_GROUP``), so no process outside the group the worker started can be
hit, whatever the server or its tools write.

Why a server never reaches what the container guards: it runs on the host, not in the job's
container, in a fresh, empty, private (0700) directory of its own (its ``HOME`` too), which
holds nothing of the worker's (its standard error goes to a file with no name), never in the
job's working tree or workspace; its environment is the configured ``env`` over the SDK's short
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
import errno
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Final, NamedTuple, TextIO

import anyio
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

_PIDFD_SIGNAL_PROCESS_GROUP: Final = 4
"""``pidfd_send_signal``'s flag (Linux 6.9) that signals the process group the pidfd's
process leads, as the kernel records it: a group, not a number that may have been reused."""

# Run by the worker's Python, isolated (-I -S: no site, no PYTHONPATH), before the server:
# it asks the kernel to kill it when the worker dies, gives up if the worker is already
# gone, connects to the worker's socket so that the kernel tells the worker its pid (also
# its process group: the SDK starts it in a new session), then becomes the server. The
# socket is closed on exec: the server never holds it.
_LAUNCHER: Final = """\
import ctypes, os, signal, socket, sys
address, parent, command, *args = sys.argv[1:]
ctypes.CDLL(None).prctl(1, signal.SIGKILL)
if os.getppid() != int(parent):
    sys.exit(1)
with socket.socket(socket.AF_UNIX) as worker:
    worker.connect("\\0" + address)
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


class Leader(NamedTuple):
    """A stdio server's launcher, the leader of its process group: a pidfd, and its pid."""

    pidfd: int
    pid: int


class _Server:
    """One configured server for one segment: its client, directory, standard error and,
    for a stdio server, the leader of its process group."""

    def __init__(self, config: McpServerConfig, tools: tuple[str, ...]) -> None:
        self.config = config
        self._tools = tools
        self._client: Client | None = None
        self._home: Path | None = None
        self._errlog: TextIO | None = None
        self._leader: Leader | None = None

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
        # mkdtemp's directory is new and 0700; nothing of the worker's is ever put in it.
        self._home = Path(tempfile.mkdtemp(prefix=f"riverbeam-mcp-{config.name}-"))
        errlog = self._errlog = _nameless_file()
        assert config.command is not None  # the configuration has a command or a url
        address = f"riverbeam-mcp-{secrets.token_hex(16)}"
        server = StdioServerParameters(
            command=sys.executable,
            args=[
                "-I",
                "-S",
                "-c",
                _LAUNCHER,
                address,
                str(os.getpid()),
                config.command,
                *config.args,
            ],
            env={"HOME": str(self._home), **config.env},
            cwd=self._home,
        )
        return self._launched(server, address, errlog)

    @contextlib.asynccontextmanager
    async def _launched(
        self, server: StdioServerParameters, address: str, errlog: TextIO
    ) -> AsyncIterator[Any]:
        """The SDK's stdio transport, once the kernel has named the server's launcher."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK) as listener:
            listener.bind("\0" + address)
            listener.listen(8)
            async with stdio_client(server, errlog=errlog) as streams:
                with anyio.fail_after(self.config.startup_timeout_seconds):
                    self._leader = await _launcher_of(listener)
                listener.close()
                yield streams

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
        if self._errlog is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            log = self._errlog.fileno()
            # Only the server writes it; a UTF-8 character is at most 4 bytes.
            start = max(0, os.fstat(log).st_size - 4 * STDERR_TAIL)
            text = os.pread(log, 4 * STDERR_TAIL, start).decode(errors="replace")
            tail = text[-STDERR_TAIL:].strip()
            if tail:
                return f"; its standard error ends: {tail}"
        return ""

    def kill(self) -> None:
        leader, self._leader = self._leader, None
        if leader is not None:
            kill_group(leader)
            os.close(leader.pidfd)
        errlog, self._errlog = self._errlog, None
        if errlog is not None:
            errlog.close()
        home, self._home = self._home, None
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)


def _nameless_file() -> TextIO:
    """A file in no directory (``O_TMPFILE``) for a server's standard error."""
    fd = os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR, 0o600)
    return open(fd, "w", encoding="utf-8", errors="replace")


async def _launcher_of(listener: socket.socket) -> Leader:
    """The first process to connect to ``listener`` that ``leader_of`` accepts; others are
    dropped (a stranger that found the socket's name cannot stand in for the launcher)."""
    while True:
        await anyio.wait_readable(listener)
        with contextlib.suppress(BlockingIOError):
            connection, _ = listener.accept()
            with connection:
                leader = leader_of(connection)
            if leader is not None:
                return leader


def leader_of(connection: socket.socket) -> Leader | None:
    """The process at the other end of ``connection``, as the kernel names it, when it may be
    a launcher of this worker: of the worker's user, the worker's own child, leading its own
    session and process group (so neither 0, 1, nor the worker's group); else None."""
    creds = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    if uid != os.getuid() or pid <= 1 or pid == os.getpgrp():
        return None
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        # Not reaped yet after the read: the pid was still the pidfd's process when read.
        signal.pidfd_send_signal(pidfd, 0)
    except OSError:
        fields = []
    if fields[1:4] == [str(os.getpid()), str(pid), str(pid)]:
        return Leader(pidfd, pid)
    os.close(pidfd)
    return None


def kill_group(leader: Leader) -> None:
    """SIGKILL the process group ``leader`` leads, even once the leader itself has exited
    (its helpers stay in the group): the kernel signals the group of the pidfd's process,
    never another group that came to have the same number."""
    try:
        signal.pidfd_send_signal(leader.pidfd, signal.SIGKILL, None, _PIDFD_SIGNAL_PROCESS_GROUP)
    except ProcessLookupError:
        return  # the group is gone
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
        kill_group_while_led(leader)


def kill_group_while_led(leader: Leader) -> None:
    """Before Linux 6.9 a group is signalled by its number, which is the leader's own only
    while the leader is not reaped: so only then, as the pidfd proves."""
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(leader.pidfd, 0)
        os.killpg(leader.pid, signal.SIGKILL)


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
