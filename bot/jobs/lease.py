"""Keeping a running job's lease, and noticing when the job must stop.

A running job belongs to the worker whose lease is current; a redelivered task takes the
job over only once the lease has run out. ``LeaseKeeper`` renews it from a thread, so a long
model call or a slow tool does not let it lapse while the worker is alive; only a dead
worker's lease runs out. ``StopCheck`` is what the run's hooks ask between tool calls and
before each model call: the job was cancelled (BEM-506), or another worker holds it now
(BEM-507), and this worker must stop touching it. A cancel is read from the job's cancel flag
(one EXISTS); one an earlier release asked for, which set no flag, is read from the record
by the next lease renewal.
"""

from __future__ import annotations

import logging
import threading

from bot.core.errors import BeamError
from bot.store.store import JobStore

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews ``job_id``'s lease every third of its length until ``stop``."""

    def __init__(self, store: JobStore, job_id: str, *, worker: str, seconds: float) -> None:
        self._store = store
        self._job_id = job_id
        self._worker = worker
        self._seconds = seconds
        self._stopping = threading.Event()
        self._lost = threading.Event()
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{job_id}", daemon=True)

    @property
    def lost(self) -> bool:
        """True once a renewal found that another worker holds the job."""
        return self._lost.is_set()

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join()

    @property
    def cancelled(self) -> bool:
        """True once a renewal read a cancel request in the job's record: how a cancel that
        an earlier release asked for, which set no cancel flag, stops the job."""
        return self._cancelled.is_set()

    def _renew(self) -> None:
        while not self._stopping.wait(self._seconds / 3):
            if not self.renew():
                return

    def renew(self) -> bool:
        """Renew the lease once (the thread does, every third of its length); False once
        another worker holds the job."""
        try:
            record = self._store.leases.renew_record(
                self._job_id, worker=self._worker, lease_seconds=self._seconds
            )
        except BeamError as error:
            # Redis away for a moment: the lease is long enough for the next attempt.
            log.warning("renewing the lease of job %s failed: %s", self._job_id, error)
            return True
        if record is None:
            self._lost.set()
            return False
        if record.cancel_requested:
            self._cancelled.set()
        return True


class StopCheck:
    """Raises the reason a running job must stop, if there is one; remembers it."""

    def __init__(self, store: JobStore, job_id: str, lease: LeaseKeeper) -> None:
        self._store = store
        self._job_id = job_id
        self._lease = lease
        self.reason: BeamError | None = None

    def check(self) -> None:
        """Ask the store (one EXISTS of the cancel flag, no document read): cancelled, or
        taken over."""
        if self.reason is None:
            if self._lease.lost:
                self.reason = BeamError(
                    "BEM-507",
                    f"job {self._job_id} was taken over by another worker; this one stopped",
                )
            elif self._lease.cancelled or self._store.jobs.cancel_requested(self._job_id):
                self.reason = BeamError("BEM-506", f"job {self._job_id} was cancelled")
        self.raise_if_stopped()

    def raise_if_stopped(self) -> None:
        """Raise the reason found earlier, without asking the store again."""
        if self.reason is not None:
            raise self.reason
