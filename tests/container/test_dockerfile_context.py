"""The build context `riverbeam sandbox build` prepares for docker/sandbox/Dockerfile holds
every file the Dockerfile copies (hosts with a registry build from it; this one cannot)."""

from __future__ import annotations

import re
from pathlib import Path

from bot.config import Settings
from sandbox.host.image import imagefs
from sandbox.host.image.build import plan_image
from sandbox.host.image.dockerbuild import _assemble
from sandbox.host.image.recipe import DOCKERFILE


def test_the_context_holds_everything_the_dockerfile_copies(tmp_path: Path) -> None:
    # The wheels are in the host's cache once the image was built (docker/provision does).
    plan = plan_image(Settings(), fetch=False)
    _assemble(tmp_path, plan)

    # The first source of each COPY from the context (flags such as --chmod skipped).
    copied = re.findall(r"^COPY (?!--from)(?:--\S+ )*(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert copied, "the Dockerfile copies nothing?"
    for source in copied:
        assert (tmp_path / source.rstrip("/")).exists(), f"the context lacks {source}"
    assert (tmp_path / "imagefs.py").read_bytes() == Path(imagefs.__file__).read_bytes()
    assert {path.name for path in (tmp_path / "wheels").iterdir()} == {
        wheel.path.name for wheel in plan.wheels
    }
