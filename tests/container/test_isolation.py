"""Two jobs, two containers: neither can see the other's workspace."""

from __future__ import annotations

import os
from pathlib import Path

import docker
import pytest

from bot.config import SandboxLimits
from bot.core.errors import BeamError
from harness.workers import own
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.container.probe import inspect_flags, run_probe
from sandbox.host.image.build import ImageInfo
from tests.container.conftest import PROTECTED
from tests.container.kit import deadline, make_workspace, probe_job


def test_a_job_cannot_reach_another_jobs_workspace(
    docker_client: docker.DockerClient, image: ImageInfo, limits: SandboxLimits, tmp_path: Path
) -> None:
    mine = make_workspace(tmp_path / own("job-a"), job_id=own("job-a"))
    theirs = make_workspace(tmp_path / own("job-b"), job_id=own("job-b"))
    (theirs.path / "private.md").write_text("job b's draft\n")
    planted = {"their-tree": str(theirs.path), "their-file": str(theirs.path / "private.md")}
    for name, target in planted.items():
        os.symlink(target, mine.path / name)
        os.lchown(mine.path / name, 10001, 10001)

    with (
        ContainerSandbox(docker_client, image.ref) as a,
        ContainerSandbox(docker_client, image.ref) as b,
    ):
        a.start(own("job-a"), mine.path, PROTECTED, limits, deadline=deadline(), outbox=mine.outbox)
        b.start(own("job-b"), theirs.path, PROTECTED, limits, deadline=deadline())
        for name in planted:
            with pytest.raises(BeamError) as refused:
                a.call("read_file", {"path": name})
            assert refused.value.code == "BEM-303"
        assert "job b's draft" not in str(a.call("list_tree", {}))
        assert b.call("read_file", {"path": "private.md"})  # it is there, for job b
        assert a.container_id is not None and b.container_id is not None
        mounts_a = inspect_flags(docker_client.api.inspect_container(a.container_id))["Mounts"]
        assert sorted(mounts_a) == sorted(
            [(str(mine.path), "/workspace"), (str(mine.outbox), "/outbox")]
        )

    # And from inside job a's container, past the jail: job b's paths do not exist.
    job = probe_job(mine, limits, own("job-a-probe"))
    paths = [str(theirs.path), str(theirs.path / "private.md"), str(tmp_path)]
    report, _ = run_probe(docker_client, image.ref, job, paths=[*paths, "/workspace/their-file"])
    assert not any(report.paths[path] for path in paths)
    assert report.paths["/workspace/their-file"]  # the dangling symlink itself, nothing behind it
