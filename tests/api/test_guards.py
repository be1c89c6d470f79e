"""What a hostile or unlucky input costs a live ``riverbeam api``: JSON nested or sized past
the limits is refused at the door (BEM-710), a record or an event that cannot be read never
breaks a list, a stream or a page, cursors and event ids are checked before Redis sees them,
and no redirect takes its host from the request."""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import JsonValue

from bot.core.frames import ChunkFrame, ToolCallRecord, ToolFrame
from bot.store.models import JobKind, JobRecord, JobSpec, utcnow
from harness.api_server import api_server
from harness.stack import Stack, job_stack
from tests.api.conftest import TOKENS
from tests.api.kit import SUMMARIZE, problem, read_events
from tests.web.kit import Web, browser_like, sign_in

# Signed in on the web pages as these (the API's token holders).
ADMIN, WRITER, SCOPED = "admin", "writer", "scoped"


@pytest.fixture(scope="module")
def quiet() -> Iterator[Web]:
    """Redis, the API and no worker: jobs stay queued, records stay as a test wrote them."""
    with job_stack(repositories={"handbook": {}}) as stack, api_server(stack, TOKENS) as api:
        yield Web(stack, api)


def _nested(depth: int) -> JsonValue:
    value: JsonValue = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _job_body(metadata_text: str) -> str:
    return f'{{"kind": "summarize", "repo": "docs", "branch": "main", "metadata": {metadata_text}}}'


def _stored(stack: Stack, record: JobRecord, raw: bytes | str | None = None) -> str:
    """Write ``record`` (or ``raw`` under its id) straight into Redis, as an earlier release
    or a damaged disk left it."""
    client = stack.store.gateway.client
    client.set(stack.store.gateway.key("job", record.id), raw or record.model_dump_json())
    client.zadd(stack.store.gateway.key("jobs"), {record.id: record.created_at.timestamp()})
    return record.id


def _record(metadata: dict[str, JsonValue] | None = None, repo: str = "docs") -> JobRecord:
    spec = JobSpec(
        kind=JobKind.SUMMARIZE,
        repo=repo,
        branch="main",
        requested_by=WRITER,
        metadata=metadata or {},
    )
    now = utcnow()
    return JobRecord(id=uuid.uuid4().hex[:12], spec=spec, created_at=now, updated_at=now)


# -- JSON limits at the door -----------------------------------------------------------------


@pytest.mark.parametrize("depth", [32, 33, 210, 254, 300, 5000])
def test_metadata_nested_past_the_limit_is_bem_710_and_nothing_is_stored(
    quiet: Web, depth: int
) -> None:
    before = quiet.job_count()
    nested = "[" * (depth - 1) + "]" * (depth - 1)  # the object around it is one level
    reply = httpx.post(
        f"{quiet.url}/v1/jobs",
        headers={**quiet.api.auth(WRITER), "Content-Type": "application/json"},
        content=_job_body(f'{{"x": {nested}}}'),
    )

    if depth <= 32:
        assert reply.status_code == 201, reply.text
        return
    body = problem(reply, 422, "BEM-710")
    assert "32 levels" in body["detail"]
    assert "[[" not in reply.text, "nothing of the document is echoed"
    assert all(set(item) == {"loc", "msg"} for item in body.get("errors", []))
    assert quiet.job_count() == before


def test_metadata_over_its_size_limit_is_bem_710(quiet: Web) -> None:
    reply = httpx.post(
        f"{quiet.url}/v1/jobs",
        headers=quiet.api.auth(WRITER),
        json={**SUMMARIZE, "metadata": {"blob": "x" * (64 << 10)}},
    )

    body = problem(reply, 422, "BEM-710")
    assert "65536" in body["detail"] and "xxx" not in reply.text


@pytest.mark.parametrize("where", ["top", "kind", "unknown"])
def test_a_body_nested_past_every_parser_is_a_422_not_a_500(quiet: Web, where: str) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    text = {
        "top": deep,
        "kind": f'{{"kind": {deep}, "repo": "docs"}}',
        "unknown": f'{{"kind": "summarize", "repo": "docs", "branch": "main", "x": {deep}}}',
    }[where]
    reply = httpx.post(
        f"{quiet.url}/v1/jobs",
        headers={**quiet.api.auth(WRITER), "Content-Type": "application/json"},
        content=text,
    )

    body = problem(reply, 422, "BEM-710")
    assert "[[" not in reply.text and "Traceback" not in reply.text
    assert body["detail"]


# -- records that an earlier release stored, or that are damaged ---------------------------


def test_a_record_nested_deep_by_an_earlier_release_reads_lists_and_cancels(quiet: Web) -> None:
    """What the previous release let through (metadata 254 deep) must not poison anyone's
    list, nor stay unreadable for its owner or an admin."""
    legacy = _stored(quiet.stack, _record({"x": _nested(254)}))

    for holder in (WRITER, SCOPED, ADMIN):
        reply = httpx.get(f"{quiet.url}/v1/jobs", headers=quiet.api.auth(holder))
        assert reply.status_code == 200, reply.text
        assert legacy in [item["id"] for item in reply.json()["items"]]
    read = httpx.get(f"{quiet.url}/v1/jobs/{legacy}", headers=quiet.api.auth(ADMIN))
    assert read.status_code == 200 and read.json()["id"] == legacy
    cancel = httpx.post(f"{quiet.url}/v1/jobs/{legacy}/cancel", headers=quiet.api.auth(ADMIN))
    assert cancel.status_code == 200 and cancel.json()["state"] == "cancelled"
    with sign_in(quiet, WRITER) as browser:
        for path in ("/jobs", "/mine", f"/jobs/{legacy}"):
            page = browser.get(path)
            assert page.status_code == 200 and legacy in page.text, path


def test_a_damaged_record_is_named_to_admins_skipped_for_others_and_a_clean_500_alone(
    quiet: Web,
) -> None:
    readable = _stored(quiet.stack, _record())
    damaged = _stored(quiet.stack, _record(), raw=b'{"spec": {"request": "private words"')

    admin = httpx.get(f"{quiet.url}/v1/jobs", headers=quiet.api.auth(ADMIN)).json()
    assert damaged in admin["unreadable"] and readable in [i["id"] for i in admin["items"]]
    scoped = httpx.get(f"{quiet.url}/v1/jobs", headers=quiet.api.auth(SCOPED))
    assert scoped.status_code == 200 and scoped.json()["unreadable"] == []
    assert readable in [item["id"] for item in scoped.json()["items"]]
    for method, path in (("GET", ""), ("POST", "/cancel")):
        reply = httpx.request(
            method, f"{quiet.url}/v1/jobs/{damaged}{path}", headers=quiet.api.auth(ADMIN)
        )
        problem(reply, 500, "BEM-516")
        assert "private" not in reply.text
    with sign_in(quiet, ADMIN) as browser:
        page = browser.get("/jobs")
        assert page.status_code == 200 and damaged in page.text and readable in page.text
        assert "private" not in page.text


def test_a_damaged_or_deep_event_never_breaks_the_stream_or_the_job_page(quiet: Web) -> None:
    store = quiet.stack.store
    job = httpx.post(f"{quiet.url}/v1/jobs", headers=quiet.api.auth(WRITER), json=SUMMARIZE)
    job_id = job.json()["id"]
    events = store.gateway.key("events", job_id)
    store.events.append(job_id, ChunkFrame(text="first"))
    damaged = store.gateway.client.xadd(
        events, {"frame": '{"type": "tool", "record": {"secret"'}
    ).decode()
    call = ToolCallRecord(id="c1", name="write_file", arguments={"x": _nested(210)}, ok=False)
    store.gateway.client.xadd(events, {"frame": ToolFrame(record=call).model_dump_json()})
    store.events.append(job_id, ChunkFrame(text="last"))
    store.jobs.request_cancel(job_id)  # ends the stream

    with quiet.api.client(WRITER) as client, client.stream("GET", f"/v1/jobs/{job_id}/events") as r:
        assert r.status_code == 200
        seen, _ = read_events(r.iter_lines())
    kinds = [(event.event, _frame_type(event.data)) for event in seen]
    assert kinds == [
        ("frame", "chunk"),
        ("frame", "error"),
        ("frame", "tool"),
        ("frame", "chunk"),
        ("end", None),
    ]
    assert seen[1].id == damaged and seen[1].data["error"]["code"] == "BEM-517"
    with sign_in(quiet, WRITER) as browser:
        page = browser.get(f"/jobs/{job_id}")
        assert page.status_code == 200 and "BEM-517" in page.text and "last" in page.text
        assert "secret" not in page.text


def _frame_type(data: Any) -> str | None:
    return data.get("type") if isinstance(data, dict) else None


# -- cursors, event ids, redirects ------------------------------------------------------------


def _cursor(text: bytes) -> str:
    return base64.urlsafe_b64encode(text).decode().rstrip("=")


@pytest.mark.parametrize(
    ("cursor", "code"),
    [("a" * 401, "BEM-705"), (_cursor(b"[" * 140 + b"]" * 140), "BEM-501")],
    ids=["overlong", "nested"],
)
def test_a_bad_cursor_is_a_422_in_the_api_and_on_the_pages(
    quiet: Web, cursor: str, code: str
) -> None:
    reply = httpx.get(
        f"{quiet.url}/v1/jobs", params={"cursor": cursor}, headers=quiet.api.auth(ADMIN)
    )
    problem(reply, 422, code)
    with sign_in(quiet, WRITER) as browser:
        for path in ("/jobs", "/mine"):
            assert browser.get(path, params={"cursor": cursor * 10}).status_code == 422
            assert browser.get(path, params={"cursor": cursor}).status_code == 422


@pytest.mark.parametrize("after", ["١٧٠٠", "1700-٣", "１２", "17\n"])
def test_an_event_id_in_other_digits_is_a_422_before_redis(quiet: Web, after: str) -> None:
    job = httpx.post(f"{quiet.url}/v1/jobs", headers=quiet.api.auth(WRITER), json=SUMMARIZE)
    job_id = job.json()["id"]

    reply = httpx.get(
        f"{quiet.url}/v1/jobs/{job_id}/events",
        params={"after": after},
        headers=quiet.api.auth(WRITER),
    )
    problem(reply, 422, "BEM-705")
    with sign_in(quiet, WRITER) as browser:
        for path in (f"/jobs/{job_id}/log", f"/jobs/{job_id}/events"):
            assert browser.get(path, params={"after": after}).status_code == 422, path


@pytest.mark.parametrize("path", ["/v1/jobs/", "/approvals/", "/jobs/"])
def test_a_trailing_slash_is_a_404_never_a_redirect_to_the_host_header(
    quiet: Web, path: str
) -> None:
    headers = {**quiet.api.auth(ADMIN), "Host": "attacker.example"}
    reply = httpx.get(f"{quiet.url}{path}", headers=headers, follow_redirects=False)

    assert reply.status_code == 404 and "location" not in reply.headers
    assert "attacker" not in reply.text
    with browser_like(quiet, follow_redirects=False) as browser:
        page = browser.get(path, headers={"Host": "attacker.example"})
        assert page.status_code == 404 and "location" not in page.headers


def test_a_damaged_session_signs_no_one_in(quiet: Web) -> None:
    with sign_in(quiet, WRITER) as browser:
        session = browser.cookies["riverbeam_session"]
        digest = hashlib.sha256(session.encode()).hexdigest()
        quiet.stack.store.gateway.client.set(
            quiet.stack.store.gateway.key("session", digest), b"{broken"
        )

        page = browser.get("/jobs", follow_redirects=False)

    assert page.status_code == 303 and page.headers["location"].startswith("/sign-in")


def test_the_openapi_document_names_the_body_limit_and_the_throttle(quiet: Web) -> None:
    paths = httpx.get(f"{quiet.url}/openapi.json").json()["paths"]

    assert {"413", "429"} <= set(paths["/v1/jobs"]["post"]["responses"])
    assert "429" in paths["/v1/jobs"]["get"]["responses"]
    assert "429" not in paths["/healthz"]["get"]["responses"], "it needs no token"
