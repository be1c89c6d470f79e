"""``riverbeam mcp`` end to end: the SDK's stdio client starts the command with a token and
the API's URL in its environment, as an assistant would, and the tools act through the
real API as that token's holder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.store.models import ApprovalState, JobState
from harness.api_server import ApiServer
from harness.stack import PROJECT_ROOT, Stack, clean_environment
from tests.api.conftest import SECOND_REPO
from tests.api.kit import AUTHOR, FAILS_AT_ONCE, SUMMARIZE
from tests.mcp.kit import TOOLS, Progress, answer, refusal, resource, stdio_session


async def test_riverbeam_mcp_submits_reads_and_follows_a_job_through_the_api(
    api: ApiServer, stack: Stack
) -> None:
    async with stdio_session(api, api.tokens["writer"]) as session:
        assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS
        job = await answer(session, "submit_job", **SUMMARIZE, idempotency_key="stdio-1")
        again = await answer(session, "submit_job", **SUMMARIZE, idempotency_key="stdio-1")
        assert again["id"] == job["id"] and job["requested_by"] == "writer"
        progress = Progress()
        got = await answer(session, "wait_for_job", progress, job_id=job["id"], wait_seconds=120)
        assert progress.seen and progress.seen[-1][1] == "ended: succeeded"
        assert got["job"]["state"] == "succeeded" and got["job"]["result"] is not None
        log = await resource(session, f"riverbeam://jobs/{job['id']}/events")
        assert log["state"] == "succeeded" and log["events"][-1]["end"] == "succeeded"
        skills = await resource(session, "riverbeam://skills")
        assert "author" in {skill["name"] for skill in skills["items"]}


async def test_riverbeam_mcp_carries_the_api_refusals_and_decides_nothing(
    api: ApiServer, stack: Stack
) -> None:
    async with stdio_session(api, api.tokens["writer"]) as session:
        parked = await answer(session, "submit_job", **AUTHOR)
    stack.wait_for(parked["id"], JobState.AWAITING_APPROVAL, timeout=120)
    async with stdio_session(api, api.tokens["admin"]) as session:
        elsewhere = await answer(session, "submit_job", **{**FAILS_AT_ONCE, "repo": SECOND_REPO})
        got = await answer(session, "get_job", job_id=parked["id"])
        # The parked diff, read through the API's approval endpoint.
        assert got["approval"]["state"] == "pending" and got["approval"]["diff"]
        # The event log of a job still waiting ends at the API's first keep-alive.
        log = await resource(session, f"riverbeam://jobs/{parked['id']}/events")
        assert log["state"] == "awaiting_approval" and log["events"]
    async with stdio_session(api, api.tokens["ci"]) as session:
        assert await refusal(session, "submit_job", **AUTHOR) == "BEM-702"
        assert await refusal(session, "cancel_job", job_id=parked["id"]) == "BEM-702"
        assert await refusal(session, "submit_job", **{**SUMMARIZE, "repo": "x"}) == "BEM-501"
    async with stdio_session(api, api.tokens["scoped"]) as session:
        assert await refusal(session, "get_job", job_id=elsewhere["id"]) == "BEM-703"
        # An id is sent as one path segment: a "job" with slashes reaches no other endpoint.
        assert await refusal(session, "get_job", job_id="a/../../v1/jobs") == "BEM-706"
        with pytest.raises(Exception, match="BEM-703"):
            await resource(session, f"riverbeam://jobs/{elsewhere['id']}/events")
    async with stdio_session(api, "rb_not-a-token") as session:
        assert await refusal(session, "list_jobs") == "BEM-701"
    approval = stack.store.approvals.get(parked["id"])
    assert approval is not None and approval.state is ApprovalState.PENDING


async def test_riverbeam_mcp_names_an_api_that_does_not_answer(api: ApiServer) -> None:
    gone = ApiServer(
        url="http://127.0.0.1:9",
        tokens=api.tokens,
        process=api.process,
        log=api.log,
        config=api.config,
    )
    async with stdio_session(gone, api.tokens["writer"]) as session:
        assert await refusal(session, "list_jobs") == "BEM-720"


@pytest.mark.parametrize(
    ("env", "code"),
    [({}, "BEM-700"), ({"RIVERBEAM_TOKEN": "rb_x"}, "BEM-900")],
)
def test_riverbeam_mcp_without_a_token_or_an_api_url_says_which(
    env: dict[str, str], code: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "mcp"],
        env={**clean_environment(), **env},
        cwd=PROJECT_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and code in done.stderr, done
    assert done.stdout == ""


@pytest.mark.parametrize(("options", "logged"), [((), False), (("--loglevel", "INFO"), True)])
async def test_riverbeam_mcp_logs_no_line_per_api_request_unless_asked(
    api: ApiServer, tmp_path: Path, options: tuple[str, ...], logged: bool
) -> None:
    """An assistant shows the command's standard error to its user: by default warnings and
    errors only, not the HTTP client's INFO line for each call to the API."""
    errors = tmp_path / "stderr.log"
    with errors.open("w") as errlog:
        async with stdio_session(api, api.tokens["writer"], *options, errlog=errlog) as session:
            await answer(session, "list_jobs")
    assert ("HTTP Request: GET" in errors.read_text()) is logged, errors.read_text()
