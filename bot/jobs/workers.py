"""Which workers answer on the broker, and which queues each consumes: asked over Celery's
control channel (a broadcast that collects replies for ``timeout`` seconds)."""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery
from kombu import Connection

from bot.service.queues import DEFAULT_QUEUE, FORGE_QUEUE, queue_for
from bot.store.models import JobKind

__all__ = ["active_queues", "job_queues", "queues_served"]


def job_queues(*, forges: bool = False) -> list[str]:
    """The queues jobs and their resumes are sent to, and with ``forges`` (a forge is
    configured) the forge events' queue: each must have a worker."""
    return (
        [queue_for(kind) for kind in JobKind] + [DEFAULT_QUEUE] + ([FORGE_QUEUE] if forges else [])
    )


def active_queues(
    app: Celery,
    timeout: float,
    workers: Sequence[str] | None = None,
    *,
    connection: Connection | None = None,
) -> dict[str, list[str]]:
    """Each worker that answers within ``timeout`` (of ``workers``, or all), and the queues
    it consumes; over ``connection`` when given (one that fails fast), else the app's."""
    if workers is not None and not workers:
        return {}
    destination = list(workers) if workers is not None else None
    inspect = app.control.inspect(destination=destination, timeout=timeout, connection=connection)
    replies = inspect.active_queues() or {}
    return {
        name: [str(queue.get("name")) for queue in queues]
        for name, queues in replies.items()
        if queues is not None
    }


def queues_served(by_worker: dict[str, list[str]], *, forges: bool = False) -> dict[str, list[str]]:
    """Each job queue and the workers (sorted) that consume it; [] for one nobody serves."""
    served: dict[str, list[str]] = {queue: [] for queue in job_queues(forges=forges)}
    for worker, queues in sorted(by_worker.items()):
        for queue in queues:
            if queue in served:
                served[queue].append(worker)
    return served
