"""``GET /v1/jobs/{id}/events`` against a real server, Redis and worker: the whole stream, a
stream resumed from ``Last-Event-ID`` while the job runs and parks, keep-alives, and the
refusals that come before a stream starts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from bot.core.frames import frame_adapter
from bot.http.event_stream import MAX_CONCURRENT_READS
from bot.store.models import JobState
from harness.api_server import ApiServer
from harness.stack import Stack
from tests.api.conftest import SECOND_REPO
from tests.api.kit import (
    AUTHOR,
    FAILS_AT_ONCE,
    SUMMARIZE,
    Event,
    EventParser,
    problem,
    read_events,
    shown,
)

pytestmark = pytest.mark.slow


def _follow(
    api: ApiServer,
    job_id: str,
    *,
    headers: dict[str, str] | None = None,
    after: str | None = None,
    limit: int | None = None,
) -> tuple[list[Event], int]:
    params = {"after": after} if after is not None else {}
    with (
        api.client("writer") as client,
        client.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers, params=params) as reply,
    ):
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        return read_events(reply.iter_lines(), limit=limit)


def _stored_ids(stack: Stack, job_id: str) -> list[str]:
    return [event.id for event in stack.store.events.read(job_id, count=10_000)]


def _submit(api: ApiServer, body: dict[str, object]) -> str:
    with api.client("writer") as client:
        reply = client.post("/v1/jobs", json=body)
    assert reply.status_code == 201, reply.text
    job_id: str = reply.json()["id"]
    return job_id


def test_a_stream_carries_every_frame_then_the_end(api: ApiServer, stack: Stack) -> None:
    job_id = _submit(api, SUMMARIZE)
    # Followed from submission: the stream waits for frames as the job runs.
    events, _ = _follow(api, job_id)
    assert [event.event for event in events[:-1]] == ["frame"] * (len(events) - 1)
    assert len(events) > 2
    assert (events[-1].event, events[-1].data) == ("end", {"state": "succeeded"})
    assert [event.id for event in events] == _stored_ids(stack, job_id)
    for event in events[:-1]:
        frame_adapter.validate_python(event.data)

    # Read again once the job is over: the same stream, and it closes at once.
    again, _ = _follow(api, job_id)
    assert again == events


def test_a_follower_resumes_after_the_last_event_it_saw(api: ApiServer, stack: Stack) -> None:
    job_id = _submit(api, AUTHOR)
    first, _ = _follow(api, job_id, limit=3)
    assert [event.event for event in first] == ["frame"] * 3

    # The job parks while nobody follows. The resumed stream picks up after the third
    # frame, stays open while the job waits, and goes on once a reviewer approves.
    stack.wait_for(job_id, JobState.AWAITING_APPROVAL, timeout=60)
    parked = _stored_ids(stack, job_id)
    resumed = {"Last-Event-ID": first[-1].id}
    with (
        api.client("writer") as client,
        client.stream("GET", f"/v1/jobs/{job_id}/events", headers=resumed) as reply,
        api.client("reviewer") as reviewer,
    ):
        lines = reply.iter_lines()
        until_parked, _ = read_events(lines, limit=len(parked) - len(first))
        assert [event.id for event in until_parked] == parked[len(first) :]
        approved = reviewer.post(f"/v1/approvals/{job_id}/approve", json=shown(reviewer, job_id))
        assert approved.status_code == 200
        after_approval, _ = read_events(lines)
    rest = until_parked + after_approval

    seen = [event.id for event in first + rest]
    assert len(set(seen)) == len(seen)
    assert seen == _stored_ids(stack, job_id)
    assert (rest[-1].event, rest[-1].data) == ("end", {"state": "succeeded"})

    # ?after= does the same; Last-Event-ID, which a browser sends on reconnecting, wins.
    by_query, _ = _follow(api, job_id, after=first[1].id)
    assert [event.id for event in by_query] == seen[2:]
    both, _ = _follow(api, job_id, after="0", headers={"Last-Event-ID": first[-1].id})
    assert both == rest
    # Resumed past the end: only the end, at once.
    past, _ = _follow(api, job_id, headers={"Last-Event-ID": rest[-1].id})
    assert [(event.event, event.data) for event in past] == [("end", {"state": "succeeded"})]


def _lines_until_keepalive(lines: Iterator[str]) -> list[str]:
    taken = []
    for line in lines:
        taken.append(line)
        if line.startswith(":"):
            break
    return taken


def test_a_waiting_stream_sends_keepalives(api: ApiServer, stack: Stack) -> None:
    job_id = _submit(api, AUTHOR)
    stack.wait_for(job_id, JobState.AWAITING_APPROVAL, timeout=60)
    last = _stored_ids(stack, job_id)[-1]
    with (
        api.client("writer") as client,
        client.stream("GET", f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": last}) as reply,
    ):
        # Nothing new while the job waits: comment lines only (api.sse_keepalive_seconds).
        assert _lines_until_keepalive(reply.iter_lines()) == [": keep-alive"]
    with api.client("admin") as client:
        assert client.post(f"/v1/jobs/{job_id}/cancel").json()["state"] == "cancelled"
    ended, _ = _follow(api, job_id, headers={"Last-Event-ID": last})
    assert [(event.event, event.data) for event in ended] == [("end", {"state": "cancelled"})]


@pytest.mark.parametrize(
    "bad", ["abc", "1-2-3", "-1", "18446744073709551616-0", "0-18446744073709551616", "$"]
)
def test_a_bad_event_id_is_refused_before_the_stream(
    api: ApiServer, stack: Stack, bad: str
) -> None:
    job_id = _submit(api, FAILS_AT_ONCE)
    with api.client("writer") as client:
        problem(
            client.get(f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": bad}), 422, "BEM-705"
        )
        problem(client.get(f"/v1/jobs/{job_id}/events", params={"after": bad}), 422, "BEM-705")
    stack.wait_for(job_id, JobState.FAILED)


def test_a_refused_event_id_is_quoted_as_sent_full_width_digits_too(
    api: ApiServer, stack: Stack
) -> None:
    job_id = _submit(api, FAILS_AT_ONCE)
    with api.client("writer") as client:
        # Header bytes are UTF-8 as a client sends them; ASGI decodes them as latin-1.
        header = client.get(f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": "１".encode()})
        query = client.get(f"/v1/jobs/{job_id}/events", params={"after": "１"})
    for reply in (header, query):
        body = problem(reply, 422, "BEM-705")
        assert body["detail"].startswith("'１' is not an event id"), body["detail"]
    stack.wait_for(job_id, JobState.FAILED)


def test_refusals_come_as_problem_documents_not_streams(api: ApiServer, stack: Stack) -> None:
    with api.client("admin") as client:
        handbook = client.post("/v1/jobs", json={**FAILS_AT_ONCE, "repo": SECOND_REPO}).json()["id"]
        problem(client.get("/v1/jobs/no-such-job/events"), 404, "BEM-500")
    with api.client("scoped") as client:
        problem(client.get(f"/v1/jobs/{handbook}/events"), 403, "BEM-703")
    with httpx.Client(base_url=api.url) as client:
        problem(client.get(f"/v1/jobs/{handbook}/events"), 401, "BEM-700")
    stack.wait_for(handbook, JobState.FAILED)


FOLLOWERS = MAX_CONCURRENT_READS + 6


async def test_more_followers_than_read_threads_all_get_the_whole_stream(
    api: ApiServer, stack: Stack
) -> None:
    job_id = _submit(api, AUTHOR)
    stack.wait_for(job_id, JobState.AWAITING_APPROVAL, timeout=60)
    parked = _stored_ids(stack, job_id)
    attached = asyncio.Semaphore(0)

    async def follow(client: httpx.AsyncClient) -> list[str]:
        parser, seen = EventParser(), []
        async with client.stream("GET", f"/v1/jobs/{job_id}/events") as reply:
            async for line in reply.aiter_lines():
                event = parser.feed(line)
                if event is None:
                    continue
                seen.append(event.id)
                if len(seen) == len(parked):
                    attached.release()
                if event.event == "end":
                    break
        return seen

    limits = httpx.Limits(max_connections=FOLLOWERS + 2)
    async with httpx.AsyncClient(
        base_url=api.url, headers=api.auth("writer"), limits=limits, timeout=60
    ) as client:
        followers = [asyncio.create_task(follow(client)) for _ in range(FOLLOWERS)]
        for _ in range(FOLLOWERS):
            await asyncio.wait_for(attached.acquire(), 60)
        # Every follower blocks on Redis, and the other endpoints still answer.
        assert (await client.get("/v1/jobs", params={"limit": 1})).status_code == 200
        reviewer = api.auth("reviewer")
        current = stack.store.approvals.get(job_id)
        assert current is not None
        binding = current.binding().model_dump()
        decided = await client.post(
            f"/v1/approvals/{job_id}/approve", headers=reviewer, json=binding
        )
        assert decided.status_code == 200
        streams = await asyncio.wait_for(asyncio.gather(*followers), 120)
    everything = _stored_ids(stack, job_id)
    assert all(stream == everything for stream in streams)
    assert stack.store.jobs.get(job_id).state is JobState.SUCCEEDED
