"""``riverbeam sandbox doctor``: can this worker run sandboxes? One screen, one line a check.

Checks, in order: the engine answers (and which one it is); the current image exists (not
just *an* image: the one this code's content hash names); the engine applies every
hardening flag (a throwaway probe container, its flags read back and its view from inside
checked); free disk where images live and where workspaces live.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import DockerException

from bot.config import Settings
from bot.core.errors import BeamError
from sandbox.host.container.hardening import SandboxJob
from sandbox.host.container.probe import ProbeReport, inspect_flags, run_probe
from sandbox.host.engine import connect
from sandbox.host.image.build import ImageInfo, check_image

__all__ = ["DoctorCheck", "DoctorReport", "doctor"]

MIN_FREE_BYTES = 2 << 30


@dataclass(frozen=True)
class DoctorCheck:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class DoctorReport:
    checks: tuple[DoctorCheck, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def render(self) -> str:
        lines = [f"  {'ok' if c.ok else 'FAIL':4}  {c.name:10}  {c.detail}" for c in self.checks]
        verdict = "ready to run sandboxes" if self.ok else "not ready: see FAIL above"
        return "\n".join(["riverbeam sandbox doctor", *lines, verdict])


def doctor(settings: Settings, *, client: docker.DockerClient | None = None) -> DoctorReport:
    try:
        client = client or connect(timeout=10)
    except BeamError as error:
        return DoctorReport((DoctorCheck("engine", False, str(error)),))
    checks = [_engine(client)]
    image_check, image = _image(client, settings)
    checks += [image_check, _hardening(client, settings, image), *_disks(client, settings)]
    return DoctorReport(tuple(checks))


def _engine(client: docker.DockerClient) -> DoctorCheck:
    try:
        version = client.version()
        info = client.info()
    except (DockerException, requests.RequestException) as error:
        return DoctorCheck("engine", False, f"the engine stopped answering: {error}")
    detail = (
        f"Docker {version.get('Version')} (API {version.get('ApiVersion')}) at "
        f"{client.api.base_url}, cgroup v{info.get('CgroupVersion', '?')}, "
        f"{info.get('Driver')}, {info.get('ContainersRunning', 0)} running"
    )
    return DoctorCheck("engine", True, detail)


def _image(client: docker.DockerClient, settings: Settings) -> tuple[DoctorCheck, ImageInfo | None]:
    try:
        image = check_image(client, settings)
    except BeamError as error:
        return DoctorCheck("image", False, error.message), None
    size = image.size_bytes / (1 << 20)
    detail = f"{image.ref} is current, {size:.0f} MiB, built by {image.method}"
    return DoctorCheck("image", True, detail), image


def _hardening(
    client: docker.DockerClient, settings: Settings, image: ImageInfo | None
) -> DoctorCheck:
    if image is None:
        return DoctorCheck("hardening", False, "needs the current image (see above)")
    limits = settings.sandbox
    with tempfile.TemporaryDirectory(prefix="riverbeam-doctor-") as workspace:
        os.chown(workspace, limits.uid, limits.uid)
        job = SandboxJob(
            job_id=f"doctor-{os.getpid()}",
            workspace=Path(workspace),
            deadline=datetime.now(UTC) + timedelta(minutes=5),
            limits=limits,
            protected_refs=(),
        )
        try:
            report, inspected = run_probe(client, image.ref, job)
        except (BeamError, RuntimeError) as error:
            return DoctorCheck("hardening", False, f"the probe container failed: {error}")
    problems = _hardening_problems(inspect_flags(inspected), report, settings)
    if problems:
        return DoctorCheck("hardening", False, "; ".join(problems))
    detail = (
        f"network none, read-only root, /tmp noexec, no capabilities, no-new-privileges, "
        f"uid {limits.uid}, pids {limits.pids_limit}, memory {limits.mem_limit} (no swap), "
        f"on {inspected['HostConfig'].get('Runtime')}"
    )
    return DoctorCheck("hardening", True, detail)


def _hardening_problems(
    flags: dict[str, Any], report: ProbeReport, settings: Settings
) -> list[str]:
    limits = settings.sandbox
    expected = {
        "network mode none": flags["NetworkMode"] == "none" and flags["NetworkDisabled"],
        "read-only root": flags["ReadonlyRootfs"] and report.write_root != "ok",
        "/tmp noexec": report.exec_tmp != "ok",
        "all capabilities dropped": flags["CapDrop"] == ["ALL"] and int(report.cap_eff, 16) == 0,
        "no-new-privileges": report.no_new_privs == "1",
        "non-root uid": report.uid == limits.uid,
        "loopback only": report.interfaces == ["lo"],
        "pids limit": report.pids_max == str(limits.pids_limit),
        "memory = memory+swap": flags["Memory"] == flags["MemorySwap"] > 0,
        "not privileged": not flags["Privileged"] and not flags["Devices"],
    }
    return [f"{name}: not applied" for name, held in expected.items() if not held]


def _disks(client: docker.DockerClient, settings: Settings) -> list[DoctorCheck]:
    local = client.api.base_url.startswith("http+docker://localhost")
    docker_root = str(client.info().get("DockerRootDir", "/var/lib/docker"))
    checks = [_free("images", Path(docker_root)) if local else _remote(docker_root)]
    checks.append(_free("workspaces", settings.workspaces.root))
    return checks


def _free(name: str, path: Path) -> DoctorCheck:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    detail = f"{path}: {free / (1 << 30):.1f} GiB free"
    if free < MIN_FREE_BYTES:
        detail += f" (below {MIN_FREE_BYTES >> 30} GiB)"
    return DoctorCheck(name, free >= MIN_FREE_BYTES, detail)


def _remote(docker_root: str) -> DoctorCheck:
    return DoctorCheck(
        "images", True, f"{docker_root} is on the remote engine host: check it there"
    )
