"""How a job's sandbox container is created: the hardened defaults, in one place.

Every flag below narrows what code running in the container (the tool server, libgit2, and
anything a hostile repository or model manages to make them do) can reach. ``docs/sandbox.md``
explains each one; the container tests read every one back with ``docker inspect``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from docker.api import APIClient
from docker.types import LogConfig, Mount, Ulimit

from bot.config import SandboxLimits
from bot.core.errors import BeamError
from bot.core.identity import Identity, Trailer
from bot.core.jobids import is_job_id
from sandbox.host.container.runtime import resolve_runtime

__all__ = [
    "CHECKS_TREES_MOUNT",
    "CHECKS_WORK_MOUNT",
    "DEADLINE_LABEL",
    "DEPLOYMENT_LABEL",
    "JOB_LABEL",
    "OUTBOX_MOUNT",
    "ROLE_LABEL",
    "ROLE_SANDBOX",
    "SPARE_LABEL",
    "SPARE_OWNER_LABEL",
    "SPARE_PREFIX",
    "WORKSPACE_MOUNT",
    "SandboxJob",
    "container_job",
    "container_name",
    "create_arguments",
]

WORKSPACE_MOUNT = "/workspace"
OUTBOX_MOUNT = "/outbox"  # the per-job outbox; a job's clone has this path as its origin URL
CHECKS_TREES_MOUNT = "/checks/trees"  # sandbox.inside.checks.export writes here
CHECKS_WORK_MOUNT = "/checks/work"  # sandbox.inside.checks.runner's checks write here
JOB_LABEL = "riverbeam.job"
DEADLINE_LABEL = "riverbeam.deadline"
ROLE_LABEL = "riverbeam.role"
# Which deployment (job store) started the container: its reaper is the only one that may
# remove it before its deadline. See ``sandbox.host.container.reaper``.
DEPLOYMENT_LABEL = "riverbeam.deployment"
ROLE_SANDBOX = "sandbox"
# A spare container (``sandbox.host.container.spares``), with the deployment that started it.
# A spare carries neither the job label nor the deployment label: a reaper (of this release
# or an older one) that knows nothing of spares removes it only past its deadline.
SPARE_LABEL = "riverbeam.spare"
# The process that started a spare, "<host name>:<pid>": a reaper on that host removes an
# idle spare whose process is gone (a wrong verdict costs an idle spare, never a job).
SPARE_OWNER_LABEL = "riverbeam.spare-owner"
SPARE_PREFIX = "riverbeam-spare-"
SPARE_ARGUMENTS = ("--spare",)

# The environment is built here and nothing is inherited from the worker's: no tokens, no
# proxies, no DOCKER_HOST. HOME points at the tmpfs because the root filesystem is read-only.
_ENVIRONMENT = ("HOME=/tmp", "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1")


@dataclass(frozen=True)
class SandboxJob:
    """What one job's container is made from."""

    job_id: str
    workspace: Path
    deadline: datetime
    limits: SandboxLimits
    protected_refs: tuple[str, ...]
    outbox: Path | None = None
    identity: Identity = field(default_factory=Identity)
    # Lines every commit of the job ends with, such as ``Requested-by:``.
    trailers: tuple[Trailer, ...] = ()
    # The commit git_diff and git_log start from, and its name; the tool server checks both.
    compare_to: str | None = None
    compare_label: str | None = None
    # The starting deployment's identity (``RedisGateway.deployment``); None: unlabelled.
    deployment: str | None = None
    # A spare's: the workspace is bound rslave, so the job's view, mounted on it later on the
    # host (a shared mount), reaches the container.
    receives_mounts: bool = False

    def __post_init__(self) -> None:
        # The workspace's rule: the same id names the job's directory, branch and container.
        if not is_job_id(self.job_id):
            raise BeamError(
                "BEM-402",
                f"job id {self.job_id!r} cannot name a container; use up to 100 letters, "
                "digits, '_' and '-'",
            )
        if self.deadline.tzinfo is None:
            raise BeamError("BEM-402", "the job deadline must carry a time zone")


def container_name(job_id: str) -> str:
    # One container per job at a time: a second start for the same job is a name conflict.
    return f"riverbeam-job-{job_id}"


def container_job(labels: Mapping[str, str], names: Iterable[str]) -> str:
    """The job a sandbox container runs for: its job label, or for a claimed spare the job
    it was renamed for (``names`` as the engine lists them, "/name"); "" for an idle spare."""
    if SPARE_LABEL not in labels:
        return labels.get(JOB_LABEL, "")
    prefix = container_name("")
    for name in names:
        bare = name.rpartition("/")[2]
        if bare.startswith(prefix):
            return bare[len(prefix) :]
    return ""


def server_arguments(job: SandboxJob) -> list[str]:
    """The tool server's command line (the image's entrypoint runs ``sandbox.inside.server``)."""
    limits = job.limits
    arguments = ["--root", WORKSPACE_MOUNT]
    for pattern in job.protected_refs:
        arguments += ["--protected", pattern]
    arguments += [
        "--max-read-bytes",
        str(limits.max_read_bytes),
        "--max-write-bytes",
        str(limits.max_write_bytes),
        "--max-message-bytes",
        str(limits.max_message_bytes),
        "--call-timeout",
        repr(limits.call_timeout),
        "--identity-name",
        job.identity.name,
        "--identity-email",
        job.identity.email,
    ]
    if job.outbox is not None:
        arguments += ["--origin", OUTBOX_MOUNT]
    arguments += [f"--trailer={trailer}" for trailer in job.trailers]
    # One "--flag=value" word each: a label starting with '-' must not read as an option.
    if job.compare_to is not None:
        arguments.append(f"--compare-to={job.compare_to}")
    if job.compare_label is not None:
        arguments.append(f"--compare-label={job.compare_label}")
    return arguments


def create_arguments(
    api: APIClient,
    image: str,
    job: SandboxJob,
    *,
    entrypoint: list[str] | None = None,
    spare: bool = False,
) -> dict[str, Any]:
    """Keyword arguments for ``APIClient.create_container``. ``entrypoint`` replaces the tool
    server (probes use it) and keeps every other flag. A ``spare`` (``job.job_id`` is its
    token) differs in its name, its labels and its command only: its server waits for the
    job's arguments on stdin."""
    uid = job.limits.uid
    command = list(SPARE_ARGUMENTS) if spare else server_arguments(job)
    return {
        "image": image,
        "name": SPARE_PREFIX + job.job_id if spare else container_name(job.job_id),
        "command": None if entrypoint else command,
        "entrypoint": entrypoint,
        "user": f"{uid}:{uid}",
        "working_dir": WORKSPACE_MOUNT,
        "environment": list(_ENVIRONMENT),
        # Otherwise the SDK copies proxy settings from the worker's ~/.docker/config.json.
        "use_config_proxy": False,
        "labels": _spare_labels(job) if spare else _labels(job),
        # The tool server talks over stdin/stdout. With stdin open and not detached the SDK
        # sets StdinOnce: the engine closes the server's stdin (EOF, a clean exit) when the
        # host half-closes the attach connection.
        "stdin_open": True,
        "tty": False,
        # No network at the engine as well as network mode none: the runtime still gives the
        # container a namespace of its own with only a loopback, but the engine sets up no
        # network sandbox for it, so no hook process (a re-executed dockerd) runs per start.
        "network_disabled": True,
        "host_config": _host_config(api, job),
    }


def _labels(job: SandboxJob) -> dict[str, str]:
    labels = {
        JOB_LABEL: job.job_id,
        DEADLINE_LABEL: job.deadline.isoformat(),
        ROLE_LABEL: ROLE_SANDBOX,
    }
    if job.deployment is not None:
        labels[DEPLOYMENT_LABEL] = job.deployment
    return labels


def _spare_labels(job: SandboxJob) -> dict[str, str]:
    return {
        SPARE_LABEL: job.deployment or "",
        SPARE_OWNER_LABEL: f"{socket.gethostname()}:{os.getpid()}",
        DEADLINE_LABEL: job.deadline.isoformat(),
        ROLE_LABEL: ROLE_SANDBOX,
    }


def _host_config(api: APIClient, job: SandboxJob) -> dict[str, Any]:
    limits = job.limits
    config: dict[str, Any] = api.create_host_config(
        mounts=_mounts(job),
        # crun or runc: the same flags below either way (the container tests read them back).
        runtime=resolve_runtime(api, limits.runtime),
        network_mode="none",
        ipc_mode="none",
        cgroupns="private",
        read_only=True,
        tmpfs=_tmpfs(limits),
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        privileged=False,
        init=False,
        pids_limit=limits.pids_limit,
        mem_limit=limits.mem_limit,
        memswap_limit=limits.mem_limit,
        nano_cpus=limits.nano_cpus,
        # No core dumps: the working directory is the job's repository, where a dump could be
        # committed and pushed. A bounded descriptor table bounds kernel memory per process.
        ulimits=[Ulimit(name="core", soft=0, hard=0), Ulimit(name="nofile", soft=4096, hard=4096)],
        log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "1"}),
    )
    return config


def _tmpfs(limits: SandboxLimits) -> dict[str, str]:
    """The container's writable memory: the tools' /tmp (their uid's alone, so that a check
    cannot plant a file the tool server would read there), the trees the checks read
    (written by the tools' uid, read-only to the checks') and the checks' own work space."""
    flags = "rw,noexec,nosuid,nodev"
    tools, checks = limits.uid, limits.checks_uid
    return {
        "/tmp": f"{flags},size={limits.tmpfs_size},mode=0700,uid={tools},gid={tools}",
        CHECKS_TREES_MOUNT: f"{flags},size={limits.checks_trees_size},mode=0755,uid={tools},"
        f"gid={tools}",
        CHECKS_WORK_MOUNT: f"{flags},size={limits.checks_work_size},mode=0700,uid={checks},"
        f"gid={checks}",
    }


def _mounts(job: SandboxJob) -> list[Mount]:
    propagation = "rslave" if job.receives_mounts else None
    mounts = [
        Mount(
            WORKSPACE_MOUNT,
            str(job.workspace),
            type="bind",
            read_only=False,
            propagation=propagation,
        )
    ]
    if job.outbox is not None:
        mounts.append(Mount(OUTBOX_MOUNT, str(job.outbox), type="bind", read_only=False))
    return mounts
