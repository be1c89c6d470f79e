"""The project installed the way a deployment installs it, without the dev extras: every
runtime module imports, the Celery app loads its Redis transport, and ``riverbeam`` runs.

The dev tools bring packages the runtime may silently lean on (pytest brings ``packaging``,
which kombu's Redis transport imports); in this environment there are none of them, so a
runtime dependency missing from ``pyproject.toml`` fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
import venv
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]

# Runs in the runtime-only environment: import every module of the three packages, then what
# the workers and the API load by name at run time.
IMPORT_EVERYTHING = """
import importlib, json, pkgutil
imported, failed = [], {}
for top in ("bot", "sandbox", "skills"):
    package = importlib.import_module(top)
    imported.append(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        if info.name.endswith(".__main__"):
            continue  # running it is the CLI, tried below
        try:
            importlib.import_module(info.name)
            imported.append(info.name)
        except Exception as error:
            failed[info.name] = repr(error)

from kombu.transport import redis, resolve_transport
from bot.config import Settings
from bot.jobs.celery_app import create_app

app = create_app(Settings(redis_url="redis://127.0.0.1:1/0"))
transport = app.connection_for_write().transport_cls
resolved = resolve_transport(transport)
import uvicorn.config, uvicorn.lifespan.on, uvicorn.protocols.http.h11_impl
report = {"imported": imported, "failed": failed, "transport": resolved.__module__}
report["redis_based"] = issubclass(resolved, redis.Transport)
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def runtime_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtual environment holding the project and its runtime dependencies only,
    pinned by constraints.txt as deployments install it."""
    home = tmp_path_factory.mktemp("runtime-venv")
    venv.EnvBuilder(with_pip=True).create(home)
    python = home / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    done = subprocess.run(
        [*pip, "--constraint", str(ROOT / "constraints.txt"), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    yield python


def _clean_environment() -> dict[str, str]:
    # Nothing of the test process's environment may point the child at the dev .venv.
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    return {name: value for name, value in os.environ.items() if name not in drop}


def _run(program: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(program), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_clean_environment(),
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_no_dev_tool_is_in_the_runtime_environment(runtime_python: Path, tmp_path: Path) -> None:
    done = _run(runtime_python, "-m", "pip", "list", "--format=json", cwd=tmp_path)
    names = {entry["name"].lower() for entry in json.loads(done.stdout)}
    assert "riverbeam" in names
    assert not names & {"pytest", "mypy", "ruff", "hypothesis", "playwright", "schemathesis"}


@pytest.mark.slow
def test_every_runtime_module_and_the_redis_transport_import_without_dev_extras(
    runtime_python: Path, tmp_path: Path
) -> None:
    # Run from a scratch directory, so the checkout's packages are not on sys.path: the
    # installed copy is what imports.
    done = _run(runtime_python, "-c", IMPORT_EVERYTHING, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["failed"] == {}
    # Ours, kombu's Redis transport underneath (bot.jobs.broker).
    assert report["transport"] == "bot.jobs.broker" and report["redis_based"]
    ours = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for top in ("bot", "sandbox", "skills")
        for path in (ROOT / top).rglob("*.py")
        if path.name != "__main__.py"
    }
    assert ours <= set(report["imported"]), sorted(ours - set(report["imported"]))


@pytest.mark.slow
def test_the_installed_command_runs_without_dev_extras(
    runtime_python: Path, tmp_path: Path
) -> None:
    done = _run(runtime_python.parent / "riverbeam", "--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == version("riverbeam")


def test_constraints_pin_every_runtime_dependency_within_its_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, pinned = line.partition("==")
            pins[_normal(name)] = pinned
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    for text in wanted:
        requirement = Requirement(text)
        name = _normal(requirement.name)
        assert name in pins, f"{requirement.name} is not pinned: run docker/pin-versions"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {requirement.name}=={pins[name]}, outside {text!r}"
        )


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")
