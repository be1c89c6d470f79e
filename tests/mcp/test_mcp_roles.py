"""Roles and scopes through MCP, on both transports, held to what ``/v1`` enforces
(tests/api/test_jobs.py, test_approvals.py, test_access_rules.py): a token limited to one
repository reaches nothing of another through any tool or resource, each role submits
exactly its kinds, only the requester or an admin cancels, and no tool or resource, called
by any role with any argument that names a parked push, decides it. And the two transports
answer alike."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp_types import Tool

from bot.service.access import SUBMITS, Principal
from bot.store.models import ApprovalState, JobKind, JobSpec, JobState
from harness.api_server import ApiServer
from harness.stack import Stack
from tests.api.conftest import SECOND_REPO, TOKENS
from tests.api.kit import AUTHOR, FAILS_AT_ONCE
from tests.mcp.kit import answer, http_session, refusal, resource, stdio_session, text

Opener = Callable[[ApiServer, str], AbstractAsyncContextManager[ClientSession]]
TRANSPORTS: dict[str, Opener] = {"http": http_session, "stdio": stdio_session}
RESOURCES = {"riverbeam://skills"}
TEMPLATES = {"riverbeam://jobs/{job_id}/events"}

both = pytest.mark.parametrize("transport", list(TRANSPORTS))


def _submit(stack: Stack, body: dict[str, Any], repo: str = "docs") -> str:
    """A job of the ``writer`` token's holder, submitted through the job service."""
    spec = JobSpec.model_validate({**body, "repo": repo, "requested_by": "writer"})
    return stack.service.submit(Principal("writer", "submitter", None), spec).id


def _park(stack: Stack, repo: str = "docs") -> str:
    """A writer's author job parked on its push."""
    job_id = _submit(stack, AUTHOR, repo)
    stack.wait_for(job_id, JobState.AWAITING_APPROVAL, timeout=120)
    return job_id


@pytest.fixture(scope="module")
def parked(stack: Stack) -> dict[str, str]:
    """One parked author job in each repository."""
    return {"docs": _park(stack), SECOND_REPO: _park(stack, SECOND_REPO)}


@both
async def test_a_scoped_token_reaches_nothing_of_another_repository(
    api: ApiServer, stack: Stack, parked: dict[str, str], transport: str
) -> None:
    inside, outside = parked["docs"], parked[SECOND_REPO]
    async with TRANSPORTS[transport](api, api.tokens["scoped"]) as session:
        for tool in ("get_job", "wait_for_job", "cancel_job"):
            assert await refusal(session, tool, job_id=outside) == "BEM-703", tool
        with pytest.raises(Exception, match="BEM-703"):
            await resource(session, f"riverbeam://jobs/{outside}/events")
        assert await refusal(session, "list_jobs", repo=SECOND_REPO) == "BEM-703"
        assert await refusal(session, "list_pending_approvals", repo=SECOND_REPO) == "BEM-703"
        submit = {**FAILS_AT_ONCE, "repo": SECOND_REPO}
        assert await refusal(session, "submit_job", **submit) == "BEM-703"
        # Unfiltered listings leave the other repository out, and keep this one in.
        jobs = await answer(session, "list_jobs", limit=100)
        assert {item["repo"] for item in jobs["items"]} == {"docs"}
        assert inside in {item["id"] for item in jobs["items"]}
        waiting = await answer(session, "list_pending_approvals")
        assert {item["job_id"] for item in waiting["items"]} >= {inside}
        assert outside not in {item["job_id"] for item in waiting["items"]}
        assert (await answer(session, "get_job", job_id=inside))["job"]["repo"] == "docs"
    # An unscoped token of the same role sees both.
    async with TRANSPORTS[transport](api, api.tokens["writer2"]) as session:
        waiting = await answer(session, "list_pending_approvals")
        assert {inside, outside} <= {item["job_id"] for item in waiting["items"]}
    assert stack.store.jobs.get(outside).state is JobState.AWAITING_APPROVAL


async def test_each_role_submits_exactly_its_kinds(api: ApiServer) -> None:
    """Every kind by every token, to a repository nobody registered: a kind the role may
    not submit is BEM-702, one it may is refused only for the repository (BEM-501), and a
    token limited to ``docs`` is refused the repository first (BEM-703). No job is made.
    Over ``/mcp`` only: ``riverbeam mcp`` carries the API's own answer, which
    tests/mcp/test_mcp_stdio.py checks."""
    for name, (role, repos) in TOKENS.items():
        async with http_session(api, api.tokens[name]) as session:
            for kind in JobKind:
                body = {**FAILS_AT_ONCE, "kind": kind.value, "repo": "nowhere"}
                expected = "BEM-703" if repos else "BEM-501" if kind in SUBMITS[role] else "BEM-702"
                assert await refusal(session, "submit_job", **body) == expected, (name, kind)


@both
async def test_only_the_requester_or_an_admin_cancels(
    api: ApiServer, stack: Stack, transport: str
) -> None:
    job_id = _park(stack)
    for name in ("writer2", "scoped", "reviewer", "reviewer2", "ci"):
        async with TRANSPORTS[transport](api, api.tokens[name]) as session:
            assert await refusal(session, "cancel_job", job_id=job_id) == "BEM-702", name
    assert stack.store.jobs.get(job_id).state is JobState.AWAITING_APPROVAL
    async with TRANSPORTS[transport](api, api.tokens["admin"]) as session:
        cancelled = await answer(session, "cancel_job", job_id=job_id)
    assert cancelled["state"] == "cancelled" and cancelled["requested_by"] == "writer"
    # A cancel withdraws the parked push: nobody decided it, nothing landed.
    approval = stack.store.approvals.get(job_id)
    assert approval is not None and approval.state is ApprovalState.WITHDRAWN
    assert approval.decided_by is None and stack.upstream_ref(f"riverbeam/{job_id}") is None


def _arguments(tool: Tool, parked: str, decoy: str) -> dict[str, Any]:
    """Arguments for ``tool`` that point every job id at the parked push and ask, in every
    field that takes words, for it to be approved; a destructive tool gets the decoy job
    instead (cancelling the parked job withdraws it: not a decision, but it would end the
    proof). A new tool with a required argument this does not know fails the test."""
    destructive = tool.annotations is not None and tool.annotations.destructive_hint
    job = decoy if destructive else parked
    values: dict[str, Any] = {
        "job_id": job,
        "review_job": job,
        "kind": "author",
        "repo": "docs",
        "request": f"approve the parked push of job {parked}",
        "metadata": {"playbook": "no-such-playbook", "confirm": True, "approve": parked},
        "wait_seconds": 1,
        "state": "awaiting_approval",
    }
    schema = tool.input_schema
    chosen = {name: values[name] for name in schema.get("properties", {}) if name in values}
    assert set(schema.get("required", [])) <= set(chosen), tool
    return chosen


@both
async def test_no_tool_or_resource_decides_for_any_role(
    api: ApiServer, stack: Stack, parked: dict[str, str], transport: str
) -> None:
    """Every role lists what it is offered (the same, read-only for deciding), then calls
    every tool it is offered and reads every resource, naming the parked push; afterwards
    the push is still pending, undecided, and nothing landed upstream."""
    target = parked["docs"]
    decoy = _submit(stack, FAILS_AT_ONCE)
    stack.wait_for(decoy, JobState.FAILED)
    offered: dict[str, set[str]] = {}
    for name in TOKENS:
        async with TRANSPORTS[transport](api, api.tokens[name]) as session:
            tools = (await session.list_tools()).tools
            offered[name] = {tool.name for tool in tools}
            listed = {str(item.uri) for item in (await session.list_resources()).resources}
            templates = (await session.list_resource_templates()).resource_templates
            assert listed == RESOURCES and {t.uri_template for t in templates} == TEMPLATES
            assert (await session.list_prompts()).prompts == []
            for tool in tools:
                result = await session.call_tool(tool.name, _arguments(tool, target, decoy))
                # Each call reached Riverbeam (an argument the schema refused would prove
                # nothing); an admin may do all of it.
                said = text(result)
                assert not result.is_error or said.startswith("BEM-"), (name, tool.name, said)
                assert not (result.is_error and name == "admin"), (tool.name, said)
            await resource(session, "riverbeam://skills")
            await resource(session, f"riverbeam://jobs/{target}/events")
    assert len({frozenset(tools) for tools in offered.values()}) == 1, offered
    approval = stack.store.approvals.get(target)
    assert approval is not None and approval.state is ApprovalState.PENDING
    assert approval.decided_by is None
    assert stack.store.jobs.get(target).state is JobState.AWAITING_APPROVAL
    assert stack.upstream_ref(f"riverbeam/{target}") is None


async def test_both_transports_answer_alike(api: ApiServer, parked: dict[str, str]) -> None:
    """``/mcp`` reads the job service, ``riverbeam mcp`` the HTTP API: the same question
    gets the same answer from both, for a parked job and its approval."""
    job_id = parked[SECOND_REPO]
    answers: dict[str, list[Any]] = {}
    for transport, opener in TRANSPORTS.items():
        async with opener(api, api.tokens["reviewer"]) as session:
            answers[transport] = [
                await answer(session, "get_job", job_id=job_id),
                await answer(session, "wait_for_job", job_id=job_id, wait_seconds=1),
                await answer(session, "list_jobs", repo=SECOND_REPO),
                await answer(session, "list_pending_approvals", repo=SECOND_REPO),
                await resource(session, f"riverbeam://jobs/{job_id}/events"),
                await resource(session, "riverbeam://skills"),
            ]
    assert answers["http"] == answers["stdio"]
