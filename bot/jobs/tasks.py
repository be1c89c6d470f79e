"""The Celery tasks that run jobs on workers.

Submitting, deciding and cancelling happen wherever the CLI or the API runs, in the job
service (``bot.service.jobs.JobService``), which queues ``run_job`` and ``resume_job``.

On a worker, ``JobWorker`` holds what the tasks of one process share. Every task first
claims its job with a compare-and-set in the store, so a duplicate or redelivered task finds
the job already moved and does nothing; a task redelivered because its worker died finds the
lease run out and takes the job over. Then ``bot.jobs.executor`` runs one segment.

Two chores run on every worker host (the broadcast queue of ``bot.jobs.celery_app``):
removing sandbox containers whose job is not running, and removing expired workspaces. One
sweep runs on any one worker: queueing again the running jobs whose lease ran out; and
another: sending again the resume of a decision no resume claimed in time.

Scheduled summaries (``bot.jobs.schedules``) are two tasks on the default queue: the trigger
beat sends at a repository's cron times, which submits one summarize job per active branch,
and its follow-up, which sends itself again with a growing countdown until the run's jobs
have ended, then posts their summaries. Neither waits on a worker.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from typing import Any

import docker
from celery import Celery, Task
from celery.signals import worker_process_shutdown, worker_shutdown

from bot.config import Settings
from bot.core.errors import BeamError
from bot.forge.clients.choice import client_for
from bot.forge.inbound.deliveries import Deliveries
from bot.forge.inbound.handler import ForgeEventHandler
from bot.jobs.delivery import deliver_due
from bot.jobs.executor import Executor, ImageCheck
from bot.jobs.schedules import SCHEDULE_REQUESTER, ScheduleRuns, SummarySchedule, poll_delay
from bot.jobs.spares import SparePool
from bot.service.access import Principal, TokenRegistry
from bot.service.jobs import JobService
from bot.service.queues import (
    COLLECT_WORKSPACES,
    DEFAULT_QUEUE,
    DELIVER_OUTBOX,
    FINISH_SCHEDULE_RUN,
    HANDLE_FORGE_EVENT,
    REAP_SANDBOXES,
    RECOVER_JOBS,
    RESUME_DECIDED,
    RESUME_JOB,
    RUN_JOB,
    SCHEDULE_SUMMARIES,
    TaskQueues,
    send_deliveries,
    send_resume,
    send_run,
)
from bot.store.models import ForgeThreadRef, JobRecord, JobState
from bot.store.store import JobStore
from sandbox.host.container.reaper import reap
from sandbox.host.engine import connect
from sandbox.host.workspace.retention import collect_workspaces

log = logging.getLogger(__name__)
# A forge event whose store is unreachable is tried again, waiting 1, 2, 4 ... 60 s.
FORGE_EVENT_RETRIES = 20


def send_finish(app: Celery, repo: str, run_id: str, *, poll: int, countdown: float) -> None:
    """Queue the ``poll``-th look at a scheduled run, ``countdown`` seconds from now."""
    app.send_task(
        FINISH_SCHEDULE_RUN,
        args=[repo, run_id],
        kwargs={"poll": poll},
        queue=DEFAULT_QUEUE,
        countdown=countdown,
    )


class JobWorker:
    """What the tasks of one worker process share: its settings, store, engine and name."""

    def __init__(
        self,
        settings: Settings,
        *,
        name: str,
        store: JobStore | None = None,
        docker_client: docker.DockerClient | None = None,
    ) -> None:
        self.settings = settings
        self.name = name
        self.store = store or JobStore.for_settings(settings)
        self._docker = docker_client
        self._images = ImageCheck()
        self._schedule: SummarySchedule | None = None
        self._spares: SparePool | None = None

    @property
    def spares(self) -> SparePool | None:
        """This process's spare containers (``jobs.spare_containers``; None when 0)."""
        count = self.settings.jobs.spare_containers
        if self._spares is None and count > 0:
            self._spares = SparePool(
                self.docker,
                self.settings.workspaces,
                count=count,
                time_limit=self.settings.jobs.time_limit_seconds,
            )
        return self._spares

    def close(self) -> None:
        """The process ends: its spares go with it."""
        if self._spares is not None:
            self._spares.close()

    @property
    def docker(self) -> docker.DockerClient:
        if self._docker is None:
            self._docker = connect()
        return self._docker

    def run_job(self, job_id: str) -> JobRecord | None:
        """The first segment of a queued job; None when the job was not this task's to run
        (already claimed, cancelled, or a duplicate message)."""
        return self._run(self.store.jobs.claim(job_id, worker=self.name, lease_seconds=self._lease))

    def resume_job(self, job_id: str) -> JobRecord | None:
        """Apply the decision on a parked job and run on; None for a duplicate resume. The
        claim marks the decision applied in the same transaction, so two resumes never both
        act on it; a resume whose worker died is taken over once its lease runs out, and
        applies the same decision again (the relay finds a pushed commit already there)."""
        claimed = self.store.jobs.claim_resume(job_id, worker=self.name, lease_seconds=self._lease)
        if claimed is not None:
            return self._run(claimed[0])
        takeover = self.store.jobs.claim(
            job_id, worker=self.name, lease_seconds=self._lease, from_states=(JobState.RUNNING,)
        )
        return self._run(takeover)

    @property
    def _lease(self) -> float:
        return self.settings.jobs.lease_seconds

    def _run(self, claimed: JobRecord | None) -> JobRecord | None:
        if claimed is None:
            log.info("nothing to do for this task: the job already moved on")
            return None
        executor = Executor(
            self.settings,
            self.store,
            worker=self.name,
            docker_client=self.docker,
            images=self._images,
            spares=self.spares,
        )
        try:
            return executor.execute(claimed)
        finally:
            if self._spares is not None:
                # For this process's next job, now that this segment is over.
                self._spares.refill()

    def recover_jobs(self, app: Celery) -> list[str]:
        """Queue again every running job whose lease ran out: its worker died (``kill -9``,
        OOM, a lost host or a lost Redis connection) and the broker would redeliver that
        worker's message only after its visibility timeout. The task that gets it takes the
        job over (``claim`` accepts an expired lease); a job that moved on meanwhile makes it
        a no-op, so a sweep that runs twice costs nothing."""
        queued = []
        for job_id in self.store.leases.expired():
            record = self.store.jobs.find(job_id)
            if record is None:
                self.store.leases.forget(job_id)
                continue
            if record.approval_id is None:
                send_run(app, record)
            else:
                send_resume(app, record)
            log.warning("job %s lost its worker %s: queued again", job_id, record.worker)
            queued.append(job_id)
        return queued

    def resume_decided(self, app: Celery) -> list[str]:
        """Send again the resume of every parked job whose decision is older than
        ``jobs.resume_grace_seconds`` and that no resume claimed: its message was lost (a
        broker that lost its last writes, a purge). Each such job gets one resume per sweep;
        should the first one only have been slow, the second finds the decision applied
        (``claim_resume``) and does nothing."""
        grace = self.settings.jobs.resume_grace_seconds
        queued = []
        for record in self.store.approvals.unapplied_decisions(older_than=grace):
            send_resume(app, record)
            log.warning(
                "job %s: its decision was not applied in %g s: resume sent again", record.id, grace
            )
            queued.append(record.id)
        return queued

    def deliver_outbox(self, app: Celery) -> list[str]:
        """Deliver the outbox's due entries; when one is to be tried again, send this task
        again for the first such time (the beat's sweep every minute is the backstop)."""
        attempts = deliver_due(self.store, self.settings)
        later = [a.retry_after for a in attempts if a.retry_after is not None]
        if later:
            send_deliveries(app, countdown=min(later))
        return [f"{a.entry.id}:{a.outcome}" for a in attempts]

    def reap_sandboxes(self) -> list[str]:
        """Remove this deployment's sandbox containers on this host whose job is not
        running, and any sandbox container past its deadline."""
        return reap(
            self.docker, is_active=self._is_running, deployment=self.store.gateway.deployment()
        )

    def collect_workspaces(self) -> list[str]:
        """Remove this host's workspaces whose job ended (or is unknown) past retention."""
        return collect_workspaces(self.settings.workspaces, self.store.jobs.is_final_or_unknown)

    @property
    def schedule(self) -> SummarySchedule:
        if self._schedule is None:
            self._schedule = SummarySchedule(
                self.settings, self.store, ScheduleRuns(self.store.gateway)
            )
        return self._schedule

    def _service(self, app: Celery) -> JobService:
        return JobService(
            self.settings, self.store, TaskQueues(app), TokenRegistry(self.settings.api.tokens)
        )

    def handle_forge_event(self, event: dict[str, Any], app: Celery) -> dict[str, Any]:
        """Carry out what a forge event asks (``bot.forge.inbound.handler``); the replies it
        queued for the thread are delivered by the outbox task, sent at once."""
        handler = ForgeEventHandler(
            self.settings, self._service(app), Deliveries(self.store.gateway), lookups=client_for
        )
        outcome = handler.handle(event)
        # Its replies, and the status comment of each job it started, go out at once.
        if outcome.replies or any(result.job_id for result in outcome.results):
            send_deliveries(app)
        return outcome.model_dump(mode="json")

    def schedule_summaries(self, repo: str, app: Celery) -> dict[str, Any]:
        """Start a scheduled run of ``repo`` (or skip it) and queue its follow-up."""
        service = self._service(app)
        scheduler = Principal.operator(SCHEDULE_REQUESTER)
        started = self.schedule.trigger(repo, lambda spec: service.submit(scheduler, spec))
        if started.run is not None:
            send_finish(app, repo, started.run, poll=0, countdown=poll_delay(0))
        else:
            log.info("scheduled run of %s skipped: %s", repo, started.skipped)
        return started.model_dump(mode="json")

    def finish_schedule_run(
        self, repo: str, run_id: str, *, poll: int, claimant: str, app: Celery
    ) -> str:
        """One look at a scheduled run: look again later, or finish and post it."""
        again = self.schedule.finish(repo, run_id, claimant=claimant, poll=poll)
        if again is None:
            return "done"
        send_finish(app, repo, run_id, poll=poll + 1, countdown=again)
        return "again"

    def _is_running(self, job_id: str) -> bool:
        record = self.store.jobs.find(job_id)
        return record is not None and record.state is JobState.RUNNING


def _close_at_shutdown(workers: dict[int, JobWorker]) -> None:
    """A pool process that ends (a warm shutdown, a recycled child) removes its spares; one
    killed with SIGKILL leaves them to the reaper and to workspace retention."""

    def close_workers(**_: Any) -> None:
        for worker in workers.values():
            worker.close()

    worker_process_shutdown.connect(close_workers, weak=False)
    worker_shutdown.connect(close_workers, weak=False)


def register(app: Celery, settings: Settings) -> None:
    """Register Riverbeam's tasks on ``app``; each worker process builds its ``JobWorker``
    on first use (after the fork, so no connection is shared between processes). The tasks
    are not ``shared``: a process that builds two apps (a test, a CLI talking to two
    configurations) must not have each app adopt the other's task bodies when finalized."""
    workers: dict[int, JobWorker] = {}
    _close_at_shutdown(workers)

    def worker_for(task: Task[Any, Any]) -> JobWorker:
        pid = os.getpid()
        if pid not in workers:
            workers.clear()
            host = task.request.hostname or socket.gethostname()
            workers[pid] = JobWorker(settings, name=f"{host}:{pid}")
        return workers[pid]

    # A job's segments store no Celery result: the job record says how each ended, and
    # nothing reads the result (a key written and published per segment, for nobody).
    @app.task(name=RUN_JOB, bind=True, shared=False, ignore_result=True)
    def run_job(task: Task[Any, Any], job_id: str) -> str | None:
        return _segment_ended(app, worker_for(task).run_job(job_id))

    @app.task(name=RESUME_JOB, bind=True, shared=False, ignore_result=True)
    def resume_job(task: Task[Any, Any], job_id: str) -> str | None:
        return _segment_ended(app, worker_for(task).resume_job(job_id))

    @app.task(name=DELIVER_OUTBOX, bind=True, shared=False, ignore_result=True)
    def deliver_outbox(task: Task[Any, Any]) -> list[str]:
        return worker_for(task).deliver_outbox(app)

    @app.task(name=REAP_SANDBOXES, bind=True, shared=False)
    def reap_sandboxes(task: Task[Any, Any]) -> list[str]:
        return worker_for(task).reap_sandboxes()

    @app.task(name=RECOVER_JOBS, bind=True, shared=False)
    def recover_jobs(task: Task[Any, Any]) -> list[str]:
        return worker_for(task).recover_jobs(app)

    @app.task(name=RESUME_DECIDED, bind=True, shared=False)
    def resume_decided(task: Task[Any, Any]) -> list[str]:
        return worker_for(task).resume_decided(app)

    @app.task(name=COLLECT_WORKSPACES, bind=True, shared=False)
    def collect(task: Task[Any, Any]) -> list[str]:
        return worker_for(task).collect_workspaces()

    @app.task(name=SCHEDULE_SUMMARIES, bind=True, shared=False)
    def schedule_summaries(task: Task[Any, Any], repo: str) -> dict[str, Any]:
        return worker_for(task).schedule_summaries(repo, app)

    _register_forge_event(app, worker_for)

    @app.task(name=FINISH_SCHEDULE_RUN, bind=True, shared=False)
    def finish_schedule_run(task: Task[Any, Any], repo: str, run_id: str, poll: int = 0) -> str:
        # The task id names the claim on the run's delivery: a redelivered message (same id)
        # takes its own claim again; a duplicate follow-up (another id) leaves it alone.
        claimant = task.request.id or "unknown"
        return worker_for(task).finish_schedule_run(
            repo, run_id, poll=poll, claimant=claimant, app=app
        )


def _register_forge_event(app: Celery, worker_for: Callable[[Task[Any, Any]], JobWorker]) -> None:
    """The task that carries out a forge event; its outcome goes over the delivery's claim
    in Redis (the Celery result is not read). An unreachable store retries it."""

    @app.task(
        name=HANDLE_FORGE_EVENT,
        bind=True,
        shared=False,
        ignore_result=True,
        max_retries=FORGE_EVENT_RETRIES,
    )
    def handle_forge_event(task: Task[Any, Any], event: dict[str, Any]) -> dict[str, Any]:
        try:
            return worker_for(task).handle_forge_event(event, app)
        except BeamError as error:
            if error.code != "BEM-504":
                raise
            # Redis is away: the event waits in the broker's retry, not lost.
            raise task.retry(countdown=min(60, 2**task.request.retries)) from error


def _segment_ended(app: Celery, record: JobRecord | None) -> str | None:
    if record is None:
        return None
    if record.state is JobState.AWAITING_APPROVAL or ForgeThreadRef.of_job(record.spec):
        # The park may have queued its announcement, and a job from a forge its status
        # comment (each in its own transaction): deliver them now.
        send_deliveries(app)
    return record.state.value
