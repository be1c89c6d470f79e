"""Remove sandbox containers that outlived their job.

A worker removes its container on every path it controls; the reaper covers the paths it
does not: a worker killed with ``kill -9``, a lost engine connection during removal, a host
reboot. Every sandbox container carries ``riverbeam.role=sandbox``, its job id, its
deadline and the deployment that started it as labels, so the reaper needs nothing but the
engine and a way to ask whether a job is still running.

One engine may serve several deployments (two services, two test stacks), each with its own
job store, which knows only its own jobs. So a reaper given its ``deployment`` judges by
job only the containers labelled with it; any other sandbox container (another
deployment's, or one started by a release that set no deployment label) it removes only
once its deadline passed, when no deployment still needs it.

A spare container (``bot.jobs.spares``) carries no job label and no deployment label, only
``riverbeam.spare=<deployment>``: an idle one (``riverbeam-spare-<token>``) is removed past
its deadline, or once the worker process that started it (on this host) is gone; a claimed
one, renamed ``riverbeam-job-<id>``, is its job's container, judged by that job as any other
of its deployment. A reaper of a release before spares sees neither label, and so removes a
spare, claimed or not, only past its deadline, which the job that claimed it never outlives.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import docker
from docker.errors import NotFound

from bot.core.errors import BeamError
from sandbox.host.container.hardening import (
    DEADLINE_LABEL,
    DEPLOYMENT_LABEL,
    ROLE_LABEL,
    ROLE_SANDBOX,
    SPARE_LABEL,
    SPARE_OWNER_LABEL,
    container_job,
)
from sandbox.host.engine import connect, engine_errors

__all__ = ["reap", "reap_after_cancel"]

log = logging.getLogger(__name__)

REAP_CONNECT_TIMEOUT = 5.0
_PROC = Path("/proc")


def reap(
    client: docker.DockerClient,
    is_active: Callable[[str], bool],
    now: datetime | None = None,
    *,
    deployment: str | None = None,
) -> list[str]:
    """Remove the sandbox containers whose job is not active (finished or unknown, as
    ``is_active`` says) or whose deadline has passed; return their job ids. With a
    ``deployment``, containers labelled with another deployment (or none) are removed only
    past their deadline; without one, every sandbox container is judged by ``is_active``."""
    moment = now or datetime.now(UTC)
    api = client.api
    with engine_errors("BEM-400", "listing sandbox containers"):
        containers = api.containers(all=True, filters={"label": f"{ROLE_LABEL}={ROLE_SANDBOX}"})
    removed: list[str] = []
    for container in containers:
        labels = container.get("Labels") or {}
        job_id = container_job(labels, container.get("Names") or [])
        started_by = labels.get(SPARE_LABEL, labels.get(DEPLOYMENT_LABEL))
        deadline = labels.get(DEADLINE_LABEL)
        if SPARE_LABEL in labels and not job_id:
            # Idle: its worker holds it for a next job, unless that worker is gone.
            reason = _overdue(deadline, moment) or _owner_gone(labels.get(SPARE_OWNER_LABEL))
        elif deployment is None or started_by == deployment:
            reason = _reason(job_id, deadline, moment, is_active)
        else:
            reason = _overdue(deadline, moment)
        if reason is None:
            continue
        with engine_errors("BEM-400", f"removing the sandbox container of job {job_id}"):
            try:
                api.remove_container(container["Id"], force=True)
            except NotFound:
                continue  # its worker removed it meanwhile
        log.info("reaped sandbox container %s of job %s: %s", container["Id"][:12], job_id, reason)
        removed.append(job_id)
    return removed


def reap_after_cancel(
    deployment: Callable[[], str], *, docker_client: docker.DockerClient | None = None
) -> Callable[[str], None]:
    """What the job service runs after a cancel ended a job at once (``after_cancel``): such
    a job has no container, but one left by a worker that died is removed when this host
    reaches the engine, else by the reaper of the host it runs on. ``deployment`` is asked
    only then (it reads the store)."""

    def after_cancel(job_id: str) -> None:
        with contextlib.suppress(BeamError):
            client = docker_client or connect(timeout=REAP_CONNECT_TIMEOUT)
            reap(client, is_active=lambda other: other != job_id, deployment=deployment())

    return after_cancel


def _reason(
    job_id: str, deadline: str | None, now: datetime, is_active: Callable[[str], bool]
) -> str | None:
    if not job_id:
        return "no job label"
    expires = _parse(deadline)
    if expires is None:
        return "no readable deadline"
    overdue = _overdue(deadline, now)
    if overdue is not None:
        return overdue
    if not is_active(job_id):
        return "job finished or unknown"
    return None


def _owner_gone(owner: str | None) -> str | None:
    """Why an idle spare goes before its deadline: the process on this host that started it
    is gone (killed; a zombie not yet reaped counts as gone). None when it lives, is on
    another host, or cannot be told."""
    host, _, pid = (owner or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit() or not _PROC.is_dir():
        return None
    try:
        state = (_PROC / pid / "stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return f"its worker process {pid} is gone"
    except (OSError, IndexError):
        return None
    return f"its worker process {pid} is gone" if state in ("Z", "X") else None


def _overdue(deadline: str | None, now: datetime) -> str | None:
    """Why a container past its deadline goes, whoever started it; None when it is not."""
    expires = _parse(deadline)
    if expires is None or expires > now:
        return None
    return f"deadline {deadline} passed"


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
