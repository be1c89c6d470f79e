"""The built-in tool-loop agent, its resumable run state, and its lifecycle hooks.

See ``docs/runner.md``.
"""

from bot.runner.hooks import Hooks
from bot.runner.loop import ToolLoopAgent
from bot.runner.state import CallDecision, RunState

__all__ = ["CallDecision", "Hooks", "RunState", "ToolLoopAgent"]
