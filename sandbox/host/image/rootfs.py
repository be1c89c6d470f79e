"""The registry-free image build: a Debian root filesystem from ``mmdebstrap``, finished on
the host and loaded with ``docker import``. For machines that reach Debian's archive and the
Python package index but no container registry.

Recipe: ``mmdebstrap --variant=extract`` unpacks only the interpreter's packages and the
libraries they depend on (no ``Essential: yes`` set, so no shell, no coreutils, no apt); the
host's pip installs the cached wheels into ``/opt/riverbeam/site``; the project modules go
to ``/opt/riverbeam/app``; ``sandbox.host.image.imagefs`` adds the accounts and prunes every
program but Python; the image's own interpreter byte-compiles everything (via ``chroot``: the root
filesystem is read-only at run time, so nothing could be compiled later, and compiling on
each start would cost more than the start itself). Needs root, like ``mmdebstrap``'s root mode.

The unpacked Debian tree is cached as a tarball keyed by its recipe, so a rebuild after a
code change takes seconds. ``--force`` fetches fresh packages (security updates).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import docker

from bot.config import SandboxLimits
from bot.core.errors import BeamError
from sandbox.host.engine import engine_errors
from sandbox.host.image.imagefs import APP_DIR, CHECKS_DIR, SITE_DIR, finish
from sandbox.host.image.recipe import (
    CONTENT_LABEL,
    DEBIAN_SUITE,
    METHOD_LABEL,
    PYTHON_VERSION,
    ImagePlan,
    Wheel,
)

__all__ = [
    "DEBIAN_PACKAGES",
    "DEBIAN_SITE_PACKAGES",
    "PYTHON",
    "base_tarball",
    "build_from_rootfs",
    "byte_compile",
    "entrypoint",
    "import_tree",
    "run_step",
]

# libstdc++6: compiled extensions among the docs checks' packages (google-re2, pyjson5)
# link it, as manylinux wheels may.
DEBIAN_PACKAGES = (
    f"python{PYTHON_VERSION}-minimal",
    f"libpython{PYTHON_VERSION}-stdlib",
    "libstdc++6",
)
DEBIAN_SITE_PACKAGES = "/usr/lib/python3/dist-packages"
PYTHON = f"/usr/bin/python{PYTHON_VERSION}"


def entrypoint(python: str) -> list[str]:
    """The tool server's command. ``-I`` keeps the working directory (the job's repository,
    which the model writes) and ``PYTHON*`` variables off the import path; ``-X utf8`` makes
    file names and text UTF-8 whatever the locale."""
    return [python, "-I", "-X", "utf8", "-m", "sandbox.inside.server"]


def build_from_rootfs(
    client: docker.DockerClient,
    plan: ImagePlan,
    limits: SandboxLimits,
    cache: Path,
    *,
    refresh: bool = False,
) -> None:
    """Build and import the image; ``refresh`` unpacks fresh Debian packages instead of the
    cached tree."""
    if os.geteuid() != 0:
        raise BeamError("BEM-408", "the registry-free build runs mmdebstrap and chroot as root")
    base = base_tarball(cache / "rootfs", limits.debian_mirror, DEBIAN_PACKAGES, refresh=refresh)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="riverbeam-image-", dir=cache) as scratch:
        root = Path(scratch) / "root"
        root.mkdir()
        run_step(["tar", "--numeric-owner", "-xpf", str(base), "-C", str(root)], "unpacking")
        _install_wheels(root, plan.wheels, SITE_DIR)
        _install_wheels(root, plan.check_wheels, CHECKS_DIR)
        _copy_sources(root, plan)
        finish(root, site_packages=DEBIAN_SITE_PACKAGES, uid=plan.uid, checks_uid=plan.checks_uid)
        copy_check_programs(root, plan)
        (root / "usr/bin/python3").symlink_to(f"python{PYTHON_VERSION}")
        byte_compile(root, [f"/usr/lib/python{PYTHON_VERSION}", APP_DIR, SITE_DIR, CHECKS_DIR])
        changes = [
            f"USER {plan.uid}:{plan.uid}",
            "WORKDIR /workspace",
            "ENV PATH=/usr/bin",
            f"ENTRYPOINT {json.dumps(entrypoint('/usr/bin/python3'))}",
            f"LABEL {CONTENT_LABEL}={plan.content_hash} {METHOD_LABEL}=rootfs",
        ]
        import_tree(client, root, plan.ref, changes)


def base_tarball(
    directory: Path,
    mirror: str,
    packages: tuple[str, ...],
    *,
    refresh: bool,
    code: str = "BEM-408",
) -> Path:
    """The unpacked Debian ``packages`` (and what they depend on), cached by recipe: the
    service image asks for the sandbox's set and so shares its tarball."""
    recipe = f"{DEBIAN_SUITE} extract {' '.join(packages)} {os.uname().machine}"
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    tarball = directory / f"debian-{key}.tar"
    if tarball.exists() and not refresh:
        return tarball
    if shutil.which("mmdebstrap") is None:
        raise BeamError(code, "mmdebstrap is not installed (apt-get install mmdebstrap)")
    directory.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".partial.tar")
    command = ["mmdebstrap", "--quiet", "--variant=extract", "--mode=root", "--format=tar"]
    command += [f"--include={','.join(packages)}", DEBIAN_SUITE, str(partial)]
    # Security fixes come from the -security suite, which deb.debian.org serves beside the
    # main archive; a configured mirror must do the same.
    command += [
        f"deb {mirror} {DEBIAN_SUITE} main",
        f"deb {mirror} {DEBIAN_SUITE}-updates main",
        f"deb {mirror}-security {DEBIAN_SUITE}-security main",
    ]
    run_step(command, "mmdebstrap", code=code)
    partial.rename(tarball)
    return tarball


def _install_wheels(root: Path, wheels: tuple[Wheel, ...], directory: str) -> None:
    if not wheels:
        return
    target = root / directory.lstrip("/")
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    command += ["--no-compile", "--disable-pip-version-check", "--target", str(target)]
    # The wheels are for the image's CPython, which may not be the one running pip.
    command += ["--only-binary=:all:", "--python-version", PYTHON_VERSION]
    command += ["--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none"]
    command += [f"--platform={tag}" for tag in _platform_tags(wheels)]
    command += [str(wheel.path) for wheel in wheels]
    run_step(command, "pip install")


def copy_check_programs(root: Path, plan: ImagePlan) -> None:
    """The operator's executables for the checks (``sandbox.check_programs``), after the
    pruning, which would take their execute bits."""
    if not plan.check_programs:
        return
    target = root / CHECKS_DIR.lstrip("/") / "bin"
    target.mkdir(parents=True, exist_ok=True)
    for program in plan.check_programs:
        shutil.copyfile(program, target / program.name)
        (target / program.name).chmod(0o755)


def _platform_tags(wheels: tuple[Wheel, ...]) -> list[str]:
    tags = {"any"}
    for wheel in wheels:
        tags.update(wheel.path.name[: -len(".whl")].split("-")[-1].split("."))
    return sorted(tags)


def _copy_sources(root: Path, plan: ImagePlan) -> None:
    app = root / APP_DIR.lstrip("/")
    for relative, source in plan.sources:
        destination = app / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)
        destination.chmod(0o644)


def byte_compile(root: Path, targets: list[str], *, code: str = "BEM-408") -> None:
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    command = [chroot, str(root), PYTHON, "-I", "-m", "compileall", "-q"]
    command += ["--invalidation-mode", "unchecked-hash", *targets]
    run_step(command, "byte-compiling", env={"PATH": "/usr/bin"}, code=code)


def import_tree(
    client: docker.DockerClient,
    root: Path,
    ref: str,
    changes: list[str],
    *,
    code: str = "BEM-408",
) -> None:
    """Pack the finished tree ``root`` and load it into the engine as ``ref``, with the
    Dockerfile-style ``changes`` (user, entrypoint, labels)."""
    image_tar = root.parent / "image.tar"
    run_step(
        ["tar", "--numeric-owner", "-C", str(root), "-cf", str(image_tar), "."],
        "packing",
        code=code,
    )
    repository, tag = ref.rsplit(":", 1)
    with engine_errors(code, f"importing the image {ref}"):
        client.api.import_image_from_file(
            str(image_tar), repository=repository, tag=tag, changes=changes
        )


def run_step(
    command: list[str], step: str, env: dict[str, str] | None = None, *, code: str = "BEM-408"
) -> None:
    completed = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if completed.returncode != 0:
        detail = "\n".join(completed.stderr.strip().splitlines()[-5:]) or "no output"
        what = "the sandbox image" if code == "BEM-408" else "a service image"
        raise BeamError(code, f"building {what}: {step} failed: {detail}")
