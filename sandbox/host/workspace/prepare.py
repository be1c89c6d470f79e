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

Where the worker may mount (``workspaces.views``, ``sandbox.host.workspace.overlay``), ``tree/``
is instead a view of the base's one checkout (``sandbox.host.workspace.bases``), with the job's
changes in ``layer/`` (``work/`` is overlayfs' own), and only the job's branch, refs and config
are written into it: a job then costs the same on 38,000 files as on 4. The record names the
base (``Workspace.view_of``); ``open_workspace`` mounts the view again after a reboot, and
``remove_workspace`` detaches it before deleting.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
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
from sandbox.host.workspace.bases import take_base
from sandbox.host.workspace.checkout import check_out_as
from sandbox.host.workspace.commits import commit_in
from sandbox.host.workspace.objectstore import link_objects
from sandbox.host.workspace.overlay import (
    ViewUnavailable,
    is_mounted,
    mount_view,
    unmount_all,
    views_available,
)
from sandbox.inside.refs import HEADS, ProtectedRefs, branch_name

__all__ = [
    "CONTAINER_OUTBOX",
    "SANDBOX_UID",
    "Workspace",
    "hand_over",
    "job_directory",
    "open_record",
    "open_workspace",
    "prepare_workspace",
    "release_workspace",
    "remove_workspace",
]

SANDBOX_UID: int = SandboxLimits.model_fields["uid"].default
CONTAINER_OUTBOX = "/outbox"
METADATA = "workspace.json"
FINISHED = "finished"
TREE = "tree"
OUTBOX = "outbox.git"
LAYER = "layer"
OVERLAY_WORK = "work"
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
    # The base tree ``tree`` is a view of; None: a checkout of its own (every workspace
    # before views, and where the worker may not mount).
    view_of: Path | None = None


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
        bases = settings.root if views_available(settings.root, settings.views) else None
        base_sha, view_of = _build(
            staging, mirror, base_name, branch, sandbox_uid, repo_name, bases
        )
        if view_of is None and settings.views == "always":
            raise BeamError("BEM-342", f"the kernel refused job {job_id}'s view of its base")
        workspace = Workspace(
            job_id,
            repo_name,
            final / TREE,
            final / OUTBOX,
            mirror,
            branch,
            base_name,
            base_sha,
            view_of,
        )
        (staging / METADATA).write_bytes(_RECORD.dump_json(workspace, indent=2))
        os.rename(staging, final)
    except BeamError:
        _discard(staging)
        raise
    except (OSError, pygit2.GitError) as error:
        _discard(staging)
        raise BeamError(
            "BEM-342", f"preparing the workspace of job {job_id} failed: {error}"
        ) from None
    return workspace


def open_workspace(job_id: str, settings: WorkspaceSettings) -> Workspace:
    """The workspace ``prepare_workspace`` made for ``job_id`` (for a resumed job or the relay)."""
    record = job_directory(settings, job_id) / METADATA
    workspace = open_record(record.parent)
    if workspace.job_id != job_id:
        raise BeamError("BEM-342", f"{record} describes job {workspace.job_id}, not {job_id}")
    if workspace.view_of is not None and not is_mounted(workspace.tree):
        # The host restarted since: the job's layer is all on disk, only the mount is gone.
        if not workspace.view_of.is_dir():
            raise BeamError("BEM-342", f"job {job_id}'s base {workspace.view_of} is gone")
        _mount(workspace.view_of, record.parent)
    return workspace


def open_record(directory: Path) -> Workspace:
    """The record of the workspace in ``directory``, read and checked; BEM-342 if unusable."""
    try:
        return _RECORD.validate_json((directory / METADATA).read_bytes())
    except (OSError, ValidationError) as error:
        raise BeamError(
            "BEM-342", f"{directory} holds no usable workspace record ({error})"
        ) from None


def remove_workspace(job_id: str, settings: WorkspaceSettings) -> None:
    """Delete the job's workspace, if any: its view detached first, then every file."""
    _discard(job_directory(settings, job_id))


def release_workspace(job_id: str, settings: WorkspaceSettings) -> None:
    """Mark the job's workspace finished: retention counts from the first release."""
    directory = job_directory(settings, job_id)
    if (directory / METADATA).is_file():
        # A repeated release (a retried task) must not push the expiry further out.
        with contextlib.suppress(FileExistsError):
            (directory / FINISHED).touch(exist_ok=False)


def _build(
    staging: Path, mirror: Path, base: str, branch: str, uid: int, repo: str, root: Path | None
) -> tuple[str, Path | None]:
    """The outbox and the tree, in ``staging``; the base commit, and the base tree the tree
    is a view of (None: a checkout of its own). ``root``: where bases are, for a view."""
    tree, outbox = staging / TREE, staging / OUTBOX
    lower = None
    # Shared: a concurrent fetch must not prune the base or repack while objects are linked.
    with mirror_lock(mirror, exclusive=False):
        base_sha = commit_in(_open(mirror), base)
        _init_repository(outbox, mirror, branch, base_sha, bare=True)
        if root is None:
            _init_repository(tree, mirror, branch, base_sha, bare=False)
    if root is not None:
        # Outside the lock: a first job on a commit checks its base out meanwhile.
        lower = take_base(
            root, repo, base_sha, uid, lambda at: _lay_out_base(at, mirror, base_sha, uid)
        )
    hand_over(outbox, outbox / "objects", uid)
    if lower is not None:
        try:
            _mount(lower, staging)
        except ViewUnavailable:
            lower = None
        else:
            _on_view(tree, branch, base_sha, uid)
            return base_sha, lower
    if not (tree / ".git").exists():
        _init_repository(tree, mirror, branch, base_sha, bare=False)
    hand_over(tree, tree / ".git" / "objects", uid)
    # After the hand-over, so that nothing changes the checked-out files' owner or ctime.
    check_out_as(tree, uid)
    return base_sha, None


def _lay_out_base(tree: Path, mirror: Path, commit: str, uid: int) -> None:
    """A base's repository at ``tree``: the mirror's objects, no ref, and HEAD detached at
    ``commit``, for ``take_base`` to check out."""
    gitdir = tree / ".git"
    git_layout(gitdir, None, _tree_config(None), commit=commit)
    with mirror_lock(mirror, exclusive=False):
        link_objects(mirror / "objects", gitdir / "objects")
    hand_over(tree, gitdir / "objects", uid)


def _mount(lower: Path, directory: Path) -> None:
    """Mount the view of ``lower`` at ``directory``'s tree, its layer owned as the base is.
    ``ViewUnavailable`` leaves ``directory`` as it was."""
    layer, work = directory / LAYER, directory / OVERLAY_WORK
    made = [path for path in (layer, work, directory / TREE) if not path.exists()]
    info = lower.stat()
    for path in made:
        path.mkdir(mode=0o700)
    if layer in made:
        # The view's top directory is the layer's: the base's owner and mode.
        os.chown(layer, info.st_uid, info.st_gid)
        layer.chmod(stat.S_IMODE(info.st_mode))
    try:
        mount_view(lower, layer, work, directory / TREE)
    except ViewUnavailable:
        for path in made:
            shutil.rmtree(path)
        raise


def _on_view(tree: Path, branch: str, base_sha: str, uid: int) -> None:
    """The job's own repository state on a fresh view: its branch at the base, checked out
    (HEAD), known to be in the outbox, and its config. The base's index stays as it is."""
    gitdir = tree / ".git"
    (gitdir / "HEAD").write_text(f"ref: {HEADS}{branch}\n")
    (gitdir / "config").write_text(_tree_config(branch))
    # Written as files: libgit2 does not open a repository the worker does not own.
    for ref in (HEADS + branch, f"refs/remotes/origin/{branch}"):
        path = gitdir / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{base_sha}\n")
    hand_over(gitdir, gitdir / "objects", uid)


def _discard(directory: Path) -> None:
    """Remove a workspace's directory, detaching its view first (a rmtree through a mounted
    view would only whiteout the base's files, then fail on the mount point)."""
    unmount_all(directory / TREE)
    shutil.rmtree(directory, ignore_errors=True)


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


def git_layout(gitdir: Path, branch: str | None, config: str, *, commit: str = "") -> None:
    """A new repository at ``gitdir``: its directories, ``config``, and ``HEAD`` on
    ``branch``, which has no commit yet (no branch: ``HEAD`` detached at ``commit``)."""
    for name in _GIT_DIRECTORIES:
        os.makedirs(gitdir / name, exist_ok=True)
    (gitdir / "HEAD").write_text(f"ref: {HEADS}{branch}\n" if branch else f"{commit}\n")
    (gitdir / "config").write_text(config)


def _tree_config(branch: str | None) -> str:
    """A job tree's config; with no ``branch``, a base's (no remote: it is no job's)."""
    core = (
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
        "\tlogallrefupdates = true\n"
    )
    if branch is None:
        return core
    return (
        f'{core}[remote "origin"]\n\turl = {CONTAINER_OUTBOX}\n'
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
