"""A job's container running into its limits: memory, processes, time. Each ends in a
clear state with nothing left running.

- **memory**: the model reads a file twice the container's memory limit; the kernel
  kills the tool server, the call fails with BEM-405 (which the model reads), the container
  is gone, and the job ends with the model's answer;
- **processes**: something in a job's container forks without end (here a fork bomb in
  place of the tool server, with every other flag of a job's container); it gets no more
  than ``pids_limit`` processes, and cancelling the job removes it;
- **time**: a segment that runs past ``jobs.soft_time_limit_seconds`` fails with BEM-505
  and its container is removed.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from bot.core.frames import ToolFrame
from bot.store.models import JobKind, JobState
from harness.gitkit import git
from harness.playbooks import AUTHOR_REQUEST, HUGE_FILE
from harness.stack import Stack, job_stack, wait_until
from sandbox.host.container.hardening import SandboxJob, create_arguments
from sandbox.host.engine import connect
from sandbox.host.image.build import check_image
from tests.faults.invariants import check_invariants

pytestmark = pytest.mark.slow

MEMORY_LIMIT = "64m"
HUGE_BYTES = 128 << 20
"""Twice the memory limit: a whole read cannot fit. Each MiB more cost the test about 65 ms
(the branch's checkout and the read), and at 320 MiB it took 32 s."""
PIDS_LIMIT = 16
SOFT_LIMIT_SECONDS = 2  # author-slow thinks for 3 s before its second call


def _tool_error(stack: Stack, job_id: str, name: str) -> str | None:
    for event in stack.store.events.read(job_id, count=10_000):
        frame = event.frame
        if isinstance(frame, ToolFrame) and frame.record.name == name and frame.record.error:
            return frame.record.error.code
    return None


def _push_huge_branch(stack: Stack, branch: str) -> None:
    """``branch`` upstream: main plus a file of zeros, sparse here and tiny once packed."""
    work = stack.base / "huge-work"
    git("clone", "-q", "--branch", "main", str(stack.upstream), str(work))
    with (work / HUGE_FILE).open("wb") as huge:
        huge.truncate(HUGE_BYTES)
    git("-C", str(work), "add", HUGE_FILE)
    git(
        "-C",
        str(work),
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.com",
        "commit",
        "-qm",
        "huge",
    )
    git("-C", str(work), "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
    shutil.rmtree(work)


def test_a_read_past_the_memory_limit_kills_the_container_not_the_job() -> None:
    sandbox = {"mem_limit": MEMORY_LIMIT, "max_read_bytes": 2 * HUGE_BYTES}
    with job_stack(more_config={"sandbox": sandbox}) as stack:
        _push_huge_branch(stack, "huge")
        stack.start_worker("a")
        job = stack.submit(JobKind.AUTHOR, "author-read-huge", request=AUTHOR_REQUEST, base="huge")

        records = check_invariants(stack, [job.id])

        assert _tool_error(stack, job.id, "read_file") == "BEM-405"
        done = records[job.id]
        # The job ends cleanly; it fails because the model answered right after the failed
        # read, without trying again (fail closed, BEM-520).
        assert done.state is JobState.FAILED and done.result is not None
        assert done.error is not None and done.error.code == "BEM-520"
        assert "after read_file failed (BEM-405" in done.error.message
        assert done.result.text.startswith("The read failed: ")
        assert "BEM-405" in done.result.text and MEMORY_LIMIT in done.result.text


@pytest.fixture
def stack() -> Iterator[Stack]:
    with job_stack() as running:
        yield running


def test_a_fork_bomb_gets_no_more_than_the_pids_limit_and_goes_with_its_job(
    stack: Stack,
) -> None:
    job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)  # no worker
    limits = stack.settings.sandbox.model_copy(update={"pids_limit": PIDS_LIMIT})
    client = connect()
    image = check_image(client, stack.settings).ref
    workspace = stack.base / "bomb"
    workspace.mkdir()
    os.chown(workspace, limits.uid, limits.uid)
    bomb = (
        "import json, os, time\n"
        "made = 0\n"
        "while made < 1000:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(3600)\n"
        "    except OSError as error:\n"
        "        print(json.dumps({'forked': made, 'errno': error.errno}), flush=True)\n"
        "        break\n"
        "    made += 1\n"
        "time.sleep(3600)\n"
    )
    spec = SandboxJob(
        job_id=job.id,
        workspace=workspace,
        deadline=datetime.now(UTC) + timedelta(hours=1),
        limits=limits,
        protected_refs=("main",),
        # Labelled as the stack's own, as a worker of it labels its containers: the reaper
        # judges another deployment's containers by their deadline only.
        deployment=stack.store.gateway.deployment(),
    )
    arguments = create_arguments(client.api, image, spec, entrypoint=["python3", "-c", bomb])
    container = client.api.create_container(**arguments)["Id"]
    client.api.start(container)
    report: dict[str, int] = {}

    def reported() -> bool:
        lines = client.api.logs(container, stdout=True, stderr=False).decode().splitlines()
        report.update(json.loads(lines[-1]) if lines else {})
        return bool(report)

    wait_until(reported, 30, lambda: client.api.logs(container).decode())
    assert 0 < report["forked"] < PIDS_LIMIT
    assert report["errno"] == 11  # EAGAIN: the cgroup refused the next process
    assert stack.sandbox_containers(job.id) == [container]

    cancelled = stack.cancel(job.id)

    assert cancelled.state is JobState.CANCELLED
    check_invariants(stack, [job.id])


def test_a_segment_past_its_soft_time_limit_fails_with_bem_505() -> None:
    jobs = {"soft_time_limit_seconds": SOFT_LIMIT_SECONDS, "time_limit_seconds": 60}
    with job_stack(more_config={"jobs": jobs}) as stack:
        stack.start_worker("a")
        job = stack.submit(JobKind.AUTHOR, "author-slow", request=AUTHOR_REQUEST)

        records = check_invariants(stack, [job.id])

        failed = records[job.id]
        assert failed.state is JobState.FAILED and failed.error is not None
        assert failed.error.code == "BEM-505"
        assert f"{SOFT_LIMIT_SECONDS} s" in failed.error.message
