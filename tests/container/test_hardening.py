"""The hardening, read back from the engine and seen from inside the container.

Three views: ``docker inspect`` of a running sandbox (every flag), the tool server (what a
model can reach through the tools: only the jail), and a probe container with the same flags
and mounts running a Python script in place of the tool server (what code that got past the
jail could reach: no network, no credentials, no host paths, no programs to run). The first
and the last run on each runtime the engine has (runc, crun; both under CI=true).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from bot.config import SandboxLimits
from bot.core.errors import BeamError
from harness.docker_bridge import bridge_address
from harness.workers import own
from sandbox.host.container.hardening import container_name
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.container.probe import ProbeReport, inspect_flags, run_probe
from sandbox.host.image.build import ImageInfo
from tests.container.conftest import PROTECTED
from tests.container.kit import (
    Workspace,
    claim_spare,
    deadline,
    probe_job,
    runtimes_under_test,
)

CANARY = "RIVERBEAM_TEST_CANARY"
ALLOWED_ENV = {"HOME", "LANG", "PATH", "PYTHONDONTWRITEBYTECODE", "HOSTNAME"}
HOST_PATHS = ("/var/run/docker.sock", "/run/docker.sock", "/root/.docker", "/etc/docker")


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    """A secret in the worker's environment that must never reach a container."""
    value = f"canary-{os.getpid()}-{os.urandom(4).hex()}"
    monkeypatch.setenv(CANARY, value)
    return value


@pytest.fixture(params=runtimes_under_test())
def runtime(request: pytest.FixtureRequest, docker_client: docker.DockerClient) -> str:
    name: str = request.param
    registered = docker_client.api.info().get("Runtimes") or {}
    if name not in registered:
        pytest.fail(
            f"the engine has no {name!r} runtime (it has {sorted(registered)}); "
            "docker/provision installs crun and docker/engine-runtimes registers it"
        )
    return name


@pytest.fixture
def hardened(
    canary: str,
    docker_client: docker.DockerClient,
    image: ImageInfo,
    workspace: Workspace,
    limits: SandboxLimits,
    runtime: str,
) -> Iterator[ContainerSandbox]:
    on_runtime = limits.model_copy(update={"runtime": runtime})
    with ContainerSandbox(docker_client, image.ref) as running:
        running.start(
            own("job-1"),
            workspace.path,
            PROTECTED,
            on_runtime,
            deadline=deadline(),
            outbox=workspace.outbox,
        )
        yield running


def test_every_flag_reads_back_from_docker_inspect(
    hardened: ContainerSandbox,
    docker_client: docker.DockerClient,
    workspace: Workspace,
    limits: SandboxLimits,
    canary: str,
    runtime: str,
) -> None:
    assert hardened.container_id is not None
    inspected = docker_client.api.inspect_container(hardened.container_id)
    flags = inspect_flags(inspected)
    flags["Mounts"] = sorted(flags["Mounts"], key=lambda mount: mount[1], reverse=True)
    memory = 512 << 20
    assert flags == {
        "NetworkMode": "none",
        "NetworkDisabled": True,
        "IpcMode": "none",
        "CgroupnsMode": "private",
        "ReadonlyRootfs": True,
        # The tools' /tmp is their uid's alone; the docs checks' trees and work space.
        "Tmpfs": {
            "/tmp": "rw,noexec,nosuid,nodev,size=64m,mode=0700,uid=10001,gid=10001",
            "/checks/trees": "rw,noexec,nosuid,nodev,size=256m,mode=0755,uid=10001,gid=10001",
            "/checks/work": "rw,noexec,nosuid,nodev,size=256m,mode=0700,uid=10002,gid=10002",
        },
        "CapDrop": ["ALL"],
        "CapAdd": None,
        "SecurityOpt": ["no-new-privileges"],
        "Privileged": False,
        "Devices": None,
        "PidsLimit": limits.pids_limit,
        "Memory": memory,
        "MemorySwap": memory,
        "NanoCpus": limits.nano_cpus,
        "User": "10001:10001",
        "Mounts": [(str(workspace.path), "/workspace"), (str(workspace.outbox), "/outbox")],
    }
    host = inspected["HostConfig"]
    assert host["Runtime"] == runtime
    assert host["Init"] is False
    assert {"Name": "core", "Soft": 0, "Hard": 0} in host["Ulimits"]
    assert not host["Binds"] and not host["VolumesFrom"] and not host["Links"]
    env = inspected["Config"]["Env"]
    assert {entry.split("=", 1)[0] for entry in env} <= ALLOWED_ENV
    assert not any(canary in entry for entry in env)
    assert inspected["Config"]["Labels"]["riverbeam.role"] == "sandbox"
    assert inspected["Config"]["Labels"]["riverbeam.job"] == own("job-1")


def test_a_claimed_spare_reads_back_as_a_fresh_container_does(
    hardened: ContainerSandbox,
    docker_client: docker.DockerClient,
    image: ImageInfo,
    limits: SandboxLimits,
    runtime: str,
    tmp_path: Path,
) -> None:
    """A spare is created by the same code with the same flags; claimed, it differs from a
    fresh job container (read back above) in its command and its labels only, and its
    mounts, named by the spare directory's first path, are the job's directories."""
    tmp_path.chmod(0o711)
    on_runtime = limits.model_copy(update={"runtime": runtime})
    with ContainerSandbox(docker_client, image.ref) as spare:
        workspace, first = claim_spare(spare, tmp_path / "root", on_runtime, job_id=own("job-2"))
        claimed = docker_client.api.inspect_container(str(spare.container_id))
        fresh = docker_client.api.inspect_container(str(hardened.container_id))
        claimed_flags, fresh_flags = inspect_flags(claimed), inspect_flags(fresh)
        mounts = sorted(claimed_flags.pop("Mounts"), key=lambda mount: mount[1], reverse=True)
        fresh_flags.pop("Mounts")
        assert claimed_flags == fresh_flags
        assert mounts == [
            (str(first / "tree"), "/workspace"),
            (str(first / "outbox.git"), "/outbox"),
        ]
        assert not first.exists() and "README.md" in str(spare.call("list_tree", {}))
        assert workspace.path.parent == tmp_path / "root" / own("job-2")
        same = ("Runtime", "Init", "Ulimits", "Binds", "VolumesFrom", "Links", "LogConfig")
        assert {key: claimed["HostConfig"][key] for key in same} == {
            key: fresh["HostConfig"][key] for key in same
        }
        assert claimed["HostConfig"]["Runtime"] == runtime
        for key in ("Env", "User", "WorkingDir", "Entrypoint", "Image", "OpenStdin", "Tty"):
            assert claimed["Config"][key] == fresh["Config"][key], key
        assert claimed["Config"]["Cmd"] == ["--spare"]
        assert claimed["Name"] == "/" + container_name(own("job-2"))


def test_through_the_tools_only_the_working_tree_is_reachable(
    hardened: ContainerSandbox, workspace: Workspace, tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret\n")
    links = {
        "hostname": "/etc/hostname",
        "environ": "/proc/self/environ",
        "docker-sock": "/var/run/docker.sock",
        "root-home": "/root",
        "host-secret": str(secret),
        "outbox-config": "../outbox.git/config",
        "sibling": str(tmp_path),
    }
    for name, target in links.items():
        os.symlink(target, workspace.path / name)
        os.lchown(workspace.path / name, 10001, 10001)
    for name in links:
        for tool in ("read_file", "list_tree"):
            with pytest.raises(BeamError) as refused:
                hardened.call(tool, {"path": name})
            assert refused.value.code == "BEM-303", (tool, name, refused.value)
    listed = hardened.call("list_tree", {})
    assert isinstance(listed, dict)
    assert "host secret" not in str(listed)


@pytest.fixture
def host_listener() -> Iterator[tuple[str, int]]:
    """A TCP listener on the engine's bridge address: a host port a container could try."""
    with socket.socket() as server:
        server.bind((bridge_address(), 0))
        server.listen()
        yield server.getsockname()


def test_the_probe_can_connect_when_given_a_network(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    workspace: Workspace,
    limits: SandboxLimits,
    host_listener: tuple[str, int],
) -> None:
    # The control for the test below: the probe's connect does work on a bridge network.
    job = probe_job(workspace, limits, own("probe-1"))
    report, _ = run_probe(
        docker_client, image.ref, job, targets=[host_listener], network_mode="bridge"
    )
    assert report.connections == {f"{host_listener[0]}:{host_listener[1]}": "ok"}


def test_code_past_the_jail_finds_no_network_credentials_host_paths_or_programs(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    workspace: Workspace,
    limits: SandboxLimits,
    host_listener: tuple[str, int],
    canary: str,
    tmp_path: Path,
    runtime: str,
) -> None:
    job = probe_job(workspace, limits.model_copy(update={"runtime": runtime}), own("probe-1"))
    paths = [*HOST_PATHS, str(tmp_path), str(workspace.path), "/workspace/README.md"]
    report, _ = run_probe(docker_client, image.ref, job, targets=[host_listener], paths=paths)
    _assert_no_network(report)
    assert set(report.environment) <= ALLOWED_ENV
    assert canary not in str(report.environment)
    assert report.paths == {path: path == "/workspace/README.md" for path in paths}
    assert report.uid == report.gid == 10001
    assert int(report.cap_eff, 16) == 0
    assert report.no_new_privs == "1"
    assert report.write_root.startswith("OSError: Read-only file system")
    assert report.exec_tmp.startswith("PermissionError")
    assert report.pids_max == str(limits.pids_limit)
    assert report.memory_max == str(512 << 20)
    assert [os.path.basename(program) for program in report.programs] == ["python3.11"]
    assert "docker.sock" not in str(report.root_entries)


def _assert_no_network(report: ProbeReport) -> None:
    assert report.interfaces == ["lo"]
    (outcome,) = report.connections.values()
    assert outcome.startswith("OSError: Network is unreachable"), outcome
