"""The built-in tool-loop agent, its resumable run state, and its lifecycle hooks.

See ``docs/runner.md``.
"""

from bot.runner.hooks import Hooks
from bot.runner.loop import ToolLoopAgent
from bot.runner.state import Decision, RunState

__all__ = ["Decision", "Hooks", "RunState", "ToolLoopAgent"]
