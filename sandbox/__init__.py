"""The jail, the working tree and the nine git and file tools.

Only in-container code is imported here: the tool server's image is built from what
``sandbox.inside.server`` imports, so host-only modules (containers, workspaces, the relay) are
imported by their own module names.
"""

from sandbox.inside.jail import SandboxRoot
from sandbox.inside.sandbox_tools import sandbox_tools
from sandbox.inside.worktree import WorkingTree

__all__ = ["SandboxRoot", "WorkingTree", "sandbox_tools"]
