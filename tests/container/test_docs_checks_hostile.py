"""Hostile site builds: a ``conf.py`` and a MkDocs hook run the repository's code in the job's
container, as the checks' uid. Each tries to change the working tree, the index, the refs and
the tool server, to fork without end and to write a gigabyte; none of it reaches the job
(docs/checks.md, "What runs where")."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import docker
import pytest

from bot.config import RepositoryChecks, SandboxLimits
from bot.core.errors import BeamError
from harness.workers import own
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.image.build import ImageInfo
from tests.container.checks_kit import base_workspace, started_checks, write_files

# Every write a hostile build would make, each tried on its own.
ATTACKS = """
import os, signal
def attempt(action):
    try:
        action()
    except Exception:
        pass
attempt(lambda: open("/workspace/docs/index.md", "w").write("defaced"))
attempt(lambda: open("/workspace/.git/index", "wb").write(b"broken"))
attempt(lambda: open("/workspace/.git/refs/heads/main", "w").write("0" * 40))
attempt(lambda: open("/workspace/.git/config", "a").write("[core]\\n\\tfsmonitor = x\\n"))
attempt(lambda: open("/outbox/HEAD", "w").write("ref: refs/heads/evil\\n"))
attempt(lambda: open("/tmp/.gitconfig", "w").write("[core]\\n\\thooksPath = /tmp\\n"))
attempt(lambda: open("README.md", "w").write("defaced snapshot"))
attempt(lambda: os.kill(1, signal.SIGKILL))
attempt(lambda: os.kill(-1, signal.SIGKILL))
"""
FORK_BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
FLOOD = """
import sys
block = "x" * (1 << 20) + "\\n"
for _ in range(1024):
    sys.stdout.write(block)
with open("/checks/work/flood", "w") as flood:
    for _ in range(1024):
        flood.write(block)
"""
SECONDS = 20
"""Each check's wall time: room for a build to reach its code and finish, under load."""
BOMB_SECONDS = 6
"""The fork bomb never ends: its check always runs this long before the runner kills it.
The build reaches its code within a second here (the other cases' whole run, container
start included, takes 1.5-2.5 s), so the bomb still forks for most of it."""


def _sphinx(code: str) -> tuple[dict[str, str], RepositoryChecks]:
    files = {"manual/conf.py": code, "manual/index.rst": "Index\n=====\n"}
    return files, RepositoryChecks(
        run=("sphinx",), sphinx_source="manual", timeout_seconds=_seconds(code)
    )


def _mkdocs(code: str) -> tuple[dict[str, str], RepositoryChecks]:
    files = {
        "mkdocs.yml": "site_name: S\nhooks:\n  - hooks.py\n",
        "hooks.py": code,
        "docs/index.md": "# Index\n",
    }
    return files, RepositoryChecks(run=("mkdocs",), timeout_seconds=_seconds(code))


def _seconds(code: str) -> int:
    return BOMB_SECONDS if code is FORK_BOMB else SECONDS


def _state(workspace: Path, outbox: Path) -> dict[str, str]:
    """Every file of the tree, its .git and the outbox, by content."""
    found = {}
    for base in (workspace, outbox):
        for top, _, names in os.walk(base):
            for name in names:
                path = Path(top, name)
                if not path.is_symlink():
                    found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _in_container(client: docker.DockerClient, container: str, code: str, uid: int) -> str:
    run = client.api.exec_create(container, ["/usr/bin/python3", "-c", code], user=f"{uid}")
    return client.api.exec_start(run["Id"]).decode().strip()


@pytest.mark.parametrize("make", [_sphinx, _mkdocs], ids=["conf.py", "mkdocs-hook"])
@pytest.mark.parametrize("code", [ATTACKS, FORK_BOMB, FLOOD], ids=["writes", "fork-bomb", "1gb"])
def test_a_hostile_build_changes_nothing_of_the_job(
    tmp_path: Path,
    docker_client: docker.DockerClient,
    image: ImageInfo,
    limits: SandboxLimits,
    make: object,
    code: str,
) -> None:
    files, checks = make(code)  # type: ignore[operator]
    workspace, base = base_workspace(
        tmp_path / own("hostile"), {"README.md": "# R\n"}, own("hostile")
    )
    with ContainerSandbox(docker_client, image.ref) as sandbox:
        docs_checks = started_checks(sandbox, workspace, base, limits, checks, own("hostile"))
        write_files(workspace, files)
        sandbox.call("git_status", {})  # the tool server has opened (and guarded) the repo
        before = _state(workspace.path, workspace.outbox)
        try:
            clean: bool | None = docs_checks.run().clean
        except BeamError as error:
            # A check may kill its own runner (the same uid): the run says nothing, so it is
            # no pass.
            assert error.code == "BEM-412"
            clean = None
        after = _state(workspace.path, workspace.outbox)
        # The tool server is alive and answers, and the tree is as the tools left it.
        status = sandbox.call("git_status", {})
        container = sandbox.container_id
        assert container is not None
        planted = _in_container(
            docker_client,
            container,
            "import os; print(os.path.exists('/tmp/.gitconfig'))",
            limits.uid,
        )
        left = _in_container(
            docker_client,
            container,
            "import os\n"
            "def live(pid):\n"
            "    status = open(f'/proc/{pid}/status').read()\n"
            f"    return 'Uid:\\t{limits.checks_uid}' in status and 'State:\\tZ' not in status\n"
            "print(sum(1 for p in os.listdir('/proc') if p.isdigit() and live(p)))",
            limits.uid,
        )
    # The export wrote the change's tree into the object database, as the tools' uid: the
    # only difference.
    added = {path for path in after.keys() - before.keys() if "/.git/objects/" in path}
    assert {path: after[path] for path in after.keys() - added} == before
    assert all(os.stat(path).st_uid == limits.uid for path in added)
    assert isinstance(status, dict)
    assert planted == "False"
    assert left == "0", "a check's process outlived its run"
    if code is not ATTACKS:
        assert not clean  # cut short: never green
