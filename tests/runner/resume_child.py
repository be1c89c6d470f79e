"""The second process of ``test_resume_process.py``: resume a parked run from a saved file.

Usage: ``python resume_child.py STATE SIDE_EFFECT approve|refuse CALL_ID DECIDED_BY COMMENT``

It builds a fresh agent with a fresh scripted client, resumes the saved state with the
decision, and prints one JSON object: the final result, the frame types, and the messages of
the last request the model got.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from bot.clients.scripted import ScriptedClient
from bot.runner import CallDecision, RunState
from tests.runner.kit import collect, kinds, publisher, result_of


def main(argv: list[str]) -> None:
    state_path, side_effect, verdict, call_id, decided_by, comment = argv
    approved = verdict == "approve"
    answer = "Pushed docs/fix for review." if approved else "Understood; I did not push."
    client = ScriptedClient([answer])
    agent = publisher(client, Path(side_effect))
    state = RunState.load(Path(state_path).read_text())
    decision = CallDecision(
        call_id=call_id, approved=approved, comment=comment, decided_by=decided_by
    )
    frames = asyncio.run(collect(agent.resume(state, decision)))
    report = {
        "result": result_of(frames).model_dump(mode="json"),
        "frames": kinds(frames),
        "last_request": client.requests[-1][0],
        "decisions": [d.model_dump(mode="json") for d in state.decisions],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
