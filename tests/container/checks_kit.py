"""Repositories for the docs checks' container tests: a workspace whose base commit holds the
given files, and the ``DocsChecks`` of a started sandbox on it."""

from __future__ import annotations

from pathlib import Path

import pygit2

from bot.config import RepositoryChecks, SandboxLimits
from bot.review.docs_checks import DocsChecks
from sandbox.host.container.lifecycle import ContainerSandbox
from tests.container.kit import PROTECTED, Workspace, chown_tree, deadline, make_workspace

pygit2.option(pygit2.enums.Option.SET_OWNER_VALIDATION, 0)


def commit_files(workspace: Workspace, files: dict[str, str], message: str = "Base") -> str:
    """Commit ``files`` on the workspace's branch; the new commit's sha."""
    repo = pygit2.Repository(str(workspace.path))
    write_files(workspace, files)
    for name in files:
        repo.index.add(name)
    repo.index.write()
    author = pygit2.Signature("Docs Team", "docs@example.com", 1_700_000_100, 0)
    sha = repo.create_commit(
        "HEAD", author, author, message, repo.index.write_tree(), [repo.head.target]
    )
    chown_tree(workspace.path, 10001)
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
