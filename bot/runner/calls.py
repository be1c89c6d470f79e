"""One tool call: parse and check its arguments, run the tool, and record how it ended.

Nothing here ends the run. Every way a call can go wrong becomes a failed ``ToolCallRecord``
whose error the model reads as the tool result, so it can fix the call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import JsonValue

from bot.clients.base import Message, ToolCall
from bot.core import jsonlimits
from bot.core.errors import BeamError
from bot.core.frames import ErrorInfo, ToolCallRecord
from bot.core.tools import Tool, ToolSpec, validate_arguments
from bot.runner.hooks import Hooks
from bot.runner.interrupts import INTERRUPTS
from bot.runner.state import RunState

# How much of unparseable arguments a record keeps.
MAX_RECORDED_TEXT = 4000


@dataclass(frozen=True)
class CheckedCall:
    """A call whose tool exists and whose arguments match the tool's schema."""

    call: ToolCall
    tool: Tool
    spec: ToolSpec
    args: dict[str, JsonValue]


def recorded_arguments(call: ToolCall) -> JsonValue:
    """The arguments as the record keeps them: parsed JSON, or the raw text when malformed
    or over the JSON limits (its start only: the text is the model's, of any length)."""
    try:
        parsed: JsonValue = jsonlimits.loads(call.arguments, what="the arguments")
    except ValueError:
        return call.arguments[:MAX_RECORDED_TEXT]
    return parsed


def call_key(call: ToolCall) -> str:
    """Identifies "the same call" for the retry limit: tool name plus canonical arguments."""
    arguments = recorded_arguments(call)
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return f"{call.name}:{canonical}"


def check_call(
    call: ToolCall, tools: Mapping[str, Tool], specs: Mapping[str, ToolSpec]
) -> CheckedCall:
    """BEM-089 for a tool the agent lacks, BEM-090 for arguments that are not valid."""
    tool = tools.get(call.name)
    if tool is None:
        offered = ", ".join(sorted(tools)) or "none"
        raise BeamError(
            "BEM-089", f"there is no tool named {call.name!r}; the tools are: {offered}"
        )
    spec = specs[call.name]
    try:
        parsed = jsonlimits.loads(call.arguments, what="the arguments")
    except jsonlimits.JsonLimitError as error:
        raise BeamError(
            "BEM-090", f"{call.name}: {error}; send a smaller, flatter JSON object"
        ) from error
    except ValueError as error:
        raise BeamError(
            "BEM-090", f"{call.name}: arguments are not valid JSON ({error}); send a JSON object"
        ) from error
    return CheckedCall(call=call, tool=tool, spec=spec, args=validate_arguments(spec, parsed))


def failed_record(call: ToolCall, error: BeamError, duration_ms: float = 0.0) -> ToolCallRecord:
    return ToolCallRecord(
        id=call.id,
        name=call.name,
        arguments=recorded_arguments(call),
        ok=False,
        error=ErrorInfo(code=error.code, message=error.message),
        duration_ms=duration_ms,
        sent_id=call.sent_id,
    )


async def invoke(checked: CheckedCall, state: RunState, hooks: Hooks) -> ToolCallRecord:
    """Run the before_tool hooks and the tool; a refusal or failure is a failed record."""
    started = time.perf_counter()
    refusal = await hooks.run_before_tool(state, checked.call, checked.args)
    if refusal is not None:
        return failed_record(checked.call, refusal, _since(started))
    try:
        result = _as_json(checked.spec, await checked.tool.invoke(checked.args, state.input))
    except BeamError as error:
        return failed_record(checked.call, error, _since(started))
    except INTERRUPTS:
        raise
    except Exception as error:
        failure = BeamError(
            "BEM-100", f"{checked.spec.name} raised {type(error).__name__}: {error}"
        )
        return failed_record(checked.call, failure, _since(started))
    return ToolCallRecord(
        id=checked.call.id,
        name=checked.call.name,
        arguments=checked.args,
        ok=True,
        result=result,
        duration_ms=_since(started),
        sent_id=checked.call.sent_id,
    )


def tool_message(record: ToolCallRecord) -> Message:
    """The OpenAI tool message that answers a call: its result, or its error."""
    content: JsonValue = record.result
    if record.error is not None:
        content = {"error": record.error.model_dump()}
    return reply_message(record.id, content)


def reply_message(call_id: str, content: JsonValue) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(content)}


def _as_json(spec: ToolSpec, result: object) -> JsonValue:
    # A round trip detaches the result from the tool's own objects and normalises it to
    # exactly what the model reads, so the record and the message cannot disagree.
    try:
        normalised: JsonValue = json.loads(json.dumps(result, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise BeamError(
            "BEM-101",
            f"{spec.name} returned {type(result).__name__}, which is not JSON ({error}); "
            "tools must return JSON values",
        ) from error
    return normalised


def _since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
