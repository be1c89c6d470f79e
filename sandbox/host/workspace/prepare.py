"""Per-job workspaces on the worker host: a working tree and its outbox, built from the mirror.

Layout, under ``WorkspaceSettings.root``::

    <job-id>/                 worker-owned, 0711: the container never sees this directory
        workspace.json        what was prepared (``Workspace``), written by the worker
        finished              written when the job releases the workspace (retention clock)
        tree/                 the clone, sandbox uid; mounted as /workspace
            .git/config       written by Riverbeam: origin = /outbox, nothing else
        outbox.git/           bare, sandbox uid; mounted as /outbox

The clone is on ``<branch_prefix><job-id>`` at the requested base: a branch, or a commit id
(``sandbox.host.workspace.commits`` resolves it). Its ``origin`` is the outbox, spelled
``/outbox`` because that is where the container sees it; host-side code never pushes from
the clone, it reads the outbox directly (see ``sandbox.host.relay``).
The outbox starts with the job branch at the base commit, so the container's first push
sends only its own commits. Neither repository holds the upstream URL, a credential, a hook
or a remote-tracking ref from the mirror. A workspace is assembled in a ``.staging-*``
directory and renamed into place, so ``<job-id>/`` either is complete or does not exist.
The tree is checked out by the sandbox uid itself (``sandbox.host.workspace.checkout``), so the
stat data its index records is what the container sees: status need not hash any file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pydantic import TypeAdapter, ValidationError

from bot.config import RepositoryConfig, SandboxLimits, WorkspaceSettings
from bot.core import safe_walk
from bot.core.errors import BeamError
from bot.core.jobids import is_job_id
from bot.core.safe_walk import EntryKind
from sandbox.host.upstream.credentials import UpstreamCallbacks
from sandbox.host.upstream.mirror import mirror_lock, sync_mirror
from sandbox.host.workspace.checkout import check_out_as
from sandbox.host.workspace.commits import commit_in
from sandbox.host.workspace.objectstore import link_objects
from sandbox.inside.refs import HEADS, ProtectedRefs, branch_name

__all__ = [
    "CONTAINER_OUTBOX",
    "SANDBOX_UID",
    "Workspace",
    "hand_over",
    "job_directory",
    "open_workspace",
    "prepare_workspace",
    "release_workspace",
]

SANDBOX_UID: int = SandboxLimits.model_fields["uid"].default
CONTAINER_OUTBOX = "/outbox"
METADATA = "workspace.json"
FINISHED = "finished"
TREE = "tree"
OUTBOX = "outbox.git"
STAGING_PREFIX = ".staging-"
# What ``git_repository_init`` leaves once its built-in template (hooks, description, info)
# is removed: made directly, at a third of the CPU (nothing written only to be deleted).
_GIT_DIRECTORIES = ("objects/info", "objects/pack", "refs/heads", "refs/tags")


@dataclass(frozen=True)
class Workspace:
    """A prepared workspace: where its parts are on the host and what it was built from."""

    job_id: str
    repo: str
    tree: Path
    outbox: Path
    mirror: Path
    branch: str
    base: str
    base_sha: str


_RECORD = TypeAdapter(Workspace)


def job_directory(settings: WorkspaceSettings, job_id: str) -> Path:
    """``<root>/<job-id>``; BEM-342 when ``job_id`` is not a plain identifier."""
    if not is_job_id(job_id):
        raise BeamError(
            "BEM-342",
            f"job id {job_id!r} cannot name a workspace; use up to 100 letters, digits, '_' "
            "and '-'",
        )
    return settings.root / job_id


def prepare_workspace(
    job_id: str,
    repo_name: str,
    repo_config: RepositoryConfig,
    base: str | None,
    settings: WorkspaceSettings,
    *,
    sandbox_uid: int = SANDBOX_UID,
    callbacks: UpstreamCallbacks | None = None,
    staging: Path | None = None,
    revises: str | None = None,
) -> Workspace:
    """Refresh the mirror, then build the job's tree and outbox, owned by ``sandbox_uid``.

    ``base`` is a branch (default: the repository's default branch) or a commit id; one the
    mirror does not have is BEM-341. ``staging``: a directory under the root, with an empty
    ``tree`` and ``outbox.git``, to build in instead of a new ``.staging-*`` one (a spare
    container's, which mounts them: ``sandbox.host.container.spares``). ``revises``: an
    existing branch of Riverbeam's (under ``branch_prefix``) the tree is on instead of
    ``<branch_prefix><job-id>``; any other name is BEM-328.
    """
    final = job_directory(settings, job_id)
    own = settings.branch_prefix + job_id
    if revises is not None and (
        not revises.startswith(settings.branch_prefix) or revises == settings.branch_prefix
    ):
        raise BeamError(
            "BEM-328",
            f"job {job_id} may add commits only to a branch of Riverbeam's own "
            f"({settings.branch_prefix}...), not {revises!r}",
        )
    branch = ProtectedRefs(repo_config.protected_refs).check_branch(revises or own)
    base_name = branch_name(base or repo_config.default_branch)
    if final.exists():
        raise BeamError("BEM-342", f"a workspace for job {job_id} already exists; open it instead")
    mirror = sync_mirror(repo_name, repo_config, settings, callbacks)
    settings.root.mkdir(parents=True, exist_ok=True, mode=0o711)
    if staging is None:
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{job_id}-", dir=settings.root))
    try:
        # 0711, as the job directory it becomes: the checkout, as the sandbox uid, goes through.
        staging.chmod(0o711)
        base_sha = _build(staging, mirror, base_name, branch, sandbox_uid)
        workspace = Workspace(
            job_id, repo_name, final / TREE, final / OUTBOX, mirror, branch, base_name, base_sha
        )
        (staging / METADATA).write_bytes(_RECORD.dump_json(workspace, indent=2))
        os.rename(staging, final)
    except BeamError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except (OSError, pygit2.GitError) as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise BeamError(
            "BEM-342", f"preparing the workspace of job {job_id} failed: {error}"
        ) from None
    return workspace


def open_workspace(job_id: str, settings: WorkspaceSettings) -> Workspace:
    """The workspace ``prepare_workspace`` made for ``job_id`` (for a resumed job or the relay)."""
    record = job_directory(settings, job_id) / METADATA
    try:
        workspace = _RECORD.validate_json(record.read_bytes())
    except (OSError, ValidationError) as error:
        raise BeamError(
            "BEM-342", f"job {job_id} has no usable workspace under {settings.root} ({error})"
        ) from None
    if workspace.job_id != job_id:
        raise BeamError("BEM-342", f"{record} describes job {workspace.job_id}, not {job_id}")
    return workspace


def release_workspace(job_id: str, settings: WorkspaceSettings) -> None:
    """Mark the job's workspace finished: retention counts from the first release."""
    directory = job_directory(settings, job_id)
    if (directory / METADATA).is_file():
        # A repeated release (a retried task) must not push the expiry further out.
        with contextlib.suppress(FileExistsError):
            (directory / FINISHED).touch(exist_ok=False)


def _build(staging: Path, mirror: Path, base: str, branch: str, uid: int) -> str:
    tree, outbox = staging / TREE, staging / OUTBOX
    # Shared: a concurrent fetch must not prune the base or repack while objects are linked.
    with mirror_lock(mirror, exclusive=False):
        base_sha = commit_in(_open(mirror), base)
        _init_repository(outbox, mirror, branch, base_sha, bare=True)
        _init_repository(tree, mirror, branch, base_sha, bare=False)
    hand_over(tree, tree / ".git" / "objects", uid)
    hand_over(outbox, outbox / "objects", uid)
    # After the hand-over, so that nothing changes the checked-out files' owner or ctime.
    check_out_as(tree, uid)
    return base_sha


def _open(mirror: Path) -> pygit2.Repository:
    return pygit2.Repository(str(mirror), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)


def _init_repository(path: Path, mirror: Path, branch: str, base_sha: str, *, bare: bool) -> None:
    gitdir = path if bare else path / ".git"
    git_layout(gitdir, branch, _outbox_config() if bare else _tree_config(branch))
    link_objects(mirror / "objects", gitdir / "objects")
    repo = pygit2.Repository(str(path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    repo.references.create(HEADS + branch, base_sha)
    if not bare:
        # The outbox starts at the base, and the clone knows it: status reads "up to date".
        repo.references.create(f"refs/remotes/origin/{branch}", base_sha)


def git_layout(gitdir: Path, branch: str, config: str) -> None:
    """A new repository at ``gitdir``: its directories, ``config``, and ``HEAD`` on
    ``branch``, which has no commit yet."""
    for name in _GIT_DIRECTORIES:
        os.makedirs(gitdir / name, exist_ok=True)
    (gitdir / "HEAD").write_text(f"ref: {HEADS}{branch}\n")
    (gitdir / "config").write_text(config)


def _tree_config(branch: str) -> str:
    return (
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
        "\tlogallrefupdates = true\n"
        f'[remote "origin"]\n\turl = {CONTAINER_OUTBOX}\n'
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
        f'[branch "{branch}"]\n\tremote = origin\n\tmerge = {HEADS}{branch}\n'
    )


def _outbox_config() -> str:
    return "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"


def hand_over(top: Path, objects: Path, uid: int) -> None:
    """Give ``top`` to the sandbox uid, except the object files under ``objects``.

    Those stay the worker's and read-only: the ones linked from the mirror share its inodes,
    and ``sandbox.host.workspace.snapshot.restore`` leaves the objects it unpacks the same way.
    What the uid owns already is left alone: a ``chown`` changes the ctime even when it
    changes no owner, and the index's stat cache of those files would no longer match.
    """
    if os.geteuid() == uid:
        return
    under_objects = objects.relative_to(top).as_posix() + "/"
    try:
        _give(top, uid)
        # Descriptor-relative: the uid may write this tree already (an outbox staged again,
        # a restored snapshot), and a directory it swaps for a symlink mid-walk is not entered.
        fd = safe_walk.open_directory(top)
        try:
            for entry in safe_walk.walk(fd):
                if entry.kind is EntryKind.DIRECTORY or not entry.path.startswith(under_objects):
                    _give_entry(entry, uid)
        finally:
            os.close(fd)
    except PermissionError:
        raise BeamError(
            "BEM-342",
            f"the worker (uid {os.geteuid()}) cannot hand the workspace to the sandbox uid "
            f"{uid}; run workers as root, or with CAP_CHOWN, CAP_SETUID and CAP_SETGID",
        ) from None


def _give_entry(entry: safe_walk.Entry, uid: int) -> None:
    info = entry.lstat()
    if (info.st_uid, info.st_gid) != (uid, uid):
        os.chown(entry.name, uid, uid, dir_fd=entry.dir_fd, follow_symlinks=False)


def _give(path: str | Path, uid: int) -> None:
    info = os.lstat(path)
    if (info.st_uid, info.st_gid) != (uid, uid):
        os.chown(path, uid, uid, follow_symlinks=False)
