"""Every way a sandbox can fail ends in a clear BEM error, and no container is left behind."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import docker
import pytest

from bot.config import SandboxLimits
from bot.core.errors import BeamError
from harness.workers import own
from sandbox.host.container.hardening import JOB_LABEL, ROLE_LABEL, ROLE_SANDBOX
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.image.build import ImageInfo
from tests.container.conftest import PROTECTED, container_exists
from tests.container.kit import Workspace, chown_tree, deadline, make_workspace


def _sandbox_containers(client: docker.DockerClient, job_id: str) -> list[str]:
    """The sandbox containers of ``job_id``, whatever their state. Only this test's own: the
    engine may be shared with other test runs, whose containers come and go meanwhile."""
    labels = [f"{ROLE_LABEL}={ROLE_SANDBOX}", f"{JOB_LABEL}={job_id}"]
    containers = client.api.containers(all=True, filters={"label": labels})
    return [container["Id"] for container in containers]


def _unique_job_id(prefix: str = "job") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _start(
    client: docker.DockerClient, image: str, workspace: Workspace, limits: SandboxLimits
) -> ContainerSandbox:
    sandbox = ContainerSandbox(client, image)
    sandbox.start(own("job-1"), workspace.path, PROTECTED, limits, deadline=deadline())
    return sandbox


def _expect(code: str, sandbox: ContainerSandbox, tool: str, args: dict[str, object]) -> str:
    with pytest.raises(BeamError) as failed:
        sandbox.call(tool, args)
    assert failed.value.code == code, failed.value
    return failed.value.message


def test_a_call_the_server_times_out_is_bem_403_and_the_container_is_gone(
    sandbox: ContainerSandbox, workspace: Workspace, docker_client: docker.DockerClient
) -> None:
    # Enough untracked files that git_status cannot finish within a millisecond.
    for index in range(3000):
        (workspace.path / f"untracked-{index}.md").write_text("x\n")
    chown_tree(workspace.path, 10001)
    container_id = sandbox.container_id
    assert container_id is not None
    with pytest.raises(BeamError) as failed:
        sandbox.call("git_status", {}, timeout=0.001)
    assert failed.value.code == "BEM-403"
    assert "git_status" in failed.value.message
    assert not container_exists(docker_client, container_id)
    assert _expect("BEM-404", sandbox, "list_tree", {})


def test_a_silent_server_is_killed_at_the_host_deadline(
    sandbox: ContainerSandbox, docker_client: docker.DockerClient
) -> None:
    container_id = sandbox.container_id
    assert container_id is not None
    assert sandbox.call("list_tree", {})  # past the first call: the tools are loaded
    docker_client.api.pause(container_id)  # the server can neither reply nor time out
    with pytest.raises(BeamError) as failed:
        sandbox.call("list_tree", {}, timeout=0.2)
    assert failed.value.code == "BEM-403"
    assert "no reply" in failed.value.message
    assert not container_exists(docker_client, container_id)


def test_the_first_call_also_waits_for_the_tools_to_load(
    docker_client: docker.DockerClient, image: ImageInfo, workspace: Workspace
) -> None:
    """The server loads its tools after the ready line, so the host gives the first call
    ``ready_timeout`` more than its own timeout and grace; the calls after it get none."""
    limits = SandboxLimits(ready_timeout=5.0)
    with _start(docker_client, image.ref, workspace, limits) as sandbox:
        container_id = sandbox.container_id
        assert container_id is not None
        docker_client.api.pause(container_id)  # a load slower than the call's own deadline
        resume = threading.Timer(1.5, docker_client.api.unpause, [container_id])
        resume.start()
        try:
            listed = sandbox.call("list_tree", {}, timeout=0.2)
        finally:
            resume.join()
        assert isinstance(listed, dict) and "README.md" in listed["files"]


def test_a_container_killed_from_outside_is_bem_404_and_removed(
    sandbox: ContainerSandbox, docker_client: docker.DockerClient
) -> None:
    container_id = sandbox.container_id
    assert container_id is not None
    assert sandbox.call("list_tree", {})
    docker_client.api.kill(container_id)
    message = _expect("BEM-404", sandbox, "read_file", {"path": "README.md"})
    assert "exited (code 137)" in message
    assert not container_exists(docker_client, container_id)


@pytest.mark.slow  # cgroup v1 reclaims the page cache for seconds before the OOM kill
def test_an_oom_killed_container_is_bem_405_and_removed(
    docker_client: docker.DockerClient, image: ImageInfo, workspace: Workspace
) -> None:
    # A real trigger: the tool reads a whole file into memory, and this one (sparse, so it
    # costs no disk) is five times the container's memory limit.
    huge = workspace.path / "huge.bin"
    with huge.open("wb") as file:
        file.truncate(320 << 20)
    os.chown(huge, 10001, 10001)
    limits = SandboxLimits(mem_limit="64m", max_read_bytes=512 << 20)
    sandbox = _start(docker_client, image.ref, workspace, limits)
    container_id = sandbox.container_id
    assert container_id is not None
    message = _expect("BEM-405", sandbox, "read_file", {"path": "huge.bin"})
    assert "64m memory limit" in message
    assert not container_exists(docker_client, container_id)


def test_an_oversize_request_is_refused_and_the_container_lives_on(
    docker_client: docker.DockerClient, image: ImageInfo, workspace: Workspace
) -> None:
    limits = SandboxLimits(max_message_bytes=64 << 10)
    with _start(docker_client, image.ref, workspace, limits) as sandbox:
        _expect("BEM-406", sandbox, "write_file", {"path": "big.md", "body": "x" * (80 << 10)})
        assert sandbox.call("list_tree", {})


def test_an_oversize_result_is_refused_by_the_server_and_the_container_lives_on(
    docker_client: docker.DockerClient, image: ImageInfo, workspace: Workspace
) -> None:
    (workspace.path / "long.md").write_text("line of text\n" * 6000)  # 78 KB
    os.chown(workspace.path / "long.md", 10001, 10001)
    limits = SandboxLimits(max_message_bytes=64 << 10)
    with _start(docker_client, image.ref, workspace, limits) as sandbox:
        message = _expect("BEM-406", sandbox, "read_file", {"path": "long.md"})
        assert "result is over" in message
        assert sandbox.call("read_file", {"path": "README.md"})


def test_a_server_that_exits_before_ready_is_bem_402_with_its_stderr(
    docker_client: docker.DockerClient, image: ImageInfo, workspace: Workspace
) -> None:
    job_id = _unique_job_id()
    sandbox = ContainerSandbox(docker_client, image.ref)
    with pytest.raises(BeamError) as failed:
        sandbox.start(job_id, workspace.path, ["not a ref"], SandboxLimits(), deadline=deadline())
    assert failed.value.code == "BEM-402"
    assert "protected ref pattern 'not a ref'" in failed.value.message
    assert _sandbox_containers(docker_client, job_id) == []


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("missing workspace", "BEM-402"),
        ("missing image", "BEM-401"),
        ("bad job id", "BEM-402"),
        ("ready line over the cap", "BEM-402"),
    ],
)
def test_start_failures_leave_no_container(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    workspace: Workspace,
    tmp_path: Path,
    case: str,
    code: str,
) -> None:
    image_ref = "riverbeam-sandbox:absent" if case == "missing image" else image.ref
    path = tmp_path / "nowhere" if case == "missing workspace" else workspace.path
    job_id = _unique_job_id("../escape" if case == "bad job id" else "job")
    limits = SandboxLimits(max_message_bytes=16 if case == "ready line over the cap" else 4 << 20)
    sandbox = ContainerSandbox(docker_client, image_ref)
    with pytest.raises(BeamError) as failed:
        sandbox.start(job_id, path, PROTECTED, limits, deadline=deadline())
    assert failed.value.code == code, failed.value
    assert _sandbox_containers(docker_client, job_id) == []
    assert sandbox.container_id is None


def test_one_job_runs_one_container_at_a_time(
    sandbox: ContainerSandbox, docker_client: docker.DockerClient, image: ImageInfo, tmp_path: Path
) -> None:
    other = make_workspace(tmp_path / "again")
    second = ContainerSandbox(docker_client, image.ref)
    with pytest.raises(BeamError) as failed:
        second.start(own("job-1"), other.path, PROTECTED, SandboxLimits(), deadline=deadline())
    assert failed.value.code == "BEM-402"
    assert "Conflict" in failed.value.message or "already in use" in failed.value.message
    assert sandbox.call("list_tree", {})


def test_a_container_an_earlier_attempt_left_is_replaced_by_the_jobs_holder(
    sandbox: ContainerSandbox, docker_client: docker.DockerClient, image: ImageInfo, tmp_path: Path
) -> None:
    # ``sandbox`` stands for the container of a worker that died holding job-1.
    left = sandbox.container_id
    assert left is not None
    other = make_workspace(tmp_path / "again")
    second = ContainerSandbox(docker_client, image.ref)
    second.start(
        own("job-1"),
        other.path,
        PROTECTED,
        SandboxLimits(),
        deadline=deadline(),
        replace_leftover=True,
    )
    with second:
        assert second.call("list_tree", {})
        assert not container_exists(docker_client, left)
        assert second.container_id != left
