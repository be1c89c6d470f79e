"""Helpers for the workspace and relay tests: real repositories, driven with the git CLI.

The git CLI is used only to build fixtures and to act as the sandbox (uid 10001) on the
host: committing in a job's tree and pushing into its outbox, which is what the container's
``git_commit`` and ``git_push`` tools do.
"""

from __future__ import annotations

# Imported before as_sandbox forks: the tools import it lazily (a large tree's status scans
# in threads), and a child running as the sandbox uid cannot import it from an interpreter
# under a directory only the worker may read (a venv under /root).
import concurrent.futures.thread  # noqa: F401
import os
import pickle
import shutil
import subprocess
import tempfile
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar, cast

from sandbox.host.workspace.overlay import detach_under
from sandbox.host.workspace.prepare import SANDBOX_UID, Workspace

T = TypeVar("T")

_BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "LANG": "C",
}


@contextmanager
def traversable_dir(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A scratch directory the sandbox uid can pass through (pytest's tmp_path is 0700
    root): workspaces under it are checked out by that uid and mounted into its containers.
    Removed on the way out, with the job views mounted under it detached first."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    path.chmod(0o711)
    try:
        yield path
    finally:
        detach_under(path)
        shutil.rmtree(path, ignore_errors=True)


def git(*args: str, cwd: Path | None = None, sandbox: bool = False) -> str:
    """Run git; with ``sandbox`` it runs as the sandbox uid, like the container would."""
    result = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=_BASE_ENV,
        capture_output=True,
        text=True,
        check=False,
        user=SANDBOX_UID if sandbox else None,
        group=SANDBOX_UID if sandbox else None,
        extra_groups=[] if sandbox else None,
    )
    if result.returncode:
        raise AssertionError(f"git {' '.join(args)} failed: {result.stderr}")
    return result.stdout.strip()


def make_upstream(path: Path) -> Path:
    """A bare upstream with ``main`` (two commits) and ``docs/old`` (one commit)."""
    git("init", "-q", "--bare", "--initial-branch=main", str(path))
    git("-C", str(path), "config", "core.logAllRefUpdates", "always")
    work = path.with_name(path.name + "-seed")
    git("clone", "-q", str(path), str(work))
    write_files(work, {"README.md": "# Docs\n", "docs/install.md": "Install it.\n"})
    commit_all(work, "Initial docs")
    git("-C", str(work), "push", "-q", "origin", "HEAD:refs/heads/docs/old")
    write_files(work, {"docs/install.md": "Install it with pip.\n"})
    commit_all(work, "Explain pip")
    git("-C", str(work), "push", "-q", "origin", "HEAD:refs/heads/main")
    return path


def write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    for name, body in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            target.write_bytes(body)
        else:
            target.write_text(body)


def commit_all(work: Path, message: str, *, sandbox: bool = False) -> str:
    git("-C", str(work), "add", "-A", sandbox=sandbox)
    git("-C", str(work), "commit", "-q", "-m", message, sandbox=sandbox)
    return git("-C", str(work), "rev-parse", "HEAD", sandbox=sandbox)


def upstream_push(upstream: Path, branch: str, files: Mapping[str, str], base: str) -> str:
    """Someone else pushes a commit on top of ``base`` to ``branch`` upstream."""
    work = upstream.with_name(upstream.name + f"-other-{os.urandom(4).hex()}")
    git("clone", "-q", "--branch", base, str(upstream), str(work))
    write_files(work, files)
    sha = commit_all(work, "Someone else's change")
    git("-C", str(work), "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
    return sha


def sandbox_push(workspace: Workspace, files: Mapping[str, str], ref: str | None = None) -> str:
    """What the agent does in the container: write, commit, push to the outbox, as 10001."""
    for name, body in files.items():
        target = workspace.tree / name
        subprocess.run(
            ["/bin/sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", str(target)],
            input=body,
            text=True,
            check=True,
            user=SANDBOX_UID,
            group=SANDBOX_UID,
            extra_groups=[],
            env=_BASE_ENV,
        )
    sha = commit_all(workspace.tree, "Agent change", sandbox=True)
    target_ref = ref or workspace.branch
    git(
        "-C",
        str(workspace.tree),
        "push",
        "-q",
        str(workspace.outbox),
        f"HEAD:refs/heads/{target_ref}",
        sandbox=True,
    )
    return sha


def refs_and_logs(repo: Path) -> dict[str, str]:
    """Every ref of a bare repository and the text of every reflog: its whole visible state."""
    state = {
        line.split(" ", 1)[1]: line.split(" ", 1)[0]
        for line in git(
            "-C", str(repo), "for-each-ref", "--format=%(objectname) %(refname)"
        ).splitlines()
    }
    logs = repo / "logs"
    for path in sorted(logs.rglob("*")) if logs.is_dir() else []:
        if path.is_file():
            state[f"log:{path.relative_to(logs)}"] = path.read_text()
    return state


def walk_files(root: Path) -> Iterator[Path]:
    """Every non-directory entry under ``root``, symlinks included, following none."""
    for directory, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            yield Path(directory, name)


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    result = subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", older, newer],
        env=_BASE_ENV,
        check=False,
    )
    return result.returncode == 0


def as_sandbox(function: Callable[[], T]) -> T:
    """``function()`` run in a forked child as the sandbox uid and gid, as the container runs.

    The result comes back pickled; an exception in the child fails the test with its trace.
    """
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(readable)
        try:
            os.setgroups([])
            os.setgid(SANDBOX_UID)
            os.setuid(SANDBOX_UID)
            outcome: tuple[bool, object] = (True, function())
        except BaseException:
            outcome = (False, traceback.format_exc())
        try:
            with open(writable, "wb") as pipe:
                pipe.write(pickle.dumps(outcome))
        finally:
            # Never back into pytest from a copy of it.
            os._exit(0)
    os.close(writable)
    with open(readable, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    succeeded, value = pickle.loads(data)
    if not succeeded:
        raise AssertionError(f"as uid {SANDBOX_UID}:\n{value}")
    return cast(T, value)
