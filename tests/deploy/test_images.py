"""The service and Redis images from ``riverbeam image build``: a no-op when current, no
shell, compiler or package manager, non-root by default, and a worker inside computes the
sandbox image tag the host built (the check it makes at start)."""

from __future__ import annotations

import subprocess

import pytest

from bot.config import Settings
from sandbox.host.image import ImageInfo, build_image
from sandbox.host.image.deploy_images import (
    REDIS_UID,
    SERVICE_UID,
    build_deploy_images,
    redis_ref,
    service_ref,
)

# Serial: building the service and Redis images loads the whole machine.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

LIST_PROGRAMS = (
    "import os, sys\n"
    "found = []\n"
    "for top, dirs, files in os.walk('/'):\n"
    "    if top.startswith(('/proc', '/sys', '/dev')):\n"
    "        dirs[:] = []\n"
    "        continue\n"
    "    for name in files:\n"
    "        path = os.path.join(top, name)\n"
    "        if os.path.islink(path) or path == '/.dockerenv':  # the engine's marker\n"
    "            continue\n"
    "        if os.path.isfile(path) and os.access(path, os.X_OK) and '.so' not in name:\n"
    "            found.append(path)\n"
    "print('\\n'.join(sorted(found)))\n"
)


def _run(image: str, *command: str, user: str | None = None) -> str:
    options = ["--user", user] if user else []
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", *options, image, *command],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_second_build_is_a_no_op_on_the_same_tags(
    deploy_images: tuple[ImageInfo, ImageInfo],
) -> None:
    service, redis = deploy_images
    assert (service.ref, redis.ref) == (service_ref(Settings()), redis_ref())
    again = build_deploy_images(Settings())
    assert [(image.image_id, image.built) for image in again] == [
        (service.image_id, False),
        (redis.image_id, False),
    ]


def test_the_service_image_runs_python_and_riverbeam_only_as_a_non_root_user(
    deploy_images: tuple[ImageInfo, ImageInfo],
) -> None:
    service = deploy_images[0].ref
    programs = set(_run(service, "python3", "-c", LIST_PROGRAMS).split())
    assert programs == {"/usr/bin/python3.11", "/usr/local/bin/riverbeam"}
    assert _run(service, "riverbeam", "--version").strip() == "0.1.0"
    assert _run(service, "python3", "-c", "import os; print(os.getuid())").strip() == str(
        SERVICE_UID
    )
    missing = (
        "import importlib.util as u; print([m for m in ('pip', 'ensurepip') if u.find_spec(m)])"
    )
    assert _run(service, "python3", "-c", missing).strip() == "[]"


def test_a_worker_in_the_service_image_expects_the_sandbox_image_the_host_built(
    deploy_images: tuple[ImageInfo, ImageInfo],
) -> None:
    settings = Settings()
    host = build_image(settings)
    probe = (
        "from bot.config import Settings\n"
        "from sandbox.host.image.build import plan_image\n"
        f"print(plan_image(Settings(sandbox={{'image': {settings.sandbox.image!r}}}),"
        " fetch=False).ref)\n"
    )
    # As the compose worker runs it: root, whose wheel cache the image carries.
    assert _run(deploy_images[0].ref, "python3", "-c", probe, user="0").strip() == host.ref


def test_the_redis_image_runs_redis_as_its_own_user(
    deploy_images: tuple[ImageInfo, ImageInfo],
) -> None:
    redis = deploy_images[1].ref
    assert "Redis server v=7" in _run(redis, "redis-server", "--version")
    assert "redis-cli 7" in _run(redis, "redis-cli", "--version")
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Config.User}}", redis],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == f"{REDIS_UID}:{REDIS_UID}"
    # Redis's own programs only: no shell, no Perl.
    for program in ("sh", "perl", "apt-get"):
        shell = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", redis, program, "--version"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert shell.returncode != 0, program
