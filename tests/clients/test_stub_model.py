"""The stub server itself: what it records, and that its faults look like real ones."""

from __future__ import annotations

import time

import httpx
import pytest

from harness.stub_model import Hang, Reply, Stream, StubModel, chunk, error


async def test_records_method_path_headers_and_json_body(stub_model: StubModel) -> None:
    stub_model.enqueue(Reply({"ok": True}))

    async with httpx.AsyncClient() as http:
        reply = await http.post(
            stub_model.base_url + "/chat/completions?x=1",
            json={"model": "m"},
            headers={"X-Probe": "yes"},
        )

    assert reply.json() == {"ok": True}
    [request] = stub_model.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions?x=1")
    assert request.headers["x-probe"] == "yes"
    assert request.json == {"model": "m"}
    assert stub_model.pending == 0


async def test_an_unscripted_request_gets_501_naming_the_problem(stub_model: StubModel) -> None:
    async with httpx.AsyncClient() as http:
        reply = await http.get(stub_model.origin + "/anything")

    assert reply.status_code == 501
    assert "no behaviour queued for request #1" in reply.text


async def test_error_replies_carry_retry_after(stub_model: StubModel) -> None:
    stub_model.enqueue(error(429, "slow down", retry_after="7"))

    async with httpx.AsyncClient() as http:
        reply = await http.post(stub_model.base_url, json={})

    assert reply.status_code == 429
    assert reply.headers["retry-after"] == "7"
    assert reply.json()["error"]["message"] == "slow down"


async def test_a_cut_stream_is_an_incomplete_body(stub_model: StubModel) -> None:
    stub_model.enqueue(Stream([chunk("a")], done=False, ending="cut"))

    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
            await http.post(stub_model.base_url, json={})


async def test_a_hang_does_not_hold_up_shutdown() -> None:
    with StubModel() as stub:
        stub.enqueue(Hang(seconds=60))
        async with httpx.AsyncClient(timeout=0.2) as http:
            with pytest.raises(httpx.ReadTimeout):
                await http.post(stub.base_url, json={})
        started = time.monotonic()

    assert time.monotonic() - started < 1.0


def test_base_url_needs_a_running_server() -> None:
    with pytest.raises(RuntimeError, match="not running"):
        _ = StubModel().base_url
