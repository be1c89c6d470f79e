"""A program of the image run in a job's running container, beside its tool server: one
JSON request on stdin, one JSON line back on stdout (``docker exec``).

The docs checks use it twice (docs/checks.md): ``sandbox.inside.checks.export`` as the tools'
uid, and ``sandbox.inside.checks.runner`` as the checks' own. The process has the container's
hardening (no network, no capabilities, the same cgroup limits); it runs as the uid asked
for, whatever the image's user is. Its reply is read by a deadline and under a cap; past the
deadline every process of that uid in the container is killed (``kill(-1)`` from a second
program of the same uid), and the call is BEM-412.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from docker.api import APIClient

from bot.core.errors import BeamError
from sandbox.host.container.attach import AttachedStream, LineTooLong, StreamClosed, StreamTimeout
from sandbox.host.engine import engine_errors

__all__ = ["run_program"]

_PYTHON = ("/usr/bin/python3", "-I", "-X", "utf8")
_KILL_ALL = "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n"
_ENVIRONMENT = ["LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "HOME=/nonexistent"]


def run_program(
    api: APIClient,
    container_id: str,
    module: str,
    request: Mapping[str, Any],
    *,
    uid: int,
    timeout: float,
    max_bytes: int,
    kill_on_failure: bool = False,
) -> dict[str, Any]:
    """Run ``python -m module`` as ``uid`` in the container and return its JSON reply;
    ``kill_on_failure``: when it fails, kill every process of ``uid`` in the container
    (what it started may live on). Never for the tools' uid: the tool server is one."""
    command = [*_PYTHON, "-m", module]
    with engine_errors("BEM-412", f"starting {module} in the sandbox"):
        created = api.exec_create(
            container_id,
            command,
            stdin=True,
            stdout=True,
            stderr=True,
            user=f"{uid}:{uid}",
            environment=_ENVIRONMENT,
            workdir="/",
        )
        handle = api.exec_start(created["Id"], socket=True)
    stream = AttachedStream(handle)
    deadline = time.monotonic() + timeout
    try:
        stream.send(json.dumps(dict(request)).encode() + b"\n", deadline=deadline)
        stream.close_stdin()
        line = stream.read_line(deadline=deadline, limit=max_bytes)
    except (StreamTimeout, StreamClosed, LineTooLong) as error:
        if kill_on_failure:
            kill_all(api, container_id, uid)
        raise BeamError("BEM-412", _failure(module, error, stream, timeout, max_bytes)) from None
    finally:
        stream.close()
    return _reply(module, line)


def kill_all(api: APIClient, container_id: str, uid: int) -> None:
    """Kill every process of ``uid`` in the container (a check that outlived its time)."""
    with engine_errors("BEM-412", "stopping the checks in the sandbox"):
        created = api.exec_create(container_id, [*_PYTHON, "-c", _KILL_ALL], user=f"{uid}:{uid}")
        api.exec_start(created["Id"])


def _failure(
    module: str, error: Exception, stream: AttachedStream, timeout: float, max_bytes: int
) -> str:
    if isinstance(error, StreamTimeout):
        return f"{module} did not answer within {timeout:g} s"
    if isinstance(error, LineTooLong):
        return f"{module}'s answer is over {max_bytes} bytes"
    tail = stream.stderr_tail() or "no output on stderr"
    return f"{module} ended without an answer (a check may have killed it): {tail}"


def _reply(module: str, line: bytes) -> dict[str, Any]:
    try:
        reply = json.loads(line)
    except ValueError:
        raise BeamError("BEM-412", f"{module} answered with no JSON: {line[:200]!r}") from None
    if not isinstance(reply, dict):
        raise BeamError("BEM-412", f"{module} answered with no JSON object")
    error = reply.get("error")
    if isinstance(error, dict):
        code, message = str(error.get("code", "BEM-412")), str(error.get("message", ""))
        raise BeamError("BEM-412", message if code == "BEM-412" else f"{code}: {message}")
    return reply
