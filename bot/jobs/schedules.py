"""Scheduled summaries: Celery beat runs ``summarize`` per repository from its cron expression.

A repository with ``summary_schedule`` gets a beat entry (``summary_schedules``). When it
fires, a worker runs ``SummarySchedule.trigger``:

1. **One run at a time.** ``store.locks.try_lock(repo)`` (a redis-py ``Lock``) makes the
   check-and-start below atomic between triggers (two beat processes, a manual trigger, a
   redelivered message). Holding it for the whole run is the open run record's job: the
   trigger is SKIPPED while the repository's latest run still has a job that is not final.
   So a run is never doubled, the lock never has to outlive a crashed process by a guessed
   TTL, and a run whose follow-up chain was lost does not block the next one once its jobs
   have ended.
2. **Which branches.** The mirror is fetched, and every upstream branch is summarized that is
   not the default branch, not protected, not the publish ref (a deployment branch, not a
   change), and whose tip is not already in the default branch (merged or never moved).
   Newest tip first, at most ``MAX_BRANCHES`` of them per run.
3. **One summarize job per branch**, submitted as ``requested_by = "schedule"`` with the run in
   its metadata.
4. **The run is recorded**: ``<prefix>:schedule-runs:<repo>`` (a sorted set, run id → start
   time, the newest ``KEEP_RUNS`` kept) and ``<prefix>:schedule-run:<repo>:<run id>`` (the
   ``ScheduleRun`` document: its jobs, when it finished, the summaries and the delivery).

A follow-up task (``finish``) polls the run's jobs with a growing delay (no worker waits);
once every job is final (or a day after the run started, as things stand then) it fixes the
run's summaries, and when ``summary_webhook`` is set
POSTs them as JSON. The POST is claimed in the run document by the follow-up's task id, so
one chain posts; a failed POST is tried ``MAX_DELIVERIES`` times in all; a follow-up whose
worker died mid-POST is redelivered with the same id and posts again (at least once).

Cron expressions are the standard five fields in UTC (``minute hour day-of-month month
day-of-week``, names like ``mon`` and ``jan``, ``7`` for Sunday) or a macro (``@daily``...).
One cron rule Celery cannot follow is refused: when both day fields are restricted, cron runs
on either day and Celery only on days matching both.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, cast

import pygit2
from celery.schedules import crontab
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pygit2.enums import RepositoryOpenFlag
from redis.client import Pipeline

from bot.config import RepositoryConfig, Settings
from bot.core.cron import parse_cron
from bot.core.errors import BeamError
from bot.core.frames import ErrorInfo
from bot.jobs.webhooks import post_json, public_webhook_url
from bot.store.gateway import RedisGateway, Writes
from bot.store.models import JobKind, JobRecord, JobSpec, JobState, SummaryOutcome
from bot.store.store import JobStore
from sandbox.host.upstream.credentials import upstream_callbacks
from sandbox.host.upstream.mirror import mirror_lock, sync_mirror
from sandbox.inside.refs import HEADS, ProtectedRefs, branch_name

log = logging.getLogger(__name__)

SCHEDULE_REQUESTER: Final = "schedule"
MAX_BRANCHES: Final = 50
KEEP_RUNS: Final = 100
MAX_DELIVERIES: Final = 3
# Seconds before the second and the third POST of a run whose webhook failed.
RETRY_SECONDS: Final = (2.0, 10.0)
# The check-and-start of a run (a fetch and a few writes) ends well within this; it only
# matters if the trigger's process dies holding the lock.
TRIGGER_LOCK_SECONDS: Final = 300.0
# The follow-up polls after 0.5 s, 1 s, 2 s ... then every 30 s, and gives up (posting what
# there is) a day after the run started.
FIRST_POLL_SECONDS: Final = 0.5
MAX_POLL_SECONDS: Final = 30.0
GIVE_UP_AFTER: Final = timedelta(days=1)

Submit = Callable[[JobSpec], JobRecord]
"""``submit(spec)``: store a job and queue it (``bot.service.jobs.JobService.submit``)."""


def summary_schedules(settings: Settings) -> dict[str, crontab]:
    """Each repository's summary schedule; BEM-900 for the first invalid one."""
    return {
        name: parse_cron(repo.summary_schedule, repo=name)
        for name, repo in sorted(settings.repositories.items())
        if repo.summary_schedule is not None
    }


# -- which branches ----------------------------------------------------------------------


def active_branches(
    mirror: Path, repo: RepositoryConfig, *, limit: int = MAX_BRANCHES
) -> list[str]:
    """The branches of the (fetched) ``mirror`` a scheduled run summarizes, newest tip first:
    not the default branch, not protected, not the publish ref, and not already in the
    default branch."""
    protected = ProtectedRefs(repo.protected_refs)
    skipped = {repo.default_branch, repo.publish_ref}
    found: list[tuple[int, str]] = []
    with mirror_lock(mirror, exclusive=False):
        git = pygit2.Repository(str(mirror), RepositoryOpenFlag.NO_SEARCH)
        default = git.references.get(HEADS + repo.default_branch)
        if default is None:
            raise BeamError(
                "BEM-341",
                f"the default branch {repo.default_branch!r} is not upstream; nothing to "
                "summarize against",
            )
        default_tip = default.peel(pygit2.Commit).id
        for ref in git.references:
            name = ref.removeprefix(HEADS)
            if name == ref or name in skipped or protected.is_protected(ref) or not _usable(name):
                continue
            tip = git.references[ref].peel(pygit2.Commit)
            if tip.id == default_tip or git.descendant_of(default_tip, tip.id):
                continue
            found.append((tip.commit_time, name))
    found.sort(key=lambda item: (-item[0], item[1]))
    if len(found) > limit:
        log.warning("%d active branches; summarizing the newest %d", len(found), limit)
    return [name for _, name in found[:limit]]


def _usable(name: str) -> bool:
    """A name a job can carry (an upstream may hold refs no policy-checked name spells)."""
    try:
        branch_name(name)
    except BeamError:
        return False
    return True


# -- the run record ----------------------------------------------------------------------


class BranchSummary(BaseModel):
    """One branch of a finished run: its job, how it ended, and what it produced."""

    model_config = ConfigDict(frozen=True)

    branch: str
    job: str
    state: JobState
    summary: SummaryOutcome | None = None
    error: ErrorInfo | None = None


class SummaryDelivery(BaseModel):
    """How posting the run to ``summary_webhook`` went (``url`` without secrets)."""

    url: str
    delivered: bool
    attempts: int
    status: int | None = None
    error: ErrorInfo | None = None


class ScheduleRun(BaseModel):
    """One scheduled run of a repository. ``jobs`` maps branch → job id, newest tip first.
    ``summaries`` are fixed once every job is final (``finished_at``); ``posting`` is the
    follow-up task that holds the webhook delivery."""

    id: str
    repo: str
    started_at: datetime
    jobs: dict[str, str] = Field(default_factory=dict)
    finished_at: datetime | None = None
    summaries: list[BranchSummary] = Field(default_factory=list)
    delivery: SummaryDelivery | None = None
    posting: str | None = None

    def payload(self) -> dict[str, JsonValue]:
        """What the webhook receives."""
        return {
            "repository": self.repo,
            "run": self.id,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "summaries": [summary.model_dump(mode="json") for summary in self.summaries],
        }


class ScheduleRuns:
    """The scheduled runs of every repository, in Redis beside the jobs: through the job
    store's gateway, with its key prefix, its outage handling (BEM-504) and its optimistic
    transactions."""

    def __init__(self, gateway: RedisGateway) -> None:
        self._gateway = gateway
        self._redis = gateway.client

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "riverbeam") -> ScheduleRuns:
        return cls(RedisGateway.from_url(url, prefix=prefix))

    def _index(self, repo: str) -> str:
        return self._gateway.keys.schedule_runs(repo)

    def _key(self, repo: str, run_id: str) -> str:
        return self._gateway.keys.schedule_run(repo, run_id)

    def add(self, run: ScheduleRun) -> None:
        """Record a new run, dropping the oldest past ``KEEP_RUNS``."""
        index = self._index(run.repo)
        with self._gateway.reachable():
            with self._redis.pipeline(transaction=True) as tx:
                tx.set(self._key(run.repo, run.id), run.model_dump_json())
                tx.zadd(index, {run.id: run.started_at.timestamp()})
                tx.execute()
            old = _ids(self._redis.zrange(index, 0, -KEEP_RUNS - 1))
            if old:
                self._redis.delete(*(self._key(run.repo, run_id) for run_id in old))
                self._redis.zrem(index, *old)

    def get(self, repo: str, run_id: str) -> ScheduleRun | None:
        with self._gateway.reachable():
            raw = self._redis.get(self._key(repo, run_id))
        return None if raw is None else ScheduleRun.model_validate_json(raw)

    def recent(self, repo: str, limit: int = 20) -> list[ScheduleRun]:
        """The newest runs of ``repo``, newest first."""
        with self._gateway.reachable():
            ids = _ids(self._redis.zrevrange(self._index(repo), 0, limit - 1))
            raws = self._redis.mget([self._key(repo, run_id) for run_id in ids]) if ids else []
        return [ScheduleRun.model_validate_json(raw) for raw in raws if raw is not None]

    def update(
        self, repo: str, run_id: str, change: Callable[[ScheduleRun], ScheduleRun | None]
    ) -> ScheduleRun | None:
        """Compare-and-set: ``change`` returns the new document, or None to leave it; the
        written document, or None when nothing was written."""
        key = self._key(repo, run_id)

        def body(pipe: Pipeline) -> tuple[ScheduleRun | None, Writes | None]:
            raw = pipe.get(key)
            new = None if raw is None else change(ScheduleRun.model_validate_json(raw))
            if new is None:
                return None, None

            def writes(tx: Pipeline) -> None:
                tx.set(key, new.model_dump_json())

            return new, writes

        return self._gateway.atomic([key], body)


def _ids(reply: object) -> list[str]:
    # redis-py types every reply loosely; a sorted-set range without scores is its members,
    # bytes (the store's client never decodes).
    return [member.decode() for member in cast(list[bytes], reply)]


# -- triggering and finishing ------------------------------------------------------------


class Trigger(BaseModel):
    """What one trigger did: started ``run`` with ``jobs``, or was ``skipped`` (and why)."""

    repo: str
    run: str | None = None
    jobs: dict[str, str] = Field(default_factory=dict)
    skipped: str | None = None


class SummarySchedule:
    """Starts and finishes the scheduled runs of the repositories in ``settings``."""

    def __init__(self, settings: Settings, store: JobStore, runs: ScheduleRuns) -> None:
        self._settings = settings
        self._store = store
        self._runs = runs

    def trigger(self, repo: str, submit: Submit) -> Trigger:
        """Start a run of ``repo`` unless one is going (see the module docstring)."""
        config = self._settings.repository(repo)
        token = self._store.locks.try_lock(repo, ttl_seconds=TRIGGER_LOCK_SECONDS)
        if token is None:
            return Trigger(repo=repo, skipped="another trigger is starting a run right now")
        try:
            busy = self._open_run(repo)
            if busy is not None:
                return Trigger(repo=repo, skipped=busy)
            return self._start(repo, config, submit)
        finally:
            self._store.locks.unlock(repo, token)

    def _open_run(self, repo: str) -> str | None:
        """Why the latest run still holds the repository, or None when it is over."""
        latest = self._runs.recent(repo, 1)
        if not latest or latest[0].finished_at is not None:
            return None
        jobs = latest[0].jobs.values()
        going = [job_id for job_id in jobs if not self._store.jobs.is_final_or_unknown(job_id)]
        if not going:
            return None
        return f"run {latest[0].id} is still going (jobs {', '.join(going)} have not ended)"

    def _start(self, repo: str, config: RepositoryConfig, submit: Submit) -> Trigger:
        callbacks = upstream_callbacks(repo, config, self._settings.workspaces)
        mirror = sync_mirror(repo, config, self._settings.workspaces, callbacks)
        branches = active_branches(mirror, config)
        now = datetime.now(UTC)
        run = ScheduleRun(
            id=f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}", repo=repo, started_at=now
        )
        # Recorded before any job exists: a trigger that dies part-way leaves a run whose
        # jobs (those submitted) still block the next one until they end.
        self._runs.add(run)
        jobs: dict[str, str] = {}
        for branch in branches:
            spec = JobSpec(
                kind=JobKind.SUMMARIZE,
                repo=repo,
                branch=branch,
                requested_by=SCHEDULE_REQUESTER,
                metadata={"schedule_run": run.id},
            )
            jobs[branch] = submit(spec).id
            self._runs.update(repo, run.id, lambda current: _with_jobs(current, jobs))
        log.info("scheduled run %s of %s: %d branches", run.id, repo, len(jobs))
        return Trigger(repo=repo, run=run.id, jobs=jobs)

    def finish(self, repo: str, run_id: str, *, claimant: str, poll: int) -> float | None:
        """The ``poll``-th look of follow-up task ``claimant`` at a run: seconds until the
        next look while jobs run; once all ended, fix the summaries and post them once (when
        a webhook is set). None when nothing is left to do; a delay to retry a failed POST."""
        run = self._runs.get(repo, run_id)
        if run is None:
            log.warning("scheduled run %s of %s is gone; nothing to finish", run_id, repo)
            return None
        if run.finished_at is None:
            records = {branch: self._store.jobs.find(job_id) for branch, job_id in run.jobs.items()}
            ended = all(record is None or record.state.is_final for record in records.values())
            if not ended and datetime.now(UTC) - run.started_at < GIVE_UP_AFTER:
                return poll_delay(poll + 1)
            summaries = [
                _summary(branch, run.jobs[branch], record) for branch, record in records.items()
            ]
            finished = self._runs.update(
                repo, run_id, lambda current: _finished(current, summaries)
            )
            run = finished or self._runs.get(repo, run_id) or run
        return self._deliver(run, claimant)

    def _deliver(self, run: ScheduleRun, claimant: str) -> float | None:
        url = self._settings.repository(run.repo).summary_webhook
        if not url:
            return None
        claimed = self._runs.update(run.repo, run.id, lambda current: _claim(current, claimant))
        if claimed is None:
            return None
        attempts = (claimed.delivery.attempts if claimed.delivery else 0) + 1
        delivery = post_summaries(
            url,
            claimed.payload(),
            attempts=attempts,
            timeout=self._settings.jobs.webhook_timeout_seconds,
        )
        self._runs.update(run.repo, run.id, lambda current: _delivered(current, delivery))
        if delivery.delivered:
            log.info("posted scheduled run %s of %s", run.id, run.repo)
            return None
        log.warning("posting scheduled run %s failed: %s", run.id, delivery.error)
        return RETRY_SECONDS[attempts - 1] if attempts < MAX_DELIVERIES else None


def poll_delay(poll: int) -> float:
    """Seconds before the follow-up's ``poll``-th look (0-based): 0.5, 1, 2 ... then 30."""
    return min(MAX_POLL_SECONDS, FIRST_POLL_SECONDS * 2.0 ** min(poll, 16))


def _with_jobs(run: ScheduleRun, jobs: dict[str, str]) -> ScheduleRun:
    return run.model_copy(update={"jobs": dict(jobs)})


def _finished(run: ScheduleRun, summaries: list[BranchSummary]) -> ScheduleRun | None:
    if run.finished_at is not None:
        return None
    return run.model_copy(update={"finished_at": datetime.now(UTC), "summaries": summaries})


def _claim(run: ScheduleRun, claimant: str) -> ScheduleRun | None:
    """Take the delivery: not delivered yet, tries left, and nobody else holds it (a
    redelivered message of the same task takes it again)."""
    delivery = run.delivery
    if delivery is not None and (delivery.delivered or delivery.attempts >= MAX_DELIVERIES):
        return None
    if run.posting not in (None, claimant):
        return None
    return run.model_copy(update={"posting": claimant})


def _delivered(run: ScheduleRun, delivery: SummaryDelivery) -> ScheduleRun:
    # A failed POST frees the delivery for the retry; a delivered one keeps its poster.
    posting = run.posting if delivery.delivered else None
    return run.model_copy(update={"delivery": delivery, "posting": posting})


def _summary(branch: str, job_id: str, record: JobRecord | None) -> BranchSummary:
    if record is None:
        error = ErrorInfo(code="BEM-500", message=f"job {job_id} is gone from the store")
        return BranchSummary(branch=branch, job=job_id, state=JobState.FAILED, error=error)
    result = record.result
    outcome = result.outcome if result is not None else None
    return BranchSummary(
        branch=branch,
        job=job_id,
        state=record.state,
        summary=outcome if isinstance(outcome, SummaryOutcome) else None,
        error=record.error,
    )


def post_summaries(
    url: str, payload: dict[str, JsonValue], *, attempts: int, timeout: float
) -> SummaryDelivery:
    """POST ``payload`` as JSON; a failure is reported, never raised."""
    shown = public_webhook_url(url)
    response = post_json(url, payload, timeout=timeout)
    if isinstance(response, str):
        error = ErrorInfo(code="BEM-511", message=f"{shown} not reached: {response}")
        return SummaryDelivery(url=shown, delivered=False, attempts=attempts, error=error)
    if not response.is_success:
        return SummaryDelivery(
            url=shown,
            delivered=False,
            attempts=attempts,
            status=response.status_code,
            error=ErrorInfo(
                code="BEM-511", message=f"{shown} answered HTTP {response.status_code}"
            ),
        )
    return SummaryDelivery(
        url=shown, delivered=True, attempts=attempts, status=response.status_code
    )
