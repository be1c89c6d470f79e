"""Where a job segment's time went, logged by the worker once per segment.

One INFO line per segment, ``segment timings {...}`` with a JSON object: the job id, the
segment's start (epoch seconds, the worker's clock), its total, and milliseconds per phase:

- ``image``: checking the sandbox image; ``model``: finding the job's model client;
- ``workspace``: preparing (or reopening, or restoring) the job's tree;
- ``container``: starting the sandbox container until its tool server is ready, in line or on
  a background thread (absent when the segment started none); ``container_wait``: the part of
  that start the segment waited for (a tool call waiting for the container to be ready);
- ``agent``: the run itself (model calls, tool calls, event writes, the park decision);
- ``stop``: removing the container;
- ``park`` (run state, snapshot, approval, state change) or ``finish`` (outcome, state);
- ``clean_up``: releasing the workspace.

An operator reads it to see why a job is slow; ``bench.jobs_bench`` reads it to split a
job's time between the model, the container and the rest.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

PREFIX = "segment timings "


class SegmentTimings:
    """Phase durations of one segment of job ``job_id``."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.started = time.time()
        self._start = time.perf_counter()
        self.phases: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        begun = time.perf_counter()
        try:
            yield
        finally:
            elapsed = (time.perf_counter() - begun) * 1000
            self.phases[name] = self.phases.get(name, 0.0) + elapsed

    def add(self, name: str, seconds: float) -> None:
        """Count ``seconds`` spent elsewhere (another thread) under phase ``name``."""
        if seconds:
            self.phases[name] = self.phases.get(name, 0.0) + seconds * 1000

    def log(self, state: str) -> None:
        """Log the line, with the state the segment left the job in."""
        total = (time.perf_counter() - self._start) * 1000
        line = {
            "job": self.job_id,
            "state": state,
            "started": round(self.started, 4),
            "total_ms": round(total, 1),
            "phases_ms": {name: round(value, 1) for name, value in self.phases.items()},
        }
        log.info("%s%s", PREFIX, json.dumps(line))
