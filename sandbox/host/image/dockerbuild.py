"""The image build for hosts with a registry: ``docker/sandbox/Dockerfile`` through the engine.

The build context is assembled on the host from the same inputs as the registry-free build
(the cached wheels, the project modules the tool server imports,
``sandbox/host/image/imagefs.py``), so nothing is downloaded inside the build container: its
TLS trust store need not match the host's, and the build is reproducible offline once the base
image is present.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import docker
import requests
from docker.errors import DockerException, ImageNotFound

from bot.core.errors import BeamError
from sandbox.host.engine import engine_errors
from sandbox.host.image import imagefs
from sandbox.host.image.recipe import CONTENT_LABEL, DOCKERFILE, METHOD_LABEL, ImagePlan

__all__ = ["BASE_IMAGE", "base_image_available", "build_with_dockerfile"]

BASE_IMAGE = "python:3.11-slim-bookworm"


def base_image_available(client: docker.DockerClient, base: str = BASE_IMAGE) -> bool:
    """True when the base image is here or can be pulled (a registry answers)."""
    try:
        client.images.get(base)
        return True
    except ImageNotFound:
        pass
    except (DockerException, requests.RequestException):
        return False
    try:
        client.images.pull(base)
    except (DockerException, requests.RequestException):
        return False
    return True


def build_with_dockerfile(
    client: docker.DockerClient, plan: ImagePlan, *, base: str = BASE_IMAGE
) -> None:
    if not DOCKERFILE.exists():
        raise BeamError("BEM-408", f"{DOCKERFILE} is missing: build from a source checkout")
    with tempfile.TemporaryDirectory(prefix="riverbeam-context-") as scratch:
        context = Path(scratch)
        _assemble(context, plan)
        buildargs = {
            "BASE": base,
            "SANDBOX_UID": str(plan.uid),
            "CHECKS_UID": str(plan.checks_uid),
        }
        labels = {CONTENT_LABEL: plan.content_hash, METHOD_LABEL: "dockerfile"}
        with engine_errors("BEM-408", "building the sandbox image from its Dockerfile"):
            client.images.build(
                path=str(context),
                tag=plan.ref,
                buildargs=buildargs,
                labels=labels,
                rm=True,
                forcerm=True,
                pull=False,
            )


def _assemble(context: Path, plan: ImagePlan) -> None:
    shutil.copyfile(DOCKERFILE, context / "Dockerfile")
    shutil.copyfile(imagefs.__file__, context / "imagefs.py")
    for folder, wheels in (("wheels", plan.wheels), ("check-wheels", plan.check_wheels)):
        (context / folder).mkdir()
        for wheel in wheels:
            shutil.copyfile(wheel.path, context / folder / wheel.path.name)
    (context / "check-programs").mkdir()
    for program in plan.check_programs:
        shutil.copyfile(program, context / "check-programs" / program.name)
    for relative, source in plan.sources:
        destination = context / "app" / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)
