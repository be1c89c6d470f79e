"""``GET /metrics``: the service in the Prometheus text format (version 0.0.4).

What a scrape costs is bounded whatever the size of the store, and a scrape within
``METRICS_TTL_SECONDS`` of the last one gets the same answer without touching Redis or the
engine:

- ``riverbeam_jobs{kind,state}``: the newest ``SCAN_JOBS`` jobs (one page of the creation
  index: a sorted-set range and one MGET); ``riverbeam_jobs_scan_complete`` says whether
  that was every job.
- ``riverbeam_job_duration_seconds{kind,quantile}``: created → last update of the newest
  ``DURATION_JOBS`` finished jobs among them (an author job's time includes the wait for a
  reviewer).
- ``riverbeam_tool_call_duration_seconds{tool,quantile}``: the tool frames of the newest
  ``TOOL_JOBS`` finished jobs, the first ``TOOL_EVENTS_PER_JOB`` events of each stream.
- ``riverbeam_approvals_waiting`` and ``riverbeam_approval_oldest_age_seconds``: the
  pending queue's size, and the summaries the store keeps per pending approval (repository,
  opened at; ``JobStore.pending_summaries``) of its oldest ``APPROVAL_SUMMARIES``: small
  reads whatever the diffs weigh. An approval parked by a release that kept no summary gets
  one written on a scrape (at most 50 a scrape, oldest first).
- ``riverbeam_sandbox_containers{state}``: containers labelled ``riverbeam.role=sandbox``
  on this host's engine.

The durations are summaries over that window of recent jobs (as a client library's summary
is over a recent time window): read the quantiles as they are; there are no cumulative
``_count``/``_sum`` series to ``rate()``. ``riverbeam_metrics_source_up{source}`` is 0 when
the store or the engine did not answer in time, and that source's series are left out.

No token is needed: like ``/healthz``, it is for a scraper on a private network. The labels
carry kinds, states, tool names and container states, never a repository, a person or a job.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter, Request, Response

from bot.core.errors import BeamError
from bot.core.frames import ToolFrame
from bot.jobs.store import JobStore
from bot.service.jobs import JobService
from bot.store.models import JobKind, JobState

log = logging.getLogger(__name__)
router = APIRouter(tags=["operations"])

METRICS_TTL_SECONDS = 5.0
COLLECT_TIMEOUT_SECONDS = 5.0
SCAN_JOBS = 1000
DURATION_JOBS = 200
TOOL_JOBS = 20
TOOL_EVENTS_PER_JOB = 500
APPROVAL_SUMMARIES = 1000
QUANTILES = (0.5, 0.9, 0.99)
CONTAINER_STATES = ("created", "running", "paused", "restarting", "removing", "exited", "dead")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="riverbeam-metrics")

Labels = dict[str, str]


@dataclass
class Family:
    """One metric: its name, type, help line and samples (labels, value)."""

    name: str
    type: Literal["gauge", "summary"]
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        self.samples.append((labels, value))


def exposition(families: Iterable[Family]) -> str:
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for labels, value in family.samples:
            inside = ",".join(f'{key}="{_escape_label(text)}"' for key, text in labels.items())
            shown = f"{{{inside}}}" if inside else ""
            lines.append(f"{family.name}{shown} {_number(value)}")
    return "\n".join(lines) + "\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def quantile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of sorted values."""
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def _summary(
    name: str, help: str, label: str, values: dict[str, list[float]], *, counted: str
) -> list[Family]:
    """Quantiles per ``label`` value, and a gauge of how many ``counted`` they cover
    (``<name without _seconds>_window_<counted>``)."""
    quantiles = Family(name, "summary", help)
    window = Family(
        f"{name.removesuffix('_seconds')}_window_{counted}",
        "gauge",
        f"{counted} the quantiles of {name} are over",
    )
    for key in sorted(values):
        ordered = sorted(values[key])
        window.add(len(ordered), **{label: key})
        for q in QUANTILES if ordered else ():
            quantiles.add(quantile(ordered, q), **{label: key, "quantile": f"{q:g}"})
    return [quantiles, window]


def store_families(store: JobStore, now: datetime) -> list[Family]:
    """Everything read from Redis, within the caps of the module docstring."""
    records, more = store.list(limit=SCAN_JOBS)
    jobs = Family("riverbeam_jobs", "gauge", f"jobs by kind and state (newest {SCAN_JOBS})")
    counts = Counter((record.spec.kind, record.state) for record in records)
    for kind in JobKind:
        for state in JobState:
            jobs.add(counts[kind, state], kind=kind.value, state=state.value)
    complete = Family(
        "riverbeam_jobs_scan_complete",
        "gauge",
        f"1 when riverbeam_jobs counts every job, 0 when only the newest {SCAN_JOBS}",
    )
    complete.add(0 if more else 1)

    finished = [record for record in records if record.state.is_final]
    durations: dict[str, list[float]] = {kind.value: [] for kind in JobKind}
    for record in finished[:DURATION_JOBS]:
        seconds = (record.updated_at - record.created_at).total_seconds()
        durations[record.spec.kind.value].append(seconds)
    tools: dict[str, list[float]] = defaultdict(list)
    for record in finished[:TOOL_JOBS]:
        for event in store.read_events(record.id, count=TOOL_EVENTS_PER_JOB):
            if isinstance(event.frame, ToolFrame):
                tools[event.frame.record.name].append(event.frame.record.duration_ms / 1000)

    waiting, oldest = approval_families(store, now)
    return [
        jobs,
        complete,
        *_summary(
            "riverbeam_job_duration_seconds",
            f"job duration, created to finished, over the newest {DURATION_JOBS} finished jobs",
            "kind",
            durations,
            counted="jobs",
        ),
        *_summary(
            "riverbeam_tool_call_duration_seconds",
            f"tool call duration over the newest {TOOL_JOBS} finished jobs",
            "tool",
            tools,
            counted="calls",
        ),
        waiting,
        oldest,
    ]


def approval_families(store: JobStore, now: datetime) -> tuple[Family, Family]:
    """The approval queue from the store's small per-approval summaries (never an approval
    with its diff): the count, and the age of the oldest of the first ``APPROVAL_SUMMARIES``."""
    count, summaries = store.pending_summaries(limit=APPROVAL_SUMMARIES)
    waiting = Family("riverbeam_approvals_waiting", "gauge", "pushes waiting for a decision")
    waiting.add(count)
    oldest = Family(
        "riverbeam_approval_oldest_age_seconds",
        "gauge",
        "how long the oldest waiting push has waited (0 when none waits)",
    )
    ages = [(now - summary.created_at).total_seconds() for summary in summaries]
    oldest.add(max(0.0, max(ages, default=0.0)))
    return waiting, oldest


def engine_families() -> list[Family]:
    from sandbox.host.container.hardening import ROLE_LABEL, ROLE_SANDBOX
    from sandbox.host.engine import connect, engine_errors

    client = connect(timeout=COLLECT_TIMEOUT_SECONDS)
    try:
        with engine_errors("BEM-400", "listing sandbox containers"):
            found = client.api.containers(
                all=True, filters={"label": f"{ROLE_LABEL}={ROLE_SANDBOX}"}
            )
    finally:
        client.close()
    states = Counter(str(container.get("State", "")) for container in found)
    containers = Family(
        "riverbeam_sandbox_containers", "gauge", "sandbox containers on this host, by state"
    )
    for state in sorted(set(CONTAINER_STATES) | set(states)):
        containers.add(states[state], state=state)
    return [containers]


class MetricsCache:
    """The last exposition and when it was made; one refresh at a time."""

    def __init__(self, service: JobService, ttl_seconds: float = METRICS_TTL_SECONDS) -> None:
        self._service = service
        self._ttl = ttl_seconds
        self._lock = asyncio.Lock()
        self._text = ""
        self._at = -math.inf

    async def text(self) -> str:
        async with self._lock:
            if time.monotonic() - self._at > self._ttl:
                self._text = await self._collect()
                self._at = time.monotonic()
            return self._text

    async def _collect(self) -> str:
        sources: dict[str, Callable[[], list[Family]]] = {
            "store": lambda: store_families(self._service.store, datetime.now(UTC)),
            "engine": engine_families,
        }
        results = await asyncio.gather(*(_timed(source) for source in sources.values()))
        up = Family("riverbeam_metrics_source_up", "gauge", "1 when the source answered in time")
        took = Family(
            "riverbeam_metrics_collect_seconds", "gauge", "time spent reading each source"
        )
        families: list[Family] = []
        for name, (found, seconds) in zip(sources, results, strict=True):
            up.add(0 if found is None else 1, source=name)
            took.add(round(seconds, 4), source=name)
            families.extend(found or ())
        return exposition([*families, up, took])


async def _timed(source: Callable[[], list[Family]]) -> tuple[list[Family] | None, float]:
    """The source's families (None when it failed or ran past the timeout) and the time."""
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    try:
        found: list[Family] | None = await asyncio.wait_for(
            loop.run_in_executor(_POOL, source), timeout=COLLECT_TIMEOUT_SECONDS
        )
    except TimeoutError:
        log.warning("a metrics source did not answer within %g s", COLLECT_TIMEOUT_SECONDS)
        found = None
    except BeamError as error:
        log.warning("a metrics source failed: %s", error)
        found = None
    except Exception:  # a bug, not an outage: keep the traceback
        log.exception("a metrics source failed unexpectedly")
        found = None
    return found, time.perf_counter() - started


def _cache(request: Request) -> MetricsCache:
    cache: MetricsCache | None = getattr(request.app.state, "metrics", None)
    if cache is None:
        cache = request.app.state.metrics = MetricsCache(request.app.state.service)
    return cache


class PrometheusText(Response):
    media_type = CONTENT_TYPE


@router.get(
    "/metrics",
    response_class=PrometheusText,
    summary="Prometheus metrics: jobs, durations, approvals waiting, sandbox containers",
)
async def metrics(request: Request) -> PrometheusText:
    return PrometheusText(await _cache(request).text(), headers={"Cache-Control": "no-store"})
