"""Must show (issue 17): an author job (scripted model) calls two tools of
``@modelcontextprotocol/server-everything`` (npm), a server nobody here wrote; ``get-sum`` is
``confirm_required``: the job parks, a reviewer approves it through the API, and the resume
runs on another worker, which makes the call and finishes the job.

Real Redis, real Celery workers, real containers, a real ``riverbeam api``; only the model is
scripted (``harness.mcp_playbooks``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.store.models import JobKind, JobState
from harness.api_server import ApiServer, api_server
from harness.mcp_playbooks import ECHOED, SUM_ARGUMENTS
from harness.mcp_servers import everything, tiny
from harness.stack import Stack, job_stack

CANARY = "worker-secret-7d2a"
TOKENS = {"reviewer": ("reviewer", None), "writer": ("submitter", None)}
MCP = {
    "servers": [everything(tools=["echo", "get-sum", "get-env"], confirm_required=["get-sum"])],
    "skills": {"author": ["everything.echo", "everything.get-sum", "everything.get-env"]},
}


@pytest.fixture
def stack() -> Iterator[Stack]:
    with job_stack(model_factory="harness.mcp_playbooks:for_job") as running:
        yield running


@pytest.fixture
def api(stack: Stack) -> Iterator[ApiServer]:
    with api_server(stack, TOKENS) as server:
        yield server


def start_worker(stack: Stack, name: str) -> Path:
    """A worker with the toolbox configured, a secret in its environment, and its own
    temporary directory (where its MCP servers' directories go)."""
    temp = stack.base / f"tmp-{name}"
    temp.mkdir()
    env = {"RIVERBEAM_MCP": json.dumps(MCP), "REDIS_PASSWORD": CANARY, "TMPDIR": str(temp)}
    stack.start_worker(name, env=env)
    return temp


def servers_under(temp: Path) -> list[int]:
    """Processes whose working directory is (or was) under ``temp``: the MCP servers of
    that worker still running."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd").startswith(str(temp)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def seen(shown: dict[str, Any]) -> dict[str, Any]:
    """What a decision names of the approval the reviewer looked at."""
    return {"approval_id": shown["id"], "commit_sha": None, "diff_digest": shown["diff_digest"]}


def test_server_everything_tools_in_an_author_job_parked_approved_resumed_elsewhere(
    stack: Stack, api: ApiServer
) -> None:
    temp_a = start_worker(stack, "a")
    job = stack.submit(JobKind.AUTHOR, "everything", request="Use the MCP tools")
    parked = stack.wait_for(job.id, JobState.AWAITING_APPROVAL, timeout=90)
    # Parked: worker a's servers are gone with its segment.
    assert servers_under(temp_a) == []
    stack.stop_worker("a")

    with api.client("reviewer") as reviewer:
        shown = reviewer.get(f"/v1/approvals/{parked.id}").json()["current"]
        # What the person approves: the MCP tool and its arguments (no commit, no diff).
        assert (shown["tool"], shown["arguments"]) == ("everything__get-sum", SUM_ARGUMENTS)
        assert shown["commit_sha"] is None and shown["diff"] == ""
        temp_b = start_worker(stack, "b")
        decided = reviewer.post(
            f"/v1/approvals/{parked.id}/approve", json=seen(shown) | {"comment": "ok"}
        )
    assert decided.status_code == 200, decided.text

    done = stack.wait_for(job.id, JobState.SUCCEEDED, timeout=90)
    echo, env, total = (
        stack.tool_calls(job.id, name)[0]
        for name in ("everything__echo", "everything__get-env", "everything__get-sum")
    )
    assert echo.ok and echo.result == {"content": [{"type": "text", "text": f"Echo: {ECHOED}"}]}
    # The worker's secret never reached the server.
    assert env.ok and CANARY not in json.dumps(env.result)
    assert total.ok and total.arguments == SUM_ARGUMENTS
    result: Any = total.result
    assert result["content"][0]["text"] == "The sum of 2 and 3 is 5."
    assert done.result is not None and "The sum of 2 and 3 is 5." in done.result.text
    # Worker a was stopped before the decision: worker b resumed, started the server for
    # the call, and stopped it with the job.
    assert list(temp_b.glob("riverbeam-mcp-*")) == [] and servers_under(temp_b) == []


def test_a_refused_mcp_call_is_never_made_and_the_model_reads_the_refusal(
    stack: Stack, api: ApiServer
) -> None:
    start_worker(stack, "a")
    job = stack.submit(JobKind.AUTHOR, "everything", request="Use the MCP tools")
    parked = stack.wait_for(job.id, JobState.AWAITING_APPROVAL, timeout=90)
    with api.client("reviewer") as reviewer:
        shown = reviewer.get(f"/v1/approvals/{parked.id}").json()["current"]
        refused = reviewer.post(
            f"/v1/approvals/{parked.id}/refuse", json=seen(shown) | {"comment": "no"}
        )
    assert refused.status_code == 200, refused.text
    # As for a refused push: the job ends refused, with the model's answer.
    done = stack.wait_for(job.id, JobState.REFUSED, timeout=90)
    total = stack.tool_calls(job.id, "everything__get-sum")
    assert [call.error.code if call.error else None for call in total] == ["BEM-094"]
    assert done.result is not None and "refused by reviewer" in done.result.text


def test_a_server_down_at_start_fails_the_job_with_bem_721(stack: Stack) -> None:
    down = {
        "servers": [{"name": "everything", "command": str(stack.base / "gone"), "tools": ["echo"]}],
        "skills": {"author": ["everything.echo"]},
    }
    stack.start_worker("a", env={"RIVERBEAM_MCP": json.dumps(down)})
    job = stack.submit(JobKind.AUTHOR, "everything", request="Use the MCP tools")
    failed = stack.wait_for(job.id, JobState.FAILED, timeout=90)
    assert failed.error is not None and failed.error.code == "BEM-721"
    assert "cannot run" in failed.error.message
    # Nothing ran: the model was never asked, no tool was called.
    assert stack.tool_calls(job.id) == []


def test_a_server_dying_mid_call_fails_the_job_with_bem_722_and_leaves_nothing(
    stack: Stack,
) -> None:
    dying = {
        "servers": [tiny(stack.base, tools=["where", "die"])],
        "skills": {"author": ["tiny.where", "tiny.die"]},
    }
    temp = stack.base / "tmp-a"
    temp.mkdir()
    stack.start_worker("a", env={"RIVERBEAM_MCP": json.dumps(dying), "TMPDIR": str(temp)})
    job = stack.submit(JobKind.AUTHOR, "tiny-die", request="Use the MCP tools")
    failed = stack.wait_for(job.id, JobState.FAILED, timeout=90)
    assert failed.error is not None and failed.error.code == "BEM-722"
    assert "tiny.die" in failed.error.message
    where: Any = stack.tool_calls(job.id, "tiny__where")[0].result
    pid = json.loads(where["content"][0]["text"])["pid"]
    assert not Path(f"/proc/{pid}").exists() and servers_under(temp) == []
    assert list(temp.glob("riverbeam-mcp-*")) == []
    # The worker is free: the next job runs (and fails the same way) rather than hanging.
    again = stack.submit(JobKind.AUTHOR, "tiny-die", request="Use the MCP tools")
    assert stack.wait_for(again.id, JobState.FAILED, timeout=90).error is not None
