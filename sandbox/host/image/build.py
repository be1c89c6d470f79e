"""The sandbox image: what goes in it, its content hash, and building and checking it.

The image holds exactly what ``python -m sandbox.inside.server`` imports: the project modules it
loads (found by importing it, and the modules it names as loaded later, in a fresh interpreter
on the host, so the list cannot drift from the code) and the wheels of the third-party
packages among them, at the versions the host runs (so pygit2 inside is the host's pygit2).
Wheels are downloaded once, on the host, into a cache, and installed into the image offline.

The tag is ``riverbeam-sandbox:<content hash>``, a hash of every build input: both recipes
(``docker/sandbox/Dockerfile`` and the registry-free recipe in ``sandbox.host.image.rootfs``, with
``sandbox.host.image.imagefs``), each wheel's file name and SHA-256, and each copied source file.
``build_image`` does nothing when that tag exists; ``check_image`` refuses (BEM-401) when it
does not, which is how a worker notices that its code moved on without a rebuild.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

import docker
from docker.errors import APIError, ImageNotFound
from docker.models.images import Image

from bot.config import SandboxLimits, Settings
from bot.core.errors import BeamError
from sandbox.host.engine import engine_errors
from sandbox.host.image.dockerbuild import base_image_available, build_with_dockerfile
from sandbox.host.image.recipe import (
    CHECKS_LOCK,
    DEBIAN_SUITE,
    DOCKERFILE,
    METHOD_LABEL,
    PROJECT_ROOT,
    PYTHON_RELEASE,
    PYTHON_VERSION,
    ImagePlan,
    Wheel,
)
from sandbox.host.image.rootfs import build_from_rootfs
from sandbox.inside.checks import CHECK_PROGRAMS
from sandbox.inside.server import LOADED_LATER

__all__ = [
    "ImageInfo",
    "ImagePlan",
    "Wheel",
    "build_image",
    "cache_dir",
    "check_image",
    "image_info",
    "plan_image",
]

DEBIAN_GLIBC_MINOR = 36  # bookworm's glibc 2.36: the newest manylinux wheel it can load
KEPT_PREVIOUS_IMAGES = 2
_PROJECT_PACKAGES = ("bot", "sandbox")
_RECIPE_MODULES = (
    "sandbox/host/image/build.py",
    "sandbox/host/image/imagefs.py",
    "sandbox/host/image/recipe.py",
    "sandbox/host/image/rootfs.py",
)

Method = Literal["dockerfile", "rootfs"]


@dataclass(frozen=True)
class ImageInfo:
    ref: str
    content_hash: str
    image_id: str
    size_bytes: int
    method: str
    built: bool  # False when the current image already existed


def cache_dir(limits: SandboxLimits) -> Path:
    if limits.build_cache is not None:
        return limits.build_cache
    if os.geteuid() == 0:
        return Path("/var/cache/riverbeam")
    return Path.home() / ".cache" / "riverbeam"


def plan_image(settings: Settings, *, fetch: bool = True) -> ImagePlan:
    """The inputs of the current image. ``fetch`` downloads missing wheels (the host needs
    the package index once); without it a missing wheel is BEM-401."""
    limits = settings.sandbox
    sources, distributions = container_closure()
    wheels = tuple(
        _wheel(cache_dir(limits) / "wheels", name, version, fetch=fetch)
        for name, version in distributions
    )
    check_wheels = tuple(
        _wheel(cache_dir(limits) / "wheels", name, version, fetch=fetch)
        for name, version in check_distributions(limits)
    )
    programs = tuple(_program(path) for path in limits.check_programs)
    digest = hashlib.sha256()
    for part in _recipe_parts(limits.uid, limits.checks_uid):
        digest.update(part)
    for wheel in wheels:
        digest.update(f"wheel {wheel.path.name} {wheel.sha256}\n".encode())
    for wheel in check_wheels:
        digest.update(f"check wheel {wheel.path.name} {wheel.sha256}\n".encode())
    for program in programs:
        digest.update(f"check program {program.name} {_sha256(program)}\n".encode())
    for relative, path in sources:
        digest.update(f"source {relative} {_sha256(path)}\n".encode())
    return ImagePlan(
        repository=limits.image,
        uid=limits.uid,
        wheels=wheels,
        sources=sources,
        content_hash=digest.hexdigest()[:16],
        check_wheels=check_wheels,
        check_programs=programs,
        checks_uid=limits.checks_uid,
    )


def check_distributions(limits: SandboxLimits) -> tuple[tuple[str, str], ...]:
    """The docs checks' packages: the pinned set (docker/sandbox/checks.txt) and the
    operator's ``sandbox.check_packages``, which win for a name both pin."""
    pins: dict[str, str] = {}
    lines = CHECKS_LOCK.read_text().splitlines() if CHECKS_LOCK.exists() else []
    for line in [*lines, *limits.check_packages]:
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return tuple(sorted(pins.items()))


def _program(path: Path) -> Path:
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BeamError("BEM-408", f"sandbox.check_programs: {path} is not an executable file")
    return path


def check_image(client: docker.DockerClient, settings: Settings) -> ImageInfo:
    """The current image, for a worker about to start a job; BEM-401 when it is missing or
    was built from other code."""
    plan = plan_image(settings, fetch=False)
    with engine_errors("BEM-401", "looking up the sandbox image"):
        try:
            image = client.images.get(plan.ref)
        except ImageNotFound:
            message = (
                f"the sandbox image {plan.ref} is missing or stale (the code or its "
                "dependencies changed since the last build); run `riverbeam sandbox build`"
            )
            raise BeamError("BEM-401", message) from None
    return _info(plan, image, built=False)


def build_image(
    settings: Settings, *, force: bool = False, client: docker.DockerClient | None = None
) -> ImageInfo:
    """Build the current image unless it exists (or ``force``), tag it with its content hash
    and as ``latest``. BEM-408 when the build fails."""
    from sandbox.host.engine import connect

    client = client or connect()
    plan = plan_image(settings, fetch=True)
    if not force:
        try:
            current = client.images.get(plan.ref)
        except ImageNotFound:
            pass
        else:
            # ``latest`` may name another build (of other code, built since): it follows
            # the current one, as after a build.
            if f"{plan.repository}:latest" not in current.tags:
                with engine_errors("BEM-408", "tagging the sandbox image"):
                    current.tag(plan.repository, "latest")
            return _info(plan, current, built=False)
    method = _method(client, settings.sandbox)
    if method == "dockerfile":
        build_with_dockerfile(client, plan)
    else:
        cache = cache_dir(settings.sandbox)
        build_from_rootfs(client, plan, settings.sandbox, cache, refresh=force)
    with engine_errors("BEM-408", "tagging the sandbox image"):
        image = client.images.get(plan.ref)
        image.tag(plan.repository, "latest")
    remove_superseded(client, plan)
    return _info(plan, image, built=True)


def remove_superseded(client: docker.DockerClient, plan: ImagePlan) -> None:
    """Untag content-hash images older than the newest few (each is a full copy of the
    tree). The few kept let workers still on the previous code run on through a rolling
    deploy; an image a running sandbox uses is kept until a later build in any case. Only
    the plan's repository's tags go: the same image tagged elsewhere (a copy kept as a
    benchmark baseline, another deployment's name) is someone else's, and stays."""
    older = [
        image for image in client.images.list(name=plan.repository) if plan.ref not in image.tags
    ]
    older.sort(key=lambda image: str(image.attrs.get("Created", "")), reverse=True)
    for image in older[KEPT_PREVIOUS_IMAGES:]:
        for tag in image.tags:
            if tag.rpartition(":")[0] == plan.repository:
                with contextlib.suppress(APIError):
                    client.images.remove(tag)


@functools.cache
def container_closure() -> tuple[tuple[tuple[str, Path], ...], tuple[tuple[str, str], ...]]:
    """What ``import sandbox.inside.server`` loads, with the modules it imports when used
    (``LOADED_LATER``): project source files, and third-party distributions with their installed
    versions. Computed in a fresh interpreter."""
    modules = ("sandbox.inside.server", *LOADED_LATER, *CHECK_PROGRAMS)
    imports = "".join(f"import {name}\n" for name in modules)
    probe = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        f"{imports}"
        "print(json.dumps({name: getattr(sys.modules[name], '__file__', None)"
        " for name in set(sys.modules) - before}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False
    )
    if completed.returncode != 0:
        raise BeamError(
            "BEM-408", f"cannot import sandbox.inside.server: {completed.stderr.strip()}"
        )
    loaded: dict[str, str | None] = json.loads(completed.stdout)
    return _project_sources(loaded), _distributions(loaded)


def _project_sources(loaded: dict[str, str | None]) -> tuple[tuple[str, Path], ...]:
    sources = set()
    for name, file in loaded.items():
        if name.split(".")[0] in _PROJECT_PACKAGES and file:
            path = Path(file).resolve()
            sources.add((path.relative_to(PROJECT_ROOT).as_posix(), path))
    return tuple(sorted(sources))


def _distributions(loaded: dict[str, str | None]) -> tuple[tuple[str, str], ...]:
    owners = metadata.packages_distributions()
    names = set()
    for module in loaded:
        top = module.split(".")[0]
        if top in _PROJECT_PACKAGES or top in sys.stdlib_module_names or top not in owners:
            continue
        names.update(owners[top])
    return tuple(sorted((name, metadata.version(name)) for name in names))


def _recipe_parts(uid: int, checks_uid: int) -> list[bytes]:
    parts = [f"python {PYTHON_VERSION} debian {DEBIAN_SUITE} uid {uid}\n".encode()]
    parts.append(f"checks uid {checks_uid}\n".encode())
    parts.append(DOCKERFILE.read_bytes() if DOCKERFILE.exists() else b"(no Dockerfile)")
    parts.extend((PROJECT_ROOT / module).read_bytes() for module in _RECIPE_MODULES)
    return parts


def _wheel(directory: Path, name: str, version: str, *, fetch: bool) -> Wheel:
    found = _cached_wheel(directory, name, version)
    if found is None and fetch:
        _download(directory, name, version)
        found = _cached_wheel(directory, name, version)
    if found is None:
        message = (
            f"no wheel of {name} {version} in {directory}; run `riverbeam sandbox build` "
            "(it downloads the wheels once)"
        )
        raise BeamError("BEM-408" if fetch else "BEM-401", message)
    return Wheel(name, version, found, _sha256(found))


def _cached_wheel(directory: Path, name: str, version: str) -> Path | None:
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
    if not directory.is_dir():
        return None
    matches = sorted(
        path
        for path in directory.glob("*.whl")
        if path.name.lower().startswith(stem) and _loadable(path.name)
    )
    return matches[-1] if matches else None


def _loadable(filename: str) -> bool:
    """A wheel the image's CPython 3.11 on bookworm can load, on this machine's architecture."""
    python_tag, abi_tag, platform_tag = filename[: -len(".whl")].split("-")[-3:]
    if platform_tag == "any":
        return True
    arch = os.uname().machine
    # A compiled extension for CPython 3.11 (or the stable ABI), or pure Python shipped per
    # platform (a bundled library, like watchdog's).
    abi_ok = (abi_tag in {"cp311", "abi3"} and python_tag.startswith("cp3")) or (
        abi_tag == "none" and python_tag.startswith("py3")
    )
    platforms = platform_tag.split(".")
    return abi_ok and any(_glibc_ok(platform, arch) for platform in platforms)


def _glibc_ok(platform: str, arch: str) -> bool:
    match = re.fullmatch(rf"manylinux_2_(\d+)_{arch}|manylinux(2014|2010|1)_{arch}", platform)
    if match is None:
        return False
    return match.group(1) is None or int(match.group(1)) <= DEBIAN_GLIBC_MINOR


def _download(directory: Path, name: str, version: str) -> None:
    arch = os.uname().machine
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(17, DEBIAN_GLIBC_MINOR + 1)]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--only-binary=:all:", "--python-version", PYTHON_RELEASE]
    command += ["--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none"]
    command += [f"--platform={platform}" for platform in [*platforms, f"manylinux2014_{arch}"]]
    command += ["--platform=any", "--dest", str(directory), f"{name}=={version}"]
    directory.mkdir(parents=True, exist_ok=True)
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        detail = completed.stderr.strip().splitlines()[-1:] or ["no output"]
        raise BeamError("BEM-408", f"downloading the {name} {version} wheel failed: {detail[0]}")


def _method(client: docker.DockerClient, limits: SandboxLimits) -> Method:
    if limits.build_method != "auto":
        return limits.build_method
    return "dockerfile" if base_image_available(client) else "rootfs"


def _info(plan: ImagePlan, image: Image, *, built: bool) -> ImageInfo:
    return image_info(plan.ref, plan.content_hash, image, built=built)


def image_info(ref: str, content_hash: str, image: Image, *, built: bool) -> ImageInfo:
    labels = image.labels or {}
    return ImageInfo(
        ref=ref,
        content_hash=content_hash,
        image_id=str(image.id),
        size_bytes=int(image.attrs.get("Size", 0)),
        method=str(labels.get(METHOD_LABEL, "unknown")),
        built=built,
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
