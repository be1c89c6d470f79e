"""Working trees for container tests, made on the host with pygit2 and owned by the sandbox uid.

``make_workspace`` lays out::

    base/
      workspace/     a repository on branch riverbeam/<job>, one commit, a few docs pages
      outbox.git/    a bare repository: the workspace's origin, mounted at /outbox

Both are chowned to the sandbox uid: the container runs as that uid and writes into them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import docker
import pygit2

from bot.config import SandboxLimits
from harness.workers import own
from sandbox.host.container.hardening import SandboxJob
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.workspace.spare_dirs import make_spare_directory

PROTECTED = ("main", "release/*")
PAGES = {
    "README.md": "# Handbook\n",
    "docs/index.md": "# Index\n\nWelcome.\n",
    "docs/guide/install.md": "# Install\n\nRun the installer.\n",
}


@dataclass(frozen=True)
class Workspace:
    path: Path
    outbox: Path
    branch: str


def make_workspace(
    base: Path, *, job_id: str = own("job-1"), uid: int = 10001, tree: str = "workspace"
) -> Workspace:
    path, outbox = base / tree, base / "outbox.git"
    repo = pygit2.init_repository(str(path), initial_head="main")
    for name, text in PAGES.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
        repo.index.add(name)
    repo.index.write()
    author = pygit2.Signature("Docs Team", "docs@example.com", 1_700_000_000, 0)
    commit = repo.create_commit("HEAD", author, author, "Start", repo.index.write_tree(), [])
    branch = f"riverbeam/{job_id}"
    repo.branches.local.create(branch, repo[commit])
    repo.checkout(f"refs/heads/{branch}")
    pygit2.init_repository(str(outbox), bare=True)
    chown_tree(path, uid)
    chown_tree(outbox, uid)
    return Workspace(path, outbox, branch)


def claim_spare(
    sandbox: ContainerSandbox,
    root: Path,
    limits: SandboxLimits,
    *,
    job_id: str = own("job-1"),
    deployment: str | None = None,
    replace_leftover: bool = False,
) -> tuple[Workspace, Path]:
    """Start ``sandbox`` as a spare under ``root``, and ``claim`` it for ``job_id``."""
    token, directory = make_spare_directory(root, deadline(), views=False)
    sandbox.start_spare(token, directory, limits, deadline=deadline(), deployment=deployment)
    workspace = claim(
        sandbox,
        directory,
        limits,
        job_id=job_id,
        deployment=deployment,
        replace_leftover=replace_leftover,
    )
    return workspace, directory


def claim(
    sandbox: ContainerSandbox,
    directory: Path,
    limits: SandboxLimits,
    *,
    job_id: str,
    deployment: str | None = None,
    replace_leftover: bool = False,
) -> Workspace:
    """Build ``job_id``'s workspace in a spare's ``directory``, rename it beside it to
    ``job_id`` (as ``prepare_workspace`` does) and start the job on ``sandbox``: the claim
    when ``sandbox`` is that spare."""
    root = directory.parent
    made = make_workspace(directory, job_id=job_id, tree="tree")
    os.rename(directory, root / job_id)
    workspace = Workspace(root / job_id / "tree", root / job_id / "outbox.git", made.branch)
    sandbox.start(
        job_id,
        workspace.path,
        PROTECTED,
        limits,
        deadline=deadline(),
        outbox=workspace.outbox,
        deployment=deployment,
        replace_leftover=replace_leftover,
    )
    return workspace


def chown_tree(path: Path, uid: int) -> None:
    os.lchown(path, uid, uid)
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(top, name), uid, uid)


def deadline(minutes: float = 30) -> datetime:
    return datetime.now(UTC) + timedelta(minutes=minutes)


def probe_job(
    workspace: Workspace, limits: SandboxLimits, job_id: str, *, outbox: bool = True
) -> SandboxJob:
    """A job for ``run_probe``: ``workspace`` mounted (with its outbox, unless not ``outbox``)."""
    return SandboxJob(
        job_id=job_id,
        workspace=workspace.path,
        deadline=deadline(),
        limits=limits,
        protected_refs=PROTECTED,
        outbox=workspace.outbox if outbox else None,
    )


def outbox_refs(outbox: Path) -> dict[str, str]:
    """The outbox's branches, read from its files: libgit2 in this (root) process refuses to
    open a repository the sandbox uid owns, as git does."""
    heads = outbox / "refs" / "heads"
    refs = {
        path.relative_to(heads).as_posix(): path.read_text().strip()
        for path in heads.rglob("*")
        if path.is_file()
    }
    packed = outbox / "packed-refs"
    if packed.exists():
        for line in packed.read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name.startswith("refs/heads/"):
                refs.setdefault(name.removeprefix("refs/heads/"), sha)
    return refs


def runtimes_under_test() -> list[str]:
    """runc, and crun where the engine has it registered. Under CI=true always crun too:
    docker/provision installs and registers it, so a crun the engine lacks fails there."""
    if os.environ.get("CI") == "true":
        return ["runc", "crun"]
    try:
        registered = docker.from_env(timeout=10).info().get("Runtimes") or {}
    except docker.errors.DockerException:
        return ["runc", "crun"]  # no engine: the tests fail on that, both runtimes listed
    return ["runc", *(["crun"] if "crun" in registered else [])]
