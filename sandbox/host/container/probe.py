"""Look at a sandbox from inside: a throwaway container with a job's exact flags and mounts,
whose entrypoint is a short Python script instead of the tool server.

``riverbeam sandbox doctor`` runs it to show that the engine applies the hardening, and the
container tests run it to show what code in a sandbox could reach if it got past the jail:
the network, the environment, host paths, the Docker socket, other programs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import docker
from pydantic import BaseModel, ConfigDict

from sandbox.host.container.hardening import SandboxJob, create_arguments
from sandbox.host.engine import engine_errors

__all__ = ["ProbeReport", "inspect_flags", "run_probe"]

_SCRIPT = r"""
import json, os, socket, stat, subprocess, sys
targets, paths = json.loads(sys.argv[1])
def attempt(action):
    try:
        action()
        return "ok"
    except OSError as error:
        return type(error).__name__ + ": " + (error.strerror or str(error))
def connect(host, port):
    socket.create_connection((host, port), timeout=2).close()
def write_root():
    open("/probe-write", "w").close()
def run_from_tmp():
    with open("/tmp/probe-exec", "w") as file:
        file.write("#!/usr/bin/python3\n")
    os.chmod("/tmp/probe-exec", 0o755)
    subprocess.run(["/tmp/probe-exec"], check=True)
def read(path):
    try:
        with open(path) as file:
            return file.read().strip()
    except OSError:
        return None
def programs():
    found = []
    for top, dirs, files in os.walk("/"):
        # The image's files only: not the kernel's, the job's mounts or the tmpfs.
        if top in ("/proc", "/sys", "/dev", "/workspace", "/outbox", "/tmp"):
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(top, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            mode = info.st_mode
            # An empty file runs nothing: the engine's run-time marker /.dockerenv and its
            # placeholders for /etc/hostname, /etc/hosts and /etc/resolv.conf (mode 0755).
            if stat.S_ISREG(mode) and mode & 0o111 and info.st_size and ".so" not in name:
                found.append(path)
    return sorted(found)
status = dict(
    line.split(":", 1) for line in read("/proc/self/status").splitlines() if ":" in line
)
cgroup = "/sys/fs/cgroup/"
print(json.dumps({
    "uid": os.getuid(),
    "gid": os.getgid(),
    "cap_eff": status["CapEff"].strip(),
    "no_new_privs": status.get("NoNewPrivs", "").strip(),
    "environment": dict(os.environ),
    "interfaces": sorted(name for _, name in socket.if_nameindex()),
    "connections": {
        f"{host}:{port}": attempt(lambda: connect(host, port)) for host, port in targets
    },
    "root_entries": sorted(os.listdir("/")),
    "paths": {path: os.path.lexists(path) for path in paths},
    "write_root": attempt(write_root),
    "exec_tmp": attempt(run_from_tmp),
    "pids_max": read(cgroup + "pids/pids.max") or read(cgroup + "pids.max"),
    "memory_max": read(cgroup + "memory/memory.limit_in_bytes") or read(cgroup + "memory.max"),
    "programs": programs(),
}))
"""


class ProbeReport(BaseModel):
    """What the probe saw from inside the container."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uid: int
    gid: int
    cap_eff: str
    no_new_privs: str
    environment: dict[str, str]
    interfaces: list[str]
    connections: dict[str, str]
    root_entries: list[str]
    paths: dict[str, bool]
    write_root: str
    exec_tmp: str
    pids_max: str | None
    memory_max: str | None
    programs: list[str]


def run_probe(
    client: docker.DockerClient,
    image: str,
    job: SandboxJob,
    *,
    targets: Sequence[tuple[str, int]] = (),
    paths: Sequence[str] = (),
    network_mode: str | None = None,
) -> tuple[ProbeReport, dict[str, Any]]:
    """Run the probe with ``job``'s flags; returns its report and the container's inspect
    document. ``network_mode`` overrides ``none`` only to prove the probe itself works."""
    api = client.api
    arguments = json.dumps([list(targets), list(paths)])
    entrypoint = ["python3", "-I", "-c", _SCRIPT, arguments]
    create = create_arguments(api, image, job, entrypoint=entrypoint)
    create["stdin_open"] = False
    if network_mode is not None:
        create["host_config"]["NetworkMode"] = network_mode
        create["network_disabled"] = False
    with engine_errors("BEM-402", "running the sandbox probe"):
        container_id = api.create_container(**create)["Id"]
        try:
            api.start(container_id)
            result = api.wait(container_id, timeout=60)
            output = api.logs(container_id, stdout=True, stderr=False).decode()
            errors = api.logs(container_id, stdout=False, stderr=True).decode()
            inspected = api.inspect_container(container_id)
        finally:
            api.remove_container(container_id, force=True)
    if result.get("StatusCode") != 0:
        raise RuntimeError(f"the probe failed ({result}): {errors.strip()[-2000:]}")
    return ProbeReport.model_validate_json(output), inspected


def inspect_flags(inspected: dict[str, Any]) -> dict[str, Any]:
    """The hardening-relevant fields of an inspect document, for display and assertions."""
    host = inspected["HostConfig"]
    config = inspected["Config"]
    return {
        "NetworkMode": host["NetworkMode"],
        "NetworkDisabled": config.get("NetworkDisabled", False),
        "IpcMode": host["IpcMode"],
        "CgroupnsMode": host.get("CgroupnsMode"),
        "ReadonlyRootfs": host["ReadonlyRootfs"],
        "Tmpfs": host["Tmpfs"],
        "CapDrop": host["CapDrop"],
        "CapAdd": host["CapAdd"],
        "SecurityOpt": host["SecurityOpt"],
        "Privileged": host["Privileged"],
        "Devices": host["Devices"],
        "PidsLimit": host["PidsLimit"],
        "Memory": host["Memory"],
        "MemorySwap": host["MemorySwap"],
        "NanoCpus": host["NanoCpus"],
        "User": config["User"],
        "Mounts": [(mount["Source"], mount["Destination"]) for mount in inspected["Mounts"]],
    }
