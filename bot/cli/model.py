"""``riverbeam model check``: is the configured model endpoint ready for the workers?

Three requests, as a worker would make them: a small answer, a tool call, and the small
answer streamed (whose last chunk must carry usage, or the context budget cannot calibrate).
Prints the provider, model and endpoint, each request's latency and outcome, and every
setting with where its value came from.

Exit codes: 0 every check passed; 1 the endpoint answered but a check failed (or a request
failed); 2 the configuration is incomplete (no key, no model name, a bad value).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bot.clients.base import Completion, Message, TextDelta
from bot.clients.openai_compatible import OpenAiCompatible
from bot.clients.profiles import ResolvedModel, resolve
from bot.core.errors import BeamError
from bot.core.tools import ToolSpec, json_params

PING = ToolSpec(
    name="ping",
    description="Answers pong. Call it when asked to ping.",
    parameters=json_params({"value": {"type": "string"}}, ["value"]),
)
_SMALL: list[Message] = [{"role": "user", "content": "Reply with the single word: ready"}]
_TOOL: list[Message] = [
    {"role": "user", "content": "Call the ping tool with value 'riverbeam'. Do not answer in text."}
]
_CHECK_TOKENS = 1024  # room for a reasoning model to think before "ready"


@dataclass(frozen=True)
class ModelCheck:
    name: str
    ok: bool
    detail: str
    seconds: float


def add_model_commands(commands: Any) -> None:
    """Register ``model check`` on the CLI's subcommand group."""
    model = commands.add_parser("model", help="check the configured model endpoint")
    actions = model.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check", help="a small request, a tool call and a stream against the endpoint"
    )
    check.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    from bot.config import load_settings

    resolved = resolve(load_settings().model, os.environ)
    if resolved is None:
        raise BeamError(
            "BEM-508",
            "no API key found: set model.api_key_env or model.api_key_file, or BEAM_API_KEY"
            " or OPENAI_API_KEY",
        )
    client = OpenAiCompatible.from_resolved(resolved)
    limited = client.with_max_tokens(min(resolved.max_output_tokens, _CHECK_TOKENS))
    print(f"provider   {resolved.provider}")
    print(f"model      {resolved.model}")
    print(f"endpoint   {client.endpoint}")
    checks = asyncio.run(_run_checks(limited))
    for check in checks:
        mark = "ok  " if check.ok else "FAIL"
        print(f"{mark} {check.name:16} {check.seconds * 1000:8.0f} ms  {check.detail}")
    print("settings")
    for name, value, source in _settings(resolved):
        print(f"  {name:24} {value:32} {source}")
    return 0 if all(check.ok for check in checks) else 1


async def _run_checks(client: OpenAiCompatible) -> list[ModelCheck]:
    return [
        await _timed("answer", lambda: client.complete(_SMALL, []), _answered),
        await _timed("tool call", lambda: client.complete(_TOOL, [PING]), _called_ping),
        await _timed("streaming usage", lambda: _streamed(client), _streamed_usage),
    ]


async def _timed(
    name: str, request: Callable[[], Awaitable[Completion]], judge: Callable[[Completion], str]
) -> ModelCheck:
    started = time.perf_counter()
    try:
        completion = await request()
    except BeamError as error:
        return ModelCheck(name, False, str(error), time.perf_counter() - started)
    seconds = time.perf_counter() - started
    problem = judge(completion)
    detail = problem or _summary(completion)
    return ModelCheck(name, not problem, detail, seconds)


async def _streamed(client: OpenAiCompatible) -> Completion:
    completion: Completion | None = None
    async for item in client.stream(_SMALL, []):
        if not isinstance(item, TextDelta):
            completion = item
    if completion is None:
        raise BeamError("BEM-063", "the model stream ended without a completion")
    return completion


def _answered(completion: Completion) -> str:
    if completion.refusal:
        return f"the model refused: {completion.refusal}"
    if not (completion.text or "").strip():
        return f"no text in the answer (finish_reason {completion.finish_reason!r})"
    return ""


def _called_ping(completion: Completion) -> str:
    calls = [call for call in completion.tool_calls if call.name == PING.name]
    if not calls:
        return "the model answered without calling the tool: tool calls may not be enabled"
    try:
        arguments = json.loads(calls[0].arguments)
    except ValueError:
        return f"the tool call's arguments are not JSON: {calls[0].arguments[:80]!r}"
    if not isinstance(arguments, dict) or "value" not in arguments:
        return f"the tool call's arguments lack 'value': {calls[0].arguments[:80]!r}"
    return ""


def _streamed_usage(completion: Completion) -> str:
    problem = _answered(completion)
    if problem:
        return problem
    if completion.usage is None:
        return "the stream carried no usage (stream_options.include_usage is not honoured)"
    return ""


def _summary(completion: Completion) -> str:
    parts = [f"finish_reason {completion.finish_reason or 'none'}"]
    if completion.usage is not None:
        parts.append(f"{completion.usage.total_tokens} tokens")
    if completion.tool_calls:
        parts.append(f"called {completion.tool_calls[0].name}")
    return ", ".join(parts)


def _settings(resolved: ResolvedModel) -> list[tuple[str, str, str]]:
    """Every setting in force, with its source; the key shows only where it came from."""
    values = resolved.model_dump(exclude={"sources", "api_key"})
    # Header values may be credentials too: only their names are shown.
    values["headers"] = sorted(resolved.headers)
    rows = [("api_key", "(hidden)", resolved.sources.get("api_key", "none"))]
    for name, value in values.items():
        shown = json.dumps(value) if not isinstance(value, str) else value
        rows.append((name, shown[:32], resolved.sources.get(name, "default")))
    return rows
