"""``GET /metrics``: the service in the Prometheus text format (version 0.0.4), written by
``prometheus-client`` from a collector that reads the store and the engine at scrape time.

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
  opened at; ``store.approvals.pending_summaries``) of its oldest ``APPROVAL_SUMMARIES``: small
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime

from fastapi import APIRouter, Request, Response
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from bot.core.errors import BeamError
from bot.core.frames import ToolFrame
from bot.service.jobs import JobService
from bot.store.models import JobKind, JobState
from bot.store.store import JobStore

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
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="riverbeam-metrics")

Source = Callable[[], list[Metric]]


def quantile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of sorted values."""
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def _summary(
    name: str, help: str, label: str, values: dict[str, list[float]], *, counted: str
) -> list[Metric]:
    """Quantiles per ``label`` value, and a gauge of how many ``counted`` they cover
    (``<name without _seconds>_window_<counted>``)."""
    # Not SummaryMetricFamily: it writes _count/_sum, never quantiles; and not the library's
    # Summary, a cumulative in-process count, where this is a read of the recent window.
    quantiles = Metric(name, help, "summary")
    window = GaugeMetricFamily(
        f"{name.removesuffix('_seconds')}_window_{counted}",
        f"{counted} the quantiles of {name} are over",
        labels=[label],
    )
    for key in sorted(values):
        ordered = sorted(values[key])
        window.add_metric([key], len(ordered))
        for q in QUANTILES if ordered else ():
            quantiles.add_sample(name, {label: key, "quantile": f"{q:g}"}, quantile(ordered, q))
    return [quantiles, window]


def store_metrics(store: JobStore, now: datetime) -> list[Metric]:
    """Everything read from Redis, within the caps of the module docstring."""
    records, more = store.listing.list(limit=SCAN_JOBS)
    jobs = GaugeMetricFamily(
        "riverbeam_jobs", f"jobs by kind and state (newest {SCAN_JOBS})", labels=["kind", "state"]
    )
    counts = Counter((record.spec.kind, record.state) for record in records)
    for kind in JobKind:
        for state in JobState:
            jobs.add_metric([kind.value, state.value], counts[kind, state])
    complete = GaugeMetricFamily(
        "riverbeam_jobs_scan_complete",
        f"1 when riverbeam_jobs counts every job, 0 when only the newest {SCAN_JOBS}",
        value=0 if more else 1,
    )

    finished = [record for record in records if record.state.is_final]
    durations: dict[str, list[float]] = {kind.value: [] for kind in JobKind}
    for record in finished[:DURATION_JOBS]:
        seconds = (record.updated_at - record.created_at).total_seconds()
        durations[record.spec.kind.value].append(seconds)
    tools: dict[str, list[float]] = defaultdict(list)
    for record in finished[:TOOL_JOBS]:
        for event in store.events.read(record.id, count=TOOL_EVENTS_PER_JOB):
            if isinstance(event.frame, ToolFrame):
                tools[event.frame.record.name].append(event.frame.record.duration_ms / 1000)

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
        *approval_metrics(store, now),
    ]


def approval_metrics(store: JobStore, now: datetime) -> list[Metric]:
    """The approval queue from the store's small per-approval summaries (never an approval
    with its diff): the count, and the age of the oldest of the first ``APPROVAL_SUMMARIES``."""
    count, summaries = store.approvals.pending_summaries(limit=APPROVAL_SUMMARIES)
    ages = [(now - summary.created_at).total_seconds() for summary in summaries]
    return [
        GaugeMetricFamily(
            "riverbeam_approvals_waiting", "pushes waiting for a decision", value=count
        ),
        GaugeMetricFamily(
            "riverbeam_approval_oldest_age_seconds",
            "how long the oldest waiting push has waited (0 when none waits)",
            value=max(0.0, max(ages, default=0.0)),
        ),
    ]


def engine_metrics() -> list[Metric]:
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
    containers = GaugeMetricFamily(
        "riverbeam_sandbox_containers",
        "sandbox containers on this host, by state",
        labels=["state"],
    )
    for state in sorted(set(CONTAINER_STATES) | set(states)):
        containers.add_metric([state], states[state])
    return [containers]


class RiverbeamCollector(Collector):
    """Reads every source when collected, at once, each in a thread of ``_POOL``; a source
    that fails or does not answer within ``timeout_seconds`` of the start is left out of
    that collection, and its ``riverbeam_metrics_source_up`` is 0."""

    def __init__(
        self, sources: Mapping[str, Source], timeout_seconds: float = COLLECT_TIMEOUT_SECONDS
    ) -> None:
        self._sources = sources
        self._timeout = timeout_seconds

    def collect(self) -> Iterable[Metric]:
        started = time.perf_counter()
        running = {name: _POOL.submit(_read, source) for name, source in self._sources.items()}
        up = GaugeMetricFamily(
            "riverbeam_metrics_source_up", "1 when the source answered in time", labels=["source"]
        )
        took = GaugeMetricFamily(
            "riverbeam_metrics_collect_seconds", "time spent reading each source", labels=["source"]
        )
        metrics: list[Metric] = []
        for name, future in running.items():
            found, seconds = self._outcome(future, started)
            up.add_metric([name], 0 if found is None else 1)
            took.add_metric([name], round(seconds, 4))
            metrics.extend(found or ())
        return [*metrics, up, took]

    def _outcome(
        self, future: Future[tuple[list[Metric] | None, float]], started: float
    ) -> tuple[list[Metric] | None, float]:
        """The source's metrics and the time it took, or None and the time waited for it."""
        try:
            return future.result(timeout=max(0.0, started + self._timeout - time.perf_counter()))
        except TimeoutError:
            log.warning("a metrics source did not answer within %g s", self._timeout)
            return None, time.perf_counter() - started


def _read(source: Source) -> tuple[list[Metric] | None, float]:
    """The source's metrics (None when it failed) and the time it took, in the thread."""
    started = time.perf_counter()
    found: list[Metric] | None
    try:
        found = source()
    except BeamError as error:
        log.warning("a metrics source failed: %s", error)
        found = None
    except Exception:  # a bug, not an outage: keep the traceback
        log.exception("a metrics source failed unexpectedly")
        found = None
    return found, time.perf_counter() - started


class MetricsCache:
    """The last exposition and when it was made; one refresh at a time. Each app has its own
    registry holding only the Riverbeam collector: the library's global one would add this
    process's own metrics, and several apps in one process would share it."""

    def __init__(self, service: JobService, ttl_seconds: float = METRICS_TTL_SECONDS) -> None:
        self._ttl = ttl_seconds
        self._lock = asyncio.Lock()
        self._text = b""
        self._at = -math.inf
        self._registry = CollectorRegistry()
        self._registry.register(
            RiverbeamCollector(
                {
                    "store": lambda: store_metrics(service.store, datetime.now(UTC)),
                    "engine": engine_metrics,
                }
            )
        )

    async def text(self) -> bytes:
        async with self._lock:
            if time.monotonic() - self._at > self._ttl:
                # Collecting blocks for up to the sources' timeout: not on the event loop.
                self._text = await asyncio.to_thread(generate_latest, self._registry)
                self._at = time.monotonic()
            return self._text


def _cache(request: Request) -> MetricsCache:
    cache: MetricsCache | None = getattr(request.app.state, "metrics", None)
    if cache is None:
        cache = request.app.state.metrics = MetricsCache(request.app.state.service)
    return cache


class PrometheusText(Response):
    # 0.0.4, what scrapers are configured for (the library's CONTENT_TYPE_LATEST is 1.0.0).
    media_type = CONTENT_TYPE_PLAIN_0_0_4


@router.get(
    "/metrics",
    response_class=PrometheusText,
    summary="Prometheus metrics: jobs, durations, approvals waiting, sandbox containers",
)
async def metrics(request: Request) -> PrometheusText:
    return PrometheusText(await _cache(request).text(), headers={"Cache-Control": "no-store"})
