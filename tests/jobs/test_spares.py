"""Spare containers in the worker (``jobs.spare_containers``): a first segment claims the spare
its process started ahead, each spare serves one job, and nothing is left behind: not after
a segment, a cancel, the time limit, a spare that died, an image change, a worker's
shutdown, nor a worker killed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from bot.jobs.executor import ImageCheck
from bot.jobs.spares import RECYCLE_THREAD
from bot.service.access import Principal
from bot.store.models import JobKind, JobRecord, JobState
from harness.playbooks import AUTHOR_REQUEST
from harness.stack import REQUESTER, Stack, job_stack, wait_until
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.engine import connect
from sandbox.host.workspace.retention import collect_workspaces
from sandbox.host.workspace.spare_dirs import SPARE_DIRECTORY_PREFIX, spare_deadline

SPARES = {"jobs": {"spare_containers": 1}}


@pytest.fixture
def containers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, bool]]]:
    """Each container start in this process: the job, the container, whether it was a
    claimed spare."""
    started: list[tuple[str, str, bool]] = []
    start = ContainerSandbox.start

    def recorded(self: ContainerSandbox, job_id: str, *args: Any, **kwargs: Any) -> None:
        spare = self.container_id if self.is_spare else None
        start(self, job_id, *args, **kwargs)
        started.append((job_id, str(self.container_id), self.container_id == spare))

    monkeypatch.setattr(ContainerSandbox, "start", recorded)
    yield started


def _author(stack: Stack) -> JobRecord:
    job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
    record = stack.worker("w").run_job(job.id)
    assert record is not None and record.state is JobState.AWAITING_APPROVAL, stack.log_tails()
    assert stack.sandbox_containers(job.id) == [], "a segment leaves no container"
    return record


def _idle_spare(stack: Stack) -> str:
    """The one spare the worker holds, once its start is done."""
    wait_until(
        lambda: len(stack.spare_containers()) == 1,
        30,
        lambda: f"no single spare: {stack.spare_containers()}\n{stack.log_tails()}",
    )
    (spare,) = stack.spare_containers()
    return spare


def _spare_directories(stack: Stack, worker: str = "w") -> list[str]:
    root = stack.worker_settings(worker).workspaces.root
    return sorted(p.name for p in root.iterdir() if p.name.startswith(SPARE_DIRECTORY_PREFIX))


def _recycle_timers() -> int:
    return sum(thread.name == RECYCLE_THREAD for thread in threading.enumerate())


def _exists(container_id: str) -> bool:
    return bool(connect().api.containers(all=True, filters={"id": container_id}))


def _spare_after_a_park(stack: Stack, worker: str) -> str:
    """Starts a Celery worker process ``worker``, parks one author job on it and returns the
    spare it starts after that job's segment."""
    stack.start_worker(worker)
    job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
    stack.wait_for(job.id, JobState.AWAITING_APPROVAL)
    return _idle_spare(stack)


@pytest.mark.slow
def test_each_first_segment_claims_the_spare_started_for_it_and_it_serves_one_job(
    containers: list[tuple[str, str, bool]],
) -> None:
    with job_stack(more_config=SPARES) as stack:
        first = _author(stack)
        # The process's first job had no spare; its start made one for the next job.
        spare = _idle_spare(stack)
        assert len(_spare_directories(stack)) == 1
        second = _author(stack)
        third = _author(stack)
        assert [(job, claimed) for job, _, claimed in containers] == [
            (first.id, False),
            (second.id, True),
            (third.id, True),
        ]
        ids = [container for _, container, _ in containers]
        assert ids[1] == spare and len(set(ids)) == 3, "one container per job, never shared"
        assert not any(_exists(container) for container in ids)
        # The job's commit was made in the spare's container, on the job's own branch.
        assert second.branch == f"riverbeam/{second.id}"
        assert stack.tool_calls(second.id, "git_commit")
        # One idle spare (for the next job) and its directory; the claimed ones are gone.
        assert _idle_spare(stack) not in ids
        assert len(_spare_directories(stack)) == 1
        # Only the idle spare's recycle timer is left: a claimed spare's is cancelled, so no
        # thread holds a used spare (its container and stream) until its idle limit.
        wait_until(lambda: _recycle_timers() == 1, 5, lambda: f"{_recycle_timers()} timers")
        stack.worker("w").close()
        assert _recycle_timers() == 0
        assert stack.spare_containers() == [] and _spare_directories(stack) == []


@pytest.mark.slow
def test_a_spare_that_died_or_is_of_another_image_is_not_used_and_the_job_runs(
    containers: list[tuple[str, str, bool]],
) -> None:
    with job_stack(more_config=SPARES) as stack:
        _author(stack)
        connect().api.kill(_idle_spare(stack))
        died = _author(stack)
        assert containers[-1][0] == died.id and not containers[-1][2]
        # A spare of another image (a deploy changed the code) is removed, not claimed.
        pool = stack.worker("w").spares
        assert pool is not None
        spare = _idle_spare(stack)
        deployment = stack.store.gateway.deployment()
        assert pool.take("another-image", stack.settings.sandbox, deployment) is None
        assert not _exists(spare) and _spare_directories(stack) == []


@pytest.mark.slow
def test_a_spare_of_other_limits_is_replaced() -> None:
    with job_stack(more_config=SPARES) as stack:
        _author(stack)
        pool = stack.worker("w").spares
        assert pool is not None
        image = ImageCheck().current(connect(), stack.settings)
        bigger = stack.settings.sandbox.model_copy(update={"pids_limit": 300})
        deployment = stack.store.gateway.deployment()
        assert pool.take(image, bigger, deployment) is None
        assert stack.spare_containers() == [] and _spare_directories(stack) == []
        pool.take(image, stack.settings.sandbox, deployment)  # none: asks for the next
        pool.refill()
        spare = _idle_spare(stack)
        # One of the same image and limits is handed over (one still starting waited for).
        taken = pool.take(image, stack.settings.sandbox, deployment)
        assert taken is not None and taken.sandbox.container_id == spare
        taken.discard()
        assert not _exists(spare) and _spare_directories(stack) == []


@pytest.mark.slow
def test_an_idle_spare_is_replaced_at_its_idle_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Read when the worker's pool is made, at its first job.
    monkeypatch.setattr("bot.jobs.spares.SPARE_IDLE_SECONDS", 2.0)
    with job_stack(more_config=SPARES) as stack:
        _author(stack)
        first = _idle_spare(stack)
        wait_until(
            lambda: not _exists(first) and len(stack.spare_containers()) == 1,
            30,
            lambda: f"not replaced: {stack.spare_containers()}",
        )
        assert _idle_spare(stack) != first
        assert len(_spare_directories(stack)) == 1


@pytest.mark.slow
def test_a_cancel_of_a_job_on_a_claimed_spare_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    start = ContainerSandbox.start
    with job_stack(more_config=SPARES) as stack:
        _author(stack)
        spare = _idle_spare(stack)
        job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)

        def cancelled_meanwhile(self: ContainerSandbox, job_id: str, *a: Any, **k: Any) -> None:
            stack.service.cancel(Principal.operator(REQUESTER), job_id)
            start(self, job_id, *a, **k)

        monkeypatch.setattr(ContainerSandbox, "start", cancelled_meanwhile)
        ended = stack.worker("w").run_job(job.id)
        assert ended is not None and ended.state is JobState.CANCELLED
        assert not _exists(spare) and stack.sandbox_containers(job.id) == []
        assert stack.upstream_ref(f"riverbeam/{job.id}") is None


@pytest.mark.slow
def test_a_worker_shut_down_removes_its_spares_and_their_directories() -> None:
    with job_stack(more_config=SPARES) as stack:
        _spare_after_a_park(stack, "celery")
        assert len(_spare_directories(stack, "celery")) == 1
        assert stack.stop_worker("celery") == 0
        assert stack.spare_containers() == []
        assert _spare_directories(stack, "celery") == []


@pytest.mark.slow
def test_no_spare_is_started_at_zero(containers: list[tuple[str, str, bool]]) -> None:
    with job_stack(more_config={"jobs": {"spare_containers": 0}}) as stack:
        _author(stack)
        _author(stack)
        assert stack.worker("w").spares is None and stack.spare_containers() == []
        assert [claimed for _, _, claimed in containers] == [False, False]


@pytest.mark.slow
def test_a_job_on_a_claimed_spare_past_its_soft_time_limit_leaves_nothing() -> None:
    limits = {"soft_time_limit_seconds": 2, "time_limit_seconds": 60, "spare_containers": 1}
    with job_stack(more_config={"jobs": limits}) as stack:
        stack.start_worker("a")
        first = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        # Parked, or past the limit too on a busy machine (its container started in line):
        # either way the worker starts a spare after it.
        stack.wait_for(first.id, JobState.AWAITING_APPROVAL, JobState.FAILED)
        spare = _idle_spare(stack)
        # author-slow thinks for 3 s before its second call: past the soft limit.
        slow = stack.submit(JobKind.AUTHOR, "author-slow", request=AUTHOR_REQUEST)
        failed = stack.wait_for(slow.id, JobState.FAILED)
        assert failed.error is not None and failed.error.code == "BEM-505"
        assert stack.tool_calls(slow.id), "the job ran in the spare it claimed"
        assert not _exists(spare) and stack.sandbox_containers(slow.id) == []


@pytest.mark.slow
def test_a_killed_workers_spare_is_reaped_and_its_directory_goes_at_its_deadline() -> None:
    with job_stack(more_config=SPARES) as stack:
        spare = _spare_after_a_park(stack, "a")
        settings = stack.worker_settings("a").workspaces
        (directory,) = _spare_directories(stack, "a")
        deadline = spare_deadline(directory)
        assert deadline is not None
        # While its worker lives, the reaper keeps it (and retention its directory).
        stack.worker("reaper").reap_sandboxes()
        collect_workspaces(settings, lambda _: True)
        assert _exists(spare) and _spare_directories(stack, "a") == [directory]
        # Its worker killed: the reaper on this host removes it, the process being gone;
        # the directory waits for the deadline its name carries.
        stack.kill_worker("a")
        stack.worker("reaper").reap_sandboxes()
        assert not _exists(spare)
        collect_workspaces(settings, lambda _: True)
        assert _spare_directories(stack, "a") == [directory]
        collect_workspaces(settings, lambda _: True, (deadline + timedelta(seconds=1)).timestamp())
        assert _spare_directories(stack, "a") == []
