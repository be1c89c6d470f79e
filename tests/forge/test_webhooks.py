"""``POST /webhooks/<forge>`` on a live ``riverbeam api``: GitHub's published examples
signed with real HMAC-SHA256, and GitLab's documented payloads
(https://docs.gitlab.com/user/project/integrations/webhook_events/) with their token, over
real HTTP. What was queued is read from the ``forge`` queue in Redis, so "nothing queued"
is seen, not assumed."""

from __future__ import annotations

import json
import socket
import statistics
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import httpx
import pytest

from harness.forges import check_github, encoded, github_example, github_headers, gitlab_headers
from tests.api.kit import problem
from tests.forge.conftest import FLOOD_PER_MINUTE, GH_SECRET, GL_SECRET, ForgeApi
from tests.forge.kit import BOT, gitlab_payload

MiB = 1 << 20


def _comment(body: str = "@riverbeam fix the install page", **changes: Any) -> dict[str, Any]:
    payload = github_example("issue_comment", "created", 3)  # the example with installation 1
    payload["comment"]["body"] = body
    for key, value in changes.items():
        payload[key].update(value)
    check_github("issue_comment", "created", payload)
    return payload


def _send_github(
    forge: ForgeApi,
    payload: dict[str, Any],
    *,
    event: str = "issue_comment",
    delivery: str | None = None,
    forge_name: str = "gh",
    secret: str = GH_SECRET,
    **headers: str,
) -> httpx.Response:
    body = encoded(payload)
    sent = {**github_headers(secret, body, event, delivery=delivery), **headers}
    return httpx.post(
        f"{forge.api.url}/webhooks/{forge_name}", content=body, headers=sent, timeout=30
    )


def _send_gitlab(
    forge: ForgeApi, payload: dict[str, Any], event: str, *, token: str = GL_SECRET
) -> httpx.Response:
    headers = gitlab_headers(token, event)
    return httpx.post(
        f"{forge.api.url}/webhooks/gl", content=encoded(payload), headers=headers, timeout=30
    )


def test_a_signed_comment_is_answered_at_once_and_its_event_queued(forge_api: ForgeApi) -> None:
    before = len(forge_api.queued())
    delivery = str(uuid.uuid4())
    reply = _send_github(forge_api, _comment(), delivery=delivery)
    assert reply.status_code == 202, reply.text
    assert reply.json() == {"outcome": "queued", "delivery": delivery, "event": "comment"}
    queued = forge_api.queued()
    assert len(queued) == before + 1
    event = queued[-1]
    assert (event["type"], event["forge"], event["delivery"]) == ("comment", "gh", delivery)
    assert event["body"] == "@riverbeam fix the install page"
    assert (
        forge_api.stack.store.gateway.client.get(
            forge_api.stack.store.gateway.keys.forge_delivery("gh", delivery)
        )
        == b"queued"
    )


@pytest.mark.parametrize(
    ("headers", "what"),
    [
        ({"X-Hub-Signature-256": ""}, "missing"),
        ({"X-Hub-Signature-256": "sha256=" + "0" * 64}, "wrong"),
        ({"X-Hub-Signature-256": "sha1=abc"}, "malformed"),
    ],
)
def test_a_bad_or_missing_signature_is_401_and_queues_nothing(
    forge_api: ForgeApi, headers: dict[str, str], what: str
) -> None:
    before = len(forge_api.queued())
    problem(_send_github(forge_api, _comment(), **headers), 401, "BEM-800")
    assert len(forge_api.queued()) == before, what


def test_a_body_changed_after_signing_is_401(forge_api: ForgeApi) -> None:
    before = len(forge_api.queued())
    body = encoded(_comment())
    headers = github_headers(GH_SECRET, body, "issue_comment")
    tampered = body.replace(b"fix the install page", b"delete the install page")
    reply = httpx.post(f"{forge_api.api.url}/webhooks/gh", content=tampered, headers=headers)
    problem(reply, 401, "BEM-800")
    # Signed with another secret.
    problem(_send_github(forge_api, _comment(), secret="guess"), 401, "BEM-800")
    assert len(forge_api.queued()) == before


def test_gitlab_a_wrong_or_missing_token_is_401_and_queues_nothing(forge_api: ForgeApi) -> None:
    before = len(forge_api.queued())
    problem(
        _send_gitlab(forge_api, gitlab_payload("note-issue"), "Note Hook", token="x"),
        401,
        "BEM-800",
    )
    headers = gitlab_headers(GL_SECRET, "Note Hook")
    del headers["X-Gitlab-Token"]
    body = encoded(gitlab_payload("note-issue"))
    reply = httpx.post(f"{forge_api.api.url}/webhooks/gl", content=body, headers=headers)
    problem(reply, 401, "BEM-800")
    assert len(forge_api.queued()) == before


def test_gitlab_a_comment_with_its_token_is_queued(forge_api: ForgeApi) -> None:
    payload = gitlab_payload("note-issue")
    payload["object_attributes"]["note"] = "@riverbeam fix the install page"
    reply = _send_gitlab(forge_api, payload, "Note Hook")
    assert reply.status_code == 202, reply.text
    event = forge_api.queued()[-1]
    assert (event["forge"], event["repository"], event["actor"]) == (
        "gl",
        "gitlab-org/gitlab-test",
        "root",
    )


def test_a_replayed_delivery_is_queued_once(forge_api: ForgeApi) -> None:
    before = len(forge_api.queued())
    delivery = str(uuid.uuid4())
    first = _send_github(forge_api, _comment(), delivery=delivery)
    again = _send_github(forge_api, _comment(), delivery=delivery)
    assert first.status_code == 202 and again.status_code == 200, again.text
    assert again.json()["outcome"] == "duplicate"
    assert len(forge_api.queued()) == before + 1
    # GitLab: its Idempotency-Key stays the same across its retries.
    payload = gitlab_payload("note-issue")
    headers = {**gitlab_headers(GL_SECRET, "Note Hook"), "Idempotency-Key": str(uuid.uuid4())}
    answers = [
        httpx.post(f"{forge_api.api.url}/webhooks/gl", content=encoded(payload), headers=headers)
        for _ in range(3)
    ]
    assert [a.json()["outcome"] for a in answers] == ["queued", "duplicate", "duplicate"]
    assert len(forge_api.queued()) == before + 2


def test_riverbeams_own_and_edited_comments_are_ignored(forge_api: ForgeApi) -> None:
    before = len(forge_api.queued())
    own = _send_github(forge_api, _comment(sender={"login": BOT}))
    assert own.status_code == 200 and own.json()["outcome"] == "ignored", own.text
    edited = github_example("issue_comment", "edited", 0)
    edited["comment"]["body"] = "@riverbeam fix the install page"
    edited["installation"] = {"id": 1, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ=="}
    reply = _send_github(forge_api, edited)
    assert reply.status_code == 200 and "edited" in reply.json()["reason"], reply.text
    note = gitlab_payload("note-issue")
    note["object_attributes"].update(note="@riverbeam fix it", action="update")
    assert _send_gitlab(forge_api, note, "Note Hook").json()["outcome"] == "ignored"
    assert len(forge_api.queued()) == before


def test_an_unknown_installation_or_project_is_refused(forge_api: ForgeApi) -> None:
    before = len(forge_api.queued())
    other = _comment(installation={"id": 42})
    problem(_send_github(forge_api, other), 403, "BEM-802")
    project = gitlab_payload("note-issue")
    project["project"]["path_with_namespace"] = "someone/else"
    problem(_send_gitlab(forge_api, project, "Note Hook"), 403, "BEM-802")
    # The configured path with another project's id (the entry pins project_id 5).
    moved = gitlab_payload("note-issue")
    moved["project"]["id"] = 6
    problem(_send_gitlab(forge_api, moved, "Note Hook"), 403, "BEM-802")
    assert len(forge_api.queued()) == before


def test_an_unknown_forge_a_missing_secret_and_malformed_deliveries(forge_api: ForgeApi) -> None:
    before = len(forge_api.queued())
    problem(_send_github(forge_api, _comment(), forge_name="nowhere"), 404, "BEM-801")
    problem(_send_github(forge_api, _comment(), forge_name="nosecret"), 503, "BEM-803")
    body = b"[1, 2, 3]"
    headers = github_headers(GH_SECRET, body, "issue_comment")
    problem(
        httpx.post(f"{forge_api.api.url}/webhooks/gh", content=body, headers=headers),
        400,
        "BEM-804",
    )
    problem(_send_github(forge_api, _comment(), **{"X-GitHub-Delivery": ""}), 400, "BEM-805")
    assert len(forge_api.queued()) == before


def _answer_to_oversized(forge: ForgeApi, size: int) -> tuple[int, bytes]:
    """POST a body declared as ``size`` bytes, sending a first part only, and read the answer."""
    host, port = forge.api.url.removeprefix("http://").split(":")
    head = (
        f"POST /webhooks/gh HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"X-GitHub-Event: issue_comment\r\nX-GitHub-Delivery: {uuid.uuid4()}\r\n"
        f"X-Hub-Signature-256: sha256={'0' * 64}\r\nContent-Length: {size}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(head.encode() + b"{" + b" " * 65535)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.partition(b"\r\n\r\n")[2]


def test_a_10_mb_webhook_is_413_before_it_is_read(forge_api: ForgeApi) -> None:
    before = len(forge_api.queued())
    status, body = _answer_to_oversized(forge_api, 10 * 1000 * 1000)
    assert status == 413 and json.loads(body)["code"] == "BEM-711"
    # Streamed without a Content-Length: refused as it passes the limit.
    chunks = (b" " * MiB for _ in range(10))
    headers = github_headers(GH_SECRET, b"", "issue_comment")
    reply = httpx.post(f"{forge_api.api.url}/webhooks/gh", content=chunks, headers=headers)
    problem(reply, 413, "BEM-711")
    assert len(forge_api.queued()) == before


def _v1_latency(client: httpx.Client) -> float:
    started = time.perf_counter()
    reply = client.get("/v1/jobs")
    assert reply.status_code == 200, reply.text
    return time.perf_counter() - started


def _deliver(url: str, body: bytes, count: int) -> list[tuple[int, str, str]]:
    """``count`` signed deliveries of ``body`` to ``url``, one after another (in a process of
    its own: the flood must not starve the test's own client of the GIL)."""
    answers = []
    with httpx.Client(timeout=30) as client:
        for _ in range(count):
            reply = client.post(
                url, content=body, headers=github_headers(GH_SECRET, body, "issue_comment")
            )
            answers.append((reply.status_code, reply.headers.get("retry-after", ""), reply.text))
    return answers


def test_a_flood_of_webhooks_is_throttled_without_slowing_v1(forge_api: ForgeApi) -> None:
    body = encoded(_comment())
    senders, each = 4, 2 * FLOOD_PER_MINUTE
    v1 = forge_api.api.client("writer")
    baseline = [_v1_latency(v1) for _ in range(20)]
    during: list[float] = []
    with ProcessPoolExecutor(senders) as pool:
        url = f"{forge_api.api.url}/webhooks/flood"
        # The pool's processes start before the clock does.
        list(pool.map(time.sleep, [0] * senders))
        started = time.perf_counter()
        sent = [pool.submit(_deliver, url, body, each) for _ in range(senders)]
        while not all(future.done() for future in sent):
            during.append(_v1_latency(v1))
        answers = [answer for future in sent for answer in future.result()]
        took = time.perf_counter() - started
    v1.close()
    statuses = [status for status, _, _ in answers]
    accepted, throttled = statuses.count(202), statuses.count(429)
    assert accepted + throttled == senders * each, statuses
    # A minute's allowance, and at most the refill of the seconds the flood took.
    assert FLOOD_PER_MINUTE <= accepted <= FLOOD_PER_MINUTE + 1 + took * FLOOD_PER_MINUTE / 60
    _, retry_after, text = next(a for a in answers if a[0] == 429)
    assert json.loads(text)["code"] == "BEM-806" and int(retry_after) >= 1
    # /v1 went on, on its own allowance: every request answered 200 (``_v1_latency``), none
    # throttled, and not held behind the flood.
    assert len(during) >= 3
    alone, flooded = statistics.median(baseline), statistics.median(during)
    print(
        f"/v1/jobs median {alone * 1000:.1f} ms alone, {flooded * 1000:.1f} ms during "
        f"{senders * each} webhooks in {took:.1f} s ({throttled} throttled)"
    )
    assert flooded < max(0.5, 10 * alone)
    # The throttled deliveries queued nothing: the flood's accepted ones are all there is.
    assert sum(e["forge"] == "flood" for e in forge_api.queued()) == accepted


def test_healthz_wants_a_worker_on_the_forge_queue_when_a_forge_is_configured(
    forge_api: ForgeApi,
) -> None:
    # No worker runs in this module: every queue is named as unserved, the forge's too.
    body = problem_or_health(httpx.get(f"{forge_api.api.url}/healthz", timeout=30))
    assert body["workers"]["forge"] == []
    assert "forge" in body["checks"]["workers"]["detail"]


def problem_or_health(reply: httpx.Response) -> dict[str, Any]:
    assert reply.status_code == 503, reply.text
    found: dict[str, Any] = reply.json()
    return found
