"""The names by which the job service and the workers meet on the broker: task names, queues,
priorities, and the sends of the beat's and the host chores.

These are stored contracts: messages already queued by the previous release name these
tasks and queues, so none may change. ``bot.jobs.celery_app`` builds the Celery app around
them; this module imports no task code, so whoever only sends (the job service, through
``TaskQueues``) needs nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from celery import Celery
from kombu import Exchange
from kombu.exceptions import OperationalError

from bot.core.errors import BeamError
from bot.store.models import JobKind, JobRecord

DEFAULT_QUEUE: Final = "default"
FORGE_QUEUE: Final = "forge"
"""Forge events from webhooks: a queue of their own, so a burst of deliveries never waits
behind jobs nor holds them up."""
HOSTS_QUEUE: Final = "riverbeam.hosts"
"""A broadcast queue: every worker gets a copy of what is sent there. The sandbox reaper and
the workspace collector are per-host chores (each host has its own engine and disk)."""

HOSTS_EXCHANGE: Final = Exchange(HOSTS_QUEUE, type="fanout")
"""Declared with every chore sent: Celery declares nothing for a broadcast queue, and Redis
routes to an exchange it was never told is fanout as if it were direct (to nobody)."""

RUN_JOB: Final = "riverbeam.run_job"
RESUME_JOB: Final = "riverbeam.resume_job"
REAP_SANDBOXES: Final = "riverbeam.reap_sandboxes"
COLLECT_WORKSPACES: Final = "riverbeam.collect_workspaces"
SCHEDULE_SUMMARIES: Final = "riverbeam.schedule_summaries"
FINISH_SCHEDULE_RUN: Final = "riverbeam.finish_schedule_run"
RECOVER_JOBS: Final = "riverbeam.recover_jobs"
RESUME_DECIDED: Final = "riverbeam.resume_decided"
HANDLE_FORGE_EVENT: Final = "riverbeam.handle_forge_event"
DELIVER_OUTBOX: Final = "riverbeam.deliver_outbox"

# Redis serves priority 0 first (kombu keeps one list per step: 0, 3, 6, 9). A new job is
# queued at 6 and a decided push (its resume) at 0, so an approved push never waits behind a
# backlog of jobs that have not started: whoever approved it sees it land in seconds.
RUN_PRIORITY: Final = 6
RESUME_PRIORITY: Final = 0


def queue_for(kind: JobKind) -> str:
    """The queue a job of ``kind`` goes to: one per kind, so workers can specialise."""
    return kind.value


def worker_queues() -> list[str]:
    """Every queue a general-purpose worker consumes, the broadcast queue included."""
    return [queue_for(kind) for kind in JobKind] + [DEFAULT_QUEUE, FORGE_QUEUE, HOSTS_QUEUE]


def send_schedule(app: Celery, repo: str) -> None:
    """Trigger a scheduled summary run of ``repo`` now (what beat sends at its cron times)."""
    app.send_task(SCHEDULE_SUMMARIES, args=[repo], queue=DEFAULT_QUEUE)


def send_deliveries(app: Celery, *, countdown: float = 0.0) -> None:
    """Deliver the outbox's due entries, ``countdown`` seconds from now."""
    app.send_task(DELIVER_OUTBOX, queue=DEFAULT_QUEUE, countdown=countdown)


def send_recover(app: Celery) -> None:
    """Sweep for jobs whose worker died now (what beat sends every minute)."""
    app.send_task(RECOVER_JOBS, queue=DEFAULT_QUEUE)


def send_resume_sweep(app: Celery) -> None:
    """Sweep for decisions whose resume message was lost now (what beat sends every minute)."""
    app.send_task(RESUME_DECIDED, queue=DEFAULT_QUEUE)


def send_forge_event(app: Celery, event: dict[str, object]) -> None:
    """Queue a forge event (a ``ForgeEvent`` as JSON) for a worker to act on; BEM-504 when
    the broker cannot take it (the webhook door then forgets the delivery, so the forge's
    redelivery is not taken for a duplicate)."""
    try:
        app.send_task(HANDLE_FORGE_EVENT, args=[event], queue=FORGE_QUEUE)
    except OperationalError as error:
        raise BeamError("BEM-504", f"queueing the forge event failed: {error}") from error


def send_chore(app: Celery, task: str) -> None:
    """Send a per-host chore to every worker (what beat does on its schedule)."""
    app.send_task(task, declare=[HOSTS_EXCHANGE])


def send_run(app: Celery, record: JobRecord) -> None:
    """Queue the first run of a stored job."""
    _send(app, RUN_JOB, record, priority=RUN_PRIORITY)


def send_resume(app: Celery, record: JobRecord) -> None:
    """Queue the resume of a parked job whose decision is stored."""
    _send(app, RESUME_JOB, record, priority=RESUME_PRIORITY)


@dataclass(frozen=True)
class TaskQueues:
    """What the job service sends on: the first run and the resume of a job, on ``app``."""

    app: Celery

    def send_run(self, record: JobRecord) -> None:
        send_run(self.app, record)

    def send_resume(self, record: JobRecord) -> None:
        send_resume(self.app, record)

    def send_forge_event(self, event: dict[str, object]) -> None:
        send_forge_event(self.app, event)


def _send(app: Celery, task: str, record: JobRecord, *, priority: int) -> None:
    try:
        app.send_task(task, args=[record.id], queue=queue_for(record.spec.kind), priority=priority)
    except OperationalError as error:
        # The record is stored: a submit retried with the same Idempotency-Key queues it.
        raise BeamError(
            "BEM-504", f"job {record.id} is stored but queueing it failed: {error}; try again"
        ) from error
