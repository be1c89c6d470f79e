"""``ContainerStart`` on the real engine, run by ``DeferredSandbox`` as a segment runs it: on a
background thread (``begin``), waited for by the first call, stopped whatever happened; a
start that fails is raised again, as it was raised, and leaves no container."""

from __future__ import annotations

from dataclasses import replace

import docker
import pytest

from bot.config import SandboxLimits
from bot.core.errors import BeamError
from bot.core.identity import Identity, Trailer
from bot.jobs.plans import Baseline
from bot.jobs.segment.container_start import ContainerStart
from harness.workers import own
from sandbox.host.container.deferred import DeferredSandbox
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.image.build import ImageInfo
from tests.container.kit import PROTECTED, Workspace

pytestmark = pytest.mark.slow


def _start(workspace: Workspace, limits: SandboxLimits) -> ContainerStart:
    return ContainerStart(
        job_id=own("job-1"),
        tree=workspace.path,
        outbox=workspace.outbox,
        protected_refs=PROTECTED,
        limits=limits,
        time_limit_seconds=120,
        identity=Identity(),
        trailers=(Trailer.requested_by("alice"),),
        compare=None,
        deployment=own("deployment"),
    )


def _labelled(client: docker.DockerClient, job_id: str) -> list[str]:
    found = client.api.containers(all=True, filters={"name": job_id})
    return [container["Id"] for container in found]


def test_begun_it_starts_in_the_background_and_the_first_call_waits_for_it(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    workspace: Workspace,
    limits: SandboxLimits,
) -> None:
    start = _start(workspace, limits)
    deferred = DeferredSandbox(ContainerSandbox(docker_client, image.ref), start)
    try:
        deferred.begin()
        assert deferred.begun
        listed = deferred.call("list_tree", {})
        assert deferred.running and isinstance(listed, dict)
        assert deferred.start_seconds > 0
        assert _labelled(docker_client, start.job_id) != []
    finally:
        deferred.stop()
    assert not deferred.running
    assert _labelled(docker_client, start.job_id) == [], "stopped: the container is gone"


def test_a_failed_start_is_raised_again_and_leaves_no_container(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    workspace: Workspace,
    limits: SandboxLimits,
) -> None:
    # A compare point the tree does not hold: the tool server refuses to start (BEM-402).
    start = replace(_start(workspace, limits), compare=Baseline(sha="0" * 40, label="nowhere"))
    deferred = DeferredSandbox(ContainerSandbox(docker_client, image.ref), start)
    try:
        deferred.begin()
        with pytest.raises(BeamError) as caught:
            deferred.ready()
        assert caught.value.code == "BEM-402"
        failure = deferred.failure()
        assert failure is caught.value, "the start's own error, not a copy"
        with pytest.raises(BeamError) as again:
            deferred.call("list_tree", {})
        assert again.value is failure
    finally:
        deferred.stop()
    assert _labelled(docker_client, start.job_id) == []


def test_the_start_is_a_value_fixed_when_the_workspace_is(
    workspace: Workspace, limits: SandboxLimits
) -> None:
    start = _start(workspace, limits)
    with pytest.raises(AttributeError):
        start.tree = workspace.outbox  # type: ignore[misc]
    assert start == _start(workspace, limits) and hash(start) == hash(_start(workspace, limits))
