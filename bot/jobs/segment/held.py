"""What a segment holds that its end gives back, whatever phase it reached: the one
mutable part of a segment, filled as each resource is taken and emptied as it is given
back. The phases themselves hand on frozen values (``bot.jobs.segment.ground``)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import WorkspaceSettings
from bot.jobs.kinds.kind import Kind
from bot.jobs.segment.tree_setup import OpenedTree
from bot.jobs.timings import SegmentTimings
from bot.jobs.toolbox import Toolbox
from sandbox.host.container.deferred import DeferredSandbox
from sandbox.host.workspace.prepare import Workspace, release_workspace


@dataclass
class HeldResources:
    """Job ``job_id``'s toolbox, workspace and container, as far as the segment got."""

    job_id: str
    kind: Kind
    timings: SegmentTimings
    toolbox: Toolbox | None = None
    workspace: Workspace | None = None
    sandbox: DeferredSandbox | None = None
    parked: bool = False

    def hold_tree(self, opened: OpenedTree) -> None:
        self.workspace, self.sandbox = opened.workspace, opened.sandbox

    def own_branch(self) -> str | None:
        """The record's ``branch`` change: an author job's own branch, once its tree exists."""
        if self.workspace is None or not self.kind.owns_branch:
            return None
        return self.workspace.branch

    def stop_container(self) -> DeferredSandbox | None:
        """Stop the container (once; a start under way is waited for) and return it, for
        its start's outcome; None when there was none, or it is stopped already."""
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            sandbox.stop()
            # ``container``: the start, wherever it ran; ``container_wait``: what of it the
            # segment waited for (all of it when in line, none when all was overlapped).
            self.timings.add("container", sandbox.start_seconds)
            self.timings.add("container_wait", sandbox.wait_seconds)
        return sandbox

    def give_back(self, workspaces: WorkspaceSettings) -> None:
        """Everything, on every path; the workspace stays only when the job parked."""
        self.stop_container()
        # A time limit can cut the toolbox's own stop short: its servers die here at last.
        if self.toolbox is not None:
            self.toolbox.kill_leftovers()
        if self.workspace is not None and not self.parked:
            with self.timings.phase("clean_up"):
                release_workspace(self.job_id, workspaces)
