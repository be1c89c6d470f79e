"""What a job's branch holds beyond its base, read on the host from the job's tree.

The tree is written by the container, so the host reads it as data, the way the relay reads
the outbox (``sandbox.host.workspace.outbox``): a branch tip straight from its ref file, objects
through an object database made of a pack and a loose backend only. The repository is never
opened (no config, hooks or alternates from it are honoured), and every object libgit2 reads
is checked against its id, so the diff a person approves is exactly the diff of the commit id
the approval names.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
from pygit2.enums import DeltaStatus, DiffStatsFormat, SortMode

from bot.config import Site
from bot.core.errors import BeamError
from bot.review.links import LinkReport, check_links, is_markdown
from bot.review.preview import PageSource, page_sources
from bot.store.models import CommitInfo
from sandbox.host.workspace.outbox import outbox_branch, untrusted_odb

STAT_WIDTH = 80


@dataclass(frozen=True)
class BranchChange:
    """``base..head``: its commits (oldest first), files, stat, and the patch, capped."""

    base_sha: str
    head_sha: str
    commits: list[CommitInfo] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    stat: str = ""
    patch: str = ""
    digest: str = ""
    truncated: bool = False


def branch_tip(tree: Path, branch: str) -> str | None:
    """The commit ``branch`` points at in a job's tree, or None when it has no such branch."""
    return outbox_branch(tree / ".git", branch)


def read_change(tree: Path, base_sha: str, head_sha: str, *, max_chars: int) -> BranchChange:
    """The change from ``base_sha`` to ``head_sha`` as a job's tree holds it.

    ``digest`` is the SHA-256 of the whole patch; ``patch`` is cut at ``max_chars``.
    """
    return read_objects_change(tree / ".git" / "objects", base_sha, head_sha, max_chars=max_chars)


def read_objects_change(
    objects: Path, base_sha: str, head_sha: str, *, max_chars: int
) -> BranchChange:
    """``read_change`` on any object directory (a bare mirror's ``objects``, say)."""
    view, base, head = _open(objects, base_sha, head_sha)
    diff = base.tree.diff_to_tree(head.tree)
    diff.find_similar()
    patch = diff.patch or ""
    files = sorted({delta.new_file.path for delta in diff.deltas})
    stat = diff.stats.format(DiffStatsFormat.FULL, STAT_WIDTH) if files else ""
    truncated = len(patch) > max_chars
    return BranchChange(
        base_sha=base_sha,
        head_sha=head_sha,
        commits=_commits(view, base.id, head.id),
        files=files,
        stat=stat,
        patch=patch[:max_chars],
        digest=hashlib.sha256(patch.encode()).hexdigest(),
        truncated=truncated,
    )


@dataclass(frozen=True)
class ChangedPages:
    """The Markdown pages ``base..head`` adds or changes: their links checked against
    ``head``'s tree (``bot.review.links``) and their text before and after, for the
    preview (``bot.review.preview``)."""

    links: LinkReport
    sources: list[PageSource]


def read_pages(
    objects: Path, base_sha: str, head_sha: str, site: Site | None = None
) -> ChangedPages:
    _, base, head = _open(objects, base_sha, head_sha)
    diff = base.tree.diff_to_tree(head.tree)
    pages = [
        delta.new_file.path
        for delta in diff.deltas
        if delta.status != DeltaStatus.DELETED and is_markdown(delta.new_file.path)
    ]
    return ChangedPages(
        links=check_links(head.tree, pages, site), sources=page_sources(base.tree, head.tree, pages)
    )


def _open(
    objects: Path, base_sha: str, head_sha: str
) -> tuple[pygit2.Repository, pygit2.Commit, pygit2.Commit]:
    view = pygit2.Repository()
    view.set_odb(untrusted_odb(objects))
    return view, _commit(view, base_sha), _commit(view, head_sha)


def _commit(view: pygit2.Repository, sha: str) -> pygit2.Commit:
    try:
        found = view.get(sha)
    except (pygit2.GitError, ValueError):
        found = None
    if not isinstance(found, pygit2.Commit):
        raise BeamError(
            "BEM-502",
            f"commit {sha} is not in the job's repository; its workspace is incomplete",
        )
    return found


def _commits(view: pygit2.Repository, base: pygit2.Oid, head: pygit2.Oid) -> list[CommitInfo]:
    walker = view.walk(head, SortMode.TOPOLOGICAL | SortMode.REVERSE)
    walker.hide(base)
    return [
        CommitInfo(sha=str(commit.id), subject=commit.message.split("\n", 1)[0])
        for commit in walker
    ]
