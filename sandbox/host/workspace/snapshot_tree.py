"""The job's tree as the worker reaches it for a snapshot: vetted, opened, walked.

The tree belongs to the sandbox uid and may have been shaped by a hostile container, while
the worker runs as root. So its repository is opened only once its layout and the files git
reads by path are vetted (BEM-329), with its config replaced as in the container; paths are
walked one directory descriptor at a time, following no link; and every path and branch name
a snapshot holds must be one the jail and ``sandbox.inside.refs`` accept as spelled.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Sequence
from pathlib import Path

import pygit2
from pygit2.enums import Option

from bot.core import safe_walk
from bot.core.errors import BeamError
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.refs import branch_name
from sandbox.inside.repo_guard import (
    RULE_FILES,
    check_layout,
    check_rule_files,
    enforce_config,
    open_repository,
)

__all__ = [
    "RULE_FILES",
    "is_branch_name",
    "open_parent",
    "open_tree",
    "path_problem",
    "vetted",
]

# Owner validation is one libgit2 setting for the whole process: toggles must not interleave.
_OWNER_CHECK = threading.Lock()


def vetted(tree: Path) -> Path:
    """The tree's ``.git``, once its layout (``sandbox.inside.repo_guard``) and files are safe."""
    gitdir = check_layout(tree)
    check_rule_files(tree)
    return gitdir


def open_tree(tree: Path, gitdir: Path, *, workers: int) -> list[pygit2.Repository]:
    """The vetted repository, opened ``workers`` times, its config replaced first.

    The config goes through ``sandbox.inside.repo_guard`` as in the container, so nothing in it
    steers libgit2. The tree belongs to the sandbox uid, and libgit2 refuses a repository
    another user owns: a check for repositories whose config nobody vetted. It is switched
    off for these openings only, and put back at once.
    """
    enforce_config(gitdir)
    with _OWNER_CHECK:
        previous = bool(pygit2.option(Option.GET_OWNER_VALIDATION))
        pygit2.option(Option.SET_OWNER_VALIDATION, 0)
        try:
            return [open_repository(tree, gitdir) for _ in range(max(1, workers))]
        finally:
            pygit2.option(Option.SET_OWNER_VALIDATION, int(previous))


def open_parent(top: Path, parts: Sequence[str], *, create: bool) -> int | None:
    """A descriptor of the directory holding ``parts[-1]``, reached following no symlink.

    None when a directory on the way is missing (made when ``create``), a symlink or a file.
    """
    try:
        return safe_walk.open_below(top, parts[:-1], create=create)
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            raise
        return None


def path_problem(root: SandboxRoot, path: str) -> str | None:
    """Why the jail refuses ``path`` as it is spelled; None when it accepts it."""
    try:
        canonical = root.normalize(path)
    except BeamError as error:
        return f"{error.code}: {error.message}"
    return None if canonical == path else "not a canonical path"


def is_branch_name(name: str) -> bool:
    """Whether ``sandbox.inside.refs`` accepts ``name`` as a branch, exactly as it is spelled."""
    try:
        return branch_name(name) == name
    except BeamError:
        return False
