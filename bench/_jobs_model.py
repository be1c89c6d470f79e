"""The model the workers of ``bench.jobs_bench`` use: the test playbooks, timed.

``model.factory = "bench._jobs_model:for_job"``. Every model call is logged by the worker as
``bench model call {"job": ..., "at": <epoch seconds>, "ms": ...}``: the benchmark adds these
up to give the model's share of a job's time (a scripted model's is tiny; a live one's is
most of it).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence

from bot.clients.base import Completion, CompletionClient, Message
from bot.core.tools import ToolSpec
from bot.store.models import JobRecord
from harness.playbooks import for_job as playbook_for

log = logging.getLogger(__name__)

PREFIX = "bench model call "


class TimedClient:
    """Forwards to ``inner`` and logs how long each call took."""

    def __init__(self, inner: CompletionClient, job_id: str) -> None:
        self._inner = inner
        self._job_id = job_id
        self.model = "playbook"

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        at = time.time()
        started = time.perf_counter()
        try:
            return await self._inner.complete(messages, tools)
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            line = {"job": self._job_id, "at": round(at, 4), "ms": round(elapsed, 3)}
            log.info("%s%s", PREFIX, json.dumps(line))


def for_job(job: JobRecord) -> TimedClient:
    return TimedClient(playbook_for(job), job.id)
