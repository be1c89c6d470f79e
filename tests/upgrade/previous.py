"""The release before the restructuring (git tag ``pre-restructure``), run beside the tree
under test: its sources unpacked from git into a temporary directory, run by this
virtualenv's interpreter with that directory first on ``PYTHONPATH``.

It needs no virtualenv of its own: both releases pin the same third-party packages in
``constraints.txt`` (the tree under test only adds tools the old code never imports), and
``PYTHONPATH`` comes before the editable install's finder, so ``bot``, ``sandbox`` and
``skills`` resolve to the old sources. ``unpack`` checks both: every version the old
``constraints.txt`` pins is the one installed here, and Python imports the old sources.
Should a later dependency bump break the first, give the old tree a virtualenv of its own
from its ``constraints.txt`` (``python -m venv`` and ``pip install -c constraints.txt .``
took 65 s here, with pip's cache warm; reusing this one costs nothing).

Its sandbox containers run an image built from its own sources (the image tag is a
content hash of them), under its own name, so it never replaces the image the tree under
test builds.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from harness.stack import IMAGE_VARIABLE, PROJECT_ROOT, clean_environment

TAG = "dad8858d78873468e677c95170b267f2ccdb91be"
"""The release before the restructuring (tagged ``pre-restructure``), by commit: a clone
of main has the commit whether or not it fetched the tag."""
MODEL_FACTORY = "tests.support.playbooks:for_job"
"""The scripted model of the old tree's tests: the same playbooks as ``harness.playbooks``,
under the old path."""
COMMAND_SECONDS = 120.0


@dataclass(frozen=True)
class Previous:
    """The unpacked old release, the image its containers run, and how to run its code."""

    tree: Path
    image: str

    def worker_env(self) -> dict[str, str]:
        """What a worker of the old release runs with, beside the stack's own settings."""
        return {IMAGE_VARIABLE: self.image, "RIVERBEAM_MODEL__FACTORY": MODEL_FACTORY}

    def riverbeam(self, config: Path, *argv: str, codes: tuple[int, ...] = (0,)) -> str:
        """``riverbeam ARGV`` of the old release; its output."""
        return riverbeam(self.tree, config, *argv, env=self.worker_env(), codes=codes)

    def build_image(self, config: Path) -> None:
        """Its sandbox image, by its own ``riverbeam sandbox build`` (a no-op once built:
        the tag is the content hash of its sources)."""
        self.riverbeam(config, "sandbox", "build")


def riverbeam(
    tree: Path,
    config: Path,
    *argv: str,
    env: dict[str, str] | None = None,
    codes: tuple[int, ...] = (0,),
) -> str:
    """``python -m bot.cli ARGV`` of the release in ``tree`` (the one under test:
    ``PROJECT_ROOT``), with ``config``; its standard output."""
    environment = {
        **clean_environment(),
        **(env or {}),
        "RIVERBEAM_CONFIG": str(config),
        "PYTHONPATH": str(tree),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "bot.cli", *argv],
        cwd=tree,
        env=environment,
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
    )
    assert ran.returncode in codes, f"riverbeam {argv} in {tree}: {ran.returncode}\n{ran.stderr}"
    return ran.stdout


def decision_flags(
    tree: Path, config: Path, job_id: str, *, env: dict[str, str] | None = None
) -> list[str]:
    """The flags naming the job's pending approval, as ``approvals show --json`` of the
    release in ``tree`` gives them to a reviewer."""
    shown = json.loads(riverbeam(tree, config, "approvals", "show", job_id, "--json", env=env))
    return [
        *("--approval", shown["id"]),
        *("--commit", shown["commit_sha"]),
        *("--digest", shown["diff_digest"]),
    ]


def unpack(base: Path, image: str) -> Previous:
    """The old release's sources under ``base/previous``, checked to be what Python
    imports there."""
    tree = base / "previous"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "archive", "--format=tar", TAG],
        capture_output=True,
        check=False,
    )
    assert archive.returncode == 0, (
        f"git archive {TAG} failed (a shallow clone lacks it: git fetch --unshallow):\n"
        + archive.stderr.decode()
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as unpacked:
        unpacked.extractall(tree, filter="tar")
    differ = _pins_not_installed(tree / "constraints.txt")
    assert not differ, f"the {TAG} release pins other versions than this venv's: {differ}"
    previous = Previous(tree, image)
    where = _imported_from(previous)
    assert where == str(tree / "bot" / "errors.py"), where
    return previous


def _pins_not_installed(constraints: Path) -> list[str]:
    """Each ``name==version`` of ``constraints`` this environment has at another version
    (or not at all)."""
    differ = []
    for line in constraints.read_text().splitlines():
        name, sep, version = line.partition("#")[0].strip().partition("==")
        if not sep:
            continue
        try:
            installed: str | None = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            differ.append(f"{name}=={version} (installed: {installed or 'none'})")
    return differ


def _imported_from(previous: Previous) -> str:
    ran = subprocess.run(
        [sys.executable, "-c", "import bot.errors; print(bot.errors.__file__)"],
        cwd=previous.tree,
        env={**clean_environment(), "PYTHONPATH": str(previous.tree)},
        capture_output=True,
        text=True,
        check=True,
    )
    return ran.stdout.strip()
