"""Event streams against a real redis-server: frames then the end, caps, blocking reads,
malformed ids, damaged entries."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from bot.core.frames import ChunkFrame, ErrorFrame, ThinkingFrame, ToolCallRecord, ToolFrame
from bot.store.models import JobState
from bot.store.store import JobStore
from tests.store.kit import author, code_of, nested


def test_events_come_back_as_frames_then_the_end(store: JobStore) -> None:
    record = store.jobs.create(author())
    store.jobs.claim(record.id, worker="w1", lease_seconds=30)
    first = store.events.append(record.id, ThinkingFrame(text="reading install.md"))
    store.events.append(record.id, ChunkFrame(text="Fixed two links."))
    store.jobs.transition(record.id, JobState.SUCCEEDED, from_states={JobState.RUNNING})
    events = store.events.read(record.id)
    assert [event.frame for event in events[:2]] == [
        ThinkingFrame(text="reading install.md"),
        ChunkFrame(text="Fixed two links."),
    ]
    assert events[0].id == first
    assert (events[2].frame, events[2].end) == (None, JobState.SUCCEEDED)
    assert store.events.read(record.id, after=first) == events[1:]
    assert store.events.read(record.id, after=events[-1].id) == []
    assert len(store.events.read(record.id, count=1)) == 1
    assert store.events.last_id(record.id) == events[-1].id
    assert store.events.last_id("never-ran") == "0-0"


def test_end_events_marks_only_final_states(store: JobStore) -> None:
    record = store.jobs.create(author())
    entry = store.events.end(record.id, JobState.FAILED)
    assert store.events.read(record.id)[0].id == entry
    with pytest.raises(ValueError):
        store.events.end(record.id, JobState.RUNNING)


def test_streams_are_capped(store: JobStore, client: redis.Redis) -> None:
    record = store.jobs.create(author())
    for index in range(600):
        store.events.append(record.id, ChunkFrame(text=str(index)))
    length = client.xlen(store.gateway.keys.events(record.id))
    # MAXLEN ~ trims whole stream nodes (100 entries each), so it may keep a node more.
    assert 50 <= length <= 150
    events = store.events.read(record.id, count=1000)
    assert len(events) == length
    assert events[-1].frame == ChunkFrame(text="599")


def test_a_blocking_read_wakes_when_an_event_arrives(store: JobStore) -> None:
    record = store.jobs.create(author())
    seen = store.events.append(record.id, ChunkFrame(text="before"))
    # Arrives after the first one-second slice of the wait: the read must keep waiting.
    timer = threading.Timer(1.2, store.events.append, (record.id, ChunkFrame(text="later")))
    timer.start()
    started = time.monotonic()
    events = store.events.read(record.id, after=seen, block_ms=5000)
    waited = time.monotonic() - started
    timer.join()
    assert [event.frame for event in events] == [ChunkFrame(text="later")]
    assert 1.1 < waited < 4.5  # past the first slice, and well before the deadline


def test_a_blocking_read_with_nothing_new_returns_empty_in_time(store: JobStore) -> None:
    record = store.jobs.create(author())
    store.events.append(record.id, ChunkFrame(text="old"))
    started = time.monotonic()
    assert store.events.read(record.id, after="$", block_ms=300) == []
    assert 0.25 < time.monotonic() - started < 2.5


def test_after_dollar_sees_only_new_events(store: JobStore) -> None:
    record = store.jobs.create(author())
    store.events.append(record.id, ChunkFrame(text="old"))
    timer = threading.Timer(0.2, store.events.append, (record.id, ChunkFrame(text="new")))
    timer.start()
    events = store.events.read(record.id, after="$", block_ms=3000)
    timer.join()
    assert [event.frame for event in events] == [ChunkFrame(text="new")]


@pytest.mark.parametrize("after", ["latest", "1-2-3", "", "-1", "١٧٠٠-0", "17\n", "1-٣"])
def test_a_malformed_event_id_is_a_bad_request(store: JobStore, after: str) -> None:
    assert code_of(lambda: store.events.read("any", after=after)) == "BEM-501"


def test_a_damaged_event_is_an_error_frame_in_its_place_and_the_stream_goes_on(
    store: JobStore, client: redis.Redis
) -> None:
    record = store.jobs.create(author())
    key = store.gateway.keys.events(record.id)
    store.events.append(record.id, ChunkFrame(text="before"))
    damaged = client.xadd(key, {"frame": '{"type": "tool", "record": '})
    client.xadd(key, {"nothing": "known"})
    store.events.append(record.id, ChunkFrame(text="after"))

    events = store.events.read(record.id)

    assert [type(event.frame).__name__ for event in events] == [
        "ChunkFrame",
        "ErrorFrame",
        "ErrorFrame",
        "ChunkFrame",
    ]
    unreadable = events[1].frame
    assert isinstance(unreadable, ErrorFrame) and unreadable.error.code == "BEM-517"
    assert damaged.decode() in unreadable.error.message
    assert "record" not in unreadable.error.message, "nothing of the entry is shown"


def test_an_event_nested_deeper_than_pydantic_parses_still_reads(
    store: JobStore, client: redis.Redis
) -> None:
    """What the previous release stored for a model's arguments nested ~210 deep."""
    record = store.jobs.create(author())
    arguments = nested(210)
    call = ToolCallRecord(id="c1", name="echo", arguments=arguments, ok=True)
    client.xadd(
        store.gateway.keys.events(record.id), {"frame": ToolFrame(record=call).model_dump_json()}
    )

    [event] = store.events.read(record.id)

    assert isinstance(event.frame, ToolFrame) and event.frame.record.arguments == arguments
