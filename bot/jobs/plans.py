"""Where a job's working tree starts and what its change is compared with.

A kind's ``plan`` (``bot.jobs.kinds``) names the tree as a ``TreePlan``; the segment prepares
the workspace from it and finds the compare point in the repository's mirror; the ``Tree``
is all three, what the segment's later phases and the kind's outcome read.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import RepositoryConfig
from bot.store.models import JobSpec
from sandbox.host.workspace.commits import merge_base, resolve_commit
from sandbox.host.workspace.prepare import Workspace


@dataclass(frozen=True)
class TreePlan:
    """``checkout``: what the workspace is prepared from; ``branch``/``base``: the names the
    prompt and the outcome use; ``compare``: the name the compare point is found from, and
    ``merge`` whether it is the merge base with the checkout (else that commit itself);
    ``revises``: the existing branch the workspace is on instead of a new one."""

    checkout: str
    branch: str
    base: str
    compare: str | None
    merge: bool
    # A branch of Riverbeam's own that the job's commits go on, as a fast-forward (an
    # author job addressing a review of its pull request); None: a new <prefix><job-id>.
    revises: str | None = None


@dataclass(frozen=True)
class Baseline:
    sha: str
    label: str


@dataclass(frozen=True)
class Tree:
    """A job's prepared tree: its plan, its workspace, its compare point, and the commit its
    change starts from (the base when the job started, kept across hosts by the approval)."""

    plan: TreePlan
    workspace: Workspace
    compare: Baseline | None
    base_sha: str


def branch_plan(spec: JobSpec, repo: RepositoryConfig) -> TreePlan:
    """The tree of a branch (the job's, else its base), compared with where it left its base."""
    base = spec.base or repo.default_branch
    branch = spec.branch or base
    return TreePlan(checkout=branch, branch=branch, base=base, compare=base, merge=True)


def compare_point(plan: TreePlan, workspace: Workspace) -> Baseline | None:
    """The commit ``git_diff``/``git_log`` start from in this workspace, found in its mirror."""
    if plan.compare is None:
        return None
    if plan.merge:
        sha = merge_base(workspace.mirror, workspace.base_sha, plan.compare)
    else:
        sha = resolve_commit(workspace.mirror, plan.compare)
    return Baseline(sha=sha, label=plan.compare)
