"""The container runtime: ``sandbox.runtime`` picks crun when the engine has it, and a runtime
the engine lacks is refused before anything is created. (The hardening on each runtime is read
back in ``test_hardening``.)"""

from __future__ import annotations

import docker
import pytest
from pydantic import ValidationError

from bot.config import SandboxLimits, Settings
from bot.core.errors import BeamError
from harness.workers import own
from sandbox.host.container.hardening import JOB_LABEL
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.container.runtime import resolve_runtime
from sandbox.host.doctor import doctor
from sandbox.host.image.build import ImageInfo
from tests.container.kit import PROTECTED, Workspace, deadline


def test_auto_runs_the_sandbox_on_crun_when_the_engine_has_it_else_on_its_default(
    docker_client: docker.DockerClient, image: ImageInfo, workspace: Workspace
) -> None:
    info = docker_client.api.info()
    expected = "crun" if "crun" in info["Runtimes"] else info["DefaultRuntime"]
    assert resolve_runtime(docker_client.api, "auto") == expected
    with ContainerSandbox(docker_client, image.ref) as sandbox:
        sandbox.start(
            own("job-auto"), workspace.path, PROTECTED, SandboxLimits(), deadline=deadline()
        )
        assert sandbox.container_id is not None
        inspected = docker_client.api.inspect_container(sandbox.container_id)
        assert inspected["HostConfig"]["Runtime"] == expected


def test_a_runtime_the_engine_lacks_is_bem_411_and_nothing_is_created(
    docker_client: docker.DockerClient, image: ImageInfo, workspace: Workspace
) -> None:
    limits = SandboxLimits(runtime="riverbeam-absent")
    sandbox = ContainerSandbox(docker_client, image.ref)
    with pytest.raises(BeamError) as refused:
        sandbox.start(own("job-absent"), workspace.path, PROTECTED, limits, deadline=deadline())
    assert refused.value.code == "BEM-411"
    assert "'riverbeam-absent'" in refused.value.message
    assert "runc" in refused.value.message  # what the engine does have
    labelled = {"label": [f"{JOB_LABEL}={own('job-absent')}"]}
    assert docker_client.api.containers(all=True, filters=labelled) == []
    assert sandbox.container_id is None


@pytest.mark.parametrize("name", ["", "crun --debug", "../runc", "-runc"])
def test_the_setting_takes_runtime_names_only(name: str) -> None:
    with pytest.raises(ValidationError, match="a runtime name"):
        SandboxLimits(runtime=name)


def test_the_start_records_its_stages_in_order(
    docker_client: docker.DockerClient, image: ImageInfo, workspace: Workspace
) -> None:
    with ContainerSandbox(docker_client, image.ref) as sandbox:
        sandbox.start(
            own("job-stages"), workspace.path, PROTECTED, SandboxLimits(), deadline=deadline()
        )
        stages = sandbox.startup_stages
    host = ["create", "created", "attached", "started", "ready"]
    server = ["interpreter", "imported", "checked"]
    assert set(stages) == {*host, *server}
    assert list(stages) == sorted(stages, key=stages.__getitem__)
    # The server's clock is the host's: its stages fall between asking for the start and
    # reading the ready line.
    for order in (host, ["attached", *server, "ready"]):
        assert [stages[name] for name in order] == sorted(stages[name] for name in order)


def test_the_doctor_says_which_runtime_the_hardening_was_checked_on(
    docker_client: docker.DockerClient, image: ImageInfo, settings: Settings
) -> None:
    runc = settings.model_copy(
        update={"sandbox": settings.sandbox.model_copy(update={"runtime": "runc"})}
    )
    (hardening,) = [c for c in doctor(runc, client=docker_client).checks if c.name == "hardening"]
    assert hardening.ok, hardening.detail
    assert hardening.detail.endswith(", on runc")
