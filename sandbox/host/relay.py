"""The push relay: exactly the approved commit, to exactly the approved branch, upstream.

The container pushes into the job's outbox and nowhere else; it has no network and no
credentials. Once a person approved that push (bound to a commit id and a branch), the
worker runs ``relay_push``, which checks, in this order:

1. the branch is a plain branch name (BEM-325, BEM-324) and not protected (BEM-328), with
   the repository's ``protected_refs``: the policy is enforced again here, on the host;
2. the approved id is a full commit id (BEM-350);
3. the upstream branch already at that commit: success, nothing pushed (``already_there``);
4. the outbox's ``refs/heads/<branch>`` points at the approved commit (BEM-352);
5. the outbox holds that commit and all it needs, each object verified against its id
   while it is copied into the mirror (BEM-350);
6. the upstream branch is absent or an ancestor of the approved commit (BEM-351, naming
   both commits);
7. the push: refspec ``<sha>:refs/heads/<branch>`` built here, never with ``+`` (BEM-353 for
   transport or authentication failures, BEM-351 if the branch moved in the meantime).

Every connection to an SSH upstream (reading the branch, pushing) first checks the server's
host key against the repository's known_hosts file: a key that is not pinned, or not the
pinned one, is BEM-354 and nothing is sent.

Why push from the mirror and not from the outbox: the outbox is written by the container,
so the host treats it as data (``sandbox.host.workspace.outbox``) and never opens it as a
repository to run a network operation from. The mirror is the worker's own, its config is
Riverbeam's, and it already has the upstream history, so only the job's new objects travel.

``publish_commit`` moves a repository's publish branch to a reviewed commit along the same
path: steps 1 to 3, 6 and 7 are shared (``_update_upstream``); only where the commit comes
from differs. A publish takes it from the mirror, which already holds every upstream branch,
so the reviewed commit must be there (BEM-363) and nothing is read from a job's outbox.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pygit2
from pydantic import BaseModel, ConfigDict
from pygit2.enums import ObjectType

from bot.config import RepositoryConfig
from bot.core.errors import BeamError
from sandbox.host.upstream.credentials import (
    HOST_KEY_CODES,
    UpstreamAccess,
    UpstreamCallbacks,
    check_upstream_url,
    public_url,
)
from sandbox.host.upstream.mirror import mirror_lock, open_mirror
from sandbox.host.workspace.outbox import ApprovedCommit, import_commit, off_approved
from sandbox.host.workspace.prepare import Workspace
from sandbox.inside.refs import HEADS, ProtectedRefs

__all__ = ["RelayResult", "publish_commit", "relay_push"]

_COMMIT_ID = re.compile(r"[0-9a-f]{40}")

# Makes the error for an upstream branch at ``current`` that ``sha`` does not build on.
_NotFastForward = Callable[[str, str, str], BeamError]
# Puts commit ``sha`` (and all it needs) into the mirror, refusing if it cannot.
_Provide = Callable[[pygit2.Repository, str, str], None]


class RelayResult(BaseModel):
    """What the relay did; the jobs layer stores it with the job."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    branch: str
    sha: str
    pushed: bool
    already_there: bool


def relay_push(
    workspace: Workspace,
    approved_sha: str,
    branch: str,
    repo_config: RepositoryConfig,
    *,
    callbacks: UpstreamCallbacks,
) -> RelayResult:
    """Push ``approved_sha`` from the job's outbox to ``refs/heads/<branch>`` upstream."""

    def from_outbox(mirror: pygit2.Repository, name: str, sha: str) -> None:
        # A mirror removed since the workspace was built comes back empty; the import then
        # copies the whole closure from the outbox, which holds the base history too.
        _check_outbox(workspace, ApprovedCommit(sha=sha, branch=name))
        import_commit(workspace.outbox, mirror, sha)

    return _update_upstream(
        workspace.mirror, approved_sha, branch, repo_config, callbacks, provide=from_outbox
    )


def publish_commit(
    mirror: Path,
    sha: str,
    publish_ref: str,
    repo_config: RepositoryConfig,
    *,
    callbacks: UpstreamCallbacks,
) -> RelayResult:
    """Fast-forward (or create) ``refs/heads/<publish_ref>`` upstream to ``sha``.

    ``sha`` must already be in the mirror (BEM-363): sync the mirror first, which also lets
    the fast-forward check see the branch's current upstream tip. The branch is checked
    against the protected refs here, as for any push.
    """
    return _update_upstream(
        mirror,
        sha,
        publish_ref,
        repo_config,
        callbacks,
        provide=_require_in_mirror,
        not_fast_forward=_publish_would_drop,
    )


def _update_upstream(
    mirror_dir: Path,
    candidate_sha: str,
    branch: str,
    repo_config: RepositoryConfig,
    callbacks: UpstreamCallbacks,
    *,
    provide: _Provide,
    not_fast_forward: _NotFastForward | None = None,
) -> RelayResult:
    """The one pushing path: checks 1-3, ``provide`` the commit, then checks 6-7 and push."""
    moved = not_fast_forward or _moved
    name = ProtectedRefs(repo_config.protected_refs).check_branch(branch)
    sha = _commit_id(candidate_sha)
    check_upstream_url(repo_config.upstream)
    mirror = open_mirror(mirror_dir)
    upstream = _Upstream(mirror, repo_config.upstream, callbacks, moved)
    current = upstream.tip(name)
    if current == sha:
        return RelayResult(branch=name, sha=sha, pushed=False, already_there=True)
    # Shared: other jobs may build workspaces meanwhile; a fetch waits until the push is done.
    with mirror_lock(mirror_dir, exclusive=False):
        provide(mirror, name, sha)
        _check_fast_forward(mirror, name, current, sha, moved)
        upstream.push(name, sha, current)
    return RelayResult(branch=name, sha=sha, pushed=True, already_there=False)


def _commit_id(candidate: str) -> str:
    sha = candidate.strip().lower() if isinstance(candidate, str) else ""
    if not _COMMIT_ID.fullmatch(sha):
        raise BeamError(
            "BEM-350",
            f"{candidate!r} is not a full 40-character commit id; an approval binds one",
        )
    return sha


def _check_outbox(workspace: Workspace, approved: ApprovedCommit) -> None:
    where = off_approved(workspace.outbox, approved)
    if where is not None:
        raise BeamError(
            "BEM-352",
            f"the job's outbox branch {approved.branch!r} {where}, not at the approved commit "
            f"{approved.sha}: "
            "the outbox no longer holds what was approved (the job pushed again, or pushed "
            "another branch). Nothing was sent; approve the job's current push instead.",
        )


def _require_in_mirror(mirror: pygit2.Repository, name: str, sha: str) -> None:
    oid = pygit2.Oid(hex=sha)
    if oid not in mirror.odb or mirror.odb.read_header(oid)[0] != ObjectType.COMMIT:
        raise BeamError(
            "BEM-363",
            f"commit {sha} is not in the mirror: no upstream branch holds it any more (was the "
            f"reviewed branch rewritten or deleted?). Nothing was pushed to {name}; review the "
            "branch again and publish that review.",
        )


def _check_fast_forward(
    mirror: pygit2.Repository,
    name: str,
    current: str | None,
    sha: str,
    moved: _NotFastForward,
) -> None:
    if current is None:
        return
    tip = pygit2.Oid(hex=current)
    if tip not in mirror.odb or not mirror.descendant_of(pygit2.Oid(hex=sha), tip):
        raise moved(name, current, sha)


def _moved(name: str, current: str, sha: str) -> BeamError:
    return BeamError(
        "BEM-351",
        f"someone pushed {current[:12]} to {name} since approval: the upstream branch is now "
        f"at {current}, which the approved commit {sha} does not build on. Riverbeam never "
        "forces; re-run the job from the new tip.",
    )


def _publish_would_drop(name: str, current: str, sha: str) -> BeamError:
    return BeamError(
        "BEM-351",
        f"the publish branch {name} is at {current}, which the reviewed commit {sha} does not "
        "build on: moving it would drop published history, and Riverbeam never forces. Merge "
        f"{name} into the reviewed branch, review it again and publish that review.",
    )


class _Upstream:
    """The upstream as seen through an anonymous remote on the mirror."""

    def __init__(
        self,
        mirror: pygit2.Repository,
        url: str,
        callbacks: UpstreamCallbacks,
        moved: _NotFastForward,
    ) -> None:
        self._mirror = mirror
        self._url = url
        self._callbacks = callbacks
        self._moved = moved

    def tip(self, name: str) -> str | None:
        """The commit the upstream branch is at, or None when it has no such branch."""
        try:
            with _host_key_refusal():
                heads = self._remote().list_heads(callbacks=self._callbacks)
        except pygit2.GitError as error:
            raise self._failed("reading", error) from None
        ref = HEADS + name
        return next((str(head.oid) for head in heads if head.name == ref), None)

    def push(self, name: str, sha: str, expected: str | None) -> None:
        outcome = _PushOutcome(self._callbacks.access)
        try:
            # No '+': the upstream (and libgit2 before it) refuses anything but a fast-forward.
            with _host_key_refusal():
                self._remote().push([f"{sha}:{HEADS}{name}"], callbacks=outcome)
        except pygit2.GitError as error:
            self._explain_refusal(name, sha, expected)
            raise self._failed("pushing to", error) from None
        if outcome.refusal is not None:
            self._explain_refusal(name, sha, expected)
            raise BeamError(
                "BEM-353",
                f"{public_url(self._url)} refused the update of {name}: "
                f"{self._callbacks.redact(outcome.refusal)}",
            )

    def _explain_refusal(self, name: str, sha: str, expected: str | None) -> None:
        # A refusal right after our checks passed usually means a push raced ours.
        current = self.tip(name)
        if current not in (expected, sha) and current is not None:
            raise self._moved(name, current, sha)

    def _remote(self) -> pygit2.Remote:
        return self._mirror.remotes.create_anonymous(self._url)

    def _failed(self, action: str, error: pygit2.GitError) -> BeamError:
        return BeamError(
            "BEM-353",
            f"{action} the upstream {public_url(self._url)} failed: "
            f"{self._callbacks.redact(str(error))}. The approval stands; retry the relay.",
        )


@contextmanager
def _host_key_refusal() -> Iterator[None]:
    """A host key the repository does not trust, as the relay's BEM-354."""
    try:
        yield
    except BeamError as error:
        if error.code not in HOST_KEY_CODES:
            raise
        raise BeamError(
            "BEM-354",
            f"nothing was pushed: {error.message} ({error.code}). Once the host key is "
            "settled, push again (a new approval) or run the job again.",
        ) from None


class _PushOutcome(UpstreamCallbacks):
    """The upstream's credentials and host-key check, plus its verdict on the one ref pushed."""

    def __init__(self, access: UpstreamAccess) -> None:
        super().__init__(access)
        self.refusal: str | None = None

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message:
            self.refusal = message
