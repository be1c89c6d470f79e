"""``ToolLoopAgent``: asks the model, runs the tools it calls, and repeats until it answers.

A run is split into segments. ``start`` builds a ``RunState``; ``run`` drives it until the
model answers, the run fails, or a ``confirm_required`` tool parks it. ``resume`` applies a
person's ``CallDecision`` to a parked state, possibly in another process, and drives it on. Every
segment yields a placeholder and a thinking frame first and exactly one done frame last.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncGenerator, Collection, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Literal, TypedDict, Unpack

from bot.clients.base import (
    Completion,
    CompletionClient,
    Message,
    StreamingCompletionClient,
    TextDelta,
    ToolCall,
)
from bot.core.agent import AgentMetadata
from bot.core.errors import BeamError
from bot.core.frames import (
    ChunkFrame,
    DoneFrame,
    Frame,
    PendingCall,
    PlaceholderFrame,
    ResultStatus,
    ThinkingFrame,
    ToolCallRecord,
    ToolFrame,
    Usage,
)
from bot.core.input import AgentContext, AgentInput
from bot.core.tools import Tool, ToolSpec, allowlist_name
from bot.runner.budget import (
    NO_BUDGET,
    ContextBudget,
    calibrated,
    fit,
    over_cap_message,
    over_cap_note,
    recalibrated,
)
from bot.runner.calls import (
    CheckedCall,
    call_key,
    check_call,
    failed_record,
    invoke,
    reply_message,
    tool_message,
)
from bot.runner.endings import check_ending, unique_call_ids
from bot.runner.hooks import Hooks
from bot.runner.interrupts import INTERRUPTS
from bot.runner.result_fit import fitted_result
from bot.runner.run_limits import RunLimits
from bot.runner.state import CallDecision, RunState, accepted_digests, specs_digest
from sandbox.inside.tool_specs import EARLIER_SPECS
from skills.loader import Skill, skill_by_name


class LoopOptions(TypedDict, total=False):
    """The keyword options ``ToolLoopAgent.for_skill`` passes on to the constructor."""

    max_rounds: int
    tool_retry_limit: int
    hooks: Hooks | None
    stream_tokens: bool
    prompt_values: Mapping[str, Any] | None
    description: str
    budget: ContextBudget | Literal["off"] | None
    limits: RunLimits


class ToolLoopAgent:
    """The built-in tool-loop agent. It implements the ``bot.core.agent.Agent`` protocol."""

    def __init__(
        self,
        name: str,
        client: CompletionClient,
        tools: Sequence[Tool],
        skill: Skill | None = None,
        *,
        max_rounds: int = 8,
        tool_retry_limit: int = 2,
        hooks: Hooks | None = None,
        stream_tokens: bool = False,
        prompt_values: Mapping[str, Any] | None = None,
        description: str = "",
        budget: ContextBudget | Literal["off"] | None = None,
        limits: RunLimits | None = None,
    ) -> None:
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, not {max_rounds}")
        if tool_retry_limit < 0:
            raise ValueError(f"tool_retry_limit must not be negative, not {tool_retry_limit}")
        self._client = client
        self._skill = skill
        self._tools, self._specs = _index(tools)
        self._digest = specs_digest(self._specs.values())
        self._accepted = accepted_digests(self._specs.values(), EARLIER_SPECS)
        # Always on unless asked off: a request never outgrows the model, however the agent
        # was built (the workers, the Python API, the consume skill).
        if budget is None:
            budget = ContextBudget.for_client(client)
        self._budget = None if budget == NO_BUDGET else budget
        self._limits = limits or RunLimits()
        # Every request carries the tool specs; the budget counts them once.
        self._specs_chars = len(json.dumps([spec.openai_format() for spec in self.tools]))
        self._max_rounds = max_rounds
        self._retry_limit = tool_retry_limit
        self._hooks = hooks or Hooks()
        self._stream_tokens = stream_tokens
        # Rendered once, from the job's values only: a misspelt value fails here (BEM-112),
        # not in a job. The request is never a prompt value; it is the user message.
        self._system_prompt = skill.render(**(prompt_values or {})) if skill else ""
        tags = ["tool-loop"] + ([f"skill:{skill.name}"] if skill else [])
        # Built here so a bad agent name fails at construction, not at registration.
        self._metadata = AgentMetadata(
            name=name,
            description=description or (skill.description if skill else ""),
            tags=tuple(tags),
        )

    @classmethod
    def for_skill(
        cls,
        skill_name: str,
        client: CompletionClient,
        tools: Sequence[Tool],
        *,
        name: str | None = None,
        granted: Collection[str] = (),
        **options: Unpack[LoopOptions],
    ) -> ToolLoopAgent:
        """An agent for a skill with only the tools its allowlist (plus ``granted``, in the
        allowlist's form: ``server.tool`` for an MCP tool) names; BEM-110 if unknown."""
        skill = skill_by_name(skill_name)
        names = skill.tools | frozenset(granted)
        allowed = [tool for tool in tools if allowlist_name(tool.spec().name) in names]
        return cls(name or skill.name, client, allowed, skill, **options)

    @property
    def name(self) -> str:
        return self._metadata.name

    @property
    def tools(self) -> list[ToolSpec]:
        """The specs of the tools this agent offers the model, sorted by name."""
        return [self._specs[name] for name in sorted(self._specs)]

    def metadata(self) -> AgentMetadata:
        return self._metadata

    async def health_check(self) -> bool:
        return True

    def stream(self, input: AgentInput, context: AgentContext) -> AsyncGenerator[Frame, None]:
        """The ``Agent`` protocol: ``start`` then ``run``."""
        return self.run(self.start(input, context))

    def start(self, input: AgentInput, context: AgentContext) -> RunState:
        """The state of a new run: system prompt, earlier turns, and the request, once.

        The system prompt was rendered when the agent was built and never holds the request,
        so the user message is the only place the model reads it.
        """
        messages: list[Message] = []
        if self._system_prompt.strip():
            messages.append({"role": "system", "content": self._system_prompt})
        messages.extend(copy.deepcopy(context.history))
        messages.append({"role": "user", "content": input.text()})
        return RunState(
            agent=self.name,
            skill=self._skill.name if self._skill else None,
            tools=sorted(self._specs),
            tools_digest=self._digest,
            input=input.model_copy(deep=True),
            messages=messages,
            budget=self._budget,
        )

    def run(self, state: RunState) -> AsyncGenerator[Frame, None]:
        """Drive a new (or interrupted-by-crash) state; BEM-098 if it ended or is parked."""
        self._check_belongs(state)
        if state.status is not None:
            waiting = f" for a decision on call {state.pending.id}" if state.pending else ""
            raise BeamError(
                "BEM-098",
                f"the run is {state.status.value}{waiting}; "
                "resume a parked run with a CallDecision, or start a new run",
            )
        return self._segment(state, self._continue(state))

    def resume(self, state: RunState, decision: CallDecision) -> AsyncGenerator[Frame, None]:
        """Apply a person's decision to a parked run and drive it on.

        The pending call is taken out of the state when ``resume`` is called, so one state
        object accepts one decision: a second ``resume`` fails with BEM-093.
        """
        self._check_belongs(state)
        pending = _claim(state, decision)
        # The segment opens by saying who decided: the event stream keeps it with the run.
        verdict = "approved" if decision.approved else "refused"
        who = decision.decided_by or "a reviewer"
        note = f"{pending.tool} {verdict} by {who}"
        return self._segment(state, self._decided(state, pending, decision), note=note)

    def _check_belongs(self, state: RunState) -> None:
        differences = _differences(
            state,
            agent=self.name,
            skill=self._skill.name if self._skill else None,
            tools=sorted(self._specs),
            digests=self._accepted,
        )
        if differences:
            raise BeamError(
                "BEM-092",
                "saved run state does not match this agent: "
                + "; ".join(differences)
                + ". Resume it on an agent built with the same name, skill and tools.",
            )

    async def _segment(
        self, state: RunState, body: AsyncGenerator[Frame, None], *, note: str = ""
    ) -> AsyncGenerator[Frame, None]:
        """Opening frames, the body's frames, then exactly one done frame, whatever happens.

        A ``BeamError`` escaping the body is how the loop fails a run: it becomes the done
        frame's error instead of leaving the generator, so a consumer always gets a result.
        """
        # The round limit guards one segment, so a run that waited for a person gets a fresh
        # budget of rounds after the decision.
        state.rounds = 0
        try:
            async with aclosing(body):
                for opening in _opening_frames(note):
                    await self._hooks.run_on_frame(opening)
                    yield opening
                async for frame in body:
                    await self._hooks.run_on_frame(frame)
                    yield frame
        except BeamError as error:
            state.fail(error)
        yield await self._done(state)

    async def _done(self, state: RunState) -> DoneFrame:
        try:
            await self._hooks.run_on_stop(state, state.result())
        except BeamError as error:
            # A run whose stop could not be handled (say, the parked state was not saved)
            # has failed: reporting it as parked would wait for a decision nobody can give.
            state.fail(error)
        frame = DoneFrame(result=state.result())
        try:
            await self._hooks.run_on_frame(frame)
        except BeamError as error:
            state.fail(error)
            # Not shown to on_frame again: that hook has just failed on this very frame.
            frame = DoneFrame(result=state.result())
        return frame

    async def _continue(self, state: RunState) -> AsyncGenerator[Frame, None]:
        """Process the queued calls, ask the model when none are left, until the run stops."""
        while state.status is None:
            step = self._process(state, state.queue.pop(0)) if state.queue else self._round(state)
            async with aclosing(step) as frames:
                async for frame in frames:
                    yield frame

    async def _decided(
        self, state: RunState, pending: PendingCall, decision: CallDecision
    ) -> AsyncGenerator[Frame, None]:
        state.decisions.append(decision)
        call = ToolCall(id=pending.id, name=pending.tool, arguments=json.dumps(pending.arguments))
        if decision.approved:
            # The decision is the approval: it lets this one call through, nothing else.
            async with aclosing(self._process(state, call, approved=True)) as frames:
                async for frame in frames:
                    yield frame
        else:
            yield await self._record(state, _refusal_record(call, decision), _refusal(decision))
        async with aclosing(self._continue(state)) as frames:
            async for frame in frames:
                yield frame

    async def _process(
        self, state: RunState, call: ToolCall, *, approved: bool = False
    ) -> AsyncGenerator[Frame, None]:
        """One call: check it, park it if it needs a person, or run it and record it."""
        try:
            checked = check_call(call, self._tools, self._specs)
        except BeamError as error:
            record = failed_record(call, error)
        else:
            if self._needs_person(checked.spec) and not approved:
                _park(state, checked)
                return
            self._limits.check_tool_call(len(state.records))
            record = await invoke(checked, state, self._hooks)
        message = tool_message(record)
        if state.budget is not None:
            limit = state.budget.max_result_chars
            message["content"] = fitted_result(message["content"], record.name, limit)
        if call.note:
            message["content"] += f"\n{call.note}"
        yield await self._record(state, record, message)
        self._count_failure(state, call, record)

    def _needs_person(self, spec: ToolSpec) -> bool:
        # A skill with confirm_first (gfs-publish) asks a person before every tool call.
        return spec.confirm_required or (self._skill is not None and self._skill.confirm_first)

    async def _record(
        self, state: RunState, record: ToolCallRecord, message: Message | None
    ) -> ToolFrame:
        """Keep the record; ``message`` answers the call in the conversation (None: the call
        is not in it)."""
        state.records.append(record)
        if message is not None:
            state.messages.append(message)
        await self._hooks.run_after_tool(state, record)
        return ToolFrame(record=record)

    def _count_failure(self, state: RunState, call: ToolCall, record: ToolCallRecord) -> None:
        """The model may retry a failing call ``tool_retry_limit`` times; one more ends the run."""
        if record.error is None:
            return
        key = call_key(call)
        failures = state.failures.get(key, 0) + 1
        state.failures[key] = failures
        if failures > self._retry_limit:
            raise BeamError(
                record.error.code,
                f"{call.name} failed {failures} times with the same arguments, more than "
                f"tool_retry_limit={self._retry_limit} allows: {record.error.message}",
            )

    async def _round(self, state: RunState) -> AsyncGenerator[Frame, None]:
        """One completion: ask the model, then queue its calls or finish with its answer."""
        if state.rounds >= self._max_rounds:
            raise BeamError(
                "BEM-088",
                f"the model made {self._max_rounds} completions in this run segment without"
                " answering; raise the limit (model.max_rounds for the workers,"
                " ToolLoopAgent(..., max_rounds=N) in Python) or narrow the request",
            )
        state.rounds += 1
        streamed = False
        completion: Completion | None = None
        sent: list[int] = []  # the size of each request sent, the last one answered
        async with aclosing(self._fitted_reply(state, sent)) as items:
            async for item in items:
                if isinstance(item, TextDelta):
                    streamed = True
                    yield ChunkFrame(text=item.text)
                else:
                    completion = item
        if completion is None:
            raise BeamError("BEM-063", "the model stream ended without a completion")
        completion = await self._hooks.run_after_completion(state, completion)
        _count_usage(state, completion, sent[-1])
        if completion.refusal:
            # A declined request is an answer of its own kind, not a failure to retry.
            state.status = ResultStatus.REFUSED
            state.refusal = completion.refusal
            state.text = completion.text or ""
            return
        check_ending(completion, _output_limit(self._client))
        _absorb(state, completion)
        if state.budget is not None and len(state.queue) > state.budget.max_calls_per_reply:
            limit = state.budget.max_calls_per_reply
            kept, declined = state.queue[:limit], state.queue[limit:]
            # The reply goes into the history with the calls that run only, and one note
            # about the rest: answering hundreds of calls one by one would itself overflow.
            state.messages[-1]["tool_calls"] = [call.openai_format() for call in kept]
            kept[-1] = kept[-1].model_copy(update={"note": over_cap_note(limit, declined)})
            state.queue = kept
            for call in declined:
                record = failed_record(call, BeamError("BEM-099", over_cap_message(limit)))
                yield await self._record(state, record, None)
        if completion.tool_calls and streamed:
            # The text said before the calls is a paragraph of its own: whatever reads the
            # chunks as one text (the job page, `riverbeam follow`) must not glue the next
            # round's words onto it.
            yield ChunkFrame(text="\n\n")
        if not completion.tool_calls:
            state.status = ResultStatus.COMPLETED
            state.text = completion.text or ""
            if state.text and not streamed:
                yield ChunkFrame(text=state.text)

    async def _fitted_reply(
        self, state: RunState, sent: list[int]
    ) -> AsyncGenerator[TextDelta | Completion, None]:
        """The model's reply to the history, fitted to the run's budget first. A request the
        model refuses as over its window (BEM-072) means the estimate was too generous: it
        is recalibrated from the refused size, the next fit compacts, and the request goes
        once more (a refusal comes before any delta, so nothing was yielded)."""
        for attempt in (1, 2):
            self._limits.check_request(state.requests, state.usage.total_tokens)
            sent_chars = self._fit(state)
            sent.append(sent_chars)
            state.requests += 1
            # Hooks edit copies: what they add reaches this one request, never the history.
            messages = copy.deepcopy(state.messages)
            specs = self.tools
            await self._hooks.run_before_completion(state, messages, specs)
            try:
                async with aclosing(self._ask(messages, specs)) as items:
                    async for item in items:
                        yield item
                return
            except BeamError as error:
                if error.code != "BEM-072" or attempt == 2 or state.budget is None:
                    raise
                state.chars_per_token = recalibrated(
                    sent_chars, state.budget, state.chars_per_token
                )

    def _fit(self, state: RunState) -> int:
        """Compact the history until the next request fits the run's budget; its size in
        characters (0 without a budget)."""
        if state.budget is None:
            return 0
        return fit(
            state.messages,
            state.budget,
            chars_per_token=state.chars_per_token,
            fixed_chars=self._specs_chars,
            compacted=state.compacted,
        )

    async def _ask(
        self, messages: list[Message], specs: list[ToolSpec]
    ) -> AsyncGenerator[TextDelta | Completion, None]:
        """The model's reply: deltas then the completion when streaming, else the completion."""
        try:
            if self._stream_tokens and isinstance(self._client, StreamingCompletionClient):
                async for item in self._client.stream(messages, specs):
                    yield item
            else:
                yield await self._client.complete(messages, specs)
        except BeamError:
            raise
        except INTERRUPTS:
            raise
        except Exception as error:
            # Clients report failures as BeamErrors (BEM-06x); anything else is a client bug,
            # and the run records it instead of crashing the worker.
            raise BeamError(
                "BEM-096",
                f"the model client raised {type(error).__name__}: {error}",
            ) from error


def _index(tools: Sequence[Tool]) -> tuple[dict[str, Tool], dict[str, ToolSpec]]:
    by_name: dict[str, Tool] = {}
    specs: dict[str, ToolSpec] = {}
    for tool in tools:
        # Read once: the spec the model sees, the digest and the checks must all agree.
        spec = tool.spec()
        if spec.name in by_name:
            raise ValueError(f"two tools are named {spec.name!r}; tool names must be unique")
        by_name[spec.name] = tool
        specs[spec.name] = spec
    return by_name, specs


def _differences(
    state: RunState, *, agent: str, skill: str | None, tools: list[str], digests: frozenset[str]
) -> list[str]:
    found: list[str] = []
    if state.agent != agent:
        found.append(f"it belongs to agent {state.agent!r}, not {agent!r}")
    if state.skill != skill:
        found.append(f"it was started with skill {state.skill!r}, not {skill!r}")
    missing = sorted(set(state.tools) - set(tools))
    extra = sorted(set(tools) - set(state.tools))
    if missing:
        found.append(f"this agent lacks tools {missing}")
    if extra:
        found.append(f"this agent has tools the run did not: {extra}")
    if not missing and not extra and state.tools_digest not in digests:
        found.append("the tool specs (descriptions, schemas or confirm flags) have changed")
    return found


def _claim(state: RunState, decision: CallDecision) -> PendingCall:
    pending = state.pending
    if state.status is not ResultStatus.INTERRUPTED or pending is None:
        status = state.status.value if state.status else "running"
        raise BeamError("BEM-093", f"the run has no pending call to decide (it is {status})")
    if decision.call_id != pending.id:
        raise BeamError(
            "BEM-093",
            f"the decision names call {decision.call_id!r}, but the run waits on "
            f"{pending.id!r} ({pending.tool}); decide that call",
        )
    state.pending = None
    state.status = None
    return pending


def _park(state: RunState, checked: CheckedCall) -> None:
    state.pending = PendingCall(id=checked.call.id, tool=checked.spec.name, arguments=checked.args)
    state.status = ResultStatus.INTERRUPTED


def _count_usage(state: RunState, completion: Completion, sent_chars: int) -> None:
    """Tokens are paid for whether or not the turn can be acted on; the prompt's count also
    calibrates the budget's estimate (``sent_chars`` 0: no budget to calibrate)."""
    if completion.usage is None:
        state.usage = state.usage + Usage(unreported_requests=1)
    else:
        state.usage = state.usage + completion.usage
        ratio = calibrated(sent_chars, completion.usage.prompt_tokens)
        if ratio is not None:
            state.chars_per_token = ratio
    if completion.model is not None:
        state.model_used = completion.model


def _absorb(state: RunState, completion: Completion) -> None:
    calls = unique_call_ids(completion.tool_calls, state.messages)
    turn = completion.model_copy(update={"tool_calls": calls})
    state.messages.append(turn.assistant_message())
    state.queue = calls


def _output_limit(client: CompletionClient) -> str | None:
    """The client's output-token limit as ``parameter=N``, when it says (for messages)."""
    limit = getattr(client, "output_limit", None)
    return limit if isinstance(limit, str) else None


def _refusal(decision: CallDecision) -> Message:
    return reply_message(
        decision.call_id,
        {"refused": True, "by": decision.decided_by, "comment": decision.comment},
    )


def _refusal_record(call: ToolCall, decision: CallDecision) -> ToolCallRecord:
    who = decision.decided_by or "a reviewer"
    why = f": {decision.comment}" if decision.comment else ""
    return failed_record(call, BeamError("BEM-094", f"{who} refused {call.name}{why}"))


def _opening_frames(note: str) -> tuple[PlaceholderFrame, ThinkingFrame]:
    return PlaceholderFrame(text=note), ThinkingFrame()
