"""The push relay: exactly the approved commit to exactly the approved branch, or nothing."""

from __future__ import annotations

import os
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.config import RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from harness.gitkit import git, is_ancestor, refs_and_logs, sandbox_push, upstream_push
from sandbox.host.relay import RelayResult, relay_push
from sandbox.host.upstream.credentials import upstream_callbacks
from sandbox.host.workspace.prepare import SANDBOX_UID, Workspace, prepare_workspace

Relay = Callable[..., RelayResult]


@pytest.fixture
def workspace(repo_config: RepositoryConfig, settings: WorkspaceSettings) -> Workspace:
    return prepare_workspace("job-r", "docs", repo_config, None, settings)


@pytest.fixture
def relay(
    workspace: Workspace, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> Relay:
    def run(sha: str, branch: str | None = None) -> RelayResult:
        callbacks = upstream_callbacks("docs", repo_config, settings)
        return relay_push(
            workspace, sha, branch or workspace.branch, repo_config, callbacks=callbacks
        )

    return run


def _refused(code: str, upstream: Path, action: Callable[[], object]) -> BeamError:
    """``action`` fails with ``code`` and the upstream's refs and reflogs do not change."""
    before = refs_and_logs(upstream)
    with pytest.raises(BeamError) as caught:
        action()
    assert caught.value.code == code, caught.value
    assert refs_and_logs(upstream) == before
    return caught.value


def test_the_approved_commit_is_pushed_once(
    upstream: Path, workspace: Workspace, relay: Relay
) -> None:
    sha = sandbox_push(workspace, {"docs/new.md": "A new page.\n"})

    first = relay(sha)
    after_first = refs_and_logs(upstream)
    second = relay(sha)

    assert first == RelayResult(branch=workspace.branch, sha=sha, pushed=True, already_there=False)
    assert second == RelayResult(branch=workspace.branch, sha=sha, pushed=False, already_there=True)
    assert refs_and_logs(upstream) == after_first
    assert after_first[f"refs/heads/{workspace.branch}"] == sha
    assert git("-C", str(upstream), "show", f"{sha}:docs/new.md") == "A new page."
    assert RelayResult.model_validate_json(first.model_dump_json()) == first


def test_a_later_approval_fast_forwards_and_history_is_never_rewritten(
    upstream: Path, workspace: Workspace, relay: Relay
) -> None:
    first = sandbox_push(workspace, {"docs/a.md": "A\n"})
    relay(first)
    second = sandbox_push(workspace, {"docs/b.md": "B\n"})

    assert relay(second).pushed
    assert is_ancestor(upstream, first, second)
    assert is_ancestor(upstream, workspace.base_sha, second)
    log = refs_and_logs(upstream)[f"log:refs/heads/{workspace.branch}"].splitlines()
    assert [line.split()[:2] for line in log] == [["0" * 40, first], [first, second]]


@pytest.mark.parametrize("branch", ["main", "MAIN", "refs/heads/main", "release/2.0"])
def test_a_protected_ref_is_refused_even_when_the_outbox_holds_it(
    upstream: Path, workspace: Workspace, relay: Relay, branch: str
) -> None:
    sha = sandbox_push(workspace, {"docs/x.md": "x\n"}, ref=branch.removeprefix("refs/heads/"))

    error = _refused("BEM-328", upstream, lambda: relay(sha, branch))
    assert "protected" in error.message


@pytest.mark.parametrize(
    ("branch", "code"),
    [
        ("-f", "BEM-325"),
        ("+riverbeam/job-r", "BEM-325"),
        ("a:b", "BEM-325"),
        ("refs/tags/v1", "BEM-325"),
        ("a..b", "BEM-324"),
        ("has space", "BEM-324"),
        ("", "BEM-324"),
    ],
)
def test_an_invalid_or_option_like_branch_is_refused(
    upstream: Path, workspace: Workspace, relay: Relay, branch: str, code: str
) -> None:
    sha = sandbox_push(workspace, {"docs/x.md": "x\n"})

    _refused(
        code,
        upstream,
        lambda: relay_push(
            workspace,
            sha,
            branch,
            RepositoryConfig(upstream=str(upstream)),
            callbacks=upstream_callbacks(
                "docs", RepositoryConfig(upstream=str(upstream)), WorkspaceSettings()
            ),
        ),
    )


def test_a_sha_the_outbox_branch_does_not_point_at_is_bem_352(
    upstream: Path, workspace: Workspace, relay: Relay
) -> None:
    approved = sandbox_push(workspace, {"docs/x.md": "approved\n"})
    later = sandbox_push(workspace, {"docs/x.md": "pushed after approval\n"})

    error = _refused("BEM-352", upstream, lambda: relay(approved))
    assert later in error.message and approved in error.message
    _refused("BEM-352", upstream, lambda: relay(approved, "riverbeam/elsewhere"))


def test_a_commit_missing_from_the_outbox_is_bem_350(
    upstream: Path, workspace: Workspace, relay: Relay
) -> None:
    ghost = "1234567890abcdef1234567890abcdef12345678"
    ref = workspace.outbox / "refs" / "heads" / workspace.branch
    ref.write_text(ghost + "\n")

    _refused("BEM-350", upstream, lambda: relay(ghost))
    _refused("BEM-350", upstream, lambda: relay("not-a-sha"))
    _refused("BEM-350", upstream, lambda: relay(ghost[:12]))


def test_an_upstream_that_moved_is_bem_351_naming_both_commits(
    upstream: Path, workspace: Workspace, relay: Relay
) -> None:
    approved = sandbox_push(workspace, {"docs/x.md": "ours\n"})
    theirs = upstream_push(upstream, workspace.branch, {"docs/y.md": "theirs\n"}, "main")

    error = _refused("BEM-351", upstream, lambda: relay(approved))
    assert theirs in error.message and approved in error.message
    assert f"someone pushed {theirs[:12]} to {workspace.branch}" in error.message


def test_an_upstream_branch_behind_the_approved_commit_is_fast_forwarded(
    upstream: Path, workspace: Workspace, relay: Relay
) -> None:
    # The job's branch already exists upstream at the base (say, an earlier publish).
    git("-C", str(upstream), "branch", workspace.branch, workspace.base_sha)
    approved = sandbox_push(workspace, {"docs/x.md": "ours\n"})

    assert relay(approved).pushed
    assert refs_and_logs(upstream)[f"refs/heads/{workspace.branch}"] == approved


def test_an_outbox_ref_that_is_a_symlink_is_refused(
    upstream: Path, workspace: Workspace, relay: Relay, base_dir: Path
) -> None:
    approved = sandbox_push(workspace, {"docs/x.md": "x\n"})
    elsewhere = base_dir / "planted-ref"
    elsewhere.write_text(approved + "\n")
    ref = workspace.outbox / "refs" / "heads" / workspace.branch
    ref.unlink()
    ref.symlink_to(elsewhere)

    _refused("BEM-352", upstream, lambda: relay(approved))


def test_a_symlink_among_the_outbox_objects_is_refused(
    upstream: Path, workspace: Workspace, relay: Relay
) -> None:
    approved = sandbox_push(workspace, {"docs/x.md": "x\n"})
    (workspace.outbox / "objects" / "pack" / "pack-evil.idx").symlink_to("/etc/passwd")

    error = _refused("BEM-350", upstream, lambda: relay(approved))
    assert "pack-evil.idx" in error.message


def test_an_object_that_does_not_match_its_id_is_refused(
    upstream: Path, workspace: Workspace, relay: Relay
) -> None:
    approved = sandbox_push(workspace, {"docs/x.md": "reviewed text\n"})
    blob = git("-C", str(workspace.tree), "rev-parse", f"{approved}:docs/x.md", sandbox=True)
    loose = workspace.outbox / "objects" / blob[:2] / blob[2:]
    assert loose.is_file(), "a small push is stored as loose objects"
    swapped = b"something the reviewer never saw\n"
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob %d\0" % len(swapped) + swapped))
    os.chown(loose, SANDBOX_UID, SANDBOX_UID)

    error = _refused("BEM-350", upstream, lambda: relay(approved))
    assert blob in error.message


def test_a_retried_relay_is_already_there_even_after_the_job_pushed_again(
    upstream: Path, workspace: Workspace, relay: Relay
) -> None:
    approved = sandbox_push(workspace, {"docs/x.md": "approved\n"})
    relay(approved)
    sandbox_push(workspace, {"docs/x.md": "a later, unapproved change\n"})
    before = refs_and_logs(upstream)

    assert relay(approved).already_there
    assert refs_and_logs(upstream) == before


def test_a_mirror_removed_since_preparation_is_rebuilt_for_the_relay(
    upstream: Path, workspace: Workspace, relay: Relay
) -> None:
    approved = sandbox_push(workspace, {"docs/x.md": "x\n"})
    shutil.rmtree(workspace.mirror)

    assert relay(approved).pushed
    assert refs_and_logs(upstream)[f"refs/heads/{workspace.branch}"] == approved
    git("-C", str(upstream), "fsck", "--strict", "--no-dangling")
