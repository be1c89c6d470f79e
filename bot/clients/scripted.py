"""A client that plays back prepared completions, for tests and demos."""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterable, Sequence

from bot.clients.base import Completion, Message
from bot.core.errors import BeamError
from bot.core.tools import ToolSpec

Step = Completion | str | BeamError


class ScriptedClient:
    """Returns its steps in order: a ``Completion``, a plain answer string, or an error to
    raise. Every request is recorded in ``requests`` so tests can read what the model saw.
    Fails with BEM-081 once the steps run out."""

    model = "scripted"

    def __init__(self, steps: Iterable[Step]) -> None:
        self._steps: deque[Step] = deque(steps)
        self.requests: list[tuple[list[Message], list[ToolSpec]]] = []

    @property
    def remaining(self) -> int:
        return len(self._steps)

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Completion:
        self.requests.append((copy.deepcopy(list(messages)), list(tools)))
        if not self._steps:
            raise BeamError(
                "BEM-081",
                f"scripted client has no steps left after {len(self.requests) - 1} completions;"
                " add a step for this request",
            )
        step = self._steps.popleft()
        if isinstance(step, BeamError):
            raise step
        if isinstance(step, str):
            return Completion(text=step, model=self.model)
        return step if step.model else step.model_copy(update={"model": self.model})
