"""Spare containers (``bot.jobs.spares``): started ahead with a job container's flags on empty
mounts, claimed by one job whose workspace was built in their directory, and never another's;
and how the reapers (this release's, and the one before spares) judge them."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import docker
import pytest

from bot.config import SandboxLimits
from bot.core.errors import BeamError
from harness.workers import own
from sandbox.host.container.hardening import (
    DEADLINE_LABEL,
    DEPLOYMENT_LABEL,
    JOB_LABEL,
    ROLE_LABEL,
    SPARE_LABEL,
    container_name,
)
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.container.reaper import reap, reap_after_cancel
from sandbox.host.image.build import ImageInfo
from sandbox.host.workspace.spare_dirs import make_spare_directory
from sandbox.inside.protocol import PROTOCOL_VERSION
from tests.container.conftest import PROTECTED, container_exists
from tests.container.kit import claim, claim_spare, deadline, make_workspace
from tests.upgrade.previous import TAG


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A workspace root the sandbox uid can go through."""
    tmp_path.chmod(0o711)
    return tmp_path / "workspaces"


@pytest.fixture
def sandboxes(
    docker_client: docker.DockerClient, image: ImageInfo
) -> Iterator[list[ContainerSandbox]]:
    """Sandboxes made with ``new()``; all stopped at the end."""
    made: list[ContainerSandbox] = []
    yield made
    for sandbox in made:
        sandbox.stop()


def _new(
    client: docker.DockerClient, image: ImageInfo, into: list[ContainerSandbox]
) -> ContainerSandbox:
    sandbox = ContainerSandbox(client, image.ref)
    into.append(sandbox)
    return sandbox


def _spare(
    client: docker.DockerClient,
    image: ImageInfo,
    into: list[ContainerSandbox],
    root: Path,
    limits: SandboxLimits,
    *,
    deployment: str | None = "dep-spares",
    until: datetime | None = None,
) -> tuple[ContainerSandbox, Path]:
    sandbox = _new(client, image, into)
    token, directory = make_spare_directory(root, until or deadline(), views=False)
    sandbox.start_spare(
        token, directory, limits, deadline=until or deadline(), deployment=deployment
    )
    return sandbox, directory


def _idle_and_claimed(
    client: docker.DockerClient,
    image: ImageInfo,
    into: list[ContainerSandbox],
    root: Path,
    limits: SandboxLimits,
    *,
    job_id: str,
) -> tuple[str, ContainerSandbox, ContainerSandbox]:
    """A deployment of its own, an idle spare of it, and a spare of it claimed by ``job_id``."""
    ours = f"dep-{os.urandom(4).hex()}"
    idle, _ = _spare(client, image, into, root, limits, deployment=ours)
    claimed = _new(client, image, into)
    claim_spare(claimed, root, limits, job_id=job_id, deployment=ours)
    return ours, idle, claimed


def test_a_claimed_spare_runs_the_job_on_its_workspace_renamed_into_place(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    sandboxes: list[ContainerSandbox],
    root: Path,
    limits: SandboxLimits,
) -> None:
    sandbox = _new(docker_client, image, sandboxes)
    workspace, first = claim_spare(
        sandbox, root, limits, job_id=own("spare-job-1"), deployment="d1"
    )
    assert not first.exists(), "the spare's directory is the job's now"
    # The bind mounts followed the directories: the container sees the job's tree, and what
    # it writes is in the job's directory on the host.
    listed = sandbox.call("list_tree", {})
    assert isinstance(listed, dict) and "README.md" in listed["files"]
    sandbox.call("write_file", {"path": "new.md", "body": "claimed\n"})
    assert (workspace.path / "new.md").read_text() == "claimed\n"
    committed = sandbox.call("git_status", {})
    assert isinstance(committed, dict)
    inspected = docker_client.api.inspect_container(str(sandbox.container_id))
    assert inspected["Name"] == "/" + container_name(own("spare-job-1"))
    labels = inspected["Config"]["Labels"]
    # No job label and no deployment label: a reaper of the release before spares judges
    # it by its deadline only, never removes it as a container of an unknown job.
    assert JOB_LABEL not in labels and DEPLOYMENT_LABEL not in labels
    assert labels[SPARE_LABEL] == "d1" and labels[ROLE_LABEL] == "sandbox"
    assert datetime.fromisoformat(labels[DEADLINE_LABEL]) > datetime.now(UTC)
    stages = sandbox.startup_stages
    assert list(stages)[-1] == "ready" and "claim" in stages and "loaded" in stages


def test_a_spare_that_died_or_mounts_another_workspace_gives_way_to_a_fresh_container(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    sandboxes: list[ContainerSandbox],
    root: Path,
    limits: SandboxLimits,
    tmp_path: Path,
) -> None:
    # Died: its container is gone; the job's start makes a fresh one on the same workspace.
    dead, directory = _spare(docker_client, image, sandboxes, root, limits)
    spare_id = str(dead.container_id)
    docker_client.api.kill(spare_id)
    claim(dead, directory, limits, job_id=own("spare-died"))
    assert dead.container_id not in (None, spare_id)
    assert not container_exists(docker_client, spare_id)
    assert dead.call("git_status", {})
    assert not dead.is_spare

    # Another workspace: the spare is not handed a tree it does not mount; it is removed.
    other, _ = _spare(docker_client, image, sandboxes, root, limits)
    spare_id = str(other.container_id)
    elsewhere = make_workspace(tmp_path / "elsewhere", job_id=own("spare-other"))
    other.start(
        own("spare-other"),
        elsewhere.path,
        PROTECTED,
        limits,
        deadline=deadline(),
        outbox=elsewhere.outbox,
    )
    assert other.container_id != spare_id and not container_exists(docker_client, spare_id)
    listed = other.call("list_tree", {})
    assert isinstance(listed, dict) and "README.md" in listed["files"]


def test_a_spare_serves_one_job_and_is_gone_with_it(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    sandboxes: list[ContainerSandbox],
    root: Path,
    limits: SandboxLimits,
) -> None:
    sandbox = _new(docker_client, image, sandboxes)
    claim_spare(sandbox, root, limits, job_id=own("spare-once-1"))
    first = str(sandbox.container_id)
    sandbox.stop()
    assert not container_exists(docker_client, first)
    # The same object, asked for a second job, starts a fresh container: no spare is left.
    second = make_workspace(root / own("spare-once-2"), job_id=own("spare-once-2"))
    sandbox.start(
        own("spare-once-2"),
        second.path,
        PROTECTED,
        limits,
        deadline=deadline(),
        outbox=second.outbox,
    )
    assert sandbox.container_id not in (None, first)


def test_a_claim_replaces_what_an_earlier_attempt_left_only_when_asked(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    sandboxes: list[ContainerSandbox],
    root: Path,
    limits: SandboxLimits,
    tmp_path: Path,
) -> None:
    leftover = _new(docker_client, image, sandboxes)
    old = make_workspace(tmp_path / "old", job_id=own("spare-again"))
    leftover.start(own("spare-again"), old.path, PROTECTED, limits, deadline=deadline())
    left_id = str(leftover.container_id)
    # Not asked: the name is taken, the spare is removed and the fresh start conflicts too.
    sandbox = _new(docker_client, image, sandboxes)
    with pytest.raises(BeamError) as conflict:
        claim_spare(sandbox, root / "a", limits, job_id=own("spare-again"))
    assert conflict.value.code == "BEM-402"
    assert container_exists(docker_client, left_id)
    # Asked (the caller holds the job): the leftover goes, the spare takes the name.
    claimed = _new(docker_client, image, sandboxes)
    claim_spare(claimed, root / "b", limits, job_id=own("spare-again"), replace_leftover=True)
    assert not container_exists(docker_client, left_id)
    name = docker_client.api.inspect_container(str(claimed.container_id))["Name"]
    assert name == "/" + container_name(own("spare-again"))


@pytest.mark.parametrize(
    "line",
    [b"not json\n", b'{"root": "/"}\n', b'["--root", 1]\n', b'["--spare"]\n', b"[]", b""],
    ids=["not-json", "object", "not-strings", "spare-again", "no-newline", "eof"],
)
def test_a_spare_takes_one_json_list_of_arguments_and_nothing_else(line: bytes) -> None:
    # The server as a process on the host: the same code as in the image.
    spare = subprocess.Popen(
        [sys.executable, "-m", "sandbox.inside.server", "--spare"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert spare.stdout is not None
    assert json.loads(spare.stdout.readline()) == {"spare": True, "version": PROTOCOL_VERSION}
    out, err = spare.communicate(line, timeout=30)
    assert spare.returncode == 2, err
    assert out == b"", "no ready line, nothing served"


def test_a_spare_given_a_job_serves_it(tmp_path: Path) -> None:
    root = make_workspace(tmp_path, uid=0).path
    spare = subprocess.Popen(
        [sys.executable, "-m", "sandbox.inside.server", "--spare"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert spare.stdout is not None and spare.stdin is not None
    assert json.loads(spare.stdout.readline())["spare"] is True
    spare.stdin.write(json.dumps(["--root", str(root), "--protected", "main"]).encode() + b"\n")
    spare.stdin.flush()
    assert json.loads(spare.stdout.readline())["ready"] is True
    request = {"id": "1", "tool": "git_status", "args": {}}
    spare.stdin.write(json.dumps(request).encode() + b"\n")
    spare.stdin.flush()
    assert json.loads(spare.stdout.readline())["ok"] is True
    _, err = spare.communicate(timeout=30)
    assert spare.returncode == 0, err


# -- the reapers -------------------------------------------------------------------------


def _previous_reaper() -> ModuleType:
    """``reap`` as the release before spares has it (the upgrade tests' release), bound to
    this tree's engine helpers and labels, which are the same."""
    source = subprocess.run(
        ["git", "show", f"{TAG}:sandbox/container/reaper.py"],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    source = source.replace("sandbox.container.engine", "sandbox.host.engine")
    source = source.replace("sandbox.container.hardening", "sandbox.host.container.hardening")
    spec = importlib.util.spec_from_loader("previous_reaper", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, "previous_reaper.py", "exec"), module.__dict__)
    return module


def test_the_reapers_judge_an_idle_spare_by_its_deadline_and_a_claimed_one_by_its_job(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    sandboxes: list[ContainerSandbox],
    root: Path,
    limits: SandboxLimits,
) -> None:
    ours, idle, claimed = _idle_and_claimed(
        docker_client, image, sandboxes, root, limits, job_id=own("spare-reaped")
    )
    overdue, _ = _spare(
        docker_client,
        image,
        sandboxes,
        root,
        limits,
        deployment=ours,
        until=datetime.now(UTC) + timedelta(seconds=3),
    )
    ids = {
        name: str(sandbox.container_id)
        for name, sandbox in {"idle": idle, "overdue": overdue, "claimed": claimed}.items()
    }

    def alive() -> set[str]:
        return {name for name, cid in ids.items() if container_exists(docker_client, cid)}

    # The release before spares, during a rolling upgrade, with our deployment: its store
    # does not know the claimed spare's job, yet it leaves every spare to its deadline.
    previous = _previous_reaper()
    previous.reap(docker_client, lambda job: not job.startswith("spare-"), deployment=ours)
    assert alive() == {"idle", "claimed", "overdue"}

    # This release: the claimed spare's job runs, so it stays; an idle one is no job's, and
    # is judged by its deadline only, which the one spare has passed a little later.
    def running(job: str) -> bool:
        return job == own("spare-reaped") or not job.startswith("spare-")

    reap(docker_client, running, deployment=ours)
    assert alive() == {"idle", "claimed", "overdue"}
    later = datetime.now(UTC) + timedelta(seconds=5)
    reap(docker_client, running, later, deployment=ours)
    assert alive() == {"idle", "claimed"}
    # The claimed spare's job ended: it goes as any job container; the idle one stays.
    reap(docker_client, lambda job: not job.startswith("spare-"), deployment=ours)
    assert alive() == {"idle"}


def test_a_cancel_reaps_the_claimed_spare_of_its_job_and_no_idle_one(
    docker_client: docker.DockerClient,
    image: ImageInfo,
    sandboxes: list[ContainerSandbox],
    root: Path,
    limits: SandboxLimits,
) -> None:
    ours, idle, claimed = _idle_and_claimed(
        docker_client, image, sandboxes, root, limits, job_id=own("spare-cancelled")
    )
    claimed_id, idle_id = str(claimed.container_id), str(idle.container_id)
    reap_after_cancel(lambda: ours, docker_client=docker_client)(own("spare-cancelled"))
    assert not container_exists(docker_client, claimed_id)
    assert container_exists(docker_client, idle_id)
