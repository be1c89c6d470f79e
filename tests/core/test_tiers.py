"""The suite's two tiers: a test module that disturbs every other test is marked ``serial``.

``tests/run`` runs the suite in parallel (pytest-xdist), then the ``serial`` tests alone. A
module that restarts the Docker engine, reaps sandbox containers engine-wide (``reap`` with
no ``deployment``: every sandbox container on the engine judged by this test's jobs), or
brings up the compose deployment and its images (``tests/deploy``'s fixtures) would break
the tests running beside it, so it must say ``pytestmark = [..., pytest.mark.serial]``.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# Fixtures of tests/deploy/conftest.py: the compose deployment (pytest-docker's
# ``docker_services``) and the service and Redis images it runs.
DEPLOYMENT_FIXTURES = frozenset({"docker_services", "deployment", "deploy_images"})


def _disturbs(tree: ast.Module) -> list[str]:
    """What in a test module disturbs the tests beside it, as readable reasons."""
    reasons = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "restart_engine":
            reasons.add("restarts the Docker engine")
        elif isinstance(node, ast.Call) and _called(node) == "reap":
            if not any(keyword.arg == "deployment" for keyword in node.keywords):
                reasons.add("reaps sandbox containers engine-wide (reap with no deployment)")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
            DEPLOYMENT_FIXTURES & {argument.arg for argument in node.args.args}
        ):
            reasons.add("brings up the compose deployment or builds its images")
    return sorted(reasons)


def _called(call: ast.Call) -> str:
    function = call.func
    if isinstance(function, ast.Attribute):
        return function.attr
    return function.id if isinstance(function, ast.Name) else ""


def _marked_serial(tree: ast.Module) -> bool:
    """The module's ``pytestmark`` (one mark or a list of them) holds ``pytest.mark.serial``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
        ):
            marks = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            return any(ast.unparse(mark) == "pytest.mark.serial" for mark in marks)
    return False


def unmarked(source: str) -> list[str]:
    """Why a module of ``source`` must be marked serial, when it is not; else []."""
    tree = ast.parse(source)
    return [] if _marked_serial(tree) else _disturbs(tree)


def test_every_module_that_disturbs_the_others_runs_in_the_serial_tier() -> None:
    found = {
        str(path.relative_to(TESTS)): reasons
        for path in sorted(TESTS.rglob("test_*.py"))
        if (reasons := unmarked(path.read_text()))
    }
    assert found == {}


def test_the_serial_tier_holds_the_engine_restart_the_reaper_and_the_deployment() -> None:
    serial = {
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("test_*.py")
        if _marked_serial(ast.parse(path.read_text()))
    }
    assert {
        "faults/test_engine_restart.py",
        "container/test_reaper.py",
        "deploy/test_deployment.py",
        "deploy/test_images.py",
    } <= serial


def test_an_unmarked_engine_restart_reap_or_deployment_is_found() -> None:
    # The check must be able to fail: each facility in a module without the mark.
    restart = (
        "from tests.faults.engine import restart_engine\n\ndef test_x():\n    restart_engine()\n"
    )
    reap = "def test_x(client):\n    reap(client, lambda job: False)\n"
    deployed = "def test_x(deployment):\n    assert deployment\n"
    assert unmarked(restart) == ["restarts the Docker engine"]
    assert unmarked(reap) == ["reaps sandbox containers engine-wide (reap with no deployment)"]
    assert unmarked(deployed) == ["brings up the compose deployment or builds its images"]
    # A reap of one deployment's containers, and the same modules marked, are fine.
    assert unmarked("def test_x(c):\n    reap(c, lambda job: False, deployment='d')\n") == []
    marked = "import pytest\n\npytestmark = [pytest.mark.slow, pytest.mark.serial]\n"
    assert unmarked(marked + restart) == []
    assert unmarked("import pytest\n\npytestmark = pytest.mark.serial\n" + deployed) == []
