"""``riverbeam model check``: is the configured model endpoint ready for the workers?

Three requests, as a worker would make them: a small answer, a tool call, and the small
answer streamed (whose last chunk must carry usage, or the context budget cannot calibrate).
Prints the provider, model and endpoint, each request's latency and outcome, and every
setting with where its value came from.

With ``model.factory`` set (the demo's scripted model, tests), the workers use what it
returns instead of any endpoint, so that is what is checked: no key is needed, the factory
is loaded and each job kind's client asked for its first reply, and the scripted demo model
is named as such.

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
from typing import TYPE_CHECKING, Any, NamedTuple

from bot.clients.base import Completion, Message, TextDelta
from bot.clients.profiles import ResolvedModel, resolve
from bot.config import Settings
from bot.core.errors import BeamError
from bot.core.tools import ToolSpec, json_params
from bot.store.models import JobKind, JobRecord, JobSpec

if TYPE_CHECKING:
    from bot.clients.openai_compatible import OpenAiCompatible

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


class ModelCheck(NamedTuple):
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

    settings = load_settings()
    if settings.model.factory:
        return _check_factory(settings)
    resolved = resolve(settings.model, os.environ)
    if resolved is None:
        raise BeamError(
            "BEM-508",
            "no API key found: set model.api_key_env or model.api_key_file, or BEAM_API_KEY"
            " or OPENAI_API_KEY",
        )
    # Here, not at the top: every command's start would import the openai package (1.1 s).
    from bot.clients.openai_compatible import OpenAiCompatible

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


def _check_factory(settings: Settings) -> int:
    """The check of a configured ``model.factory``, which the workers use instead of any
    endpoint (so no key is needed): each kind's client is built as a worker builds it, and
    asked for its first reply to the job's opening request."""
    from bot.cli.common import scripted_model_note

    factory = settings.model.factory
    print(f"factory    {factory} (the workers use it, not an endpoint: no API key is needed)")
    note = scripted_model_note(settings)
    if note is not None:
        print(note)
    checks = [asyncio.run(_first_reply(settings, kind)) for kind in JobKind]
    for check in checks:
        mark = "ok  " if check.ok else "FAIL"
        print(f"{mark} {check.name:16} {check.seconds * 1000:8.0f} ms  {check.detail}")
    return 0 if all(check.ok for check in checks) else 1


async def _first_reply(settings: Settings, kind: JobKind) -> ModelCheck:
    from bot.jobs.kinds import REGISTRY
    from bot.jobs.model_client import model_client_for

    # A stand-in job, never stored or run: each kind with the fields it requires.
    spec = JobSpec.model_validate({"kind": kind, "repo": "check", **REGISTRY[kind].stand_in_fields})
    job = JobRecord(id="model-check", spec=spec)
    client = model_client_for(settings, job)
    name = getattr(client, "model", None) or type(client).__name__
    started = time.perf_counter()
    try:
        reply = await client.complete(_SMALL, [])
    except BeamError as error:
        return ModelCheck(f"{kind} job", False, str(error), time.perf_counter() - started)
    seconds = time.perf_counter() - started
    if reply.tool_calls:
        return ModelCheck(f"{kind} job", True, f"{name}: calls {reply.tool_calls[0].name}", seconds)
    text = (reply.text or "").strip()
    return ModelCheck(f"{kind} job", bool(text), f"{name}: answers {text[:40]!r}", seconds)


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
