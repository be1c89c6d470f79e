"""Every webhook call has one deadline for the whole exchange: a receiver that drips its
answer a byte at a time (each byte well within any read timeout) is cut off when the
deadline passes, and hung up on. Against a real HTTP receiver on loopback."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from bot.clients.deadline import DeadlinePassed, within
from bot.jobs.webhooks import WebhookAnswer, post_json
from tests.jobs.webhook_receiver import webhook_receiver


def _post_in_thread(url: str, timeout: float) -> tuple[object, float]:
    """``post_json`` on a thread of its own, waited for at most 20 s: a call that never
    ends fails the test instead of hanging it."""
    outcome: list[object] = []
    started = time.monotonic()
    thread = threading.Thread(
        target=lambda: outcome.append(post_json(url, {"event": "x"}, timeout=timeout)),
        daemon=True,
    )
    thread.start()
    thread.join(20)
    assert outcome, "post_json was still waiting on the dripping receiver after 20 s"
    return outcome[0], time.monotonic() - started


def test_a_dripping_receiver_is_cut_off_at_the_deadline() -> None:
    with webhook_receiver("/hooks/slow") as receiver:
        receiver.drip_seconds = 0.2
        answer, took = _post_in_thread(receiver.url, timeout=1.0)
        assert isinstance(answer, str) and "within 1 s" in answer
        assert 1.0 <= took < 2.5
        # The connection was closed, not left to the receiver.
        assert receiver.hung_up.wait(5)


def test_an_answering_receiver_gets_the_headers_and_its_status_is_returned() -> None:
    with webhook_receiver("/hooks/fast?token=s3cret") as receiver:
        receiver.status = 202
        answer = post_json(receiver.url, {"a": 1}, timeout=5, headers={"X-Riverbeam-Event": "e"})
    assert answer == WebhookAnswer(202, "Accepted") and answer.is_success
    [request] = receiver.requests
    assert request["body"] == {"a": 1} and request["headers"]["X-Riverbeam-Event"] == "e"


def test_an_unreachable_receiver_is_a_reason_without_the_secret() -> None:
    answer = post_json("http://127.0.0.1:9/hook?token=s3cret", {}, timeout=2)
    assert isinstance(answer, str) and "s3cret" not in answer


def test_within_runs_from_a_thread_whose_event_loop_runs() -> None:
    async def caller() -> int:
        async def slow() -> int:
            await asyncio.sleep(5)
            return 1

        async def quick() -> int:
            return 7

        with pytest.raises(DeadlinePassed):
            within(0.2, slow)
        return within(1, quick)

    assert asyncio.run(caller()) == 7
