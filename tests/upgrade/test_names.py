"""The names a release shares with the one before it, checked against literals: messages
the previous release queued name its tasks and queues, beat's schedule file keys on its
entry names, deployments run its app path, console script and model factory, its Redis keys
hold parked jobs, and its containers carry its labels. Renaming any of them strands what
the previous release left behind (``test_across_releases`` proves it whole, with the
release before the restructuring); change one only with a migration, and say so in
docs/operations.md ("Upgrading")."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from bot.config import RepositoryConfig, Settings, WorkspaceSettings
from bot.core.factories import load_factory
from bot.core.frames import ChunkFrame
from bot.demo import demo_model
from bot.jobs.celery_app import create_app
from bot.service import queues
from bot.service.queues import (
    DEFAULT_QUEUE,
    FORGE_QUEUE,
    HOSTS_EXCHANGE,
    HOSTS_QUEUE,
    queue_for,
    worker_queues,
)
from bot.store.models import Approval, JobKind, JobSpec, JobState
from bot.store.store import JobStore
from harness.redis_server import RedisServer, running_redis
from harness.stack import PROJECT_ROOT, clean_environment
from sandbox.host.container import hardening
from sandbox.host.upstream.mirror import mirror_path
from sandbox.host.workspace import snapshot_format
from sandbox.host.workspace.prepare import job_directory

TASKS = {
    "RUN_JOB": "riverbeam.run_job",
    "RESUME_JOB": "riverbeam.resume_job",
    "REAP_SANDBOXES": "riverbeam.reap_sandboxes",
    "COLLECT_WORKSPACES": "riverbeam.collect_workspaces",
    "SCHEDULE_SUMMARIES": "riverbeam.schedule_summaries",
    "FINISH_SCHEDULE_RUN": "riverbeam.finish_schedule_run",
    "RECOVER_JOBS": "riverbeam.recover_jobs",
    "RESUME_DECIDED": "riverbeam.resume_decided",
    "HANDLE_FORGE_EVENT": "riverbeam.handle_forge_event",
    "DELIVER_OUTBOX": "riverbeam.deliver_outbox",
}
JOB_QUEUES = ["author", "review", "summarize", "commit-notes", "publish"]
BEAT_ENTRIES = {
    "reap-sandboxes": "riverbeam.reap_sandboxes",
    "collect-workspaces": "riverbeam.collect_workspaces",
    "recover-jobs": "riverbeam.recover_jobs",
    "resume-decided": "riverbeam.resume_decided",
    "deliver-outbox": "riverbeam.deliver_outbox",
    "summarize-docs": "riverbeam.schedule_summaries",
}
STORED_KEYS = {
    "riverbeam:job:<id>",
    "riverbeam:jobs",
    "riverbeam:leases",
    "riverbeam:events:<id>",
    "riverbeam:run:<id>",
    "riverbeam:snapshot:<id>",
    "riverbeam:approval:<id>",
    "riverbeam:approvals:pending",
    "riverbeam:approvals:summaries",
    "riverbeam:approvals:decided",
    "riverbeam:approvals:history:<id>",
    "riverbeam:deployment",
}
"""What a job that parks, is decided and streams events leaves in Redis (docs/storage.md)."""
LABELS = {
    "JOB_LABEL": "riverbeam.job",
    "DEADLINE_LABEL": "riverbeam.deadline",
    "ROLE_LABEL": "riverbeam.role",
    "DEPLOYMENT_LABEL": "riverbeam.deployment",
    "ROLE_SANDBOX": "sandbox",
}


def _app() -> Celery:
    docs = RepositoryConfig(upstream="/srv/docs.git", summary_schedule="30 6 * * 1-5")
    return create_app(Settings(redis_url="redis://127.0.0.1:1/0", repositories={"docs": docs}))


def test_task_names_and_priorities() -> None:
    assert {name: getattr(queues, name) for name in TASKS} == TASKS
    assert set(TASKS.values()) <= set(_app().tasks)
    assert (queues.RUN_PRIORITY, queues.RESUME_PRIORITY) == (6, 0)


def test_queue_names() -> None:
    assert [queue_for(kind) for kind in JobKind] == JOB_QUEUES
    assert [kind.value for kind in JobKind] == JOB_QUEUES
    assert (DEFAULT_QUEUE, FORGE_QUEUE, HOSTS_QUEUE) == ("default", "forge", "riverbeam.hosts")
    assert (HOSTS_EXCHANGE.name, HOSTS_EXCHANGE.type) == ("riverbeam.hosts", "fanout")
    assert worker_queues() == [*JOB_QUEUES, "default", "forge", "riverbeam.hosts"]


def test_beat_entry_names() -> None:
    schedule = _app().conf.beat_schedule
    assert {name: entry["task"] for name, entry in schedule.items()} == BEAT_ENTRIES


def test_entry_points() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "bot.cli", "--help"],
        cwd=PROJECT_ROOT,
        env={**clean_environment(), "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"riverbeam": "bot.cli:main"}
    installed = importlib.metadata.entry_points(group="console_scripts", name="riverbeam")
    assert [point.value for point in installed] == ["bot.cli:main"]
    assert callable(installed["riverbeam"].load())
    assert (
        load_factory("bot.demo:demo_model", setting="model.factory", code="BEM-508") is demo_model
    )


FIND_APP = (
    "import json; from celery.app.utils import find_app; "
    "print(json.dumps(sorted(find_app('bot.jobs.celery_app').tasks)))"
)


def test_celery_finds_the_app_by_its_path(tmp_path: Path) -> None:
    """``celery -A bot.jobs.celery_app`` (docs/jobs.md) finds the app there, as Celery's own
    ``find_app`` does; in a process of its own, as a worker's, since the app is built once
    per process from its configuration."""
    config = tmp_path / "riverbeam.toml"
    config.write_text('redis_url = "redis://127.0.0.1:1/0"\n')
    environment = {**clean_environment(), "RIVERBEAM_CONFIG": str(config)}
    found = subprocess.run(
        [sys.executable, "-c", FIND_APP],
        cwd=PROJECT_ROOT,
        env={**environment, "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert found.returncode == 0, found.stderr
    assert set(TASKS.values()) <= set(json.loads(found.stdout))


def test_container_labels_and_snapshot_format() -> None:
    assert {name: getattr(hardening, name) for name in LABELS} == LABELS
    assert snapshot_format.FORMAT_VERSION == 1


def test_workspace_and_mirror_layout(tmp_path: Path) -> None:
    settings = WorkspaceSettings(root=tmp_path / "workspaces", mirrors=tmp_path / "mirrors")
    assert job_directory(settings, "3f9c2a71b0de") == tmp_path / "workspaces" / "3f9c2a71b0de"
    assert mirror_path(settings, "docs") == tmp_path / "mirrors" / "docs.git"


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as running:
        yield running


def test_redis_keys(redis_server: RedisServer) -> None:
    """What the store writes for a job that parks, is decided and streams events: the keys
    of docs/storage.md's table, under the default prefix."""
    store = JobStore.from_url(redis_server.url)
    record = store.jobs.create(
        JobSpec(kind=JobKind.AUTHOR, repo="docs", request="fix", requested_by="a")
    )
    job = record.id
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    written: set[str] = set()

    def look() -> None:
        written.update(key.replace(job, "<id>") for key in client.scan_iter(match="riverbeam:*"))

    store.jobs.claim(job, worker="w", lease_seconds=30)
    look()
    store.events.append(job, ChunkFrame(text="hello"))
    store.blobs.save_run_state(job, "{}")
    store.blobs.save_snapshot(job, b"snapshot")
    approval = Approval(
        id="ap1",
        job_id=job,
        repo="docs",
        requested_by="a",
        call_id="c1",
        tool="git_push",
        arguments={},
        commit_sha="a" * 40,
        target_ref=f"riverbeam/{job}",
        diff_digest="d" * 64,
    )
    store.approvals.open(approval)
    look()
    store.jobs.transition(
        job, JobState.AWAITING_APPROVAL, from_states={JobState.RUNNING}, approval_id="ap1"
    )
    store.approvals.decide(job, approve=True, by="b", binding=approval.binding())
    store.gateway.deployment()
    look()
    # A new key may be added (the previous release never reads it); none may go or move.
    assert written >= STORED_KEYS, sorted(STORED_KEYS - written)
    table = (PROJECT_ROOT / "docs" / "storage.md").read_text()
    assert [key for key in sorted(STORED_KEYS) if f"| `{key}` |" not in table] == []
