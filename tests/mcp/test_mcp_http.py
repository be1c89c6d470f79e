"""``/mcp``: the SDK's Streamable HTTP client against a real API over real Redis and a
worker; the same tokens, roles and scopes as ``/v1``, and no decision for any role."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from bot.store.models import ApprovalState, JobState
from harness.api_server import ApiServer
from harness.stack import Stack
from tests.api.conftest import SECOND_REPO, TOKENS
from tests.api.kit import AUTHOR, FAILS_AT_ONCE, SUMMARIZE, problem
from tests.mcp.kit import TOOLS, Progress, answer, http_session, refusal, resource


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


DECIDING_WORDS = ("approve", "refuse", "decide", "decision", "reject", "confirm")


async def test_the_tools_are_offered_and_none_of_them_decides(api: ApiServer) -> None:
    for name in TOKENS:
        async with http_session(api, api.tokens[name]) as session:
            tools = (await session.list_tools()).tools
        assert {tool.name for tool in tools} == TOOLS
        for tool in tools:
            said = f"{tool.name} {sorted(tool.input_schema.get('properties', {}))}".lower()
            assert not any(word in said for word in DECIDING_WORDS), tool


async def test_a_submitted_job_reads_back_through_get_list_and_its_event_log(
    api: ApiServer, stack: Stack
) -> None:
    async with http_session(api, api.tokens["writer"]) as session:
        job = await answer(session, "submit_job", **SUMMARIZE)
        assert job["state"] == "queued" and job["requested_by"] == "writer"
        stack.wait_for(job["id"], JobState.SUCCEEDED)
        got = await answer(session, "get_job", job_id=job["id"])
        assert got["job"]["state"] == "succeeded" and got["job"]["result"] is not None
        assert got["approval"] is None
        mine = await answer(session, "list_jobs", mine=True, state="succeeded")
        assert await refusal(session, "list_jobs", mine=True, requested_by="ci") == "BEM-705"
        assert job["id"] in {item["id"] for item in mine["items"]}
        log = await resource(session, f"riverbeam://jobs/{job['id']}/events")
        assert log["state"] == "succeeded" and log["events"][-1]["end"] == "succeeded"
        assert any("frame" in event for event in log["events"])
        skills = await resource(session, "riverbeam://skills")
        assert "author" in {skill["name"] for skill in skills["items"]}


async def test_a_retry_with_the_same_idempotency_key_returns_the_first_job(
    api: ApiServer,
) -> None:
    async with http_session(api, api.tokens["writer"]) as session:
        first = await answer(session, "submit_job", **FAILS_AT_ONCE, idempotency_key="k-1")
        again = await answer(session, "submit_job", **FAILS_AT_ONCE, idempotency_key="k-1")
        other = await answer(session, "submit_job", **FAILS_AT_ONCE, idempotency_key="k-2")
        assert first["id"] == again["id"] != other["id"]
        assert await refusal(session, "submit_job", **FAILS_AT_ONCE, idempotency_key="") == (
            "BEM-705"
        )


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({**SUMMARIZE, "repo": "nowhere"}, "BEM-501"),
        ({"kind": "summarize", "repo": "docs"}, "BEM-501"),  # no branch
        ({**SUMMARIZE, "metadata": {"deep": _nested(40)}}, "BEM-710"),
    ],
)
async def test_a_bad_request_is_a_tool_error_with_its_code(
    api: ApiServer, body: dict[str, Any], code: str
) -> None:
    async with http_session(api, api.tokens["writer"]) as session:
        assert await refusal(session, "submit_job", **body) == code
        assert await refusal(session, "get_job", job_id="no-such-job") == "BEM-500"


async def test_each_role_submits_only_the_kinds_it_may(api: ApiServer) -> None:
    async with http_session(api, api.tokens["ci"]) as session:
        assert await refusal(session, "submit_job", **AUTHOR) == "BEM-702"
        assert (await answer(session, "submit_job", **FAILS_AT_ONCE))["requested_by"] == "ci"
    async with http_session(api, api.tokens["writer"]) as session:
        publish = {"kind": "publish", "repo": "docs", "branch": "main"}
        assert await refusal(session, "submit_job", **publish) == "BEM-702"


async def test_a_scoped_token_sees_nothing_of_another_repository(
    api: ApiServer, stack: Stack
) -> None:
    async with http_session(api, api.tokens["admin"]) as session:
        elsewhere = await answer(session, "submit_job", **{**FAILS_AT_ONCE, "repo": SECOND_REPO})
    stack.wait_for(elsewhere["id"], JobState.FAILED)
    async with http_session(api, api.tokens["scoped"]) as session:
        assert await refusal(session, "get_job", job_id=elsewhere["id"]) == "BEM-703"
        assert await refusal(session, "cancel_job", job_id=elsewhere["id"]) == "BEM-703"
        assert await refusal(session, "list_jobs", repo=SECOND_REPO) == "BEM-703"
        assert await refusal(session, "list_pending_approvals", repo=SECOND_REPO) == "BEM-703"
        submit = {**FAILS_AT_ONCE, "repo": SECOND_REPO}
        assert await refusal(session, "submit_job", **submit) == "BEM-703"
        listed = await answer(session, "list_jobs", limit=100)
        assert {item["repo"] for item in listed["items"]} <= {"docs"}
        assert elsewhere["id"] not in {item["id"] for item in listed["items"]}
        with pytest.raises(Exception, match="BEM-703"):
            await resource(session, f"riverbeam://jobs/{elsewhere['id']}/events")


async def test_only_the_requester_or_an_admin_cancels(api: ApiServer, stack: Stack) -> None:
    async with http_session(api, api.tokens["writer"]) as session:
        job = await answer(session, "submit_job", **AUTHOR)
    stack.wait_for(job["id"], JobState.AWAITING_APPROVAL, timeout=120)
    for name in ("writer2", "reviewer", "ci"):
        async with http_session(api, api.tokens[name]) as session:
            assert await refusal(session, "cancel_job", job_id=job["id"]) == "BEM-702"
    async with http_session(api, api.tokens["writer"]) as session:
        cancelled = await answer(session, "cancel_job", job_id=job["id"])
    assert cancelled["state"] == "cancelled"
    approval = stack.store.approvals.get(job["id"])
    assert approval is not None and approval.state is ApprovalState.WITHDRAWN
    assert approval.decided_by is None


async def test_no_role_reaches_a_decision_through_mcp(api: ApiServer, stack: Stack) -> None:
    """A parked push, then every tool called by every role with every argument that names
    it: the approval is still pending, undecided, and the job still parked."""
    async with http_session(api, api.tokens["writer"]) as session:
        job = await answer(session, "submit_job", **AUTHOR)
    stack.wait_for(job["id"], JobState.AWAITING_APPROVAL, timeout=120)
    for name in TOKENS:
        async with http_session(api, api.tokens[name]) as session:
            got = await answer(session, "get_job", job_id=job["id"])
            assert got["approval"]["state"] == "pending" and got["approval"]["diff"]
            pending = await answer(session, "list_pending_approvals", repo="docs")
            assert job["id"] in {item["job_id"] for item in pending["items"]}
            await answer(session, "list_jobs", state="awaiting_approval")
            await resource(session, f"riverbeam://jobs/{job['id']}/events")
            # A second submit naming the parked job, and its confirm metadata, decide nothing.
            await session.call_tool(
                "submit_job",
                {**AUTHOR, "metadata": {"confirm": True, "approve": job["id"]}},
            )
            if name not in ("writer", "admin"):
                assert await refusal(session, "cancel_job", job_id=job["id"]) == "BEM-702"
    approval = stack.store.approvals.get(job["id"])
    assert approval is not None and approval.state is ApprovalState.PENDING
    assert (
        approval.decided_by is None
        and stack.store.jobs.get(job["id"]).state is JobState.AWAITING_APPROVAL
    )


def test_mcp_refuses_a_missing_or_unknown_token_and_a_body_over_the_limit(
    api: ApiServer,
) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    problem(httpx.post(f"{api.url}/mcp", json=hello, headers=accept), 401, "BEM-700")
    wrong = {**accept, "Authorization": "Bearer rb_not-a-token"}
    problem(httpx.post(f"{api.url}/mcp", json=hello, headers=wrong), 401, "BEM-701")
    basic = {**accept, "Authorization": "Basic d3JpdGVyOnB3"}
    problem(httpx.post(f"{api.url}/mcp", json=hello, headers=basic), 401, "BEM-700")
    big = {**accept, **api.auth("writer"), "Content-Type": "application/json"}
    reply = httpx.post(f"{api.url}/mcp", content=b" " * (2 * 1024 * 1024), headers=big)
    problem(reply, 413, "BEM-711")


async def test_an_unknown_token_cannot_open_a_session(api: ApiServer) -> None:
    refused = False
    try:
        async with http_session(api, "rb_not-a-token") as session:
            await session.list_tools()
    except* MCPError:  # the SDK's client raises the 401 from inside its task groups
        refused = True
    assert refused


async def test_waiting_for_a_job_reports_each_event_as_progress(
    api: ApiServer, stack: Stack
) -> None:
    async with http_session(api, api.tokens["writer"]) as session:
        job = await answer(session, "submit_job", **SUMMARIZE)
        progress = Progress()
        done = await answer(session, "wait_for_job", progress, job_id=job["id"], wait_seconds=120)
        assert done["job"]["state"] == "succeeded"
        counts = [count for count, _ in progress.seen]
        assert counts == list(range(1, len(counts) + 1)) and len(counts) >= 2
        assert progress.seen[-1][1] == "ended: succeeded"
        # A parked job: the wait ends when it waits for a person, with the diff to read.
        parked = await answer(session, "submit_job", **AUTHOR)
        progress = Progress()
        got = await answer(session, "wait_for_job", progress, job_id=parked["id"], wait_seconds=120)
        assert got["job"]["state"] == "awaiting_approval" and got["approval"]["diff"]
        assert any(message and message.startswith("tool ") for _, message in progress.seen)
        assert await refusal(session, "wait_for_job", job_id="no-such-job") == "BEM-500"
