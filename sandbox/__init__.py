"""The jail, the working tree and the nine git and file tools.

Only in-container code is named here: the tool server's image is built from what
``sandbox.inside.server`` imports, so host-only modules (containers, workspaces, the relay) are
imported by their own module names. The names load on first use: importing any module of the
package runs this file first, and the tool server must not pay for pygit2, pydantic and the
tool schemas before it needs them (its start-up is on every job's critical path). The names are
for users of the library: Riverbeam's own modules import the module a name lives in, never this
package (the ``no-root-imports`` contract).
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox.inside.bound_tools import sandbox_tools
    from sandbox.inside.jail import SandboxRoot
    from sandbox.inside.worktree import WorkingTree

_EXPORTS = {
    "SandboxRoot": "sandbox.inside.jail",
    "WorkingTree": "sandbox.inside.worktree",
    "sandbox_tools": "sandbox.inside.bound_tools",
}

__all__ = ["SandboxRoot", "WorkingTree", "sandbox_tools"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(_load(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sandbox' has no attribute {name!r}")


def _load(module: str) -> ModuleType:
    # Import statements, not names for importlib: the import graph (lint-imports) sees what
    # this package can load. Only a user of the names gets here, never the tool server.
    import sandbox.inside.bound_tools
    import sandbox.inside.jail
    import sandbox.inside.worktree  # noqa: F401 (each import binds ``sandbox``: ruff sees the last unused)

    return sys.modules[module]


def __dir__() -> list[str]:
    return __all__
