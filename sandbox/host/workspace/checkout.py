"""Check a job's tree out as the uid that will work in it, so its index's stat cache holds.

The index records each file's stat data (owner, ctime, mtime, inode, size), and git and
libgit2 trust a file whose stat data matches and hash one whose does not. A checkout made as
the worker and then handed to the sandbox uid with ``chown`` changes every file's owner and
ctime: libgit2 would then hash the whole tree on every status and diff in the container
(about 0.5 s on 20,000 files) and never write the refreshed data back. So the checkout runs
in a forked child that has switched to the sandbox uid and gid: the files and the index are
created by that uid, and nothing changes them afterwards.

The child does all of its libgit2 work itself, on a repository it opens after the fork: no
libgit2 object crosses the fork. Its global configuration search path is emptied first
(``sandbox.inside.repo_guard.isolate_process_config``): the sandbox uid cannot read the worker's
home, and the worker's settings have no business in a job's checkout anyway. A fork copies
only the forking thread, so a libgit2 lock another thread held at that moment would stay
held in the child forever: no other thread of the worker may be inside libgit2 while it
prepares a workspace. Celery's prefork pool, the default, runs one task per process.
The checkout also gains the sandbox uid's limits: a hostile upstream tree can at most write
what that uid may write.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import NoReturn

import pygit2
from pygit2.enums import CheckoutStrategy, RepositoryOpenFlag

from bot.core.errors import BeamError
from sandbox.inside.repo_guard import isolate_process_config

__all__ = ["check_out_as"]

MAX_REPORT_BYTES = 4096
# How long to wait for the filesystem's clock to pass the checkout's last write (see
# ``_rewrite_after_the_files``); a clock coarser than this only costs speed, not correctness.
RACY_WAIT_SECONDS = 0.05


def check_out_as(tree: Path, uid: int) -> None:
    """Check out ``tree``'s HEAD (files and index) in a child process running as ``uid``.

    ``tree`` and its ``.git`` must already belong to ``uid``, and the directories above it
    must let ``uid`` through. BEM-342 when the checkout fails or the child is killed.
    """
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(readable)
        _child(tree, uid, writable)
    os.close(writable)
    reaped = False
    try:
        with open(readable, "rb") as pipe:
            report = pipe.read()
        _, status = os.waitpid(pid, 0)
        reaped = True
    finally:
        if not reaped:
            # Interrupted (a time limit, a shutdown): the caller removes the staging
            # directory next, and the child must not still be writing into it.
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        raise BeamError(
            "BEM-342",
            f"checking the tree out as uid {uid} failed: the process was killed by "
            f"{signal.Signals(-code).name}",
        )
    if code:
        detail = report.decode(errors="replace") or f"exit status {code}"
        raise BeamError("BEM-342", f"checking the tree out as uid {uid} failed: {detail}")


def _child(tree: Path, uid: int, report: int) -> NoReturn:
    """Switch to ``uid``, check out, and exit: 0 on success, else 1 with a report."""
    status = 1
    try:
        # The worker's handlers would run the worker's code here; a plain process just ends.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _become(uid)
        _check_reachable(tree, uid)
        isolate_process_config()
        repo = pygit2.Repository(str(tree), RepositoryOpenFlag.NO_SEARCH)
        repo.checkout("HEAD", strategy=CheckoutStrategy.FORCE)
        _rewrite_after_the_files(repo.index, tree / ".git" / "index")
        status = 0
    # Whatever happens, the child must reach os._exit: returning or raising would run the
    # worker's own code (its task loop, atexit handlers) in a copy of the worker.
    except BaseException as error:
        message = error.message if isinstance(error, BeamError) else str(error)
        with contextlib.suppress(OSError):
            os.write(report, message.encode(errors="replace")[:MAX_REPORT_BYTES])
    finally:
        os._exit(status)


def _become(uid: int) -> None:
    """Take on ``uid`` as user and group, with no supplementary groups: the container's ids."""
    if os.geteuid() == uid:
        return
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    except PermissionError:
        raise BeamError(
            "BEM-342",
            f"the worker (uid {os.geteuid()}) cannot switch to the sandbox uid {uid} to check "
            "the tree out; run workers as root, or with CAP_CHOWN, CAP_SETUID and CAP_SETGID",
        ) from None


def _check_reachable(tree: Path, uid: int) -> None:
    """BEM-342 naming the cause, where libgit2 would only say "Permission denied"."""
    try:
        os.stat(tree)
    except PermissionError:
        raise BeamError(
            "BEM-342",
            f"uid {uid} cannot reach {tree}: workspaces.root and every directory above it must "
            "let it through (search permission, o+x); Riverbeam creates the root 0711",
        ) from None


def _rewrite_after_the_files(index: pygit2.Index, path: Path) -> None:
    """Write the index again once the filesystem's clock has passed the checkout's writes.

    A file whose mtime is not older than the index is "racily clean": it could have changed
    within the same clock tick after being recorded, so git and libgit2 hash it on every
    status. Files written in the checkout's last tick would be; rewritten later, the index
    is newer than all of them. libgit2 re-hashes the racy entries before that write, and
    nothing else writes into the tree meanwhile.
    """
    written = path.stat().st_mtime_ns
    deadline = time.monotonic() + RACY_WAIT_SECONDS
    while True:
        # A touch stamps the index with the filesystem's own time, whatever its clock.
        os.utime(path)
        if path.stat().st_mtime_ns > written:
            break
        if time.monotonic() > deadline:
            return
        time.sleep(0.001)
    index.write()
