"""``ContainerStart``: how a job segment's container is started, as one named value.

The segment builds it once its workspace is known and hands it to ``DeferredSandbox``
(``sandbox.host.container.deferred``), which runs it once: on a background thread when the
segment knows a tool call is coming, else at the first tool call. It is frozen: what the
container starts with is fixed when the workspace is, whichever thread runs the start and
whenever. The deadline alone is taken when the start runs, so a start that waited still
gets the whole ``jobs.time_limit_seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.config import SandboxLimits
from bot.core.identity import Identity, Trailer
from bot.jobs.plans import Baseline
from sandbox.host.container.lifecycle import ContainerSandbox

__all__ = ["ContainerStart"]


@dataclass(frozen=True)
class ContainerStart:
    """Start job ``job_id``'s container on ``tree`` (``ContainerStart(...)(sandbox)``)."""

    job_id: str
    tree: Path
    outbox: Path
    protected_refs: tuple[str, ...]
    limits: SandboxLimits
    time_limit_seconds: float
    identity: Identity
    trailers: tuple[Trailer, ...]
    compare: Baseline | None
    deployment: str

    def __call__(self, sandbox: ContainerSandbox) -> None:
        sandbox.start(
            self.job_id,
            self.tree,
            self.protected_refs,
            self.limits,
            deadline=datetime.now(UTC) + timedelta(seconds=self.time_limit_seconds),
            outbox=self.outbox,
            identity=self.identity,
            trailers=self.trailers,
            compare_to=self.compare.sha if self.compare else None,
            compare_label=self.compare.label if self.compare else None,
            # The segment holds the job: a container of it on this engine was left by an
            # attempt whose worker died (kill -9, a lost Redis connection).
            replace_leftover=True,
            deployment=self.deployment,
        )
