"""Fixtures for tests against the real Docker engine and the real sandbox image.

The image is built once per session through ``build_image`` (a no-op when the current
content hash is already tagged). No engine is a failure, not a skip: ``tests/run`` installs
and starts one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from bot.config import SandboxLimits, Settings
from bot.core.errors import BeamError
from harness.workers import IMAGE_BUILD, one_at_a_time, own
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.engine import connect
from sandbox.host.image.build import ImageInfo, build_image
from tests.container.kit import PROTECTED, Workspace, deadline, make_workspace


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    try:
        return connect(timeout=30)
    except BeamError as error:
        pytest.fail(f"container tests need a Docker engine (tests/run starts one): {error}")


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="session")
def image(docker_client: docker.DockerClient, settings: Settings) -> ImageInfo:
    with one_at_a_time(IMAGE_BUILD):
        return build_image(settings, client=docker_client)


@pytest.fixture
def limits(settings: Settings) -> SandboxLimits:
    return settings.sandbox


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return make_workspace(tmp_path / own("job-1"))


@pytest.fixture
def sandbox(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    workspace: Workspace,
    limits: SandboxLimits,
) -> Iterator[ContainerSandbox]:
    with ContainerSandbox(docker_client, image.ref) as running:
        running.start(
            own("job-1"),
            workspace.path,
            PROTECTED,
            limits,
            deadline=deadline(),
            outbox=workspace.outbox,
        )
        yield running


def container_exists(client: docker.DockerClient, container_id: str) -> bool:
    return bool(client.api.containers(all=True, filters={"id": container_id}))
