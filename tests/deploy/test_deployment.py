"""The compose deployment driven end to end through its API (pytest-docker over
``docker/compose.yaml``, the images from ``riverbeam image build``), then the operations
``docs/operations.md`` promises: two workers, a Redis restart, ``down`` and ``up``.

The tests share one stack and run in order: each leaves jobs the next ones count on.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from bot.config import Settings
from bot.demo import PAGE, REPO_NAME, REQUEST, branch_commit
from harness.git_http import basic
from tests.deploy.conftest import UPSTREAM_USER, Deployment, _timed

# Serial: the compose deployment and its image builds load the whole machine.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

AUTHOR = {"kind": "author", "repo": REPO_NAME, "request": REQUEST}
SUMMARIZE = {"kind": "summarize", "repo": REPO_NAME, "branch": "main"}
JOB_SECONDS = 180.0
PARKED: list[str] = []  # parked jobs the later tests decide


def _submit(deployment: Deployment, body: dict[str, Any]) -> str:
    with deployment.client("writer") as client:
        reply = client.post("/v1/jobs", json=body)
    assert reply.status_code == 201, reply.text
    job_id: str = reply.json()["id"]
    return job_id


def _wait(deployment: Deployment, job_id: str, state: str) -> dict[str, Any]:
    deadline = time.monotonic() + JOB_SECONDS
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        with deployment.client("reviewer") as client:
            job = client.get(f"/v1/jobs/{job_id}").json()
        if job.get("state") == state:
            return job
        assert job.get("state") not in {"failed", "refused", "cancelled"}, job
        time.sleep(1)
    raise AssertionError(f"{job_id} not {state} in {JOB_SECONDS:g} s: {job}")


def _approve(deployment: Deployment, job_id: str) -> str:
    with deployment.client("reviewer") as client:
        current = client.get(f"/v1/approvals/{job_id}").json()["current"]
        seen = {key: current[key] for key in ("commit_sha", "diff_digest")}
        reply = client.post(
            f"/v1/approvals/{job_id}/approve",
            json={"approval_id": current["id"], **seen, "comment": "deployed and checked"},
        )
    assert reply.status_code == 200, reply.text
    sha: str = reply.json()["commit_sha"]
    return sha


def _pushed(deployment: Deployment, job_id: str, sha: str) -> None:
    _wait(deployment, job_id, "succeeded")
    landed = branch_commit(deployment.upstream, f"riverbeam/{job_id}")
    assert landed is not None and landed.sha == sha
    main = branch_commit(deployment.upstream, "main")
    assert main is not None and main.sha == deployment.main_sha  # main untouched


def _inspect(container: str) -> dict[str, Any]:
    done = subprocess.run(
        ["docker", "inspect", container], capture_output=True, text=True, check=True, timeout=60
    )
    inspected: dict[str, Any] = json.loads(done.stdout)[0]
    return inspected


def test_an_author_job_parks_and_its_approval_pushes_over_smart_http(
    deployment: Deployment,
) -> None:
    started = time.monotonic()
    job_id = _submit(deployment, AUTHOR)
    parked = _wait(deployment, job_id, "awaiting_approval")
    assert branch_commit(deployment.upstream, f"riverbeam/{job_id}") is None
    sha = _approve(deployment, job_id)
    _pushed(deployment, job_id, sha)
    _timed("one author job: submit -> parked -> approved -> pushed", started)
    # The demo model fixed the page in a sandbox the worker container started on the host.
    assert parked["kind"] == "author"
    pushed = subprocess.run(
        ["git", "-C", str(deployment.upstream), "show", f"{sha}:{PAGE}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "recomend" not in pushed and "recommend" in pushed
    # The worker (root in its container) handed the job's tree to the sandbox uid on the
    # host's filesystem, at the host path the engine mounted into the sandbox.
    workspaces = deployment.directory / "data" / "workspaces"
    owners = {path.stat().st_uid for path in workspaces.rglob("*") if job_id in str(path)}
    assert Settings().sandbox.uid in owners
    # Over HTTP with the worker's token: the server saw it, and it lives in the worker only.
    assert basic(UPSTREAM_USER, deployment.upstream_token) in deployment.git.seen_authorizations


def test_every_health_check_passes(deployment: Deployment) -> None:
    checked = [deployment.containers(service)[0] for service in ("redis", "api", "worker")]
    deadline = time.monotonic() + JOB_SECONDS
    states: list[str] = []
    while time.monotonic() < deadline:
        states = [_inspect(container)["State"]["Health"]["Status"] for container in checked]
        if states == ["healthy"] * 3:
            break
        time.sleep(2)
    assert states == ["healthy"] * 3


def test_only_the_worker_holds_the_engine_socket_and_the_upstream_token(
    deployment: Deployment,
) -> None:
    for service in ("api", "beat", "redis", "worker"):
        (container,) = deployment.containers(service)
        details = _inspect(container)
        mounts = {mount["Destination"] for mount in details["Mounts"]}
        environment = "\n".join(details["Config"]["Env"] or [])
        assert deployment.upstream_token not in environment, service
        holds = {"/var/run/docker.sock", "/run/secrets/upstream-token"} & mounts
        assert holds == ({"/var/run/docker.sock", "/run/secrets/upstream-token"}
                         if service == "worker" else set()), service  # fmt: skip
        # Nothing but the worker runs as root; Redis is not published on the host.
        user = details["Config"]["User"]
        assert (user in {"0", "0:0"}) == (service == "worker"), (service, user)
        if service == "redis":
            assert not details["HostConfig"]["PortBindings"]


def test_healthz_lists_the_workers_per_queue_and_two_workers_share_the_jobs(
    deployment: Deployment,
) -> None:
    PARKED.append(_park(deployment))  # for the Redis restart below
    started = time.monotonic()
    deployment.compose("up", "-d", "--scale", "worker=2", "--no-recreate")
    body = deployment.wait_healthy(workers=2)
    _timed("scale to two workers -> both on /healthz", started)
    served = body["workers"]
    assert isinstance(served, dict)
    containers = deployment.containers("worker")
    assert len(containers) == 2
    # Celery names each worker after its container's host name.
    hosts = {name.rsplit("@", 1)[1] for workers in served.values() for name in workers}
    assert hosts == {container[:12] for container in containers}
    before = {container: _tasks_done(container) for container in containers}
    for _ in range(3):  # a batch normally spreads at once; prefetch is one job per process
        for job in [_submit(deployment, SUMMARIZE) for _ in range(6)]:
            _wait(deployment, job, "succeeded")
        if all(_tasks_done(container) > before[container] for container in containers):
            break
    assert all(_tasks_done(container) > before[container] for container in containers)


def _tasks_done(container: str) -> int:
    """How many tasks this worker container finished, from Celery's log lines."""
    done = subprocess.run(
        ["docker", "logs", container], capture_output=True, text=True, check=True, timeout=60
    )
    return (done.stdout + done.stderr).count("] succeeded in ")


def _park(deployment: Deployment) -> str:
    job_id = _submit(deployment, AUTHOR)
    _wait(deployment, job_id, "awaiting_approval")
    return job_id


def test_a_redis_restart_keeps_parked_jobs(deployment: Deployment) -> None:
    started = time.monotonic()
    deployment.compose("restart", "redis")
    deployment.wait_healthy(workers=2)
    _timed("restart redis -> healthy again", started)
    (job_id,) = PARKED
    _wait(deployment, job_id, "awaiting_approval")
    sha = _approve(deployment, job_id)
    _pushed(deployment, job_id, sha)
    PARKED.clear()


def test_down_and_up_loses_nothing(deployment: Deployment) -> None:
    PARKED.append(_park(deployment))
    with deployment.client("reviewer") as client:
        before = client.get("/v1/jobs", params={"limit": 100}).json()["items"]
    started = time.monotonic()
    deployment.compose("down")
    assert deployment.containers("redis") == []
    deployment.compose("up", "-d")
    deployment.wait_healthy()
    _timed("down, up -> healthy (warm start)", started)
    with deployment.client("reviewer") as client:
        after = client.get("/v1/jobs", params={"limit": 100}).json()["items"]
    assert {(job["id"], job["state"]) for job in after} == {
        (job["id"], job["state"]) for job in before
    }
    (job_id,) = PARKED
    sha = _approve(deployment, job_id)
    _pushed(deployment, job_id, sha)
