"""The values a segment's phases hand on, each fixed once made: what the segment is to do
(``SegmentStart``, before anything starts) and what its run works on (``Ground``: the tree
in its container, or the publish target, and the MCP toolbox)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import RepositoryConfig
from bot.jobs.kinds.kind import Kind
from bot.jobs.parking import PublishTarget
from bot.jobs.plans import Tree, TreePlan
from bot.jobs.segment.tree_setup import OpenedTree
from bot.jobs.toolbox import Toolbox
from bot.store.models import Approval, JobRecord
from sandbox.host.upstream.credentials import UpstreamCallbacks


@dataclass(frozen=True)
class SegmentStart:
    """The claimed job, its kind and repository, the upstream's callbacks (built once:
    reading the repository's secret may fail, BEM-343, and the mirror sync, the workspace
    and the push relay share them), the kind's tree plan (None: no tree) and, for a resume,
    the decision it applies."""

    record: JobRecord
    kind: Kind
    repo: RepositoryConfig
    callbacks: UpstreamCallbacks
    plan: TreePlan | None
    approval: Approval | None


@dataclass(frozen=True)
class Ground:
    """What the run works on: the start, its MCP toolbox, and the opened tree (a kind with
    a tree) or the publish target (a kind that publishes)."""

    start: SegmentStart
    toolbox: Toolbox
    opened: OpenedTree | None
    publish: PublishTarget | None

    @property
    def tree(self) -> Tree | None:
        """The tree as the kinds read it (prompt values, outcome)."""
        if self.start.plan is None or self.opened is None:
            return None
        opened = self.opened
        return Tree(self.start.plan, opened.workspace, opened.compare, opened.base_sha)
