"""Spare sandbox containers, started ahead for the next jobs of a worker process (``SparePool``).

A job's container costs about 0.3 s to create and start, and its tool server more to load its
tools. A spare pays that before a job exists: it is created with exactly a job container's
flags (``sandbox.host.container.hardening.create_arguments``), on the empty ``tree`` and
``outbox.git`` of a directory of its own under the workspace root, and its server loads
everything, then waits for one line, the job's arguments. When a first segment takes it, the
job's workspace is built in that directory and renamed into place (a bind mount follows the
directory, not its path), and ``ContainerSandbox.start`` claims it: the container is renamed
the job's, the arguments sent, the ready line awaited. After that one segment it is removed
as any job container is. Once the segment is over, the worker process starts the next spare
for its next job (``refill``), so that the start competes with no job's own work.

Nothing is shared between jobs: a spare has never seen a job before its own, and never sees
another. A spare still idle after ``SPARE_IDLE_SECONDS`` is replaced by a new one. A spare
that cannot be used (it died, it is of another image or limits, or it is past that idle
limit) is removed and the job starts a fresh container.

Clean-up, where the worker does not get to do it:

- labels: ``riverbeam.role=sandbox``, a deadline, and ``riverbeam.spare=<deployment>``, but no
  job label nor deployment label, so a reaper judges it by its deadline only (a claimed one,
  named ``riverbeam-job-<id>``, also by its job: ``sandbox.host.container.reaper``);
- the deadline is its idle limit plus the job time limit plus a margin: a job that claims
  it in time ends before it;
- its directory (``sandbox.host.workspace.spare_dirs``) carries the deadline in its name:
  workspace retention removes one whose deadline has passed, and a claim renames it away.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import docker

from bot.config import SandboxLimits, WorkspaceSettings
from bot.core.errors import BeamError
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.workspace.overlay import ViewUnavailable, unmount_all, views_available
from sandbox.host.workspace.prepare import TREE
from sandbox.host.workspace.spare_dirs import make_spare_directory

__all__ = ["RECYCLE_THREAD", "SPARE_IDLE_SECONDS", "Spare", "SparePool"]

log = logging.getLogger(__name__)

# A spare unclaimed this long is replaced (and not handed to a job): its deadline leaves a
# whole job time limit after it.
SPARE_IDLE_SECONDS = 300.0
_DEADLINE_MARGIN_SECONDS = 60.0
RECYCLE_THREAD = "spare-recycle"


@dataclass
class Spare:
    """A started spare: its sandbox, the directory it mounts, what it was made for."""

    sandbox: ContainerSandbox
    directory: Path
    image: str
    limits: SandboxLimits
    made: float
    # Replaces the spare at its idle limit; cancelled once the spare leaves the pool, so that
    # no timer thread (holding the spare, its container and its stream) outlives its use.
    recycle: threading.Timer | None = None

    def leave_pool(self) -> None:
        if self.recycle is not None:
            self.recycle.cancel()

    def discard(self) -> None:
        """Remove the container and the directory (which a claim renamed away already)."""
        self.leave_pool()
        self.sandbox.stop()
        unmount_all(self.directory / TREE)
        shutil.rmtree(self.directory, ignore_errors=True)


class SparePool:
    """Up to ``count`` spares of one worker process, started on a background thread."""

    def __init__(
        self,
        client: docker.DockerClient,
        workspaces: WorkspaceSettings,
        *,
        count: int,
        time_limit: float,
    ) -> None:
        self._client = client
        self._workspaces = workspaces
        self._count = count
        self._time_limit = time_limit
        self._lock = threading.Lock()
        self._spares: list[Spare] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self._wanted: tuple[str, SandboxLimits, str | None] | None = None
        # Read when the pool is made: every spare of it has the same idle limit.
        self._idle = SPARE_IDLE_SECONDS

    def take(self, image: str, limits: SandboxLimits, deployment: str | None) -> Spare | None:
        """A spare for a job on ``image`` with ``limits``, or None; when none is ready, one
        under way is waited for (it is further on than a fresh start). One unfit is removed.
        The next spares (``refill``) are made for the same image, limits and deployment."""
        with self._lock:
            self._wanted = (image, limits, deployment)
        spare = self._pop()
        if spare is None:
            self._join()
            spare = self._pop()
        if spare is None:
            return None
        fresh = time.monotonic() - spare.made < self._idle
        if spare.image == image and spare.limits == limits and fresh:
            return spare
        spare.discard()
        return None

    def refill(self) -> None:
        """Start spares up to the count on a background thread (unless one runs), for what
        the last ``take`` asked. Called between segments: a spare's start then competes
        with no job's own work on the worker."""
        with self._lock:
            wanted = self._wanted
            if self._closed or wanted is None or len(self._spares) >= self._count:
                return
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._fill, args=wanted, name="spare-start")
            self._thread.start()

    def close(self) -> None:
        """Remove every spare (the worker process ends); none is started after."""
        with self._lock:
            self._closed = True
        self._join()
        with self._lock:
            spares, self._spares = self._spares, []
        for spare in spares:
            spare.discard()

    def _pop(self) -> Spare | None:
        with self._lock:
            spare = self._spares.pop(0) if self._spares else None
        if spare is not None:
            spare.leave_pool()
        return spare

    def _join(self) -> None:
        thread = self._thread
        if thread is not None:
            thread.join()

    def _fill(self, image: str, limits: SandboxLimits, deployment: str | None) -> None:
        with self._lock:
            missing = self._count - len(self._spares)
        for _ in range(missing):
            with self._lock:
                if self._closed:
                    return
            spare = self._start(image, limits, deployment)
            if spare is None:
                return  # the next refill tries again; the jobs meanwhile start fresh ones
            spare.recycle = threading.Timer(self._idle, self._recycle, args=(spare,))
            spare.recycle.daemon = True
            spare.recycle.name = RECYCLE_THREAD
            with self._lock:
                self._spares.append(spare)
            spare.recycle.start()

    def _recycle(self, spare: Spare) -> None:
        """A spare still idle at its idle limit is replaced, so that the next job's is fresh
        (about one container start per idle worker process per ``SPARE_IDLE_SECONDS``)."""
        with self._lock:
            if spare not in self._spares:
                return  # claimed, or removed with the pool
            self._spares.remove(spare)
        spare.discard()
        self.refill()

    def _start(self, image: str, limits: SandboxLimits, deployment: str | None) -> Spare | None:
        seconds = self._idle + self._time_limit + _DEADLINE_MARGIN_SECONDS
        deadline = (datetime.now(UTC) + timedelta(seconds=seconds)).replace(microsecond=0)
        sandbox = ContainerSandbox(self._client, image)
        try:
            views = views_available(self._workspaces.root, self._workspaces.views)
            token, directory = make_spare_directory(self._workspaces.root, deadline, views=views)
        except (OSError, BeamError, ViewUnavailable) as error:
            log.warning("could not make a spare's directory: %s", error)
            return None
        made = time.monotonic()
        try:
            sandbox.start_spare(
                token, directory, limits, deadline=deadline, deployment=deployment, views=views
            )
        except BeamError as error:
            log.warning("could not start a spare sandbox container: %s", error)
            unmount_all(directory / TREE)
            shutil.rmtree(directory, ignore_errors=True)
            return None
        return Spare(sandbox, directory, image, limits, made)
