"""The Celery app that carries jobs to workers, and its settings.

Redis is the broker and the result backend (``settings.redis_url``). The settings make a lost
or stopped worker cost a retry, never a job:

- ``task_acks_late`` + ``task_reject_on_worker_lost``: a message is acknowledged when its
  task returns, so a worker killed mid-task (``kill -9``, OOM, host loss) leaves the message
  to be delivered again, and the claim in the job store decides whether the new delivery
  takes over (the old lease ran out) or does nothing (the job moved on).
- ``worker_prefetch_multiplier = 1``: a worker holds one unstarted job at a time, so a
  second idle worker gets the next one instead of it waiting behind a long job.
- ``visibility_timeout`` longer than the hard time limit: Redis redelivers an unacknowledged
  message after that long, which must never happen to a job that is still running.
- soft and hard time limits from ``jobs.soft_time_limit_seconds`` / ``time_limit_seconds``:
  the soft one raises inside the task, which fails the job with BEM-505 and removes its
  container; the hard one kills the process, and the reaper removes what it left.
- JSON only, in and out: no pickle crosses the broker.
- ``broker_transport``: kombu's Redis transport with the fix of ``bot.jobs.broker``, so a
  worker busy with a job reads the hosts broadcast instead of spinning on it.
- priorities: a resume (a person's decision) is served before new jobs (``RUN_PRIORITY``).
- ``beat_schedule``: the per-host chores every five minutes, the recovery sweep every minute
  (``riverbeam.recover_jobs``: a running job whose lease ran out is queued again, so a job
  whose worker died is taken over within about a minute, not after the visibility timeout),
  the resume sweep every minute (``riverbeam.resume_decided``: a decision older than
  ``jobs.resume_grace_seconds`` that no resume claimed gets its resume sent again),
  and for each repository with a ``summary_schedule`` its cron entry (``bot.jobs.schedules``).
  An invalid cron expression is BEM-900 when the app is built, so neither beat nor a worker
  starts on it.

A worker shut down with SIGTERM (warm shutdown) stops taking messages and lets its current
task finish; a task never waits for a person, so that is at most one job segment (up to the
park or the end of the run). A second SIGTERM or SIGQUIT is a cold shutdown: the task dies
unacknowledged, its message is redelivered, and the next worker takes the job over once its
lease runs out. See ``docs/jobs.md``.
"""

from __future__ import annotations

import functools
from typing import Any, Final
from urllib.parse import urlsplit

from celery import Celery
from kombu import Exchange, Queue
from kombu.common import Broadcast

from bot.config import Settings, load_settings
from bot.jobs.schedules import summary_schedules
from bot.jobs.tasks import register
from bot.service.queues import (
    COLLECT_WORKSPACES,
    DEFAULT_QUEUE,
    DELIVER_OUTBOX,
    FORGE_QUEUE,
    HOSTS_EXCHANGE,
    HOSTS_QUEUE,
    REAP_SANDBOXES,
    RECOVER_JOBS,
    RESUME_DECIDED,
    SCHEDULE_SUMMARIES,
    queue_for,
)
from bot.store.models import JobKind

CHORE_INTERVAL_SECONDS: Final = 300.0
# A job whose worker died waits for this sweep (at most this long after its lease ran out),
# not for Redis to redeliver the dead worker's message (the visibility timeout, 30 minutes
# with the default limits).
RECOVER_INTERVAL_SECONDS: Final = 60.0
# Redis redelivers an unacknowledged message after the visibility timeout; a job still inside
# its hard limit must never be handed to a second worker that way.
VISIBILITY_MARGIN_SECONDS: Final = 600
# kombu's Redis transport, reading the hosts broadcast while a job runs (bot.jobs.broker).
BROKER_TRANSPORT: Final = "bot.jobs.broker:Transport"


def broker_tls(redis_url: str) -> dict[str, str] | None:
    """The broker's TLS for a ``rediss://`` URL: verify the server, as the job store's client
    does with the same URL (kombu lets the URL's ``ssl_*`` query override this). kombu turns
    TLS on by the scheme only under its own transport name, not for ``BROKER_TRANSPORT``."""
    return {"ssl_cert_reqs": "required"} if urlsplit(redis_url).scheme == "rediss" else None


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings for ``settings``; see the module docstring for the why of each."""
    jobs = settings.jobs
    # Each queue has its own direct exchange and routing key: bound to a shared one, a
    # message would be copied to every queue.
    names = [queue_for(kind) for kind in JobKind] + [DEFAULT_QUEUE, FORGE_QUEUE]
    queues = [Queue(name, Exchange(name, type="direct"), routing_key=name) for name in names]
    # Redis fanout channels are named after the exchange and the routing key, so sender and
    # workers must use the same key.
    chore = {
        "queue": HOSTS_QUEUE,
        "exchange": HOSTS_QUEUE,
        "exchange_type": "fanout",
        "routing_key": HOSTS_QUEUE,
    }
    return {
        "broker_url": settings.redis_url,
        "broker_transport": BROKER_TRANSPORT,
        "broker_use_ssl": broker_tls(settings.redis_url),
        "result_backend": settings.redis_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "visibility_timeout": jobs.time_limit_seconds + VISIBILITY_MARGIN_SECONDS,
            # Publisher and workers must agree on how fanout channels are named.
            "fanout_prefix": True,
            "fanout_patterns": True,
        },
        "result_expires": 24 * 3600,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "task_soft_time_limit": jobs.soft_time_limit_seconds,
        "task_time_limit": jobs.time_limit_seconds,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_queues": [*queues, Broadcast(HOSTS_QUEUE, routing_key=HOSTS_QUEUE)],
        "task_default_queue": DEFAULT_QUEUE,
        "task_default_exchange": DEFAULT_QUEUE,
        "task_default_routing_key": DEFAULT_QUEUE,
        "task_routes": {REAP_SANDBOXES: chore, COLLECT_WORKSPACES: chore},
        "beat_schedule": _beat_schedule(settings),
        "worker_hijack_root_logger": False,
        "timezone": "UTC",
        "enable_utc": True,
    }


def _beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    chores = {
        name: {
            "task": task,
            "schedule": CHORE_INTERVAL_SECONDS,
            "options": {"declare": [HOSTS_EXCHANGE]},
        }
        for name, task in (
            ("reap-sandboxes", REAP_SANDBOXES),
            ("collect-workspaces", COLLECT_WORKSPACES),
        )
    }
    for name, task in (
        ("recover-jobs", RECOVER_JOBS),
        ("resume-decided", RESUME_DECIDED),
        ("deliver-outbox", DELIVER_OUTBOX),
    ):
        chores[name] = {
            "task": task,
            "schedule": RECOVER_INTERVAL_SECONDS,
            "options": {"queue": DEFAULT_QUEUE},
        }
    summaries = {
        f"summarize-{repo}": {
            "task": SCHEDULE_SUMMARIES,
            "schedule": schedule,
            "args": [repo],
            "options": {"queue": DEFAULT_QUEUE},
        }
        for repo, schedule in summary_schedules(settings).items()
    }
    return {**chores, **summaries}


def create_app(settings: Settings) -> Celery:
    """A Celery app for ``settings``, with Riverbeam's tasks registered."""
    app = Celery("riverbeam", set_as_current=False)
    app.conf.update(celery_config(settings))
    register(app, settings)
    return app


@functools.cache
def default_app() -> Celery:
    """The app for the settings of this process (``riverbeam.toml`` + ``RIVERBEAM_*``)."""
    return create_app(load_settings())


def __getattr__(name: str) -> Celery:
    # ``celery -A bot.jobs.celery_app worker`` looks up ``app`` here; building it on first
    # access lets a process import this module before its configuration is in place.
    if name == "app":
        return default_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
