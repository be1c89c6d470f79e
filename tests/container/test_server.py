"""The tool server's protocol, run as a process on the host (no container needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pygit2
import pytest

from sandbox.inside.protocol import PROTOCOL_VERSION
from sandbox.inside.tool_schemas import TOOL_NAMES
from tests.container.kit import make_workspace


class Server:
    """``python -m sandbox.inside.server`` on pipes, one JSON line at a time."""

    def __init__(self, root: Path, *options: str) -> None:
        command = [sys.executable, "-m", "sandbox.inside.server", "--root", str(root), *options]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        frame: dict[str, Any] = json.loads(self.process.stdout.readline())
        return frame

    def send(self, line: bytes) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(line)
        self.process.stdin.flush()
        return self.read()

    def call(self, request_id: str, tool: str, args: dict[str, Any], **extra: Any) -> Any:
        request = {"id": request_id, "tool": tool, "args": args, **extra}
        return self.send(json.dumps(request).encode() + b"\n")

    def close(self) -> tuple[int, bytes, bytes]:
        out, err = self.process.communicate(timeout=10)
        return self.process.returncode, out, err


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_workspace(tmp_path, uid=0).path


@pytest.fixture
def server(root: Path) -> Iterator[Server]:
    running = Server(root, "--protected", "main", "--max-message-bytes", "4096")
    yield running
    if running.process.poll() is None:
        running.process.kill()
    running.process.communicate(timeout=10)  # closes the pipes


def test_ready_then_replies_in_order_then_exit_0_on_eof(server: Server) -> None:
    ready = server.read()
    stages = ready.pop("stages")
    assert ready == {"ready": True, "version": PROTOCOL_VERSION, "tools": list(TOOL_NAMES)}
    # When the server reached each stage of its start, on the host's monotonic clock.
    assert list(stages) == ["interpreter", "imported", "checked"]
    assert stages["interpreter"] <= stages["imported"] <= stages["checked"] <= time.monotonic()
    reply = server.call("a", "read_file", {"path": "README.md"})
    assert reply["id"] == "a" and reply["ok"] is True
    assert reply["result"]["content"] == "# Handbook\n"
    refused = server.call("b", "git_push", {"ref": "main"})
    assert refused == {"id": "b", "ok": False, "error": refused["error"]}
    assert refused["error"]["code"] == "BEM-328"
    assert server.close() == (0, b"", b"")


def test_malformed_requests_are_bem_407_and_the_server_carries_on(server: Server) -> None:
    server.read()
    for line in (b"{not json\n", b"[1, 2]\n", b'{"id": 1, "tool": "list_tree"}\n', b"\xff\n"):
        reply = server.send(line)
        assert reply["ok"] is False and reply["error"]["code"] == "BEM-407", line
    bad_timeout = server.call("t", "list_tree", {}, timeout=-1)
    assert bad_timeout["error"]["code"] == "BEM-407"
    assert server.call("c", "list_tree", {})["ok"] is True


def test_an_oversize_request_is_bem_406_with_its_id_and_the_stream_resyncs(
    server: Server,
) -> None:
    server.read()
    body = "x" * 100_000
    reply = server.call("big", "write_file", {"path": "big.md", "body": body})
    assert reply["id"] == "big" and reply["error"]["code"] == "BEM-406"
    assert server.call("next", "list_tree", {})["ok"] is True


def test_an_oversize_result_is_bem_406(server: Server, root: Path) -> None:
    (root / "long.md").write_text("a line of text\n" * 1000)
    server.read()
    reply = server.call("long", "read_file", {"path": "long.md"})
    assert reply["error"]["code"] == "BEM-406"
    assert "result is over the 4096-byte" in reply["error"]["message"]


def test_a_call_past_its_timeout_is_bem_403_and_the_server_carries_on(root: Path) -> None:
    for index in range(3000):
        (root / f"untracked-{index}.md").write_text("x\n")
    server = Server(root, "--call-timeout", "0.001")
    server.read()
    reply = server.call("slow", "git_status", {})
    assert reply["error"] == {
        "code": "BEM-403",
        "message": "git_status did not finish within 0.001 s",
    }
    assert server.call("fast", "read_file", {"path": "README.md"}, timeout=30)["ok"] is True
    assert server.close()[0] == 0


_NOISY = textwrap.dedent(
    """
    import os, sys
    from sandbox.inside.server import ToolServer, _protocol_streams

    def noisy(tool, args):
        print("a stray print")
        os.write(1, b"a stray write on fd 1\\n")
        return {"tool": tool}

    reader, writer = _protocol_streams()
    server = ToolServer(noisy, ["t"], reader=reader, writer=writer, max_message_bytes=1024,
                        call_timeout=5)
    sys.exit(server.serve())
    """
)


def test_stray_output_goes_to_stderr_never_into_the_protocol() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", _NOISY],
        input=b'{"id": "1", "tool": "t", "args": {}}\n',
        capture_output=True,
        timeout=30,
        check=True,
    )
    lines = [json.loads(line) for line in completed.stdout.splitlines()]
    assert lines == [
        {"ready": True, "version": PROTOCOL_VERSION, "tools": ["t"]},
        {"id": "1", "ok": True, "result": {"tool": "t"}},
    ]
    assert b"a stray print" in completed.stderr
    assert b"a stray write on fd 1" in completed.stderr


def test_a_root_that_cannot_be_opened_exits_2_before_ready(tmp_path: Path) -> None:
    server = Server(tmp_path, "--protected", "bad pattern")
    code, out, err = server.close()
    assert (code, out) == (2, b"")
    assert b"protected ref pattern 'bad pattern'" in err


_BEFORE_READY = textwrap.dedent(
    """
    import json, sys
    from sandbox.inside import server
    server.check_tree(server._arguments(sys.argv[1:]))
    print(json.dumps(sorted(sys.modules)))
    """
)


def _loaded_before_ready(root: Path, *options: str) -> set[str]:
    completed = subprocess.run(
        [sys.executable, "-c", _BEFORE_READY, "--root", str(root), *options],
        capture_output=True,
        timeout=60,
        check=True,
    )
    return set(json.loads(completed.stdout))


_DEFERRED = {"pydantic", "jsonschema", "sandbox.inside.worktree", "sandbox.inside.sandbox_tools"}


def test_the_ready_line_waits_for_the_tree_check_only_not_for_the_tools(root: Path) -> None:
    """What the server imports before its ready line: the check of the tree (the jail and the
    ref policy; pygit2 and the guard only to find a compare point), not the tools."""
    loaded = _loaded_before_ready(root, "--protected", "main")
    assert {"sandbox.inside.tree_checks", "sandbox.inside.jail"} <= loaded
    assert loaded.isdisjoint({"pygit2", "sandbox.inside.repo_guard", *_DEFERRED})

    head = str(pygit2.Repository(str(root)).head.target)
    compared = _loaded_before_ready(root, "--compare-to", head, "--compare-label", "main")
    assert {"pygit2", "sandbox.inside.repo_guard"} <= compared
    assert compared.isdisjoint(_DEFERRED), compared & _DEFERRED


def test_a_compare_point_the_repository_lacks_ends_the_server_before_its_ready_line(
    root: Path,
) -> None:
    missing = ["--compare-to", "0" * 40, "--compare-label", "main"]
    completed = subprocess.run(
        [sys.executable, "-m", "sandbox.inside.server", "--root", str(root), *missing],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert completed.stdout == b""  # no ready line
    assert b"is not a commit in this repository" in completed.stderr


def test_what_only_the_tools_check_ends_the_server_after_its_ready_line(root: Path) -> None:
    """A commit identity git cannot store is refused when the working tree is made, after the
    ready line: the server exits 2 with the reason, and the host's first call sees it go."""
    server = Server(root, "--identity-name", "Evil <x@example.com>")
    assert server.read()["ready"] is True
    returncode, out, err = server.close()
    assert (returncode, out) == (2, b"")
    assert b"cannot open" in err and b"must not contain '<'" in err


_LOADED = textwrap.dedent(
    """
    import json, sys
    from sandbox.inside import server
    server._ToolsAfterReady(server._arguments(sys.argv[1:])).load()
    print(json.dumps(sorted(sys.modules)))
    """
)


def test_loading_the_tools_loads_no_pydantic_and_no_json_schema_library(root: Path) -> None:
    """They were most of the server's start-up CPU: the arguments are checked by
    ``bot.core.arguments``, the reports are dataclasses, the author is ``bot.core.authors``."""
    completed = subprocess.run(
        [sys.executable, "-c", _LOADED, "--root", str(root)],
        capture_output=True,
        timeout=60,
        check=True,
    )
    loaded = set(json.loads(completed.stdout))
    assert "sandbox.inside.sandbox_tools" in loaded
    heavy = {"pydantic", "pydantic_core", "jsonschema", "referencing", "attrs"}
    heavy |= {"bot.core.identity", "bot.core.tools", "bot.core.input", "sandbox.inside.tool_specs"}
    assert loaded.isdisjoint(heavy), loaded & heavy
