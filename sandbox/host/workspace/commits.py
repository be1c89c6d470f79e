"""Commits a job names, found in the mirror: a branch or a commit id, and merge bases.

Review, summarize and commit-notes jobs look at a change that is already committed. The
executor builds the workspace at the change's tip and gives the tool server the commit the
change started from as its compare point, so git_diff and git_log show "the change"::

    workspace = prepare_workspace(job_id, repo, config, "docs/fix", settings, ...)
    start = merge_base(workspace.mirror, workspace.base_sha, "main")  # where it left main
    sandbox.start(..., compare_to=start, compare_label="main")

A name is checked by ``sandbox.inside.refs`` first (BEM-324/325 for what no branch can be called).
It means the branch of that name when there is one, as in git; failing that, 7 to 40
hexadecimal digits mean the commit with that id (or unambiguous prefix). Anything else is
BEM-341. The worker reads the mirror, never the job's tree: the tree belongs to the sandbox
uid, and libgit2 refuses to open another user's repository. The tree's objects are linked
from the mirror when it is built, and fetches only add objects, so the merge base of the
workspace's ``base_sha`` and another commit is always one the tree holds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pygit2
from pygit2.enums import RepositoryOpenFlag

from bot.core.errors import BeamError
from sandbox.host.upstream.mirror import mirror_lock
from sandbox.inside.refs import HEADS, branch_name

__all__ = ["commit_in", "merge_base", "resolve_commit"]

_COMMIT_PREFIX = re.compile(r"[0-9a-fA-F]{7,40}")
_SHOWN_BRANCHES = 10


def resolve_commit(mirror: Path, name: str) -> str:
    """The commit id ``name`` (a branch, or a full or abbreviated commit id) stands for."""
    with mirror_lock(mirror, exclusive=False):
        return commit_in(_open(mirror), name)


def merge_base(mirror: Path, a: str, b: str) -> str:
    """The best common ancestor of ``a`` and ``b`` (each named as ``resolve_commit`` takes):
    where one branch left the other. BEM-341 when they share no history."""
    with mirror_lock(mirror, exclusive=False):
        repo = _open(mirror)
        first, second = commit_in(repo, a), commit_in(repo, b)
        found = repo.merge_base(pygit2.Oid(hex=first), pygit2.Oid(hex=second))
    if found is None:
        raise BeamError(
            "BEM-341",
            f"{a!r} ({first[:12]}) and {b!r} ({second[:12]}) share no history, so there is no "
            "point where one left the other to compare with",
        )
    return str(found)


def commit_in(repo: pygit2.Repository, name: str) -> str:
    """``resolve_commit`` on an open repository; the caller holds the mirror's lock."""
    branch = branch_name(name)
    reference = repo.references.get(HEADS + branch)
    if reference is not None:
        return str(reference.peel(pygit2.Commit).id)
    if _COMMIT_PREFIX.fullmatch(branch):
        try:
            found = repo.get(branch.lower())
        except ValueError:  # pygit2.AmbiguousError
            raise BeamError(
                "BEM-341", f"{name!r} is the start of more than one object id; give more digits"
            ) from None
        if isinstance(found, pygit2.Commit):
            return str(found.id)
        if found is not None:
            raise BeamError("BEM-341", f"{name!r} is a {found.type_str}, not a commit")
    raise BeamError(
        "BEM-341",
        f"{name!r} is neither a branch upstream nor a commit the mirror holds "
        f"(branches: {_branches(repo)})",
    )


def _branches(repo: pygit2.Repository) -> str:
    known = sorted(name.removeprefix(HEADS) for name in repo.references if name.startswith(HEADS))
    shown = ", ".join(known[:_SHOWN_BRANCHES])
    return (shown + (", ..." if len(known) > _SHOWN_BRANCHES else "")) or "none"


def _open(mirror: Path) -> pygit2.Repository:
    try:
        return pygit2.Repository(str(mirror), RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError as error:
        raise BeamError(
            "BEM-340",
            f"the mirror {mirror} cannot be read ({error}); prepare a workspace to fetch it",
        ) from None
