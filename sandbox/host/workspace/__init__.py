"""Per-job workspaces on the worker host: the mirror cache, the job's clone and outbox, their
garbage collection, and the relay that pushes an approved commit upstream.
"""

from sandbox.host.workspace.prepare import (
    Workspace,
    open_workspace,
    prepare_workspace,
    release_workspace,
)
from sandbox.host.workspace.retention import collect_workspaces

__all__ = [
    "Workspace",
    "collect_workspaces",
    "open_workspace",
    "prepare_workspace",
    "release_workspace",
]
