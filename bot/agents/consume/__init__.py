"""The ``consume`` skill's tools: ``search`` and ``get_page``, read-only, over one docs tree.

No job kind runs ``consume`` (DESIGN §3.5); an embedder does, through the Python API::

    agent = ToolLoopAgent.for_skill("consume", client, consume_tools(root))

Both tools read through the path jail (``SandboxRoot``), so a tree an embedder points them at
is read the way a job's tree is: no symlink out, no special file, nothing over the read cap.
"""

from __future__ import annotations

from bot.agents.consume.get_page import GetPageTool
from bot.agents.consume.search import SearchTool
from bot.core.tools import Tool
from sandbox.inside.jail import SandboxRoot

__all__ = ["GetPageTool", "SearchTool", "consume_tools"]


def consume_tools(root: SandboxRoot) -> list[Tool]:
    """The tools the ``consume`` skill allows, bound to the tree behind ``root``."""
    return [SearchTool(root), GetPageTool(root)]
