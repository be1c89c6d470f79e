"""What a parked call asks a person to approve, or why policy refuses it without asking.

A ``git_push`` is bound to what would land: the commit its branch points at in the job's
tree, the target branch, and the diff from the base (its SHA-256, stat and capped text). A
push that could never be relayed is refused at once by policy, and the model reads why:
a protected or malformed target (the BEM code of ``ProtectedRefs.check_branch``), a branch
other than the job's own (BEM-326: the tree has no other), or nothing committed (BEM-321).

A ``publish_docset`` is bound to the reviewed commit and the publish branch its tool's plan
names (checked when the segment began: a plan that fails BEM-360 or BEM-361 fails the job
before the model runs), with the diff from where that branch stands in the mirror. Any other
parked call (under a confirm-first skill) is bound to its tool and arguments.

A push's approval also carries the repository's docs checks of its commit
(``checked_approval``), run by the worker itself (docs/checks.md).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path

from bot.config import Site
from bot.core.errors import BeamError
from bot.core.frames import PendingCall
from bot.jobs.branch_change import (
    BranchChange,
    ChangedPages,
    branch_tip,
    read_change,
    read_objects_change,
    read_pages,
)
from bot.jobs.host_tools.publish import PublishDocsetTool, PublishPlan
from bot.review.docs_checks import DocsChecks
from bot.runner.state import CallDecision
from bot.store.models import Approval, JobRecord
from sandbox.host.workspace.outbox import ApprovedCommit, off_approved, outbox_branch
from sandbox.host.workspace.prepare import Workspace
from sandbox.inside.refs import ProtectedRefs

POLICY = "policy"


@dataclass(frozen=True)
class PushTarget:
    """Where a job's tree stands for a push: its workspace and the commit its change starts
    from (the base when the job started, kept across hosts by the approval)."""

    workspace: Workspace
    base_sha: str
    protected_refs: tuple[str, ...]
    diff_max_chars: int
    site: Site | None = None  # how the pages' links resolve (None: detected from the tree)


@dataclass(frozen=True)
class PublishTarget:
    """A publish job's tool, its plan (checked when the segment began) and the repository's
    mirror (fetched then)."""

    tool: PublishDocsetTool
    plan: PublishPlan
    mirror: Path
    diff_max_chars: int
    site: Site | None = None


def approval_for(
    record: JobRecord, pending: PendingCall, target: PushTarget | PublishTarget | None
) -> Approval | CallDecision:
    """The approval to open for ``pending``, or policy's refusal of it."""
    approval = Approval(
        id=uuid.uuid4().hex,
        job_id=record.id,
        repo=record.spec.repo,
        requested_by=record.spec.requested_by,
        call_id=pending.id,
        tool=pending.tool,
        arguments=dict(pending.arguments),
    )
    try:
        if pending.tool == "git_push" and isinstance(target, PushTarget):
            return _bind_push(approval, pending, target)
        if pending.tool == "publish_docset" and isinstance(target, PublishTarget):
            return _bind_publish(approval, target)
    except BeamError as refusal:
        return CallDecision(
            call_id=pending.id,
            approved=False,
            decided_by=POLICY,
            comment=f"{refusal.code}: {refusal.message}",
        )
    return approval


def _bind_push(approval: Approval, pending: PendingCall, target: PushTarget) -> Approval:
    workspace = target.workspace
    requested = pending.arguments.get("ref")
    name = ProtectedRefs(target.protected_refs).check_branch(
        requested if isinstance(requested, str) and requested else workspace.branch
    )
    if name != workspace.branch:
        raise BeamError(
            "BEM-326",
            f"this job pushes only its own branch {workspace.branch!r}, not {name!r}; call "
            "git_push without a ref",
        )
    tip = branch_tip(workspace.tree, name)
    if tip is None or tip == target.base_sha:
        raise BeamError(
            "BEM-321",
            f"{name!r} has no commit beyond {workspace.base}; commit the change, then push",
        )
    change = read_change(workspace.tree, target.base_sha, tip, max_chars=target.diff_max_chars)
    objects = workspace.tree / ".git" / "objects"
    return approval.model_copy(
        update={
            "commit_sha": tip,
            "target_ref": name,
            "base_sha": target.base_sha,
            **_pages(read_pages(objects, target.base_sha, tip, target.site)),
            **_shown(change, target.diff_max_chars),
        }
    )


def _bind_publish(approval: Approval, target: PublishTarget) -> Approval:
    plan = target.plan
    current = outbox_branch(target.mirror, plan.publish_ref)
    bound = approval.model_copy(
        update={"commit_sha": plan.sha, "target_ref": plan.publish_ref, "base_sha": current}
    )
    if current is None:
        note = f"{plan.publish_ref} does not exist yet: the publish creates it at {plan.sha}\n"
        return bound.model_copy(update={"diff": note})
    change = read_objects_change(
        target.mirror / "objects", current, plan.sha, max_chars=target.diff_max_chars
    )
    pages = _pages(read_pages(target.mirror / "objects", current, plan.sha, target.site))
    return bound.model_copy(update={**pages, **_shown(change, target.diff_max_chars)})


def _pages(pages: ChangedPages) -> dict[str, object]:
    return {"links": pages.links, "pages": pages.sources}


def _shown(change: BranchChange, max_chars: int) -> dict[str, str]:
    shown = change.patch
    if change.truncated:
        shown += f"\n[diff cut at {max_chars} characters; the digest covers all]\n"
    return {"diff_digest": change.digest, "diff_stat": change.stat, "diff": shown}


def approved_commit(approval: Approval) -> ApprovedCommit | None:
    """The commit and branch ``approval`` is bound to, or None for a call bound to neither."""
    if approval.commit_sha is None or approval.target_ref is None:
        return None
    return ApprovedCommit(sha=approval.commit_sha, branch=approval.target_ref)


def holds(workspace: Workspace, approval: Approval) -> bool:
    """Whether the job's tree is where the job parked: the approved commit on its branch."""
    approved = approved_commit(approval)
    return approved is None or off_approved(workspace.tree / ".git", approved) is None


def check_still_bound(approval: Approval, workspace: Workspace) -> None:
    """BEM-603 unless the tree still holds exactly what ``approval`` names: the commit on the
    target branch and a diff with the same digest."""
    approved = approved_commit(approval)
    if approved is None:
        return
    where = off_approved(workspace.tree / ".git", approved)
    if where is not None:
        raise BeamError(
            "BEM-603",
            f"{approved.branch!r} {where}, not at the approved {approved.sha}; nothing was pushed",
        )
    base = approval.base_sha or workspace.base_sha
    change = read_change(workspace.tree, base, approved.sha, max_chars=0)
    if change.digest != approval.diff_digest:
        raise BeamError(
            "BEM-603", "the change no longer has the approved diff digest; nothing was pushed"
        )


def check_publish_still_bound(approval: Approval, plan: PublishPlan) -> None:
    """BEM-603 unless the publish (as ``plan`` says now) would still move the approved branch
    to the approved commit (the review job or the configuration changed since the decision)."""
    if (plan.sha, plan.publish_ref) != (approval.commit_sha, approval.target_ref):
        raise BeamError(
            "BEM-603",
            f"the publish would now move {plan.publish_ref!r} to {plan.sha[:12]}, but the "
            f"approval is for {approval.target_ref!r} at {(approval.commit_sha or '')[:12]}; "
            "nothing was published",
        )


async def checked_approval(approval: Approval, checks: DocsChecks | None) -> Approval:
    """``approval`` with the docs checks of the commit it would push, run by the worker
    itself (never the model's word). Checks that could not run are one ``error`` run: the
    approval says so, and a blocking repository blocks it."""
    if checks is None or approval.tool != "git_push" or approval.commit_sha is None:
        return approval
    report = await asyncio.to_thread(checks.checked, approval.commit_sha)
    return approval.model_copy(update={"checks": report, "checks_block": checks.checks.block})
