"""Park a run, save it, and resume it in a fresh Python process, as a worker restart would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bot.clients.scripted import ScriptedClient
from bot.core.frames import ResultStatus
from bot.core.input import AgentContext
from tests.runner.kit import call, calls, collect, publisher, request, result_of

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("resume_child.py")


async def park(tmp_path: Path) -> tuple[Path, Path]:
    """Run the first segment here until it parks on the push; return the saved state's path."""
    side_effect = tmp_path / "pushed.json"
    client = ScriptedClient(
        [calls(call("echo", "c1", text="prep"), call("push", "p1", ref="docs/fix"), tokens=10)]
    )
    agent = publisher(client, side_effect)
    state = agent.start(request("Publish the fix."), AgentContext())
    result = result_of(await collect(agent.run(state)))
    assert result.status is ResultStatus.INTERRUPTED
    assert result.pending is not None and result.pending.id == "p1"
    assert not side_effect.exists(), "a confirm_required tool does not run before a decision"
    state_path = tmp_path / "state.json"
    state_path.write_text(state.model_dump_json())
    return state_path, side_effect


def resume_elsewhere(state: Path, side_effect: Path, verdict: str, comment: str) -> Any:
    completed = subprocess.run(
        [sys.executable, str(CHILD), str(state), str(side_effect), verdict, "p1", "alice", comment],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


async def test_an_approved_push_runs_in_the_process_that_resumes(tmp_path: Path) -> None:
    state, side_effect = await park(tmp_path)
    report = resume_elsewhere(state, side_effect, "approve", "ship it")
    result = report["result"]

    assert json.loads(side_effect.read_text()) == {"ref": "docs/fix"}
    assert report["frames"] == ["placeholder", "thinking", "tool", "chunk", "done"]
    assert result["status"] == "completed"
    assert result["text"] == "Pushed docs/fix for review."
    assert [(r["id"], r["ok"]) for r in result["tool_calls"]] == [("c1", True), ("p1", True)]
    assert result["usage"]["prompt_tokens"] == 10, "usage of the first segment is kept"
    assert result["pending"] is None
    assert report["decisions"] == [
        {"call_id": "p1", "approved": True, "comment": "ship it", "decided_by": "alice"}
    ]
    last = report["last_request"]
    assert last[-1] == {
        "role": "tool",
        "tool_call_id": "p1",
        "content": json.dumps({"pushed": "docs/fix"}),
    }
    assert sum(json.dumps(m).count("Publish the fix.") for m in last) == 1


async def test_a_refused_push_never_runs_and_the_model_reads_why(tmp_path: Path) -> None:
    state, side_effect = await park(tmp_path)
    report = resume_elsewhere(state, side_effect, "refuse", "wrong branch, use docs/v2")
    result = report["result"]

    assert not side_effect.exists()
    assert result["status"] == "completed"
    assert result["text"] == "Understood; I did not push."
    refusal = result["tool_calls"][-1]
    assert (refusal["id"], refusal["ok"], refusal["error"]["code"]) == ("p1", False, "BEM-094")
    assert "alice" in refusal["error"]["message"]
    reply = report["last_request"][-1]
    assert reply["tool_call_id"] == "p1"
    assert json.loads(reply["content"]) == {
        "refused": True,
        "by": "alice",
        "comment": "wrong branch, use docs/v2",
    }
