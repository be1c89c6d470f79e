"""Run limits: how much one run may spend, across all its segments, whatever the model does.

``max_rounds`` caps one segment's completions; these cap the run: the requests sent to the
model (``max_requests``), the tool calls run (``max_tool_calls``) and the tokens the endpoint
reported (``max_total_tokens``). A hostile or looping model reaches one and the run fails
with BEM-073, whose message names the limit and the setting that raises it. The counts are
the run state's own (``requests``, ``records``, ``usage``), so a resumed run goes on counting.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from bot.core.errors import BeamError


class RunLimits(BaseModel):
    """None: no limit. The defaults are far above what a docs job needs (a few dozen
    requests), and low enough that a model that never stops is stopped."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_requests: int | None = Field(default=100, ge=1)
    max_tool_calls: int | None = Field(default=500, ge=1)
    max_total_tokens: int | None = Field(default=None, ge=1)

    def check_request(self, requests: int, total_tokens: int) -> None:
        """Before a request: BEM-073 when ``requests`` were sent already, or the tokens so
        far reached the limit."""
        if self.max_requests is not None and requests >= self.max_requests:
            raise _reached("max_requests", self.max_requests, f"{requests} requests were sent")
        if self.max_total_tokens is not None and total_tokens >= self.max_total_tokens:
            raise _reached(
                "max_total_tokens", self.max_total_tokens, f"{total_tokens} tokens were used"
            )

    def check_tool_call(self, calls: int) -> None:
        """Before a tool call runs: BEM-073 when ``calls`` were made already."""
        if self.max_tool_calls is not None and calls >= self.max_tool_calls:
            raise _reached("max_tool_calls", self.max_tool_calls, f"{calls} tool calls were made")


def _reached(limit: str, value: int, spent: str) -> BeamError:
    return BeamError(
        "BEM-073",
        f"the run reached its limit {limit}={value}: {spent}; raise model.{limit}"
        f" (RIVERBEAM_MODEL__{limit.upper()}) or ToolLoopAgent(..., limits=RunLimits(...)),"
        " or narrow the request",
    )
