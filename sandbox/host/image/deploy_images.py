"""The deployment's own images, built without a registry the way the sandbox image is: the
service image (``riverbeam api``, ``worker`` and ``beat`` share it) and a Redis image.

Service image: the sandbox build's cached Debian tree (the same ``mmdebstrap`` tarball, so a
machine that built the sandbox image fetches nothing more from Debian), the project and its
dependencies from wheels made on the host with ``pip wheel --constraint constraints.txt``
(the pinned set), byte-compiled by the image's own interpreter. The project's packages go to
``/opt/riverbeam/app``, everything else to ``/opt/riverbeam/site``. No shell, compiler, pip or
package manager is left (``imagefs.prune``); ``riverbeam`` is a two-line launcher. It runs as
``riverbeam`` (uid ``SERVICE_UID``); the compose file runs only the worker as root.

The worker checks at start that the sandbox image matches its code (``check_image``), by
hashing what goes into the sandbox image. So the service image carries those inputs at the
paths a checkout has them: the sandbox's wheels in root's wheel cache and
``docker/sandbox/Dockerfile`` beside the project's packages. A worker in the container then
computes the very tag ``riverbeam sandbox build`` made on the host.

Redis image: Debian's ``redis-server`` and what it links, unpacked the same way, run as
``redis`` (uid ``REDIS_UID``) with ``/data`` its own.

Each image's tag is a hash of its inputs (recipe, pinned versions, project files, the sandbox
image's hash), so a build is a no-op when the tag exists. Configuration and credentials are
never in an image: they are mounted at run time (``docker/compose.yaml``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from bot.config import Settings
from bot.core.errors import BeamError
from sandbox.host.engine import engine_errors
from sandbox.host.image.build import ImageInfo, cache_dir, image_info, plan_image
from sandbox.host.image.imagefs import APP_DIR, SITE_DIR, add_account, finish, prune
from sandbox.host.image.recipe import (
    CHECKS_LOCK,
    CONTENT_LABEL,
    DEBIAN_SUITE,
    DOCKERFILE,
    METHOD_LABEL,
    PROJECT_ROOT,
    PYTHON_VERSION,
)
from sandbox.host.image.rootfs import (
    DEBIAN_PACKAGES,
    DEBIAN_SITE_PACKAGES,
    base_tarball,
    byte_compile,
    import_tree,
    run_step,
)

__all__ = [
    "REDIS_REPOSITORY",
    "REDIS_UID",
    "SERVICE_REPOSITORY",
    "SERVICE_UID",
    "build_deploy_images",
    "redis_ref",
    "service_ref",
]

CODE = "BEM-409"
SERVICE_REPOSITORY = "riverbeam"
REDIS_REPOSITORY = "riverbeam-redis"
SERVICE_UID = 10000  # docker/Dockerfile's riverbeam user too
REDIS_UID = 10002
REDIS_PACKAGES = ("redis-server",)
# redis-server is a link to redis-check-rdb; redis-check-aof repairs a damaged AOF.
REDIS_PROGRAMS = frozenset({"redis-server", "redis-check-rdb", "redis-check-aof", "redis-cli"})
SERVICE_HOME = "/var/lib/riverbeam"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
_PROJECT_PACKAGES = ("bot", "sandbox", "skills")
_PROJECT_FILES = ("pyproject.toml", "constraints.txt")
_RECIPE = (Path(__file__), *(Path(__file__).with_name(n) for n in ("rootfs.py", "imagefs.py")))
_LAUNCHER = f"#!/usr/bin/python{PYTHON_VERSION} -I\nimport sys\nfrom bot.cli import main\n"
_LAUNCHER += "sys.exit(main())\n"


def service_ref(settings: Settings) -> str:
    """``riverbeam:<content hash>`` of the current code, pinned versions and sandbox image."""
    return f"{SERVICE_REPOSITORY}:{_service_hash(settings)}"


def redis_ref() -> str:
    return f"{REDIS_REPOSITORY}:{_digest([_recipe_line('redis', REDIS_PACKAGES, REDIS_UID)])}"


def build_deploy_images(
    settings: Settings, *, force: bool = False, client: docker.DockerClient | None = None
) -> tuple[ImageInfo, ImageInfo]:
    """The service and Redis images, each built unless its tag exists (or ``force``: fresh
    Debian packages too), and tagged ``latest``. BEM-409 when a build fails."""
    from sandbox.host.engine import connect

    client = client or connect()
    service = _ensure(
        client,
        service_ref(settings),
        force,
        lambda ref: _build_service(client, settings, ref, refresh=force),
    )
    redis = _ensure(
        client, redis_ref(), force, lambda ref: _build_redis(client, settings, ref, refresh=force)
    )
    return service, redis


def _ensure(
    client: docker.DockerClient, ref: str, force: bool, build: Callable[[str], None]
) -> ImageInfo:
    repository, content_hash = ref.rsplit(":", 1)
    built = False
    if force or not _exists(client, ref):
        build(ref)
        built = True
    with engine_errors(CODE, f"tagging {ref}"):
        image = client.images.get(ref)
        image.tag(repository, "latest")
    return image_info(ref, content_hash, image, built=built)


def _exists(client: docker.DockerClient, ref: str) -> bool:
    with engine_errors(CODE, f"looking up {ref}"):
        try:
            client.images.get(ref)
        except ImageNotFound:
            return False
    return True


def _service_hash(settings: Settings) -> str:
    missing = [name for name in _PROJECT_FILES if not (PROJECT_ROOT / name).is_file()]
    if missing or not DOCKERFILE.is_file():
        raise BeamError(
            CODE, f"the service image is built from a source checkout; {PROJECT_ROOT} is not one"
        )
    parts = [_recipe_line("service", DEBIAN_PACKAGES, SERVICE_UID)]
    # The sandbox image's inputs travel in this image, so its hash is one of ours.
    parts.append(f"sandbox {plan_image(settings, fetch=True).content_hash}\n".encode())
    files = [PROJECT_ROOT / name for name in _PROJECT_FILES]
    for package in _PROJECT_PACKAGES:
        files += sorted(
            path
            for path in (PROJECT_ROOT / package).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        )
    for path in files:
        relative = path.relative_to(PROJECT_ROOT).as_posix()
        parts.append(f"{relative} {hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return _digest(parts)


def _recipe_line(kind: str, packages: tuple[str, ...], uid: int) -> bytes:
    line = f"{kind} python {PYTHON_VERSION} debian {DEBIAN_SUITE} {' '.join(packages)} uid {uid}\n"
    return line.encode() + b"".join(path.read_bytes() for path in _RECIPE)


def _digest(parts: list[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()[:16]


@contextmanager
def _debian_root(
    settings: Settings, packages: tuple[str, ...], image: str, *, refresh: bool
) -> Iterator[tuple[Path, Path]]:
    """A scratch directory in the image cache (removed after) and, in it, ``root``: the cached
    Debian tree with ``packages``, unpacked for an image to be laid out in."""
    cache = cache_dir(settings.sandbox)
    base = base_tarball(
        cache / "rootfs", settings.sandbox.debian_mirror, packages, refresh=refresh, code=CODE
    )
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"riverbeam-{image}-", dir=cache) as scratch:
        root = Path(scratch) / "root"
        root.mkdir()
        run_step(
            ["tar", "--numeric-owner", "-xpf", str(base), "-C", str(root)], "unpacking", code=CODE
        )
        yield Path(scratch), root


def _build_service(
    client: docker.DockerClient, settings: Settings, ref: str, *, refresh: bool
) -> None:
    wheels = cache_dir(settings.sandbox) / "service-wheels"
    with _debian_root(settings, DEBIAN_PACKAGES, "service", refresh=refresh) as (scratch, root):
        site, app = root / SITE_DIR.lstrip("/"), root / APP_DIR.lstrip("/")
        pip = _image_pip(root, scratch / "pip")
        constraints = ["--constraint", str(PROJECT_ROOT / "constraints.txt")]
        # The pinned set, as wheels made here: nothing is compiled or downloaded in the image.
        wheel = [*pip, "wheel", "--wheel-dir", str(wheels), *constraints, str(PROJECT_ROOT)]
        run_step(wheel, "pip wheel", code=CODE)
        install = [*pip, "install", "--no-index", "--find-links", str(wheels), "--no-compile"]
        install += [*constraints, "--target", str(site), "riverbeam"]
        run_step(install, "pip install", code=CODE)
        _move_project(site, app)
        _carry_sandbox_inputs(root, app, settings)
        limits = settings.sandbox
        finish(
            root, site_packages=DEBIAN_SITE_PACKAGES, uid=limits.uid, checks_uid=limits.checks_uid
        )
        add_account(root, "riverbeam", SERVICE_UID, SERVICE_HOME)
        _finish_service(root, site)
        byte_compile(root, [f"/usr/lib/python{PYTHON_VERSION}", APP_DIR, SITE_DIR], code=CODE)
        changes = [
            f"USER {SERVICE_UID}:{SERVICE_UID}",
            f"WORKDIR {SERVICE_HOME}",
            "ENV PATH=/usr/local/bin:/usr/bin PYTHONUNBUFFERED=1",
            f"ENV RIVERBEAM_CONFIG=/etc/riverbeam/riverbeam.toml SSL_CERT_FILE={CA_BUNDLE}",
            f"CMD {json.dumps(['riverbeam', '--help'])}",
            f"LABEL {CONTENT_LABEL}={ref.rsplit(':', 1)[1]} {METHOD_LABEL}=rootfs",
        ]
        import_tree(client, root, ref, changes, code=CODE)


def _image_pip(root: Path, scratch: Path) -> list[str]:
    """pip (this environment's copy) run by the image's own interpreter, on the host: the
    dependencies' markers (``python_full_version < "3.11.3"``) are then the image's, not
    those of the interpreter running this build."""
    spec = importlib.util.find_spec("pip")
    if spec is None or spec.origin is None:
        raise BeamError(CODE, "pip is not installed in the environment running the build")
    shutil.copytree(Path(spec.origin).parent, scratch / "pip")
    python = root / "usr/bin" / f"python{PYTHON_VERSION}"
    # -s: no user site; PYTHONPATH through env would reach pip's build subprocesses too.
    return [
        "env",
        f"PYTHONPATH={scratch}",
        "PYTHONDONTWRITEBYTECODE=1",
        str(python),
        "-s",
        "-m",
        "pip",
        "--quiet",
        "--disable-pip-version-check",
    ]


def _move_project(site: Path, app: Path) -> None:
    """The project's packages (and its dist-info, for ``--version``) apart from the
    dependencies, where a checkout has them relative to ``docker/sandbox/Dockerfile``."""
    app.mkdir(parents=True, exist_ok=True)
    for entry in [
        *(site / name for name in _PROJECT_PACKAGES),
        *site.glob("riverbeam-*.dist-info"),
    ]:
        shutil.move(entry, app / entry.name)


def _carry_sandbox_inputs(root: Path, app: Path, settings: Settings) -> None:
    plan = plan_image(settings, fetch=True)
    for recipe in (DOCKERFILE, CHECKS_LOCK):
        carried = app / recipe.relative_to(PROJECT_ROOT)
        carried.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(recipe, carried)
    # Root's wheel cache (cache_dir): the worker runs as root.
    wheels = root / "var/cache/riverbeam/wheels"
    wheels.mkdir(parents=True)
    for wheel in (*plan.wheels, *plan.check_wheels):
        shutil.copyfile(wheel.path, wheels / wheel.path.name)


def _finish_service(root: Path, site: Path) -> None:
    launcher = root / "usr/local/bin/riverbeam"
    launcher.parent.mkdir(parents=True, exist_ok=True)
    launcher.write_text(_LAUNCHER)
    launcher.chmod(0o755)
    (root / "usr/bin/python3").symlink_to(f"python{PYTHON_VERSION}")
    # HTTPS upstreams: Python and libgit2 read this bundle (SSL_CERT_FILE).
    bundle = root / CA_BUNDLE.lstrip("/")
    bundle.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(site / "certifi" / "cacert.pem", bundle)
    (root / "etc/riverbeam").mkdir(parents=True, exist_ok=True)
    # The beat volume starts as a copy of this directory, owner included.
    for directory in (SERVICE_HOME, f"{SERVICE_HOME}/beat"):
        path = root / directory.lstrip("/")
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o700)
        shutil.chown(path, SERVICE_UID, SERVICE_UID)


def _build_redis(
    client: docker.DockerClient, settings: Settings, ref: str, *, refresh: bool
) -> None:
    with _debian_root(settings, REDIS_PACKAGES, "redis", refresh=refresh) as (_, root):
        add_account(root, "root", 0, "/root")
        add_account(root, "redis", REDIS_UID, "/data")
        # Only Redis's programs stay: no shell, and none of the Perl adduser pulled in.
        prune(root, keep=REDIS_PROGRAMS)
        for library in root.glob("usr/lib/*/libperl.so*"):
            library.unlink()
        data = root / "data"
        data.mkdir()
        data.chmod(0o700)
        shutil.chown(data, REDIS_UID, REDIS_UID)
        changes = [
            f"USER {REDIS_UID}:{REDIS_UID}",
            "WORKDIR /data",
            "ENV PATH=/usr/bin",
            f"CMD {json.dumps(['redis-server'])}",
            f"LABEL {CONTENT_LABEL}={ref.rsplit(':', 1)[1]} {METHOD_LABEL}=rootfs",
        ]
        import_tree(client, root, ref, changes, code=CODE)
