"""The in-container tool server: ``python -m sandbox.inside.server --root /workspace ...``.

One long-lived process per job. It opens the job's working tree once, writes a ready line,
then answers JSON-line requests from stdin on stdout (see ``sandbox.inside.protocol``) until stdin
closes, and exits 0. Nothing but protocol lines ever reaches stdout: at start-up the real
stdout is kept on a private descriptor and fd 1 is pointed at stderr, so a stray ``print``
or a C library's chatter cannot corrupt the stream.

Every failure of one request becomes an error reply and the server carries on:

- a line over ``--max-message-bytes``: BEM-406, the rest of the line is skipped;
- a line that is not a JSON request: BEM-407;
- a call that outlives its timeout: BEM-403 (an interval timer interrupts Python code; a
  long call inside libgit2 is interrupted when it returns, which is why the host keeps its
  own, slightly later deadline and kills the container when that passes);
- a result over the cap: BEM-406; a result JSON cannot carry: BEM-101.

Start-up is on every job's critical path, so the ready line waits only for what can refuse
the job (``sandbox.inside.tree_checks``: the jail and the ref policy, and pygit2 with the
repository guard only for a compare point, the one check that opens the repository). The working
tree and the tools load right after it, while the host goes on with its own work; a request
that arrives meanwhile waits in the pipe. Neither part loads pydantic or a JSON Schema library:
the arguments are checked by ``sandbox.inside.tool_schemas``, the reports are dataclasses.
The ready line carries the monotonic times of the server's stages (the host's clock too: a
container has no clock of its own), which ``bench.container_bench`` breaks down.

A spare (``--spare``, the only argument then; see ``bot.jobs.spares``) starts
before its job exists: it loads all of the above, writes a spare line, and reads exactly one
line from the host, the job's arguments as a JSON list of strings; then it goes on as a
server started with them. Any other first line (or EOF) ends it with exit code 2.

This module is imported inside the container, so it keeps to the standard library and the
modules the tools need; those load when used (``LOADED_LATER`` names them for the image build).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn

from bot.core.errors import BeamError
from sandbox.inside.protocol import (
    PROTOCOL_VERSION,
    encode_frame,
    error_reply,
    ok_reply,
    ready_frame,
)
from sandbox.inside.tool_schemas import TOOL_NAMES

if TYPE_CHECKING:
    from sandbox.inside.jail import SandboxRoot
    from sandbox.inside.worktree import WorkingTree

__all__ = ["LOADED_LATER", "ToolServer", "main", "open_tree"]

Dispatch = Callable[[str, dict[str, Any]], Any]

# The modules ``main`` imports when it needs them, not with this module.
LOADED_LATER = ("sandbox.inside.tree_checks", "sandbox.inside.sandbox_tools")

# Enough to find the id at the start of an oversize request, so its reply can name it.
_ID_PREFIX = re.compile(rb'^\s*\{\s*"id"\s*:\s*"([^"\\]{1,128})"')
_SKIP_CHUNK = 1 << 16
SPARE = "--spare"
# A job's arguments are a few hundred bytes; the cap only bounds what a spare reads.
_ARGUMENTS_CAP = 1 << 16


class _CallTimeout(BaseException):
    """Raised by the interval timer inside a call. A BaseException, so that a tool's own
    ``except Exception`` cannot swallow it."""


class ToolServer:
    """Reads requests from ``reader`` and writes replies to ``writer`` until EOF."""

    def __init__(
        self,
        dispatch: Dispatch,
        tools: Sequence[str],
        *,
        reader: BinaryIO,
        writer: BinaryIO,
        max_message_bytes: int,
        call_timeout: float,
        stages: dict[str, float] | None = None,
    ) -> None:
        self._dispatch = dispatch
        self._stages = stages
        self._tools = list(tools)
        self._reader = reader
        self._writer = writer
        self._cap = max_message_bytes
        self._call_timeout = call_timeout
        self._armed = False

    def serve(self, after_ready: Callable[[], None] | None = None) -> int:
        """Write the ready line, run ``after_ready``, then answer requests until EOF on the
        reader; the exit code is 0."""
        signal.signal(signal.SIGALRM, self._on_alarm)
        self._send(ready_frame(self._tools, self._stages))
        if after_ready is not None:
            after_ready()
        while True:
            line = self._reader.readline(self._cap + 1)
            if not line:
                return 0
            if len(line) > self._cap and not line.endswith(b"\n"):
                self._send(self._oversize_request(line))
            else:
                self._send(self._handle(line))

    def _oversize_request(self, head: bytes) -> dict[str, Any]:
        # Skip to the end of the line so the next request starts clean.
        chunk = head
        while chunk and not chunk.endswith(b"\n"):
            chunk = self._reader.readline(_SKIP_CHUNK)
        match = _ID_PREFIX.match(head)
        request_id = match.group(1).decode("utf-8", "replace") if match else None
        return error_reply(
            request_id, "BEM-406", f"request is over the {self._cap}-byte message cap"
        )

    def _handle(self, line: bytes) -> dict[str, Any]:
        try:
            request_id, tool, args, timeout = self._parse(line)
        except ValueError as error:
            return error_reply(None, "BEM-407", f"malformed request: {error}")
        try:
            result = self._timed_call(tool, args, timeout)
        except _CallTimeout:
            message = f"{tool} did not finish within {timeout:g} s"
            return error_reply(request_id, "BEM-403", message)
        except BeamError as error:
            return error_reply(request_id, error.code, error.message)
        except Exception as error:
            message = f"{tool} failed: {type(error).__name__}: {error}"
            return error_reply(request_id, "BEM-100", message)
        return ok_reply(request_id, result)

    def _parse(self, line: bytes) -> tuple[str, str, dict[str, Any], float]:
        request = json.loads(line)  # ValueError (JSONDecodeError, bad UTF-8) when malformed
        if not isinstance(request, dict):
            raise ValueError("a request is a JSON object")
        request_id, tool = request.get("id"), request.get("tool")
        args, timeout = request.get("args", {}), request.get("timeout", self._call_timeout)
        if not isinstance(request_id, str) or not isinstance(tool, str):
            raise ValueError("'id' and 'tool' must be strings")
        if not isinstance(args, dict):
            raise ValueError("'args' must be an object")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError("'timeout' must be a positive number of seconds")
        return request_id, tool, args, float(timeout)

    def _timed_call(self, tool: str, args: dict[str, Any], timeout: float) -> Any:
        self._armed = True
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return self._dispatch(tool, args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self._armed = False

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        # A timer that fires after the call returned (between return and disarm) is ignored.
        if self._armed:
            self._armed = False
            raise _CallTimeout

    def _send(self, frame: dict[str, Any]) -> None:
        try:
            data = encode_frame(frame)
        except (TypeError, ValueError) as error:
            message = f"the tool result is not JSON: {error}"
            data = encode_frame(error_reply(frame.get("id"), "BEM-101", message))
        if len(data) - 1 > self._cap:
            message = f"the result is over the {self._cap}-byte message cap"
            data = encode_frame(error_reply(frame.get("id"), "BEM-406", message))
        self._writer.write(data)
        self._writer.flush()


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sandbox.inside.server")
    parser.add_argument("--root", required=True, help="the job's working tree")
    parser.add_argument("--protected", action="append", help="a protected ref pattern")
    parser.add_argument("--origin", help="where git_push sends branches (the job's outbox)")
    parser.add_argument("--max-read-bytes", type=int, default=1 << 20)
    parser.add_argument("--max-write-bytes", type=int, default=1 << 20)
    parser.add_argument("--max-message-bytes", type=int, default=4 << 20)
    parser.add_argument("--call-timeout", type=float, default=30.0)
    parser.add_argument("--identity-name", default="Riverbeam")
    parser.add_argument("--identity-email", default="riverbeam@localhost")
    parser.add_argument(
        "--trailer", action="append", default=[], help="'Key: value' ending every commit"
    )
    parser.add_argument("--compare-to", help="commit git_diff and git_log start from (a sha)")
    parser.add_argument("--compare-label", help="what the job calls that commit, like 'main'")
    return parser.parse_args(argv)


def check_tree(args: argparse.Namespace) -> None:
    """Refuse what ``open_tree`` would, with the modules that opening a repository needs."""
    from sandbox.inside.tree_checks import check_tree as check

    check(
        _root(args),
        args.protected,
        origin=args.origin,
        compare_to=args.compare_to,
        compare_label=args.compare_label,
    )


def open_tree(args: argparse.Namespace) -> WorkingTree:
    """The job's working tree, as the arguments describe it; a compare point the repository
    does not hold fails here, not on every git_diff."""
    from bot.core.authors import Author
    from sandbox.inside.worktree import WorkingTree

    make = functools.partial(
        WorkingTree,
        identity=Author(args.identity_name, args.identity_email),
        trailers=args.trailer,
        compare_to=args.compare_to,
        compare_label=args.compare_label,
    )
    root = _root(args)
    # Without --protected the tree keeps its own default protection.
    tree = make(root) if args.protected is None else make(root, args.protected)
    if args.origin:
        tree.add_origin(args.origin)
    tree.compare_point()
    return tree


def _root(args: argparse.Namespace) -> SandboxRoot:
    from sandbox.inside.jail import SandboxRoot

    return SandboxRoot(
        args.root, max_read_bytes=args.max_read_bytes, max_write_bytes=args.max_write_bytes
    )


class _ToolsAfterReady:
    """The dispatcher, made once the ready line is out: the tree and the tools it loads."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self._dispatch: Dispatch | None = None

    def load(self) -> None:
        call_tool = _load_tools()
        try:
            self._dispatch = functools.partial(call_tool, open_tree(self._args))
        except (BeamError, OSError, ValueError) as error:  # ValueError: a bad identity or trailer
            _refuse(self._args.root, error)

    def __call__(self, tool: str, args: dict[str, Any]) -> Any:
        assert self._dispatch is not None, "load() runs before the first request is read"
        return self._dispatch(tool, args)


def _load_tools() -> Callable[..., Any]:
    from sandbox.inside.sandbox_tools import call_tool

    return call_tool


def _await_job(reader: BinaryIO, writer: BinaryIO, stages: dict[str, float]) -> list[str]:
    """A spare's start: everything a job needs loaded, then the job's arguments, one line."""
    import sandbox.inside.tree_checks  # noqa: F401

    _load_tools()
    stages["loaded"] = time.monotonic()
    writer.write(encode_frame({"spare": True, "version": PROTOCOL_VERSION}))
    writer.flush()
    line = reader.readline(_ARGUMENTS_CAP + 1)
    stages["claimed"] = time.monotonic()
    try:
        words = json.loads(line) if line.endswith(b"\n") else None
    except ValueError:
        words = None
    if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
        print("sandbox.inside.server: a spare takes one JSON list of arguments", file=sys.stderr)
        sys.exit(2)
    return words


def _refuse(root: str, error: Exception) -> NoReturn:
    print(f"sandbox.inside.server: cannot open {root}: {error}", file=sys.stderr)
    sys.exit(2)


def _protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """The protocol's reader and writer; fd 1 is re-pointed at stderr for everything else."""
    writer = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return sys.stdin.buffer, writer


def main(argv: Sequence[str] | None = None) -> int:
    stages = {"interpreter": time.monotonic()}
    given = list(sys.argv[1:] if argv is None else argv)
    reader, writer = _protocol_streams()
    if given == [SPARE]:
        given = _await_job(reader, writer, stages)
    args = _arguments(given)
    # Timed here: the jail and the ref policy (pygit2 too when the job has a compare point).
    import sandbox.inside.jail
    import sandbox.inside.tree_checks  # noqa: F401

    stages["imported"] = time.monotonic()
    try:
        check_tree(args)
    except (BeamError, OSError) as error:
        _refuse(args.root, error)
    stages["checked"] = time.monotonic()
    tools = _ToolsAfterReady(args)
    server = ToolServer(
        tools,
        list(TOOL_NAMES),
        reader=reader,
        writer=writer,
        max_message_bytes=args.max_message_bytes,
        call_timeout=args.call_timeout,
        stages=stages,
    )
    return server.serve(after_ready=tools.load)


if __name__ == "__main__":
    sys.exit(main())
