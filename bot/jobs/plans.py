"""Where a job's working tree starts, what its change is compared with, and its prompt values.

- author: the tree starts at the base branch (the repository's default unless the job names
  one) and has no compare point: ``git_diff`` shows the edit being made against HEAD.
- review, summarize: the tree is the branch under review; the compare point is where it left
  its base (their merge base), so ``git_diff``/``git_log`` show exactly the branch's change.
- commit-notes: for a range ``A..B`` the tree is at B and the compare point is A; for a
  branch, as for summarize.
- publish: no tree at all; its one tool works on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import RepositoryConfig
from bot.store.models import JobKind, JobSpec
from sandbox.host.workspace.commits import merge_base, resolve_commit
from sandbox.host.workspace.prepare import Workspace

_DEFAULT_REQUESTS = {
    JobKind.REVIEW: "Review the change on {branch} against {base}.",
    JobKind.SUMMARIZE: "Summarize what changed on {branch} since {base}.",
    JobKind.COMMIT_NOTES: "Draft the commit message for the change on {branch} since {base}.",
    JobKind.PUBLISH: "Publish the reviewed docs.",
}


@dataclass(frozen=True)
class TreePlan:
    """``checkout``: what the workspace is prepared from; ``branch``/``base``: the names the
    prompt and the outcome use; ``compare``: the name the compare point is found from, and
    ``merge`` whether it is the merge base with the checkout (else that commit itself)."""

    checkout: str
    branch: str
    base: str
    compare: str | None
    merge: bool


@dataclass(frozen=True)
class Baseline:
    sha: str
    label: str


def tree_plan(spec: JobSpec, repo: RepositoryConfig) -> TreePlan | None:
    """The tree a job of ``spec`` works in, or None for a job that needs none (publish)."""
    base = spec.base or repo.default_branch
    if spec.kind is JobKind.PUBLISH:
        return None
    if spec.kind is JobKind.AUTHOR:
        return TreePlan(checkout=base, branch="", base=base, compare=None, merge=False)
    ends = spec.range_ends()
    if spec.kind is JobKind.COMMIT_NOTES and ends is not None:
        start, end = ends
        return TreePlan(checkout=end, branch=end, base=start, compare=start, merge=False)
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


def request_text(spec: JobSpec, plan: TreePlan | None) -> str:
    """The user message: the job's request, or a plain one for kinds that need none, and the
    pages it concerns."""
    text = spec.request if spec.request.strip() else _DEFAULT_REQUESTS.get(spec.kind, "")
    if not spec.request.strip() and plan is not None:
        text = text.format(branch=plan.branch, base=plan.base)
    if spec.pages:
        text += "\n\nPages this concerns: " + ", ".join(spec.pages)
    return text
