"""Exceptions that stop a run from outside: not failures of a model call, a tool or a hook.

The runner turns a model client's, a tool's or a hook's unexpected exception into a BEM
code (BEM-096, BEM-100, BEM-095) so a bug there does not crash the worker; a tool's is even
handed back to the model, and the run goes on. An interrupt must do neither: Celery's soft
time limit raises ``SoftTimeLimitExceeded`` (an ``Exception``) wherever the worker happens
to be, and the job must end with BEM-505, not carry on as if one call had failed. The
runner lets these through untouched, to whoever drives the run.

``RunAborted`` is a tool's way to end the run with a BEM code instead of handing an error to
the model: an MCP server that died mid-call cannot answer another call, so the job fails.
"""

from __future__ import annotations

from typing import Final

from celery.exceptions import SoftTimeLimitExceeded

from bot.core.errors import BeamError


class RunAborted(Exception):
    """Raised by a tool whose failure ends the run: ``error`` is what the job fails with."""

    def __init__(self, error: BeamError) -> None:
        super().__init__(str(error))
        self.error = error


INTERRUPTS: Final[tuple[type[BaseException], ...]] = (SoftTimeLimitExceeded, RunAborted)
