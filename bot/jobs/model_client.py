"""Which model a worker's job talks to.

``model.factory = "module:function"`` in the config names a function that gets the job's
``JobRecord`` and returns a ``CompletionClient``: tests and the demo use it to put scripted
models into real worker processes. Without it, the workers use ``OpenAiCompatible`` built
from the rest of ``[model]`` and the environment (``bot.clients.profiles``); without an API
key either, the job fails with BEM-508.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal, cast

from bot.clients.base import CompletionClient
from bot.clients.profiles import DEFAULT_MAX_OUTPUT_TOKENS, context_window
from bot.config import Settings
from bot.core.errors import BeamError
from bot.core.factories import load_factory
from bot.runner.budget import NO_BUDGET, ContextBudget
from bot.runner.run_limits import RunLimits
from bot.store.models import JobRecord

ModelFactory = Callable[[JobRecord], CompletionClient]


def model_client_for(settings: Settings, job: JobRecord) -> CompletionClient:
    """The model client for one job; BEM-508 when none is configured."""
    if settings.model.factory:
        factory = cast(
            ModelFactory,
            load_factory(settings.model.factory, setting="model.factory", code="BEM-508"),
        )
        client = factory(job)
        if not isinstance(client, CompletionClient):
            raise BeamError(
                "BEM-508",
                f"model.factory {settings.model.factory!r} returned {type(client).__name__}, "
                "not a CompletionClient (an object with an async complete(messages, tools))",
            )
        return client
    # Imported here: a worker on a scripted model never loads the openai package (1.1 s).
    from bot.clients.openai_compatible import OpenAiCompatible

    live = OpenAiCompatible.from_settings(settings.model)
    if live is None:
        raise BeamError(
            "BEM-508",
            "no model is configured for the workers: set BEAM_API_KEY (or OPENAI_API_KEY, or"
            " model.api_key_env / model.api_key_file) in the worker's environment, or"
            " model.factory in the config",
        )
    return live


def context_budget_for(settings: Settings) -> ContextBudget | Literal["off"]:
    """The budget of a job's run: the ``[model]`` limits and the provider's window;
    ``NO_BUDGET`` only when ``model.context_budget`` is turned off."""
    model = settings.model
    if not model.context_budget:
        return NO_BUDGET
    return ContextBudget(
        context_window=context_window(model, os.environ),
        max_output_tokens=model.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS,
        max_result_chars=model.max_result_chars,
        max_calls_per_reply=model.max_calls_per_reply,
        compaction=model.compaction,
    )


def run_limits_for(settings: Settings) -> RunLimits:
    """The run limits of a job's run, from ``[model]``."""
    model = settings.model
    return RunLimits(
        max_requests=model.max_requests,
        max_tool_calls=model.max_tool_calls,
        max_total_tokens=model.max_total_tokens,
    )
