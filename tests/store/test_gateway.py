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
from bot.store.gateway import MAX_WATCH_RETRIES, RedisGateway, Writes
from bot.store.models import JobState
from bot.store.store import JobStore
from harness.redis_server import RedisServer, running_redis
from tests.store.kit import author, code_of, open_store, parked, seen

REDIS_CONF = Path(__file__).resolve().parents[2] / "docker" / "redis.conf"


def test_a_decoding_client_is_refused(server: RedisServer) -> None:
    decoding = redis.Redis.from_url(server.url, decode_responses=True)
    with pytest.raises(ValueError, match="decode_responses"):
        RedisGateway(decoding)
    decoding.close()


def test_redis_going_away_is_bem_504_without_secrets_and_recovers(tmp_path: Path) -> None:
    with running_redis(tmp_path, appendonly=True) as server:
        plain = open_store(server.url)
        record = plain.jobs.create(author())
        admin = redis.Redis.from_url(server.url)
        admin.config_set("requirepass", "s3cret-pw")
        admin.close()
        secret_url = server.url.replace("redis://", "redis://:s3cret-pw@")
        guarded = open_store(secret_url, prefix=plain.gateway.keys.prefix)
        assert guarded.jobs.get(record.id) == record
        wrong = open_store(server.url.replace("redis://", "redis://:wrong-pw@"))
        with pytest.raises(JobError) as refused:
            wrong.jobs.get(record.id)
        assert refused.value.code == "BEM-504"
        assert "authentication failed" in refused.value.message

        server.stop()
        calls: list[Callable[[], object]] = [
            lambda: guarded.jobs.get(record.id),
            lambda: guarded.jobs.create(author()),
            lambda: guarded.jobs.claim(record.id, worker="w", lease_seconds=1),
            lambda: guarded.events.read(record.id, block_ms=100),
            lambda: guarded.events.append(record.id, ChunkFrame(text="x")),
            lambda: guarded.approvals.pending(),
            lambda: guarded.listing.list(),
        ]
        for call in calls:
            with pytest.raises(JobError) as caught:
                call()
            assert caught.value.code == "BEM-504"
            assert "s3cret" not in str(caught.value) and "pw" not in str(caught.value)
            assert f"127.0.0.1:{server.port}" in caught.value.message

        server.start()  # the password was runtime-only: the restarted server has none
        assert plain.jobs.get(record.id).state is JobState.QUEUED  # the client reconnects
        for store in (plain, guarded, wrong):
            store.gateway.client.close()


def fill(store: JobStore) -> dict[str, Any]:
    """One of everything the store keeps, for a restart to bring back."""
    queued = store.jobs.create(author("queued"), idempotency_key="retry-me")
    running = store.jobs.create(author("running"))
    store.jobs.claim(running.id, worker="w1", lease_seconds=600)
    waiting = parked(store)
    store.blobs.save_run_state(waiting.id, '{"version": 1, "pending": "call-1"}')
    store.blobs.save_snapshot(waiting.id, b"\x00bundle\xff" * 100)
    decided = parked(store, approval_id="ap9")
    store.approvals.decide(
        decided.id, binding=seen(store, decided.id), approve=True, by="bob", comment="ship it"
    )
    store.events.append(running.id, ThinkingFrame(text="thinking"))
    store.jobs.transition(running.id, JobState.SUCCEEDED, from_states={JobState.RUNNING})
    token = store.locks.try_lock("docs", ttl_seconds=600)
    return {
        "jobs": store.listing.list()[0],
        "idempotent": queued.id,
        "events": store.events.read(running.id),
        "pending": store.approvals.pending(),
        "decided": (store.approvals.get(decided.id), store.approvals.history(decided.id)),
        "parked": (store.blobs.load_run_state(waiting.id), store.blobs.load_snapshot(waiting.id)),
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
        assert store.listing.list()[0] == before["jobs"]
        assert (
            store.jobs.create(author("queued"), idempotency_key="retry-me").id
            == before["idempotent"]
        )
        assert store.events.read(before["running"]) == before["events"]
        assert store.approvals.pending() == before["pending"]
        decided_id = before["decided_id"]
        assert (store.approvals.get(decided_id), store.approvals.history(decided_id)) == before[
            "decided"
        ]
        assert (
            store.blobs.load_run_state(before["waiting"]),
            store.blobs.load_snapshot(before["waiting"]),
        ) == before["parked"]
        assert store.locks.try_lock("docs", ttl_seconds=1) is None
        # ...and it goes on: the decided approval is applied once, after the restart too.
        assert store.jobs.claim_resume(decided_id, worker="w9", lease_seconds=30) is not None
        assert store.jobs.claim_resume(decided_id, worker="w9", lease_seconds=30) is None
        store.gateway.client.close()


def test_a_redis_restart_without_persistence_loses_the_jobs(tmp_path: Path) -> None:
    with running_redis(tmp_path, appendonly=False) as server:
        store = open_store(server.url)
        record = store.jobs.create(author())
        server.crash()
        server.start()
        assert code_of(lambda: store.jobs.get(record.id)) == "BEM-500"
        assert store.listing.list() == ([], None)
        store.gateway.client.close()


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
        assert store.listing.list()[0] == before["jobs"]
        assert store.events.read(before["running"]) == before["events"]
        store.gateway.client.close()


def test_a_transaction_that_keeps_colliding_is_bem_504_after_the_bound(
    store: JobStore, client: redis.Redis
) -> None:
    key = store.gateway.keys.of("contended")
    attempts = []

    def body(pipe: Pipeline) -> tuple[None, Writes | None]:
        attempts.append(pipe.get(key))
        client.incr(key)  # another writer, every time between our read and our EXEC
        return None, lambda tx: tx.set(key, "mine")

    with pytest.raises(BeamError) as caught:
        store.gateway.atomic([key], body)
    assert caught.value.code == "BEM-504"
    assert "overloaded" in caught.value.message and key in caught.value.message
    assert len(attempts) == MAX_WATCH_RETRIES
    assert client.get(key) == str(MAX_WATCH_RETRIES).encode()  # never "mine"


def test_a_transaction_that_writes_nothing_runs_once_whatever_changed(
    store: JobStore, client: redis.Redis
) -> None:
    """Without writes there is no EXEC to refuse: a read-only body is not run again when a
    watched key changes under it."""
    key = store.gateway.keys.of("read-only")
    attempts = []

    def body(pipe: Pipeline) -> tuple[int, Writes | None]:
        attempts.append(pipe.get(key))
        client.incr(key)
        return len(attempts), None

    assert store.gateway.atomic([key], body) == 1
    assert attempts == [None]
    # The pipeline went back to the pool unwatched: the next transaction is not refused.
    assert store.gateway.atomic([key], lambda pipe: (pipe.get(key), lambda tx: tx.set(key, "x")))
    assert client.get(key) == b"x"
