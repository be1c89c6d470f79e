"""The sandbox image: content-hash tags, rebuild as a no-op, stale-image refusal, contents."""

from __future__ import annotations

import contextlib
import time

import docker
import pygit2
import pytest

from bot.config import SandboxLimits, Settings
from bot.core.errors import BeamError
from harness.workers import own
from sandbox.host.container.probe import run_probe
from sandbox.host.image.build import (
    KEPT_PREVIOUS_IMAGES,
    ImageInfo,
    build_image,
    check_image,
    container_closure,
    plan_image,
    remove_superseded,
)
from tests.container.kit import Workspace, probe_job

ABSENT = (
    "/bin/sh",
    "/bin/bash",
    "/bin/dash",
    "/usr/bin/sh",
    "/usr/bin/bash",
    "/usr/bin/apt",
    "/usr/bin/apt-get",
    "/usr/bin/dpkg",
    "/usr/bin/perl",
    "/usr/bin/gcc",
    "/usr/bin/cc",
    "/usr/bin/git",
    "/usr/bin/tar",
    "/var/lib/dpkg",
    "/usr/lib/python3.11/ensurepip",
    "/opt/riverbeam/site/pip",
)


def test_the_image_is_tagged_with_its_content_hash_and_latest(
    image: ImageInfo, docker_client: docker.DockerClient, settings: Settings
) -> None:
    plan = plan_image(settings, fetch=False)
    assert image.ref == f"{plan.repository}:{plan.content_hash}"
    tagged = docker_client.images.get(image.ref)
    assert f"{plan.repository}:latest" in tagged.tags
    assert tagged.labels["riverbeam.content-hash"] == plan.content_hash
    assert tagged.attrs["Config"]["User"] == "10001:10001"
    assert tagged.attrs["Config"]["Entrypoint"][1:] == [
        "-I",
        "-X",
        "utf8",
        "-m",
        "sandbox.inside.server",
    ]


def test_a_build_that_finds_its_image_current_moves_latest_back_to_it(
    image: ImageInfo, docker_client: docker.DockerClient, settings: Settings
) -> None:
    latest = f"{settings.sandbox.image}:latest"
    # ``latest`` lost, as when another checkout's build took it and that image went.
    docker_client.images.remove(latest)
    assert latest not in docker_client.images.get(image.ref).tags
    again = build_image(settings, client=docker_client)
    assert not again.built and again.ref == image.ref
    assert latest in docker_client.images.get(image.ref).tags


def test_a_build_untags_old_images_of_its_own_repository_only(
    image: ImageInfo, docker_client: docker.DockerClient, settings: Settings
) -> None:
    plan = plan_image(settings, fetch=False)
    api = docker_client.api
    olds = [f"{plan.repository}:test-old-{n}" for n in range(KEPT_PREVIOUS_IMAGES + 2)]
    elsewhere = "riverbeam-test-elsewhere:kept"
    for tag in olds:  # oldest first: each a distinct image, made after the one before
        container = api.create_container(image.ref, entrypoint=["/nonexistent"])
        try:
            api.commit(container["Id"], *tag.split(":"), changes=f"LABEL test.tag={tag}")
        finally:
            api.remove_container(container["Id"], force=True)
    api.tag(olds[0], *elsewhere.split(":"))
    try:
        remove_superseded(docker_client, plan)
        left = {tag for each in docker_client.images.list() for tag in each.tags}
        kept = olds[-KEPT_PREVIOUS_IMAGES:]
        assert {tag for tag in olds if tag in left} == set(kept)
        assert elsewhere in left
        assert image.ref in left
    finally:
        for tag in [*olds, elsewhere]:
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(tag)


def test_building_a_current_image_does_nothing(
    image: ImageInfo, docker_client: docker.DockerClient, settings: Settings
) -> None:
    started = time.monotonic()
    again = build_image(settings, client=docker_client)
    assert (again.built, again.image_id) == (False, image.image_id)
    assert time.monotonic() - started < 10
    assert check_image(docker_client, settings) == again


def test_a_stale_image_is_refused_with_how_to_rebuild(
    image: ImageInfo, docker_client: docker.DockerClient
) -> None:
    # Another uid is another recipe, so another content hash: nothing is tagged with it.
    changed = Settings(sandbox=SandboxLimits(uid=10002, checks_uid=10003))
    with pytest.raises(BeamError) as refused:
        check_image(docker_client, changed)
    assert refused.value.code == "BEM-401"
    assert "run `riverbeam sandbox build`" in refused.value.message


def test_the_hash_covers_the_sources_and_the_wheels(settings: Settings) -> None:
    plan = plan_image(settings, fetch=False)
    sources, distributions = container_closure()
    assert [relative for relative, _ in plan.sources] == [relative for relative, _ in sources]
    assert {
        "sandbox/inside/server.py",
        "sandbox/inside/sandbox_tools.py",
        "bot/core/errors.py",
    } <= {relative for relative, _ in sources}
    assert "sandbox/host/container/lifecycle.py" not in {relative for relative, _ in sources}
    assert ("pygit2", pygit2.__version__) in distributions
    assert {wheel.name for wheel in plan.wheels} == {name for name, _ in distributions}
    assert "docker" not in {name for name, _ in distributions}


def test_the_tool_server_loads_pygit2_and_nothing_else_from_outside_the_standard_library() -> None:
    """pydantic, jsonschema and their dependencies were most of the server's start-up CPU; the
    image (built from this closure) would not even hold them, so one creeping back in fails
    here rather than as a slower start."""
    sources, distributions = container_closure()
    assert {name for name, _ in distributions} == {"cffi", "pygit2"}
    loaded = {relative for relative, _ in sources}
    assert not loaded & {"bot/core/identity.py", "bot/core/tools.py", "bot/core/input.py"}
    assert "sandbox/inside/tool_specs.py" not in loaded


def test_pygit2_in_the_image_is_the_hosts(
    image: ImageInfo, docker_client: docker.DockerClient
) -> None:
    output = docker_client.containers.run(
        image.ref,
        entrypoint=["python3", "-I", "-c", "import pygit2; print(pygit2.__version__)"],
        network_mode="none",
        remove=True,
    )
    assert output.decode().strip() == pygit2.__version__


def test_no_shell_package_manager_or_compiler_is_in_the_image(
    image: ImageInfo,
    docker_client: docker.DockerClient,
    workspace: Workspace,
    limits: SandboxLimits,
) -> None:
    job = probe_job(workspace, limits, own("contents-probe"), outbox=False)
    report, _ = run_probe(docker_client, image.ref, job, paths=ABSENT)
    assert report.paths == dict.fromkeys(ABSENT, False)
