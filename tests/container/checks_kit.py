"""Repositories for the docs checks' container tests: a workspace whose base commit holds the
given files, and the ``DocsChecks`` of a started sandbox on it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import pygit2

from bot.config import RepositoryChecks, SandboxLimits
from bot.review.check_report import ChecksReport
from bot.review.docs_checks import DocsChecks
from harness.workers import own
from sandbox.host.container.lifecycle import ContainerSandbox
from tests.container.kit import PROTECTED, Workspace, chown_tree, deadline, make_workspace


@contextmanager
def _opened(path: Path) -> Iterator[pygit2.Repository]:
    """The workspace's repository, which the sandbox uid owns, opened by this process.

    libgit2's owner check is switched off for this opening only: other tests in the same
    worker switch it back on, so a module-level switch does not hold.
    """
    Option = pygit2.enums.Option
    previous = bool(pygit2.option(Option.GET_OWNER_VALIDATION))
    pygit2.option(Option.SET_OWNER_VALIDATION, 0)
    try:
        yield pygit2.Repository(str(path))
    finally:
        pygit2.option(Option.SET_OWNER_VALIDATION, int(previous))


def commit_files(workspace: Workspace, files: dict[str, str], message: str = "Base") -> str:
    """Commit ``files`` on the workspace's branch; the new commit's sha."""
    write_files(workspace, files)
    with _opened(workspace.path) as repo:
        sha = _commit(repo, files, message)
    chown_tree(workspace.path, 10001)
    return sha


def _commit(repo: pygit2.Repository, files: dict[str, str], message: str) -> str:
    for name in files:
        repo.index.add(name)
    repo.index.write()
    author = pygit2.Signature("Docs Team", "docs@example.com", 1_700_000_100, 0)
    sha = repo.create_commit(
        "HEAD", author, author, message, repo.index.write_tree(), [repo.head.target]
    )
    return str(sha)


def write_files(workspace: Workspace, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = workspace.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    chown_tree(workspace.path, 10001)


def base_workspace(root: Path, files: dict[str, str], job_id: str) -> tuple[Workspace, str]:
    workspace = make_workspace(root, job_id=job_id)
    return workspace, commit_files(workspace, files)


def started_checks(
    sandbox: ContainerSandbox,
    workspace: Workspace,
    base_sha: str,
    limits: SandboxLimits,
    checks: RepositoryChecks,
    job_id: str,
) -> DocsChecks:
    sandbox.start(
        job_id,
        workspace.path,
        PROTECTED,
        limits,
        deadline=deadline(),
        outbox=workspace.outbox,
    )
    return DocsChecks(
        sandbox,
        checks,
        limits,
        base_sha=base_sha,
        objects=workspace.path / ".git" / "objects",
    )


def reports_on_edits(
    root: Path,
    docker_client: docker.DockerClient,
    image_ref: str,
    limits: SandboxLimits,
    files: dict[str, str],
    checks: RepositoryChecks,
    edits: list[dict[str, str]],
) -> list[ChecksReport]:
    """The checks' report after each edit in turn, in one sandbox on a base holding ``files``."""
    job_id = own("checks")
    workspace, base = base_workspace(root / job_id, files, job_id)
    reports = []
    with ContainerSandbox(docker_client, image_ref) as sandbox:
        docs_checks = started_checks(sandbox, workspace, base, limits, checks, job_id)
        for edit in edits:
            write_files(workspace, edit)
            reports.append(docs_checks.run())
    return reports
