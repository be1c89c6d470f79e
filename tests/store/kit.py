"""What the store tests share: a store under a prefix of its own, job and approval
makers, a parked job, a race of threads."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from pydantic import JsonValue
from redis.client import Pipeline

from bot.core.errors import BeamError
from bot.store.gateway import Writes
from bot.store.models import DecisionBinding, JobKind, JobRecord, JobSpec
from bot.store.store import JobStore
from harness.parking import park_on, pending_for

T = TypeVar("T")


def open_store(url: str, **kw: Any) -> JobStore:
    """A store under a prefix of its own, so tests sharing a server never see each other."""
    kw.setdefault("prefix", f"t{uuid.uuid4().hex[:8]}")
    return JobStore.from_url(url, **kw)


def author(request: str = "fix the install page", **kw: Any) -> JobSpec:
    kw.setdefault("requested_by", "alice")
    return JobSpec(kind=JobKind.AUTHOR, repo="docs", request=request, **kw)


def seen(store: JobStore, job_id: str) -> DecisionBinding | None:
    """What a reviewer looking at the job's approval now would name in a decision."""
    current = store.approvals.get(job_id)
    return None if current is None else current.binding()


def parked(store: JobStore, spec: JobSpec | None = None, approval_id: str = "ap1") -> JobRecord:
    """A job that ran, opened an approval and parked on it, as the executor does."""
    record = store.jobs.create(spec or author())
    assert store.jobs.claim(record.id, worker="w1", lease_seconds=30) is not None
    return park_on(store, pending_for(record, approval_id))


def race(count: int, work: Callable[[int], T]) -> list[T | BeamError]:
    """Run ``work(0..count-1)`` on ``count`` threads released together; results in order,
    a BeamError standing for the call that raised it."""
    barrier = threading.Barrier(count)

    def one(index: int) -> T | BeamError:
        barrier.wait()
        try:
            return work(index)
        except BeamError as error:
            return error

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def code_of(call: Callable[[], object]) -> str:
    with pytest.raises(BeamError) as caught:
        call()
    return caught.value.code


def nested(depth: int) -> JsonValue:
    """A JSON list ``depth`` lists deep."""
    value: JsonValue = []
    for _ in range(depth - 1):
        value = [value]
    return value


def cancel_as_the_previous_release(store: JobStore, job_id: str) -> None:
    """What the previous release's ``request_cancel`` wrote for a job running under a live
    lease: ``cancel_requested`` and the next version in the record, in a compare-and-set on
    it, and nothing else."""
    key = store.gateway.keys.job(job_id)

    def body(pipe: Pipeline) -> tuple[None, Writes | None]:
        document = json.loads(pipe.get(key) or b"")
        document.update(cancel_requested=True, version=document["version"] + 1)
        return None, lambda tx: tx.set(key, json.dumps(document))

    store.gateway.atomic([key], body)
