"""The cancel flag (``<prefix>:cancel:<id>``): what the check before every model and tool
call reads with one EXISTS, instead of the whole job record; and the cancels of the previous
release, which set ``cancel_requested`` in the record and no flag."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis

from bot.core.errors import BeamError
from bot.jobs.lease import LeaseKeeper, StopCheck
from bot.store.gateway import RedisGateway
from bot.store.models import JobState
from bot.store.store import JobStore
from harness.redis_server import RedisServer
from tests.store.kit import author, cancel_as_the_previous_release, open_store


class CountingRedis(redis.Redis):
    """A client that records every command it sends outside a pipeline."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.sent: list[tuple[str, ...]] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(tuple(str(arg) for arg in args))
        return super().execute_command(*args, **options)


def running(store: JobStore, worker: str = "w1") -> str:
    record = store.jobs.create(author())
    assert store.jobs.claim(record.id, worker=worker, lease_seconds=30) is not None
    return record.id


def sweep_until_backfilled(store: JobStore, client: redis.Redis) -> None:
    """Run the recovery sweep's store call (one SCAN page of backfill each) until the
    backfill's marker says it covered the keyspace."""
    for _ in range(1000):
        if client.get(store.gateway.keys.cancel_backfill) == b"done":
            return
        store.leases.expired()
    raise AssertionError("the backfill never finished")


def stop_reason(check: StopCheck) -> str | None:
    try:
        check.check()
    except BeamError as error:
        return error.code
    return None


def test_the_check_before_each_call_is_one_exists_and_reads_no_record(
    server: RedisServer,
) -> None:
    store = JobStore(
        RedisGateway(CountingRedis.from_url(server.url), prefix=f"t{uuid.uuid4().hex[:8]}")
    )
    client = store.gateway.client
    assert isinstance(client, CountingRedis)
    job_id = running(store)
    check = StopCheck(store, job_id, LeaseKeeper(store, job_id, worker="w1", seconds=30))
    client.sent.clear()
    for _ in range(5):
        assert stop_reason(check) is None
    store.jobs.request_cancel(job_id)
    client.sent.clear()
    assert stop_reason(check) == "BEM-506"
    assert stop_reason(check) == "BEM-506"  # remembered: the store is not asked again
    assert client.sent == [("EXISTS", store.gateway.keys.cancel(job_id))]
    assert all(command[0] != "GET" for command in client.sent)
    store.gateway.client.close()


def test_a_cancel_sets_the_flag_beside_the_record_and_the_end_deletes_it(
    store: JobStore, client: redis.Redis
) -> None:
    job_id = running(store)
    assert not store.jobs.cancel_requested(job_id)
    asked = store.jobs.request_cancel(job_id)
    assert asked.state is JobState.RUNNING and asked.cancel_requested  # what the API shows
    assert store.jobs.cancel_requested(job_id)
    ttl = client.pttl(store.gateway.keys.cancel(job_id))
    assert 0 < ttl <= 1260 * 1000  # jobs.time_limit_seconds + jobs.lease_seconds
    ended = store.jobs.transition(job_id, JobState.CANCELLED, from_states={JobState.RUNNING})
    assert ended is not None and ended.state is JobState.CANCELLED
    assert not store.jobs.cancel_requested(job_id)
    assert client.exists(store.gateway.keys.cancel(job_id)) == 0


def test_a_job_cancelled_at_once_leaves_no_flag(store: JobStore, client: redis.Redis) -> None:
    queued = store.jobs.create(author())
    assert store.jobs.request_cancel(queued.id).state is JobState.CANCELLED
    assert client.exists(store.gateway.keys.cancel(queued.id)) == 0


def test_the_flag_lives_as_long_as_the_settings_say(server: RedisServer) -> None:
    store = open_store(server.url, cancel_ttl_seconds=5.0)
    job_id = running(store)
    store.jobs.request_cancel(job_id)
    assert 0 < store.gateway.client.pttl(store.gateway.keys.cancel(job_id)) <= 5000
    store.gateway.client.close()


def test_a_cancel_of_the_previous_release_stops_the_job_at_the_next_renewal(
    store: JobStore,
) -> None:
    job_id = running(store)
    lease = LeaseKeeper(store, job_id, worker="w1", seconds=30)
    check = StopCheck(store, job_id, lease)
    cancel_as_the_previous_release(store, job_id)
    assert not store.jobs.cancel_requested(job_id)  # no flag: the record alone says it
    assert stop_reason(check) is None
    assert lease.renew()  # what the keeper's thread does every third of the lease
    assert lease.cancelled and not lease.lost
    assert stop_reason(check) == "BEM-506"


def test_a_cancel_of_the_previous_release_stops_a_running_keeper(store: JobStore) -> None:
    """The same through the keeper's own thread, on a short lease."""
    job_id = running(store)
    with LeaseKeeper(store, job_id, worker="w1", seconds=0.3) as lease:
        check = StopCheck(store, job_id, lease)
        cancel_as_the_previous_release(store, job_id)
        give_up = time.monotonic() + 30  # a renewal comes every 0.1 s; this only ends a hang
        while stop_reason(check) is None and time.monotonic() < give_up:
            time.sleep(0.01)
        assert not lease.lost
    assert check.reason is not None and check.reason.code == "BEM-506"


def test_the_recovery_sweep_backfills_the_flags_of_the_previous_release(
    store: JobStore, client: redis.Redis
) -> None:
    asked = [running(store) for _ in range(3)]
    for job_id in asked:
        cancel_as_the_previous_release(store, job_id)
    ended = running(store)
    cancel_as_the_previous_release(store, ended)
    store.jobs.transition(ended, JobState.FAILED, from_states={JobState.RUNNING})
    untouched = running(store)
    sweep_until_backfilled(store, client)
    assert all(store.jobs.cancel_requested(job_id) for job_id in asked)
    assert not store.jobs.cancel_requested(ended)  # final: nothing to stop
    assert not store.jobs.cancel_requested(untouched)
    # Done is done: the next sweeps read the marker and scan nothing.
    client.delete(store.gateway.keys.cancel(asked[0]))
    store.leases.expired()
    assert not store.jobs.cancel_requested(asked[0])


def test_the_backfill_keeps_a_flag_already_there(store: JobStore, client: redis.Redis) -> None:
    job_id = running(store)
    store.jobs.request_cancel(job_id)
    client.pexpire(store.gateway.keys.cancel(job_id), 60_000)
    sweep_until_backfilled(store, client)
    assert 0 < client.pttl(store.gateway.keys.cancel(job_id)) <= 60_000


@pytest.mark.parametrize("final", [JobState.SUCCEEDED, JobState.FAILED])
def test_a_job_that_ends_after_a_cancel_drops_its_flag(store: JobStore, final: JobState) -> None:
    job_id = running(store)
    store.jobs.request_cancel(job_id)
    store.jobs.transition(job_id, final, from_states={JobState.RUNNING}, owner="w1")
    assert not store.jobs.cancel_requested(job_id)
