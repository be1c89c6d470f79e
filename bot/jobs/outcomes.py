"""How a run that ended is judged, whatever its kind.

The model's final text is kept as it is in ``JobResult.text``; the outcome is the structured
part a program can rely on, built by the job's kind (``Kind.outcome`` in ``bot.jobs.kinds``)
from what the host can check (the tree's commits, the relay's answer, the review tool's
record), not from what the model says it did.

A run that ended is ``refused`` when its last decision refused a call it never made since
(``ended_refused``), and ``succeeded`` only when no call of the model's last tool-calling turn
failed (``unrecovered_error``, BEM-520: it answered without trying again) and its kind finds
nothing missing (``Kind.judge``).
"""

from __future__ import annotations

from bot.core.errors import JobError
from bot.core.frames import ToolCallRecord
from bot.runner.state import RunState

REFUSED_CODE = "BEM-094"


def ended_refused(state: RunState) -> bool:
    """The last decision was a refusal and no later call of the refused tool succeeded."""
    if not state.decisions or state.decisions[-1].approved:
        return False
    refusals = [
        index
        for index, record in enumerate(state.records)
        if record.error is not None and record.error.code == REFUSED_CODE
    ]
    if not refusals:
        return False
    refused = state.records[refusals[-1]]
    later = state.records[refusals[-1] + 1 :]
    return not any(record.ok and record.name == refused.name for record in later)


def unrecovered_failure(state: RunState) -> ToolCallRecord | None:
    """The first failed call of the model's last tool-calling turn: after it the model only
    answered, so nothing it said was built on what that call should have returned. A failure
    of an earlier turn counts as recovered: the model saw it and called tools again. A refusal
    (BEM-094) is not a failure here; ``ended_refused`` decides about it."""
    turns = [m for m in state.messages if m.get("role") == "assistant" and m.get("tool_calls")]
    if not turns:
        return None
    last = {call["id"] for call in turns[-1]["tool_calls"]}
    failed = (record for record in state.records if record.id in last and not record.ok)
    return next((r for r in failed if r.error is None or r.error.code != REFUSED_CODE), None)


def unrecovered_error(state: RunState) -> JobError | None:
    """BEM-520 when the run ended right after a failed call (``unrecovered_failure``): the
    rule every kind is judged by before its own (``Kind.judge``)."""
    failed = unrecovered_failure(state)
    if failed is None:
        return None
    error = failed.error
    reason = f"{error.code}: {error.message}" if error is not None else "it failed"
    return JobError(
        "BEM-520",
        f"the run ended right after {failed.name} failed ({reason}); the model answered "
        "without trying again, so its answer was not checked against anything",
    )
