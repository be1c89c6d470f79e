"""The gateway: a decoding client refused, outages as BEM-504 without secrets, the bound on
a transaction's retries, and what a Redis restart keeps."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.client import Pipeline

from bot.core.errors import BeamError, JobError
from bot.core.frames import ChunkFrame, ThinkingFrame
from bot.store.gateway import MAX_WATCH_RETRIES, Writes
from bot.store.models import JobState
from bot.store.store import JobStore
from harness.redis_server import RedisServer, running_redis
from tests.store.kit import author, code_of, open_store, parked, seen

REDIS_CONF = Path(__file__).resolve().parents[2] / "docker" / "redis.conf"


def test_a_decoding_client_is_refused(server: RedisServer) -> None:
    decoding = redis.Redis.from_url(server.url, decode_responses=True)
    with pytest.raises(ValueError, match="decode_responses"):
        JobStore(decoding)
    decoding.close()


def test_redis_going_away_is_bem_504_without_secrets_and_recovers(tmp_path: Path) -> None:
    with running_redis(tmp_path, appendonly=True) as server:
        plain = open_store(server.url)
        record = plain.create(author())
        admin = redis.Redis.from_url(server.url)
        admin.config_set("requirepass", "s3cret-pw")
        admin.close()
        secret_url = server.url.replace("redis://", "redis://:s3cret-pw@")
        guarded = open_store(secret_url, prefix=plain.keys.prefix)
        assert guarded.get(record.id) == record
        wrong = open_store(server.url.replace("redis://", "redis://:wrong-pw@"))
        with pytest.raises(JobError) as refused:
            wrong.get(record.id)
        assert refused.value.code == "BEM-504"
        assert "authentication failed" in refused.value.message

        server.stop()
        calls: list[Callable[[], object]] = [
            lambda: guarded.get(record.id),
            lambda: guarded.create(author()),
            lambda: guarded.claim(record.id, worker="w", lease_seconds=1),
            lambda: guarded.read_events(record.id, block_ms=100),
            lambda: guarded.append_event(record.id, ChunkFrame(text="x")),
            lambda: guarded.pending_approvals(),
            lambda: guarded.list(),
        ]
        for call in calls:
            with pytest.raises(JobError) as caught:
                call()
            assert caught.value.code == "BEM-504"
            assert "s3cret" not in str(caught.value) and "pw" not in str(caught.value)
            assert f"127.0.0.1:{server.port}" in caught.value.message

        server.start()  # the password was runtime-only: the restarted server has none
        assert plain.get(record.id).state is JobState.QUEUED  # the client reconnects
        for store in (plain, guarded, wrong):
            store.client.close()


def fill(store: JobStore) -> dict[str, Any]:
    """One of everything the store keeps, for a restart to bring back."""
    queued = store.create(author("queued"), idempotency_key="retry-me")
    running = store.create(author("running"))
    store.claim(running.id, worker="w1", lease_seconds=600)
    waiting = parked(store)
    store.save_run_state(waiting.id, '{"version": 1, "pending": "call-1"}')
    store.save_snapshot(waiting.id, b"\x00bundle\xff" * 100)
    decided = parked(store, approval_id="ap9")
    store.decide(
        decided.id, binding=seen(store, decided.id), approve=True, by="bob", comment="ship it"
    )
    store.append_event(running.id, ThinkingFrame(text="thinking"))
    store.transition(running.id, JobState.SUCCEEDED, from_states={JobState.RUNNING})
    token = store.try_lock("docs", ttl_seconds=600)
    return {
        "jobs": store.list()[0],
        "idempotent": queued.id,
        "events": store.read_events(running.id),
        "pending": store.pending_approvals(),
        "decided": (store.approval(decided.id), store.approval_history(decided.id)),
        "parked": (store.load_run_state(waiting.id), store.load_snapshot(waiting.id)),
        "waiting": waiting.id,
        "decided_id": decided.id,
        "running": running.id,
        "token": token,
    }


def test_a_redis_restart_with_aof_keeps_everything(tmp_path: Path) -> None:
    with running_redis(tmp_path, appendonly=True) as server:
        store = open_store(server.url)
        before = fill(store)
        server.crash()  # SIGKILL, no shutdown save: only the append-only file remains
        server.start()
        assert store.list()[0] == before["jobs"]
        assert store.create(author("queued"), idempotency_key="retry-me").id == before["idempotent"]
        assert store.read_events(before["running"]) == before["events"]
        assert store.pending_approvals() == before["pending"]
        decided_id = before["decided_id"]
        assert (store.approval(decided_id), store.approval_history(decided_id)) == before["decided"]
        assert (
            store.load_run_state(before["waiting"]),
            store.load_snapshot(before["waiting"]),
        ) == before["parked"]
        assert store.try_lock("docs", ttl_seconds=1) is None
        # ...and it goes on: the decided approval is applied once, after the restart too.
        assert store.claim_resume(decided_id, worker="w9", lease_seconds=30) is not None
        assert store.claim_resume(decided_id, worker="w9", lease_seconds=30) is None
        store.client.close()


def test_a_redis_restart_without_persistence_loses_the_jobs(tmp_path: Path) -> None:
    with running_redis(tmp_path, appendonly=False) as server:
        store = open_store(server.url)
        record = store.create(author())
        server.crash()
        server.start()
        assert code_of(lambda: store.get(record.id)) == "BEM-500"
        assert store.list() == ([], None)
        store.client.close()


def test_the_shipped_redis_conf_persists_and_never_evicts(tmp_path: Path) -> None:
    with running_redis(tmp_path, config=REDIS_CONF) as server:
        admin = redis.Redis.from_url(server.url, decode_responses=True)
        settings = {
            name: admin.config_get(name)[name]
            for name in ("appendonly", "appendfsync", "maxmemory-policy", "save")
        }
        admin.close()
        assert settings == {
            "appendonly": "yes",
            "appendfsync": "everysec",
            "maxmemory-policy": "noeviction",
            "save": "3600 1 300 100 60 10000",
        }
        store = open_store(server.url)
        before = fill(store)
        server.crash()
        server.start()
        assert store.list()[0] == before["jobs"]
        assert store.read_events(before["running"]) == before["events"]
        store.client.close()


def test_a_transaction_that_keeps_colliding_is_bem_504_after_the_bound(
    store: JobStore, client: redis.Redis
) -> None:
    key = store.keys.of("contended")
    attempts = []

    def body(pipe: Pipeline) -> tuple[None, Writes | None]:
        attempts.append(pipe.get(key))
        client.incr(key)  # another writer, every time between our read and our EXEC
        return None, lambda tx: tx.set(key, "mine")

    with pytest.raises(BeamError) as caught:
        store.atomic([key], body)
    assert caught.value.code == "BEM-504"
    assert "overloaded" in caught.value.message and key in caught.value.message
    assert len(attempts) == MAX_WATCH_RETRIES
    assert client.get(key) == str(MAX_WATCH_RETRIES).encode()  # never "mine"


def test_a_transaction_that_writes_nothing_runs_once_whatever_changed(
    store: JobStore, client: redis.Redis
) -> None:
    """Without writes there is no EXEC to refuse: a read-only body is not run again when a
    watched key changes under it."""
    key = store.keys.of("read-only")
    attempts = []

    def body(pipe: Pipeline) -> tuple[int, Writes | None]:
        attempts.append(pipe.get(key))
        client.incr(key)
        return len(attempts), None

    assert store.atomic([key], body) == 1
    assert attempts == [None]
    # The pipeline went back to the pool unwatched: the next transaction is not refused.
    assert store.atomic([key], lambda pipe: (pipe.get(key), lambda tx: tx.set(key, "x")))
    assert client.get(key) == b"x"
