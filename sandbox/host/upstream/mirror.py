"""The mirror cache: one bare repository per registered repository, on the worker host.

``<mirrors>/<repo-name>.git`` holds every upstream branch under ``refs/heads/`` and nothing
else Riverbeam did not write: it is fetched through an anonymous remote, so no URL and no
credential is stored in its config. Job workspaces are built from it by linking its object
files, so a warm mirror makes a new workspace cost a checkout, not a clone.

Workers on one host share the mirrors. ``mirror_lock`` is an ``flock`` on ``<repo-name>.lock``
next to the mirror: a fetch (which writes packs, refs and ``FETCH_HEAD``) holds it exclusively;
building a workspace or importing an approved commit holds it shared, so no fetch prunes a ref
or swaps a pack underneath them. ``flock`` locks belong to the open file, so threads of one
process that each open the lock file exclude each other as separate processes do.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pygit2
from pygit2.enums import FetchPrune

from bot.config import RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from sandbox.host.upstream.credentials import (
    UpstreamCallbacks,
    check_upstream_url,
    public_url,
    upstream_callbacks,
)

__all__ = ["MIRROR_REFSPEC", "mirror_lock", "mirror_path", "open_mirror", "sync_mirror"]

# Branches only: tags, notes and pull-request refs are not what jobs start from.
MIRROR_REFSPEC = "+refs/heads/*:refs/heads/*"
_REPO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_MIRROR_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"


def mirror_path(settings: WorkspaceSettings, repo_name: str) -> Path:
    """Where the mirror of ``repo_name`` lives; BEM-900 for a name unfit for a file name."""
    if not _REPO_NAME.fullmatch(repo_name):
        raise BeamError(
            "BEM-900",
            f"repository name {repo_name!r} cannot name a mirror; use letters, digits, "
            "'.', '_' and '-'",
        )
    return settings.mirrors / f"{repo_name}.git"


@contextmanager
def mirror_lock(mirror: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold the mirror's lock: exclusive to write refs and packs, shared to read them."""
    mirror.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = mirror.with_suffix(".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        # Closing the descriptor releases the lock, also when the body raised.
        os.close(fd)


def sync_mirror(
    repo_name: str,
    repo_config: RepositoryConfig,
    settings: WorkspaceSettings,
    callbacks: UpstreamCallbacks | None = None,
) -> Path:
    """Create the mirror on first use, then fetch every upstream branch into it (pruning),
    through ``callbacks`` (default: the repository's credentials and host-key check)."""
    check_upstream_url(repo_config.upstream)
    callbacks = callbacks or upstream_callbacks(repo_name, repo_config, settings)
    mirror = mirror_path(settings, repo_name)
    with mirror_lock(mirror, exclusive=True):
        repo = _open_or_create(mirror)
        remote = repo.remotes.create_anonymous(repo_config.upstream)
        try:
            progress = remote.fetch([MIRROR_REFSPEC], callbacks=callbacks, prune=FetchPrune.PRUNE)
        except pygit2.GitError as error:
            said = callbacks.redact(str(error))
            where = f"{public_url(repo_config.upstream)} into the mirror of {repo_name!r}"
            if _damaged(said):
                raise BeamError(
                    "BEM-349",
                    f"fetching {where} failed because an object the upstream's branches need"
                    f" cannot be read: {said}. The upstream repository is likely damaged (git"
                    " says: possible repository corruption on the remote side): run git fsck"
                    " on it and restore the missing objects from a good clone. It is not the"
                    " network or the credentials.",
                ) from None
            raise BeamError(
                "BEM-340",
                f"fetching {where} failed: {said}. Check the upstream URL, the network "
                "and the repository's credentials.",
            ) from None
    if progress.received_objects:
        return_freed_heap()
    return mirror


def return_freed_heap() -> None:
    """Hand the heap that libgit2's pack indexer freed back to the system.

    glibc keeps freed memory in its arenas: after indexing tldr-pages' 169 MiB pack a
    worker held 350 MiB where it had 70, and each process it forks starts from that. Not
    glibc (musl, macOS): nothing to do."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


# What libgit2 and git's upload-pack say when the upstream's refs name objects it cannot
# serve: a missing or corrupt object, not a transport problem.
_DAMAGE_WORDS = (
    "object not found",
    "cannot read header",
    "corrupt",
    "missing blob",
    "missing tree",
    "bad object",
)


def _damaged(said: str) -> bool:
    lowered = said.lower()
    return any(words in lowered for words in _DAMAGE_WORDS)


def open_mirror(mirror: Path) -> pygit2.Repository:
    """The mirror at ``mirror``, recreated empty if it was removed (it is only a cache)."""
    with mirror_lock(mirror, exclusive=True):
        return _open_or_create(mirror)


def _open_or_create(mirror: Path) -> pygit2.Repository:
    if not mirror.exists():
        _create(mirror)
    try:
        return pygit2.Repository(str(mirror), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError as error:
        raise BeamError(
            "BEM-340",
            f"the mirror {mirror} is not a usable repository ({error}); remove it and it is "
            "rebuilt on the next job",
        ) from None


def _create(mirror: Path) -> None:
    # Built beside its final place and renamed in, so a crash never leaves half a mirror.
    staging = Path(tempfile.mkdtemp(prefix=f".{mirror.name}.", dir=mirror.parent))
    try:
        pygit2.init_repository(str(staging), bare=True)
        (staging / "config").write_text(_MIRROR_CONFIG)
        shutil.rmtree(staging / "hooks", ignore_errors=True)
        staging.chmod(0o700)
        staging.rename(mirror)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
