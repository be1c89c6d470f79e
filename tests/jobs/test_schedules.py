"""Scheduled summaries: cron parsing, the beat entries, which branches a run summarizes (on a
real mirror), and whole runs with real Redis, real Celery worker processes, real containers
and a real webhook receiver on loopback. Only the model is scripted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pygit2
import pytest
from celery.beat import Scheduler
from celery.result import AsyncResult
from celery.schedules import crontab

from bot.config import RepositoryConfig, Settings, WorkspaceSettings, load_settings
from bot.core.cron import parse_cron
from bot.core.errors import BeamError
from bot.jobs.celery_app import create_app
from bot.jobs.schedules import (
    KEEP_RUNS,
    MAX_DELIVERIES,
    RETRY_SECONDS,
    SCHEDULE_REQUESTER,
    ScheduleRun,
    ScheduleRuns,
    SummarySchedule,
    active_branches,
    poll_delay,
)
from bot.service.queues import DEFAULT_QUEUE, SCHEDULE_SUMMARIES
from bot.store.models import JobKind, JobSpec, JobState, SummaryOutcome
from bot.store.store import JobStore
from harness.gitkit import git
from harness.playbooks import SLOW_BRANCH_PREFIX, SUMMARY_TEXT, seed_upstream
from harness.redis_server import redis_server
from harness.stack import PROJECT_ROOT, PUBLISH_REF, REPO, Stack, job_stack, wait_until
from sandbox.host.upstream.mirror import sync_mirror
from tests.jobs.webhook_receiver import Receiver, webhook_receiver

# -- cron ----------------------------------------------------------------------------------


def _fields(schedule: crontab) -> tuple[set[int], ...]:
    # The expanded sets are attributes the type stubs do not declare.
    expanded: Any = schedule
    return (
        set(expanded.minute),
        set(expanded.hour),
        set(expanded.day_of_month),
        set(expanded.month_of_year),
        set(expanded.day_of_week),
    )


EVERY_DAY = set(range(7))


def test_cron_fields_are_read_in_cron_order() -> None:
    # Celery's crontab takes day_of_week third; cron has it last.
    minute, hour, day, month, weekday = _fields(parse_cron("5 4 3 2 *", repo="docs"))
    assert (minute, hour, day, month, weekday) == ({5}, {4}, {3}, {2}, EVERY_DAY)
    minute, hour, day, month, weekday = _fields(parse_cron("*/20 9-17 * * mon-fri", repo="docs"))
    assert minute == {0, 20, 40} and hour == set(range(9, 18))
    assert weekday == {1, 2, 3, 4, 5} and day == set(range(1, 32)) and month == set(range(1, 13))


@pytest.mark.parametrize(
    ("expression", "weekdays"),
    [
        ("0 0 * * 7", {0}),
        ("0 0 * * 0", {0}),
        ("0 0 * * 5-7", {5, 6, 0}),
        ("0 0 * * 1-7/2", {1, 3, 5, 0}),
        ("0 0 * * 1,7", {1, 0}),
        ("0 0 * * sun", {0}),
        ("@weekly", {0}),
    ],
)
def test_sunday_is_7_or_0(expression: str, weekdays: set[int]) -> None:
    assert _fields(parse_cron(expression, repo="docs"))[4] == weekdays


def test_macros_and_spacing() -> None:
    assert _fields(parse_cron("@daily", repo="docs"))[:2] == ({0}, {0})
    assert _fields(parse_cron("@HOURLY", repo="docs"))[:2] == ({0}, set(range(24)))
    assert _fields(parse_cron("  30   2 * *  * ", repo="docs"))[:2] == ({30}, {2})
    assert _fields(parse_cron("0 0 1 1 *", repo="docs")) == _fields(
        parse_cron("@yearly", repo="docs")
    )


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("", "needs five fields"),
        ("0 9 * *", "it has 4"),
        ("0 9 * * * *", "it has 6"),
        ("@reboot", "it has 1"),
        ("61 * * * *", "not a valid cron expression"),
        ("0 24 * * *", "not a valid cron expression"),
        ("0 0 0 * *", "not a valid cron expression"),
        ("0 0 * 13 *", "not a valid cron expression"),
        ("0 0 * * 8", "not a valid cron expression"),
        ("0 0 30 2 *", "not a valid cron expression"),
        ("often * * * *", "not a valid cron expression"),
        ("0 0 1 * mon", "both the day of the month and the day of the week"),
    ],
)
def test_an_invalid_expression_is_bem_900_naming_the_repository(expression: str, says: str) -> None:
    with pytest.raises(BeamError) as caught:
        parse_cron(expression, repo="handbook")
    assert caught.value.code == "BEM-900"
    assert f"repositories.handbook.summary_schedule {expression!r}" in caught.value.message
    assert says in caught.value.message


def _settings(**repositories: RepositoryConfig) -> Settings:
    return Settings(redis_url="redis://127.0.0.1:1/0", repositories=repositories)


def test_each_scheduled_repository_gets_a_beat_entry() -> None:
    app = create_app(
        _settings(
            docs=RepositoryConfig(upstream="/srv/docs.git", summary_schedule="30 6 * * 1-5"),
            site=RepositoryConfig(upstream="/srv/site.git"),
        )
    )
    schedule = app.conf.beat_schedule
    entry = schedule["summarize-docs"]
    assert entry["task"] == SCHEDULE_SUMMARIES and entry["args"] == ["docs"]
    assert entry["options"] == {"queue": DEFAULT_QUEUE}
    assert _fields(entry["schedule"])[:2] == ({30}, {6})
    assert not any(name.endswith("-site") for name in schedule)
    # What beat itself reads: its scheduler sees the same entry.
    beat = Scheduler(app=app, lazy=True)
    beat.setup_schedule()
    assert list(beat.schedule["summarize-docs"].args or ()) == ["docs"]


def test_an_invalid_schedule_stops_the_app_at_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The configuration refuses it as it is read, naming the repository.
    bad = '{"docs": {"upstream": "/srv/docs.git", "summary_schedule": "0 0 * *"}}'
    monkeypatch.setenv("RIVERBEAM_REPOSITORIES", bad)
    with pytest.raises(BeamError) as caught:
        load_settings()
    assert caught.value.code == "BEM-900" and "repositories.docs" in caught.value.message

    # A real beat process refuses to start, saying which repository and why.
    config = tmp_path / "riverbeam.toml"
    config.write_text(
        '[repositories.handbook]\nupstream = "/srv/docs.git"\nsummary_schedule = "0 0 * * 9"\n'
    )
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RIVERBEAM_")},
        "RIVERBEAM_CONFIG": str(config),
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    beat = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "bot.jobs.celery_app", "beat", "-s", "x"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert beat.returncode != 0
    assert "BEM-900" in beat.stderr and "repositories.handbook.summary_schedule" in beat.stderr


def test_the_follow_up_looks_again_sooner_first_then_every_half_minute() -> None:
    assert [poll_delay(poll) for poll in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert poll_delay(10_000) == 30


# -- which branches a run summarizes -------------------------------------------------------


def _commit(upstream: Path, branch: str, parents: list[str], name: str, when: int) -> str:
    """A commit on ``branch`` upstream adding file ``name``, committed at ``when``; with two
    parents it is a merge into the first."""
    repo = pygit2.Repository(str(upstream))
    first = repo.revparse_single(parents[0]).peel(pygit2.Commit)
    builder = repo.TreeBuilder(first.tree)
    builder.insert(name, repo.create_blob(f"{name}\n".encode()), pygit2.enums.FileMode.BLOB)
    signature = pygit2.Signature("Writer", "writer@example.com", when, 0)
    oids = [repo.revparse_single(parent).peel(pygit2.Commit).id for parent in parents]
    ref = f"refs/heads/{branch}"
    if ref in repo.references and repo.references[ref].target != oids[0]:
        raise AssertionError(f"{branch} would not move forward")
    oid = repo.create_commit(None, signature, signature, name, builder.write(), oids)
    repo.references.create(ref, oid, force=True)
    return str(oid)


def test_active_branches_are_the_unmerged_unprotected_ones_newest_first(tmp_path: Path) -> None:
    upstream = seed_upstream(tmp_path / "upstream.git")
    now = int(time.time())
    _commit(upstream, "docs/older", ["main"], "older.md", now - 300)
    _commit(upstream, "docs/newer", ["main"], "newer.md", now - 100)
    _commit(upstream, "docs/merged", ["main"], "merged.md", now - 200)
    _commit(upstream, "main", ["main", "docs/merged"], "merge.md", now - 150)
    git("-C", str(upstream), "branch", "docs/at-main", "main")
    _commit(upstream, "release/1.0", ["main"], "release.md", now - 50)
    _commit(upstream, PUBLISH_REF, ["main"], "live.md", now - 40)
    config = RepositoryConfig(upstream=str(upstream), publish_ref=PUBLISH_REF)
    workspaces = WorkspaceSettings(root=tmp_path / "ws", mirrors=tmp_path / "mirrors")

    def fetched() -> Path:
        return sync_mirror("docs", config, workspaces)

    assert active_branches(fetched(), config) == ["docs/newer", "docs/older"]
    assert active_branches(fetched(), config, limit=1) == ["docs/newer"]
    # A protected ref stays out whatever its case; an unprotected publish ref counts once it
    # is not the configured one.
    unpublished = config.model_copy(update={"publish_ref": None})
    assert active_branches(fetched(), unpublished)[0] == PUBLISH_REF

    # Once main has it, a branch is not active any more; a deleted branch is pruned.
    _commit(upstream, "main", ["main", "docs/older"], "merge-older.md", now - 30)
    git("-C", str(upstream), "branch", "-D", "docs/newer")
    assert active_branches(fetched(), config) == []

    with pytest.raises(BeamError) as caught:
        active_branches(fetched(), config.model_copy(update={"default_branch": "trunk"}))
    assert caught.value.code == "BEM-341"


# -- whole runs, with real workers ---------------------------------------------------------


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """The summary webhook."""
    with webhook_receiver("/summaries?key=s3cret") as state:
        yield state


# -- the run record and its delivery, on a real Redis (no workers) ------------------------


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path) as url:
        yield url


def _run(run_id: str, started: datetime, **fields: Any) -> ScheduleRun:
    return ScheduleRun(id=run_id, repo=REPO, started_at=started, **fields)


def test_runs_are_kept_newest_first_and_the_oldest_dropped(redis_url: str) -> None:
    runs = ScheduleRuns.from_url(redis_url, prefix="t")
    start = datetime(2025, 3, 1, tzinfo=UTC)
    for n in range(KEEP_RUNS + 3):
        runs.add(_run(f"run-{n:03d}", start + timedelta(minutes=n)))
    kept = runs.recent(REPO, limit=KEEP_RUNS + 10)
    assert len(kept) == KEEP_RUNS
    assert kept[0].id == f"run-{KEEP_RUNS + 2:03d}" and kept[-1].id == "run-003"
    assert runs.get(REPO, "run-002") is None and runs.recent("other") == []

    changed = runs.update(REPO, "run-050", lambda run: run.model_copy(update={"posting": "x"}))
    assert changed is not None and runs.get(REPO, "run-050") == changed
    assert runs.update(REPO, "run-050", lambda run: None) is None
    assert runs.update(REPO, "gone", lambda run: run) is None


def _schedule(redis_url: str, webhook: str) -> tuple[SummarySchedule, JobStore, ScheduleRuns]:
    repo = RepositoryConfig(upstream="/srv/docs.git", summary_webhook=webhook)
    settings = Settings(redis_url=redis_url, repositories={REPO: repo})
    store = JobStore.from_url(redis_url, prefix="t")
    runs = ScheduleRuns.from_url(redis_url, prefix="t")
    return SummarySchedule(settings, store, runs), store, runs


def _ended_job(store: JobStore, branch: str) -> str:
    spec = JobSpec(kind=JobKind.SUMMARIZE, repo=REPO, branch=branch, requested_by="schedule")
    job = store.jobs.create(spec)
    store.jobs.claim(job.id, worker="w", lease_seconds=60)
    store.jobs.transition(job.id, JobState.FAILED, from_states=(JobState.RUNNING,), owner="w")
    return job.id


def test_one_follow_up_posts_a_run_and_a_failed_post_passes_to_the_next(
    redis_url: str, receiver: Receiver
) -> None:
    receiver.requests.clear()
    receiver.statuses[:] = [500]
    schedule, store, runs = _schedule(redis_url, receiver.url)
    running = store.jobs.create(JobSpec(kind=JobKind.SUMMARIZE, repo=REPO, branch="docs/b"))
    jobs = {"docs/a": _ended_job(store, "docs/a"), "docs/b": running.id}
    runs.add(_run("r1", datetime.now(UTC), jobs=jobs))

    # A job still queued: look again later, sooner first.
    assert schedule.finish(REPO, "r1", claimant="A", poll=0) == poll_delay(1)
    store.jobs.request_cancel(running.id)
    # Follow-up A posts (HTTP 500): it is to try again in 2 s and lets go of the delivery.
    assert schedule.finish(REPO, "r1", claimant="A", poll=1) == 2.0
    failed = runs.get(REPO, "r1")
    assert failed is not None and failed.posting is None and failed.delivery is not None
    assert (failed.delivery.delivered, failed.delivery.status) == (False, 500)
    assert failed.delivery.error is not None and failed.delivery.error.code == "BEM-511"
    # A duplicate follow-up B takes the delivery over and delivers; nobody posts again.
    assert schedule.finish(REPO, "r1", claimant="B", poll=0) is None
    assert schedule.finish(REPO, "r1", claimant="A", poll=2) is None
    assert schedule.finish(REPO, "r1", claimant="B", poll=1) is None
    assert len(receiver.bodies) == 2 and receiver.bodies[0] == receiver.bodies[1]
    done = runs.get(REPO, "r1")
    assert done is not None and done.delivery is not None and done.posting == "B"
    assert (done.delivery.delivered, done.delivery.attempts) == (True, 2)
    states = {
        item["branch"]: (item["state"], item["summary"]) for item in receiver.bodies[1]["summaries"]
    }
    assert states == {"docs/a": ("failed", None), "docs/b": ("cancelled", None)}


def test_a_webhook_that_keeps_failing_is_tried_three_times(
    redis_url: str, receiver: Receiver
) -> None:
    receiver.requests.clear()
    receiver.statuses[:] = [502, 502, 502, 502]
    schedule, _, runs = _schedule(redis_url, receiver.url)
    runs.add(_run("r2", datetime.now(UTC)))
    assert [schedule.finish(REPO, "r2", claimant="A", poll=n) for n in range(4)] == [
        *RETRY_SECONDS,
        None,
        None,
    ]
    run = runs.get(REPO, "r2")
    assert run is not None and run.delivery is not None
    assert (run.delivery.delivered, run.delivery.attempts) == (False, MAX_DELIVERIES)
    assert len(receiver.bodies) == MAX_DELIVERIES
    receiver.statuses.clear()


@pytest.fixture(scope="module")
def stack(receiver: Receiver) -> Iterator[Stack]:
    scheduled = {"summary_schedule": "0 6 * * *", "summary_webhook": receiver.url}
    with job_stack(repositories={REPO: scheduled}) as running:
        running.start_worker("a")
        running.start_worker("b")
        yield running


@pytest.fixture
def fresh(stack: Stack, receiver: Receiver) -> Iterator[Stack]:
    """Each test starts with no branch but main upstream and an empty receiver."""
    receiver.requests.clear()
    receiver.statuses.clear()
    yield stack
    for ref in git("-C", str(stack.upstream), "for-each-ref", "--format=%(refname:short)").split():
        if ref != "main":
            git("-C", str(stack.upstream), "branch", "-D", ref)


def _runs(stack: Stack) -> ScheduleRuns:
    return ScheduleRuns.from_url(stack.redis_url, prefix=stack.settings.jobs.prefix)


def _trigger(stack: Stack) -> AsyncResult[Any]:
    return stack.app.send_task(SCHEDULE_SUMMARIES, args=[REPO], queue=DEFAULT_QUEUE)


def _beat_trigger(stack: Stack) -> AsyncResult[Any]:
    """What beat does when the repository's cron entry is due."""
    beat = Scheduler(app=stack.app, lazy=True)
    beat.setup_schedule()
    sent: AsyncResult[Any] = beat.apply_async(beat.schedule[f"summarize-{REPO}"], advance=False)
    return sent


def _delivered(stack: Stack, run_id: str, timeout: float = 25.0) -> ScheduleRun:
    """The run once its jobs ended and its summaries were posted."""
    runs = _runs(stack)
    found: list[ScheduleRun] = []

    def done() -> bool:
        run = runs.get(REPO, run_id)
        found[:] = [run] if run else []
        return run is not None and run.delivery is not None and run.delivery.delivered

    wait_until(done, timeout, lambda: f"run {run_id} did not finish: {found}")
    return found[-1]


@pytest.mark.slow
def test_overlapping_triggers_start_one_run_and_post_its_summaries_once(
    fresh: Stack, receiver: Receiver
) -> None:
    stack = fresh
    before = {run.id for run in _runs(stack).recent(REPO, 100)}
    install = stack.push_branch(
        f"{SLOW_BRANCH_PREFIX}install",
        {"docs/install.md": "# Install\n\nInstall the tool with pip.\n"},
        "Fix the install page",
    )
    faq = stack.push_branch(
        f"{SLOW_BRANCH_PREFIX}faq", {"docs/faq.md": "# FAQ\n"}, "Add a FAQ page"
    )
    git("-C", str(stack.upstream), "branch", "merged", "main")  # nothing beyond main

    # Beat's own send and a second trigger (another beat, a manual run) at the same time.
    answers = [result.get(timeout=20) for result in (_beat_trigger(stack), _trigger(stack))]
    started = [answer for answer in answers if answer["run"] is not None]
    skipped = [answer for answer in answers if answer["skipped"] is not None]
    assert len(started) == 1 and len(skipped) == 1, answers
    run_id = started[0]["run"]
    jobs = started[0]["jobs"]
    assert sorted(jobs) == [f"{SLOW_BRANCH_PREFIX}faq", f"{SLOW_BRANCH_PREFIX}install"]
    assert {run.id for run in _runs(stack).recent(REPO, 100)} - before == {run_id}

    run = _delivered(stack, run_id)
    time.sleep(1.0)  # a second post would come now
    assert len(receiver.bodies) == 1
    body = receiver.bodies[0]
    assert (body["repository"], body["run"]) == (REPO, run_id)
    by_branch = {item["branch"]: item for item in body["summaries"]}
    assert set(by_branch) == set(jobs)
    expected = {
        f"{SLOW_BRANCH_PREFIX}install": (install, "Fix the install page", "docs/install.md"),
        f"{SLOW_BRANCH_PREFIX}faq": (faq, "Add a FAQ page", "docs/faq.md"),
    }
    for branch, (sha, subject, path) in expected.items():
        item = by_branch[branch]
        assert item["job"] == jobs[branch] and item["state"] == "succeeded"
        summary = SummaryOutcome.model_validate(item["summary"])
        assert (summary.branch, summary.base) == (branch, "main")
        assert [(c.sha, c.subject) for c in summary.commits] == [(sha, subject)]
        assert summary.files == [path] and summary.summary == SUMMARY_TEXT
    assert run.delivery is not None and run.delivery.delivered and run.delivery.attempts == 1
    assert "s3cret" not in run.delivery.url
    assert [summary.model_dump(mode="json") for summary in run.summaries] == body["summaries"]
    for job_id in jobs.values():
        record = stack.store.jobs.get(job_id)
        assert record.spec.kind is JobKind.SUMMARIZE and record.state is JobState.SUCCEEDED
        assert record.spec.requested_by == SCHEDULE_REQUESTER
        assert record.spec.metadata == {"schedule_run": run_id}
        assert stack.sandbox_containers(job_id) == []

    # The run is over: the next trigger starts a new one.
    again = _trigger(stack).get(timeout=20)
    assert again["run"] not in (None, run_id) and again["skipped"] is None
    _delivered(stack, again["run"])
    assert [body["run"] for body in receiver.bodies] == [run_id, again["run"]]


@pytest.mark.slow
def test_a_failed_post_is_tried_again_and_delivered_once(fresh: Stack, receiver: Receiver) -> None:
    stack = fresh
    stack.push_branch("docs/typo", {"docs/index.md": "# Docs\n"}, "Tidy the index")
    receiver.statuses[:] = [503]
    run_id = _trigger(stack).get(timeout=20)["run"]
    run = _delivered(stack, run_id)
    time.sleep(1.0)
    assert len(receiver.bodies) == 2 and receiver.bodies[0] == receiver.bodies[1]
    assert run.finished_at is not None and run.delivery is not None
    assert (run.delivery.delivered, run.delivery.attempts, run.delivery.status) == (True, 2, 204)
    assert [item["branch"] for item in receiver.bodies[1]["summaries"]] == ["docs/typo"]


@pytest.mark.slow
def test_a_run_with_no_active_branch_posts_an_empty_list(fresh: Stack, receiver: Receiver) -> None:
    stack = fresh
    answer = _trigger(stack).get(timeout=20)
    assert answer["jobs"] == {}
    run = _delivered(stack, answer["run"])
    assert run.jobs == {} and run.summaries == []
    assert [body["summaries"] for body in receiver.bodies] == [[]]
