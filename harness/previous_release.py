"""Another commit's code run beside the tree under test: its sources unpacked from git
(``git archive``) into a directory, run by this virtualenv's interpreter with that directory
first on ``PYTHONPATH``. The upgrade test runs the release before the restructuring this way
(``tests/upgrade/previous.py``), the job benchmarks the code before issue 18
(``bench/_previous_tree.py``).

It needs no virtualenv of its own while both trees pin the same third-party packages in
``constraints.txt`` (the tree under test only adds tools the old code never imports), and
``PYTHONPATH`` comes before the editable install's finder, so ``bot``, ``sandbox`` and
``skills`` (and the old tree's ``tests``, ``harness`` and ``bench``) resolve to the old
sources. ``unpack`` checks both: every version the old ``constraints.txt`` pins is the one
installed here, and Python imports the old sources, its model factory included. Should a
later dependency bump break the first, give the old tree a virtualenv of its own from its
``constraints.txt`` (``python -m venv`` and ``pip install -c constraints.txt .`` took 65 s
here, with pip's cache warm; reusing this one costs nothing).

Its sandbox containers run an image built by its own ``riverbeam sandbox build`` from its
own sources (the image tag is a content hash of them, so a rerun reuses it), under its own
name, so it never replaces the image the tree under test builds. Its schema may reject keys
of a later configuration: ``accepted_config`` writes a copy of a config file without them.
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

COMMAND_SECONDS = 120.0

# Run in the old tree: the dotted keys of a config file its ``Settings`` does not know
# (``extra_forbidden``); any other complaint fails, naming it.
_UNKNOWN_KEYS = """
import json, sys, tomllib
from pydantic import ValidationError
from bot.config import Settings

try:
    Settings(**tomllib.loads(open(sys.argv[1]).read()))
    errors = []
except ValidationError as error:
    errors = error.errors()
others = [e for e in errors if e["type"] != "extra_forbidden"]
if others:
    sys.exit(f"the old code refuses the config: {others}")
print(json.dumps([".".join(map(str, e["loc"])) for e in errors]))
"""


@dataclass(frozen=True)
class PreviousRelease:
    """The unpacked old code, the image its containers run, and how to run it."""

    commit: str
    tree: Path
    image: str
    model_factory: str
    """The ``model.factory`` its workers load (a module of the old tree)."""

    def worker_env(self) -> dict[str, str]:
        """What a worker of the old code runs with, beside the stack's own settings."""
        return {IMAGE_VARIABLE: self.image, "RIVERBEAM_MODEL__FACTORY": self.model_factory}

    def riverbeam(self, config: Path, *argv: str, codes: tuple[int, ...] = (0,)) -> str:
        """``riverbeam ARGV`` of the old code; its output."""
        return riverbeam(self.tree, config, *argv, env=self.worker_env(), codes=codes)

    def build_image(self, config: Path) -> None:
        """Its sandbox image, by its own ``riverbeam sandbox build`` (a no-op once built:
        the tag is the content hash of its sources)."""
        self.riverbeam(config, "sandbox", "build")

    def accepted_config(self, config: Path, into: Path) -> list[str]:
        """Write to ``into`` the config file ``config`` less the keys the old code's schema
        does not know (it refuses them); returns those keys, dotted (``jobs.spare_containers``,
        or a whole table: ``mcp``)."""
        unknown = self._unknown_keys(config)
        into.write_text(_without(config.read_text(), unknown))
        left = self._unknown_keys(into)
        assert not left, f"{into}: the old code still refuses {left}"
        return unknown

    def _unknown_keys(self, config: Path) -> list[str]:
        ran = subprocess.run(
            [sys.executable, "-c", _UNKNOWN_KEYS, str(config)],
            cwd=self.tree,
            env={**clean_environment(), "PYTHONPATH": str(self.tree)},
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
        )
        assert ran.returncode == 0, f"{config} in {self.tree}:\n{ran.stderr}"
        found: list[str] = json.loads(ran.stdout)
        return found


def _without(text: str, keys: list[str]) -> str:
    """The TOML ``text`` (one ``key = value`` a line under ``[table]`` headers, as the
    harness writes it) without the dotted ``keys``: a key's line, or a whole table."""
    kept, table = [], ""
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            table = dotted = stripped.strip("[]").strip()
        else:
            name = stripped.partition("=")[0].strip()
            dotted = f"{table}.{name}" if table else name
        if not any(dotted == key or dotted.startswith(f"{key}.") for key in keys):
            kept.append(line)
    return "".join(kept)


def riverbeam(
    tree: Path,
    config: Path,
    *argv: str,
    env: dict[str, str] | None = None,
    codes: tuple[int, ...] = (0,),
) -> str:
    """``python -m bot.cli ARGV`` of the code in ``tree`` (the tree under test:
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


def unpack(commit: str, tree: Path, image: str, *, model_factory: str) -> PreviousRelease:
    """The sources of ``commit`` in the new directory ``tree``, checked to be what Python
    imports there (``bot`` and the module of ``model_factory``), with this environment's
    packages; its containers to run ``image``."""
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "archive", "--format=tar", commit],
        capture_output=True,
        check=False,
    )
    assert archive.returncode == 0, (
        f"git archive {commit} failed (a shallow clone lacks it: git fetch --unshallow):\n"
        + archive.stderr.decode()
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as unpacked:
        unpacked.extractall(tree, filter="tar")
    differ = _pins_not_installed(tree / "constraints.txt")
    assert not differ, f"commit {commit} pins other versions than this venv's: {differ}"
    modules = ("bot", model_factory.partition(":")[0])
    where = _imported_from(tree, modules)
    outside = [path for path in where if not Path(path).is_relative_to(tree)]
    assert not outside, f"Python imports {modules} of {commit} from {where}, not from {tree}"
    return PreviousRelease(commit, tree, image, model_factory)


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


def _imported_from(tree: Path, modules: tuple[str, ...]) -> list[str]:
    """The file each of ``modules`` loads from, run in ``tree`` as its workers run."""
    ran = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util, sys\n"
            "for name in sys.argv[1:]: print(importlib.util.find_spec(name).origin)",
            *modules,
        ],
        cwd=tree,
        env={**clean_environment(), "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    )
    return ran.stdout.splitlines()
