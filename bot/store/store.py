"""``JobStore``: job records, run state, parked snapshots, event streams, approvals and
schedule locks in Redis, shared by every worker, the API and the CLI.

The store is its parts, each a class of its own module over the one ``RedisGateway`` (the
client, the keys, the outage handling): ``store.jobs`` (records and their moves),
``store.leases``, ``store.listing``, ``store.events``, ``store.approvals``, ``store.blobs``
(run state and snapshots), ``store.locks`` and ``store.outbox``. Every change to a job or an
approval is an optimistic transaction (``RedisGateway.atomic``), so two workers can never
both move a job and a decision applies once. The key layout (``bot.store.keys``) and what
survives a Redis restart are in docs/storage.md.
"""

from __future__ import annotations

from typing import Any, Self

from bot.config import Settings
from bot.store.approvals import Approvals
from bot.store.blobs import ParkedBlobs
from bot.store.events import EventStreams
from bot.store.gateway import RedisGateway
from bot.store.job_records import JobRecords
from bot.store.leases import Leases
from bot.store.listing import JobListing
from bot.store.locks import ScheduleLocks
from bot.store.outgoing import Outbox


class JobStore:
    """The job store: ``JobStore.for_settings(settings)``, ``JobStore.from_url(url)``, or
    ``JobStore(gateway)`` over a gateway of one's own."""

    def __init__(self, gateway: RedisGateway) -> None:
        self.gateway = gateway
        self.jobs = JobRecords(gateway)
        self.leases = Leases(gateway, self.jobs)
        self.listing = JobListing(gateway)
        self.events = EventStreams(gateway)
        self.approvals = Approvals(gateway)
        self.blobs = ParkedBlobs(gateway)
        self.locks = ScheduleLocks(gateway)
        self.outbox = Outbox(gateway)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """A store on a new client for ``url``; ``options`` as ``RedisGateway.from_url``."""
        return cls(RedisGateway.from_url(url, **options))

    @classmethod
    def for_settings(cls, settings: Settings, *, api: bool = False) -> Self:
        """The store the configuration names (see ``RedisGateway.for_settings``)."""
        return cls(RedisGateway.for_settings(settings, api=api))
