"""``JobStore``: job records, run state, parked snapshots, event streams, approvals and
schedule locks in Redis, shared by every worker, the API and the CLI.

One class per stored concept, each in its own module over the shared ``RedisGateway``;
``JobStore`` is all of them on one client. Every change to a job or an approval is an
optimistic transaction (``RedisGateway.atomic``), so two workers can never both move a job
and a decision applies once. The key layout (``bot.store.keys``) and what survives a Redis
restart are in docs/storage.md.
"""

from __future__ import annotations

import functools

from bot.store.approvals import Approvals
from bot.store.blobs import ParkedBlobs
from bot.store.events import EventStreams
from bot.store.leases import Leases
from bot.store.listing import JobListing
from bot.store.locks import ScheduleLocks
from bot.store.outgoing import Outbox


class JobStore(Leases, JobListing, EventStreams, Approvals, ParkedBlobs, ScheduleLocks):
    """The job store: ``JobStore.for_settings(settings)``, or ``JobStore.from_url(url)``."""

    @functools.cached_property
    def outbox(self) -> Outbox:
        """The calls to make outside, on this store's client."""
        return Outbox(self)
