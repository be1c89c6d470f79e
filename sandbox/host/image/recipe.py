"""What both image builds share: the plan of one image (its wheels, sources and content
hash), the labels it carries and the base it is built on.

The planner (``sandbox.host.image.build``) makes an ``ImagePlan``; the two builders
(``sandbox.host.image.dockerbuild`` and ``sandbox.host.image.rootfs``) turn it into an image. They
import this module, never the planner, so the planner may import them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CHECKS_LOCK",
    "CONTENT_LABEL",
    "DEBIAN_SUITE",
    "DOCKERFILE",
    "METHOD_LABEL",
    "PROJECT_ROOT",
    "PYTHON_RELEASE",
    "PYTHON_VERSION",
    "ImagePlan",
    "Wheel",
]

PYTHON_VERSION = "3.11"
# Debian bookworm's CPython release: what a package's Requires-Python is checked against.
PYTHON_RELEASE = "3.11.2"
DEBIAN_SUITE = "bookworm"
CONTENT_LABEL = "riverbeam.content-hash"
METHOD_LABEL = "riverbeam.build-method"
PROJECT_ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = PROJECT_ROOT / "docker" / "sandbox" / "Dockerfile"
# The docs checks' tools, every distribution pinned (made by docker/pin-checks).
CHECKS_LOCK = PROJECT_ROOT / "docker" / "sandbox" / "checks.txt"


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    path: Path
    sha256: str


@dataclass(frozen=True)
class ImagePlan:
    """Every input of one image, and the tag they hash to."""

    repository: str
    uid: int
    wheels: tuple[Wheel, ...]
    sources: tuple[tuple[str, Path], ...]  # (path inside the app directory, file on the host)
    content_hash: str
    # The docs checks' tools, installed apart from ``wheels`` (docs/checks.md), and the uid
    # they run as.
    check_wheels: tuple[Wheel, ...] = ()
    check_programs: tuple[Path, ...] = ()  # executables for the checks (mdbook), on the host
    checks_uid: int = 10002

    @property
    def ref(self) -> str:
        return f"{self.repository}:{self.content_hash}"

    @property
    def latest(self) -> str:
        return f"{self.repository}:latest"
