"""What can refuse a job's working tree at the tool server's start, checked without the
modules the tools need later.

The server says it is ready once these pass (``check_tree``): the protected-ref patterns, the
origin URL and, when the job has one, that the compare point is a commit of the repository,
opened under the guard (``sandbox.inside.repo_guard``). They need the jail and the ref policy;
pygit2 and the guard load here only for a compare point, the one check that opens the
repository, so a job without one is ready before pygit2 loads. The working tree
(``sandbox.inside.worktree``, with its views and reports) and the tools with their argument
schemas load after the ready line. ``WorkingTree`` applies the same checks through the same
functions.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from bot.core.errors import BeamError
from sandbox.inside.refs import ProtectedRefs

if TYPE_CHECKING:
    import pygit2

    from sandbox.inside.jail import SandboxRoot

__all__ = [
    "MAX_LABEL_CHARS",
    "MAX_URL_CHARS",
    "check_tree",
    "checked_url",
    "compare_commit",
    "compare_target",
]

MAX_URL_CHARS = 2_048
MAX_LABEL_CHARS = 200
_COMMIT_ID = re.compile(r"[0-9a-f]{40}")
_URL_SCHEMES = frozenset({"file", "http", "https", "ssh", "git"})


def check_tree(
    root: SandboxRoot,
    protected_refs: Sequence[str] | None,
    *,
    origin: str | None,
    compare_to: str | None,
    compare_label: str | None,
) -> None:
    """Refuse, as ``WorkingTree`` would, what the job's tool server was given."""
    if protected_refs is not None:
        ProtectedRefs(protected_refs)
    if origin:
        checked_url(origin)
    target = compare_target(compare_to, compare_label)
    if target is not None:
        from sandbox.inside.repo_guard import check_layout, enforce_config, open_repository

        gitdir = check_layout(root.path, {})
        enforce_config(gitdir)
        compare_commit(open_repository(root.path, gitdir), *target)


def compare_target(sha: str | None, label: str | None) -> tuple[str, str] | None:
    """The compare point's commit id and label, checked for shape (whether the repository
    holds it is ``compare_commit``'s question); the label defaults to the short id."""
    if sha is None:
        if label is not None:
            raise BeamError("BEM-320", "compare_label names a compare point; set compare_to too")
        return None
    if not isinstance(sha, str) or not _COMMIT_ID.fullmatch(sha.lower()):
        raise BeamError(
            "BEM-320", f"compare_to {sha!r} is not a full 40-character hexadecimal commit id"
        )
    sha = sha.lower()
    if label is None:
        return sha, sha[:12]
    if not isinstance(label, str) or not label.strip() or len(label) > MAX_LABEL_CHARS:
        raise BeamError(
            "BEM-320", f"compare_label must be text of 1 to {MAX_LABEL_CHARS} characters"
        )
    if label != label.strip() or not label.isprintable():
        raise BeamError(
            "BEM-320", f"compare_label {label!r} has spaces at its ends or control characters"
        )
    return sha, label


def compare_commit(repo: pygit2.Repository, sha: str, label: str) -> pygit2.Commit:
    import pygit2  # loaded already: ``repo`` is a pygit2 repository

    found = repo.get(sha)
    if not isinstance(found, pygit2.Commit):
        raise BeamError(
            "BEM-320",
            f"the compare point {label!r} ({sha}) is not a commit in this repository; the host "
            "must pick one the workspace holds, such as the merge base of the branch and its "
            "base",
        )
    return found


def checked_url(url: str) -> str:
    """``url`` if a push may go there (BEM-900 otherwise)."""
    problem = None
    if not isinstance(url, str) or not url or len(url) > MAX_URL_CHARS:
        problem = f"must be 1 to {MAX_URL_CHARS} characters"
    elif url != url.strip() or not url.isprintable():
        problem = "contains spaces at its ends or control characters"
    elif "://" in url:
        parts = urlsplit(url)
        if parts.scheme not in _URL_SCHEMES:
            problem = f"has scheme {parts.scheme!r}; use one of {sorted(_URL_SCHEMES)}"
        elif parts.netloc.startswith("-") or parts.path.startswith("-"):
            problem = "has a host or path starting with '-', which ssh would read as an option"
    elif not os.path.isabs(url):
        problem = "is neither a URL nor an absolute local path"
    if problem is not None:
        raise BeamError("BEM-900", f"origin URL {url!r} {problem}")
    return url
