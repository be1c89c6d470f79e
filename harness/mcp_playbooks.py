"""Scripted models for author jobs that call MCP tools of server-everything
(``harness.mcp_servers``): the workers' ``model.factory`` is ``harness.mcp_playbooks:for_job``.

A job picks its playbook with ``metadata={"playbook": NAME}`` (``Stack.submit`` sets it):

- ``everything``: echo and get-env in one reply, then get-sum (which the test configures
  ``confirm_required``: the job parks), then an answer that quotes what the sum call
  returned, or says it was refused;
- ``tiny-die``: the tiny server's ``where``, then its ``die`` (the server exits mid-call).
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.clients.base import Message
from bot.clients.playbook import PlaybookClient, PlaybookStep, last_tool_result
from bot.store.models import JobRecord
from harness.playbooks import calls

ECHOED = "hello from a Riverbeam job"
SUM_ARGUMENTS = {"a": 2, "b": 3}


def _answer(messages: Sequence[Message]) -> str:
    result = last_tool_result(messages)
    if isinstance(result, dict) and result.get("refused"):
        return f"The sum was refused by {result.get('by')}: {result.get('comment')}"
    return f"The MCP tools answered: {result}"


def _everything() -> list[PlaybookStep]:
    return [
        calls(("everything__echo", {"message": ECHOED}), ("everything__get-env", {})),
        calls(("everything__get-sum", SUM_ARGUMENTS)),
        _answer,
    ]


def _tiny_die() -> list[PlaybookStep]:
    return [calls(("tiny__where", {})), calls(("tiny__die", {})), "unreachable"]


PLAYBOOKS = {"everything": _everything, "tiny-die": _tiny_die}


def for_job(job: JobRecord) -> PlaybookClient:
    """The model factory: the job's playbook, by name."""
    return PlaybookClient(PLAYBOOKS[str(job.spec.metadata["playbook"])]())
