"""MCP servers for the toolbox tests and bench: the reference ``server-everything`` (npm,
installed by ``docker/provision --dev``) and a tiny stdio server of our own whose tools
misbehave on request.

``everything()`` is the ``[[mcp.servers]]`` entry of server-everything; it fails (never
skips) when the package is missing, so a machine without it cannot pass the tests.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any, Final

EVERYTHING_VERSION: Final = "2026.8.31"
EVERYTHING_PREFIX: Final = Path("/opt/riverbeam-npm/server-everything")
EVERYTHING_SCRIPT: Final = (
    EVERYTHING_PREFIX / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)

TINY_SERVER: Final = '''\
import os, sys, time
from mcp.server.mcpserver import MCPServer

server = MCPServer("tiny")


@server.tool()
def where() -> dict:
    """Where the server runs: its directory (what is in it, its mode and owner), its pid and
    environment."""
    cwd = os.getcwd()
    status = os.stat(cwd)
    return {"cwd": cwd, "entries": sorted(os.listdir(cwd)), "pid": os.getpid(),
            "mode": status.st_mode & 0o7777, "owner": status.st_uid, "env": dict(os.environ)}


@server.tool()
def write(path: str, text: str) -> str:
    """Write ``text`` to ``path`` (relative to the server's directory), as a filesystem
    server writes where the model asks."""
    with open(path, "w") as out:
        out.write(text)
    return "written"


@server.tool()
def die() -> str:
    """Exit at once, mid-call."""
    os._exit(3)


@server.tool()
def nap(seconds: float) -> str:
    """Answer after ``seconds``."""
    time.sleep(seconds)
    return "awake"


@server.tool()
def big(size: int) -> str:
    """A text of ``size`` characters."""
    return "x" * size


@server.tool()
def spawn() -> str:
    """Start a helper process that outlives this call; its pid."""
    import subprocess
    return str(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]).pid)


@server.tool()
def fail() -> str:
    """Answer with a tool error."""
    raise ValueError("the tiny server fails on purpose")


print("tiny server starting", file=sys.stderr, flush=True)
if sys.argv[1:2] == ["http"]:
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
else:
    server.run("stdio")
'''


def everything(**keys: Any) -> dict[str, Any]:
    """The ``[[mcp.servers]]`` entry of server-everything (over stdio), with ``keys``."""
    node = shutil.which("node")
    if node is None or not EVERYTHING_SCRIPT.is_file():
        raise AssertionError(
            f"@modelcontextprotocol/server-everything@{EVERYTHING_VERSION} is not installed at "
            f"{EVERYTHING_PREFIX} (or node is missing): run docker/provision --dev"
        )
    entry = {"name": "everything", "command": node, "args": [str(EVERYTHING_SCRIPT), "stdio"]}
    return entry | keys


def tiny(directory: Path, **keys: Any) -> dict[str, Any]:
    """The ``[[mcp.servers]]`` entry of the tiny server, its script written in ``directory``."""
    return {"name": "tiny", "command": sys.executable, "args": [str(tiny_script(directory))]} | keys


def tiny_script(directory: Path) -> Path:
    """The tiny server's script, written in ``directory``: ``python SCRIPT`` serves stdio,
    ``python SCRIPT http PORT`` Streamable HTTP at ``http://127.0.0.1:PORT/mcp``."""
    script = directory / "tiny_mcp_server.py"
    script.write_text(TINY_SERVER)
    return script
