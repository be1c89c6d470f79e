"""Every Redis key Riverbeam writes, built in one place.

The names are a stored contract: a job parked by an earlier release is found under them, so
a builder here never changes what it returns. docs/storage.md lists them, and
tests/store/test_keys.py checks the table against the builders below.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass


def digest(text: str) -> str:
    """The SHA-256 of ``text``: keys named by a client-chosen or secret value carry this
    instead, so they stay short and whoever reads Redis cannot reuse what they find."""
    return hashlib.sha256(text.encode()).hexdigest()


def every_key(start: str) -> str:
    """A SCAN pattern matching every key that begins with ``start`` (taken literally: a
    prefix may hold glob characters)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", start) + "*"


@dataclass(frozen=True)
class Keys:
    """The keys of one deployment's keyspace: ``<prefix>:<part>:<part>...``."""

    prefix: str = "riverbeam"

    def of(self, *parts: str) -> str:
        """Any key under the prefix; the named builders below are the ones in use."""
        return ":".join((self.prefix, *parts))

    # jobs

    def job(self, job_id: str) -> str:
        return self.of("job", job_id)

    @property
    def jobs(self) -> str:
        return self.of("jobs")

    @property
    def leases(self) -> str:
        return self.of("leases")

    def cancel(self, job_id: str) -> str:
        return self.of("cancel", job_id)

    @property
    def cancel_backfill(self) -> str:
        return self.of("cancel", "backfill")

    def idem(self, idempotency_key: str) -> str:
        return self.of("idem", digest(idempotency_key))

    # forges

    def forge_delivery(self, name: str, delivery_id: str) -> str:
        return self.of("forge", name, "delivery", digest(delivery_id))

    # parked jobs

    def run(self, job_id: str) -> str:
        return self.of("run", job_id)

    def snapshot(self, job_id: str) -> str:
        return self.of("snapshot", job_id)

    # event streams

    def events(self, job_id: str) -> str:
        return self.of("events", job_id)

    # approvals

    def approval(self, job_id: str) -> str:
        return self.of("approval", job_id)

    @property
    def pending(self) -> str:
        return self.of("approvals", "pending")

    @property
    def summaries(self) -> str:
        return self.of("approvals", "summaries")

    @property
    def decided(self) -> str:
        return self.of("approvals", "decided")

    @property
    def decided_backfill(self) -> str:
        return self.of("approvals", "decided", "backfill")

    def history(self, job_id: str) -> str:
        return self.of("approvals", "history", job_id)

    # schedules

    def schedule_lock(self, name: str) -> str:
        return self.of("schedule", name)

    def schedule_runs(self, repo: str) -> str:
        return self.of("schedule-runs", repo)

    def schedule_run(self, repo: str, run_id: str) -> str:
        return self.of("schedule-run", repo, run_id)

    # the outbox

    def outbox(self, entry_id: str) -> str:
        return self.of("outbox", entry_id)

    @property
    def outbox_due(self) -> str:
        return self.of("outbox", "due")

    def outbox_once(self, entry_id: str) -> str:
        return self.of("outbox-once", entry_id)

    def forge_comment(self, slot: str) -> str:
        return self.of("forge-comment", digest(slot))

    # the rest of the deployment

    @property
    def deployment(self) -> str:
        return self.of("deployment")

    def memory(self, scope: str) -> str:
        return self.of("memory", scope)

    def session(self, session_id: str) -> str:
        return self.of("session", digest(session_id))
