"""One hardened container per job, with a long-lived tool server inside (``ContainerSandbox``).

``start`` creates the container (flags in ``sandbox.host.container.hardening``, on the runtime
``sandbox.host.container.runtime`` picks), attaches to its stdio before starting it (so not a
byte of output is missed), and waits for the server's ready line, which comes once the tree is
checked; the server loads its tools after it, so the first call's deadline allows for that
too. ``startup_stages`` says when each step of the start happened. ``stop`` is one engine
call that kills the server and removes the container.
``call`` is one request line out and one reply line back; nothing else touches the engine
on the hot path. ``tools()`` gives the agent the nine tools with the in-process specs, as
``ContainerTool`` objects (``sandbox.host.container.remote_tools``) that call it.

Failures end the container, never leave it behind:

- no ready line in time, or the server died starting: BEM-402 with the tail of its stderr;
- no reply by the call's deadline (the server's own timeout plus a grace period): BEM-403;
- the server replied BEM-403 itself: it is killed all the same, because a call cut short
  may have left the working tree half-changed;
- the stream closed mid-call: BEM-405 when the kernel OOM-killed it, else BEM-404;
- an oversize or malformed reply: BEM-406 / BEM-407.

An oversize *request* is refused before it is sent (BEM-406) and the container lives on;
so do the tools' own refusals (jail, git, protected refs), which come back as ``BeamError``.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NoReturn, TypeVar

import docker
import requests
from docker.errors import APIError, DockerException, NotFound
from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from bot.config import SandboxLimits
from bot.core.errors import BeamError
from bot.core.identity import Identity, Trailer
from bot.core.tools import Tool
from sandbox.host.container.attach import AttachedStream, LineTooLong, StreamClosed, StreamTimeout
from sandbox.host.container.hardening import (
    SandboxJob,
    container_name,
    create_arguments,
    server_arguments,
)
from sandbox.host.container.programs import run_program
from sandbox.host.container.remote_tools import ContainerTool
from sandbox.host.engine import engine_errors
from sandbox.inside.protocol import PROTOCOL_VERSION, encode_frame
from sandbox.inside.tool_specs import TOOL_SPECS

__all__ = ["ContainerSandbox"]

log = logging.getLogger(__name__)

# The host waits this much longer than the server's own timer, so a call the server can cut
# short comes back as its own BEM-403 reply (which names the tool) rather than as silence.
HOST_GRACE_SECONDS = 0.5
STOP_SECONDS = 2.0
_ATTACH = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}


class _Ready(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ready: Literal[True]
    version: int
    tools: list[str]
    stages: dict[str, float] = {}


_Line = TypeVar("_Line", bound=BaseModel)


class _SpareLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spare: Literal[True]
    version: int


class _ErrorBody(BaseModel):
    code: str
    message: str


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None
    ok: bool
    result: JsonValue = None
    error: _ErrorBody | None = None


class ContainerSandbox:
    """A job's container and its tool server. Use as a context manager, or call ``stop``."""

    def __init__(self, client: docker.DockerClient, image: str) -> None:
        self._client = client
        self._image = image
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._container_id: str | None = None
        self._stream: AttachedStream | None = None
        self._limits = SandboxLimits()
        self._tool_names: tuple[str, ...] = ()
        self._stages: dict[str, float] = {}
        # The server loads its tools after the ready line: the first call waits for that too.
        self._loading = False
        # A spare's mounted directories (device, inode): the workspace a job must have to
        # claim it (``start_spare``); None when this is no unclaimed spare.
        self._spare: tuple[tuple[int, int], ...] | None = None

    @property
    def is_spare(self) -> bool:
        """Whether this is a started spare that no job claimed yet."""
        return self._spare is not None

    @property
    def container_id(self) -> str | None:
        return self._container_id

    @property
    def tool_names(self) -> tuple[str, ...]:
        return self._tool_names

    @property
    def startup_stages(self) -> dict[str, float]:
        """When the last ``start`` reached each stage, in ``time.monotonic`` seconds, in order:
        the host's ``create``, ``created``, ``attached``, ``started`` and ``ready`` (the
        ready line read) with the server's own (``interpreter``, ``checked``) in between.
        The container shares the host's monotonic clock."""
        return dict(sorted(self._stages.items(), key=lambda stage: stage[1]))

    def start(
        self,
        job_id: str,
        workspace: Path,
        protected_refs: tuple[str, ...] | list[str],
        limits: SandboxLimits,
        *,
        deadline: datetime,
        outbox: Path | None = None,
        identity: Identity | None = None,
        trailers: Sequence[Trailer] = (),
        compare_to: str | None = None,
        compare_label: str | None = None,
        replace_leftover: bool = False,
        deployment: str | None = None,
    ) -> None:
        """Create, attach, start and wait for the ready line (``limits.ready_timeout``).

        ``trailers`` end every commit the job makes (``Requested-by:``).
        ``compare_to`` (a commit sha the workspace holds) and its ``compare_label`` make
        git_diff and git_log show the change since that commit; a bad one fails the start
        (BEM-402, with the server's reason). A second container for the same job is a name
        conflict (BEM-402), unless ``replace_leftover``: a caller that holds the job (its
        claim in the job store) knows that such a container is what an earlier attempt left
        when its worker died, and has it removed first. ``deployment`` labels the
        container with the job store it belongs to, for the reaper.
        """
        job = SandboxJob(
            job_id=job_id,
            workspace=workspace,
            deadline=deadline,
            limits=limits,
            protected_refs=tuple(protected_refs),
            outbox=outbox,
            identity=identity or Identity(),
            trailers=tuple(trailers),
            compare_to=compare_to,
            compare_label=compare_label,
            deployment=deployment,
        )
        with self._lock:
            if self._spare is not None:
                try:
                    self._claim(job, replace_leftover)
                    return
                except BeamError as error:
                    log.warning("job %s: spare not used (%s), starting afresh", job_id, error)
                    self._discard()
            self._launch(job, replace_leftover=replace_leftover)

    def start_spare(
        self,
        token: str,
        directory: Path,
        limits: SandboxLimits,
        *,
        deadline: datetime,
        deployment: str | None = None,
        views: bool = False,
    ) -> None:
        """Create and start a spare on the empty ``directory/tree`` and ``directory/outbox.git``
        (the mounts a job's container has), and wait for its spare line: its server has
        loaded everything and waits for a job's arguments. ``start`` claims it. ``views``:
        the job's tree is a view mounted on ``tree`` later, which the spare's bind receives
        (``SandboxJob.receives_mounts``)."""
        job = SandboxJob(
            job_id=token,
            workspace=directory / "tree",
            outbox=directory / "outbox.git",
            deadline=deadline,
            limits=limits,
            protected_refs=(),
            deployment=deployment,
            receives_mounts=views,
        )
        # The directory, not the tree: a view mounted on the tree shows the view's identity.
        mounts = (_identity(directory), _identity(directory / "outbox.git"))
        with self._lock:
            self._launch(job, spare=True)
            self._spare = mounts

    def _launch(
        self, job: SandboxJob, *, spare: bool = False, replace_leftover: bool = False
    ) -> None:
        if self._container_id is not None:
            raise BeamError("BEM-402", f"this sandbox already runs {self._container_id[:12]}")
        self._limits = job.limits
        self._stages = {"create": time.monotonic()}
        with engine_errors("BEM-402", f"creating the sandbox container for job {job.job_id}"):
            created = self._create(job, replace_leftover, spare=spare)
        self._stages["created"] = time.monotonic()
        self._container_id = created["Id"]
        try:
            self._attach_and_start(spare=spare)
        except BaseException:
            self._discard()
            raise

    def _claim(self, job: SandboxJob, replace_leftover: bool) -> None:
        """Hand this spare to ``job``: its mounts must be the job's workspace, its limits the
        job's; then its name, its arguments and its ready line."""
        mounts, self._spare = self._spare, None
        outbox = job.outbox
        if outbox is None or mounts != (_identity(job.workspace.parent), _identity(outbox)):
            raise BeamError("BEM-402", "the spare mounts another workspace than the job's")
        if job.limits != self._limits:
            raise BeamError("BEM-402", "the spare was made with other sandbox limits")
        self._stages = {"claim": time.monotonic()}
        container_id, stream = self._require_id(), self._running()
        with engine_errors("BEM-402", f"naming the spare container for job {job.job_id}"):
            self._rename(container_id, container_name(job.job_id), replace_leftover)
        self._stages["renamed"] = time.monotonic()
        line = json.dumps(server_arguments(job)).encode() + b"\n"
        deadline = time.monotonic() + self._limits.ready_timeout
        try:
            stream.send(line, deadline=deadline)
        except (StreamClosed, StreamTimeout) as error:
            raise BeamError(
                "BEM-402", f"the spare did not take its job ({_reason(error)})"
            ) from None
        self._await_ready(stream)

    def _rename(self, container_id: str, name: str, replace_leftover: bool) -> None:
        api = self._client.api
        try:
            api.rename(container_id, name)
            return
        except APIError as error:
            if not (replace_leftover and error.status_code == 409):
                raise
        log.warning("removing the container an earlier attempt left (name %s)", name)
        api.remove_container(name, force=True)
        api.rename(container_id, name)

    def _create(self, job: SandboxJob, replace_leftover: bool, *, spare: bool = False) -> Any:
        api = self._client.api
        arguments = create_arguments(api, self._image, job, spare=spare)
        try:
            return api.create_container(**arguments)
        except APIError as error:
            if not (replace_leftover and error.status_code == 409):
                raise
        log.warning("removing the container an earlier attempt at job %s left", job.job_id)
        api.remove_container(arguments["name"], force=True)
        return api.create_container(**arguments)

    def call(self, tool: str, args: dict[str, Any], timeout: float | None = None) -> JsonValue:
        """Run one tool in the container and return its JSON result; a tool's refusal is
        raised as the ``BeamError`` the server sent."""
        seconds = self._limits.call_timeout if timeout is None else timeout
        with self._lock:
            stream = self._running()
            request_id = str(next(self._ids))
            frame = {"id": request_id, "tool": tool, "args": args, "timeout": seconds}
            data = self._encode_request(frame)
            grace = HOST_GRACE_SECONDS + (self._limits.ready_timeout if self._loading else 0.0)
            deadline = time.monotonic() + seconds + grace
            try:
                stream.send(data, deadline=deadline)
                line = stream.read_line(deadline=deadline, limit=self._limits.max_message_bytes)
            except StreamTimeout:
                self._fail("BEM-403", f"{tool} got no reply within {seconds:g} s; container killed")
            except StreamClosed:
                self._died(tool)
            except LineTooLong as error:
                self._fail("BEM-406", f"{tool}: {error}")
            self._loading = False
            return self._result(tool, request_id, line)

    def run_program(
        self, module: str, request: Mapping[str, Any], *, checks: bool, timeout: float
    ) -> dict[str, Any]:
        """Run program ``module`` of the image beside the tool server, as the checks' uid
        (``checks``) or the tools' (``sandbox.host.container.programs``); no tool call runs
        meanwhile."""
        with self._lock:
            container_id = self._require_id()
            limits = self._limits
            return run_program(
                self._client.api,
                container_id,
                module,
                request,
                uid=limits.checks_uid if checks else limits.uid,
                timeout=timeout,
                max_bytes=limits.max_message_bytes,
                kill_on_failure=checks,
            )

    def tools(self) -> list[Tool]:
        """The nine tools, with exactly the in-process specs, running in this container."""
        return [ContainerTool(spec, self) for spec in TOOL_SPECS.values()]

    def stop(self, *, graceful: bool = False) -> None:
        """Remove the container, in one engine call that kills the server too: between calls
        it is idle, so nothing is lost, and its tmpfs and anonymous volumes go with it.
        ``graceful`` first closes the server's stdin and waits for it to exit 0 on EOF: the
        previous stop, a few times slower (``bench.container_bench`` compares the two)."""
        with self._lock:
            stream = self._stream
            if graceful and stream is not None:
                stream.close_stdin()
                stream.drain(deadline=time.monotonic() + STOP_SECONDS)
            self._discard()

    def __enter__(self) -> ContainerSandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _attach_and_start(self, *, spare: bool = False) -> None:
        api, container_id = self._client.api, self._require_id()
        with engine_errors("BEM-402", "attaching to the sandbox container"):
            handle = api.attach_socket(container_id, params=_ATTACH)
        self._stream = AttachedStream(handle)
        self._stages["attached"] = time.monotonic()
        with engine_errors("BEM-402", "starting the sandbox container"):
            api.start(container_id)
        self._stages["started"] = time.monotonic()
        if spare:
            line = self._read_start_line(self._stream, "ready as a spare")
            self._check_version(self._parse(_SpareLine, line, "ready as a spare").version)
        else:
            self._await_ready(self._stream)

    def _read_start_line(self, stream: AttachedStream, what: str) -> bytes:
        """The server's first line (ready, or spare), read by the start's deadline."""
        limits = self._limits
        deadline = time.monotonic() + limits.ready_timeout
        try:
            line = stream.read_line(deadline=deadline, limit=limits.max_message_bytes)
            self._stages["ready"] = time.monotonic()
        except (StreamClosed, StreamTimeout, LineTooLong) as error:
            self._not_started(stream, what, error)
        return line

    def _parse(self, model: type[_Line], line: bytes, what: str) -> _Line:
        try:
            return model.model_validate_json(line)
        except ValidationError as error:
            self._not_started(self._running(), what, error)

    def _not_started(self, stream: AttachedStream, what: str, error: Exception) -> NoReturn:
        tail = stream.stderr_tail() or "(no output on stderr)"
        message = f"the tool server did not become {what} ({_reason(error)}): {tail}"
        raise BeamError("BEM-402", message) from None

    def _await_ready(self, stream: AttachedStream) -> None:
        line = self._read_start_line(stream, "ready")
        ready = self._parse(_Ready, line, "ready")
        self._check_version(ready.version)
        self._tool_names = tuple(ready.tools)
        self._stages.update(ready.stages)
        self._loading = True

    def _check_version(self, version: int) -> None:
        if version != PROTOCOL_VERSION:
            message = (
                f"the image speaks protocol {version}, this worker {PROTOCOL_VERSION}; "
                "run `riverbeam sandbox build`"
            )
            raise BeamError("BEM-401", message)

    def _encode_request(self, frame: dict[str, Any]) -> bytes:
        try:
            data = encode_frame(frame)
        except (TypeError, ValueError) as error:
            raise BeamError(
                "BEM-090", f"{frame['tool']}: arguments are not JSON: {error}"
            ) from None
        if len(data) - 1 > self._limits.max_message_bytes:
            cap = self._limits.max_message_bytes
            raise BeamError("BEM-406", f"{frame['tool']}: the request is over the {cap}-byte cap")
        return data

    def _result(self, tool: str, request_id: str, line: bytes) -> JsonValue:
        try:
            reply = _Reply.model_validate_json(line)
        except ValidationError as error:
            self._fail("BEM-407", f"{tool}: the reply is not a protocol frame: {error}")
        if reply.id != request_id:
            self._fail("BEM-407", f"{tool}: reply for request {reply.id!r}, not {request_id!r}")
        if reply.ok:
            return reply.result
        if reply.error is None:
            self._fail("BEM-407", f"{tool}: a failed reply without an error")
        try:
            refusal = BeamError(reply.error.code, reply.error.message)
        except ValueError:
            self._fail("BEM-407", f"{tool}: unknown error code {reply.error.code!r}")
        if refusal.code == "BEM-403":
            self._discard()
        raise refusal

    def _died(self, tool: str) -> NoReturn:
        container_id, stream = self._require_id(), self._running()
        stream.drain(deadline=time.monotonic() + 1.0)
        tail = stream.stderr_tail() or "(no output on stderr)"
        oom_killed, exit_code = self._final_state(container_id)
        if oom_killed:
            limit = self._limits.mem_limit
            message = f"{tool}: the container hit its {limit} memory limit and was killed"
            self._fail("BEM-405", message)
        self._fail("BEM-404", f"{tool}: the tool server exited (code {exit_code}): {tail}")

    def _final_state(self, container_id: str) -> tuple[bool, int | None]:
        """Whether the kernel OOM-killed the container, and its exit code. The engine records
        the OOM event and the exit separately, so a kill by signal is looked at twice."""
        api = self._client.api
        try:
            api.wait(container_id, timeout=5)
            for _ in range(5):
                state = api.inspect_container(container_id)["State"]
                if state["OOMKilled"] or state["ExitCode"] != 137:
                    break
                time.sleep(0.1)
        except (DockerException, requests.RequestException):
            return False, None
        return bool(state["OOMKilled"]), int(state["ExitCode"])

    def _fail(self, code: str, message: str) -> NoReturn:
        self._discard()
        raise BeamError(code, message)

    def _discard(self) -> None:
        """Forget the container and remove it, running or not."""
        container_id, stream = self._container_id, self._stream
        self._container_id, self._stream, self._spare = None, None, None
        if stream is not None:
            stream.close()
        if container_id is None:
            return
        try:
            self._client.api.remove_container(container_id, force=True, v=True)
        except NotFound:
            pass
        except (DockerException, requests.RequestException) as error:
            # The reaper removes it later: it is labelled with its job and deadline.
            log.warning("could not remove sandbox container %s: %s", container_id[:12], error)

    def _running(self) -> AttachedStream:
        if self._stream is None:
            raise BeamError("BEM-404", "the sandbox is not running (stopped, or never started)")
        return self._stream

    def _require_id(self) -> str:
        if self._container_id is None:
            raise BeamError("BEM-404", "the sandbox is not running (stopped, or never started)")
        return self._container_id


def _identity(path: Path) -> tuple[int, int]:
    """A directory's device and inode: what a bind mount follows, whatever its path becomes."""
    try:
        info = os.stat(path)
    except OSError:
        return (-1, -1)
    return (info.st_dev, info.st_ino)


def _reason(error: Exception) -> str:
    if isinstance(error, StreamClosed):
        return "it exited"
    if isinstance(error, StreamTimeout):
        return "timed out"
    return str(error).splitlines()[0]
