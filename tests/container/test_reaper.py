"""The reaper removes sandboxes whose job is over, including after a worker died hard."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import docker
import pytest

from bot.config import SandboxLimits
from harness.workers import own
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.container.reaper import reap
from sandbox.host.image.build import ImageInfo
from tests.container.conftest import PROTECTED, container_exists
from tests.container.kit import make_workspace

# Serial: reap() with no deployment judges every sandbox container on the engine.
pytestmark = pytest.mark.serial


@pytest.fixture
def started(
    docker_client: docker.DockerClient, image: ImageInfo, limits: SandboxLimits, tmp_path: Path
) -> Iterator[dict[str, ContainerSandbox]]:
    """Four jobs' sandboxes: running, finished, unknown to the job store, and overdue."""
    sandboxes: dict[str, ContainerSandbox] = {}
    now = datetime.now(UTC)
    deadlines = {
        own("reap-running"): now + timedelta(hours=1),
        own("reap-finished"): now + timedelta(hours=1),
        own("reap-unknown"): now + timedelta(hours=1),
        own("reap-overdue"): now - timedelta(seconds=1),
    }
    try:
        for job_id, deadline in deadlines.items():
            workspace = make_workspace(tmp_path / job_id, job_id=job_id)
            sandbox = ContainerSandbox(docker_client, image.ref)
            sandbox.start(job_id, workspace.path, PROTECTED, limits, deadline=deadline)
            sandboxes[job_id] = sandbox
        yield sandboxes
    finally:
        for sandbox in sandboxes.values():
            sandbox.stop()


def test_reap_removes_finished_unknown_and_overdue_jobs_and_keeps_active_ones(
    started: dict[str, ContainerSandbox], docker_client: docker.DockerClient
) -> None:
    # Overdue: still "active", but past its deadline.
    active = {own("reap-running"), own("reap-overdue")}
    ids = {job: sandbox.container_id for job, sandbox in started.items()}

    # Containers of other jobs on this engine are none of this test's business: active.
    removed = reap(docker_client, lambda job: job in active or job not in ids)

    # Another test's container past its deadline may go too: only these jobs are asserted.
    assert sorted(job for job in removed if job in ids) == [
        own("reap-finished"),
        own("reap-overdue"),
        own("reap-unknown"),
    ]
    assert {job: container_exists(docker_client, str(cid)) for job, cid in ids.items()} == {
        own("reap-running"): True,
        own("reap-finished"): False,
        own("reap-unknown"): False,
        own("reap-overdue"): False,
    }
    assert started[own("reap-running")].call("list_tree", {})


_DYING_WORKER = textwrap.dedent(
    """
    import os, sys
    from datetime import UTC, datetime, timedelta
    from pathlib import Path
    from bot.config import SandboxLimits
    from sandbox.host.container.lifecycle import ContainerSandbox
    from sandbox.host.engine import connect

    sandbox = ContainerSandbox(connect(), sys.argv[1])
    deadline = datetime.now(UTC) + timedelta(hours=1)
    sandbox.start(sys.argv[3], Path(sys.argv[2]), ["main"], SandboxLimits(), deadline=deadline)
    print(sandbox.container_id, flush=True)
    os._exit(0)  # no stop, no cleanup: a worker killed mid-job
    """
)


def test_reap_cleans_up_after_a_worker_that_died_without_stopping(
    docker_client: docker.DockerClient, image: ImageInfo, tmp_path: Path
) -> None:
    workspace = make_workspace(tmp_path / "orphan", job_id=own("reap-orphan"))
    worker = subprocess.run(
        [sys.executable, "-c", _DYING_WORKER, image.ref, str(workspace.path), own("reap-orphan")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    container_id = worker.stdout.strip()
    assert container_exists(docker_client, container_id)  # orphaned, still running

    def is_active(job: str) -> bool:
        return job != own("reap-orphan")  # the job store says: finished

    assert reap(docker_client, is_active) == [own("reap-orphan")]
    assert not container_exists(docker_client, container_id)
    assert reap(docker_client, is_active) == []


def test_reap_judges_only_its_own_deployments_containers_by_job(
    docker_client: docker.DockerClient, image: ImageInfo, limits: SandboxLimits, tmp_path: Path
) -> None:
    """Two deployments on one engine, and containers of a release that set no deployment
    label: a reaper removes its own deployment's containers of jobs its store does not run,
    and anyone else's only past their deadline."""
    # The reaper runs at the real time, so the other containers on a shared engine (other
    # test runs') are judged as they would be anyway; "passed" deadlines are already over.
    now = datetime.now(UTC)
    later, passed = now + timedelta(hours=2), now - timedelta(hours=1)
    reaped_at = now
    containers = {
        own("scope-ours"): ("dep-ours", later),
        own("scope-theirs"): ("dep-theirs", later),
        own("scope-theirs-overdue"): ("dep-theirs", passed),
        own("scope-unlabelled"): (None, later),
        own("scope-unlabelled-overdue"): (None, passed),
    }
    sandboxes = []
    try:
        for job_id, (deployment, deadline) in containers.items():
            workspace = make_workspace(tmp_path / job_id, job_id=job_id)
            sandbox = ContainerSandbox(docker_client, image.ref)
            sandboxes.append(sandbox)
            sandbox.start(
                job_id, workspace.path, PROTECTED, limits, deadline=deadline, deployment=deployment
            )
        ids = {
            job_id: str(sandbox.container_id)
            for job_id, sandbox in zip(containers, sandboxes, strict=True)
        }

        # Our store runs none of these jobs (nor knows them), and leaves other tests' alone.
        removed = reap(
            docker_client,
            lambda job: job not in containers,
            reaped_at,
            deployment="dep-ours",
        )

        # Another deployment's reaper on the same engine may have taken the overdue ones
        # first: whoever did, they are gone, and ours went by this reaper's hand.
        ours = sorted(job for job in removed if job in containers)
        assert own("scope-ours") in ours
        assert set(ours) <= {
            own("scope-ours"),
            own("scope-theirs-overdue"),
            own("scope-unlabelled-overdue"),
        }
        left = {job for job, cid in ids.items() if container_exists(docker_client, cid)}
        assert left == {own("scope-theirs"), own("scope-unlabelled")}
    finally:
        for sandbox in sandboxes:
            sandbox.stop()
