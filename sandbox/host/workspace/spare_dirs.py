"""The directory of a spare container (``bot.jobs.spares``) under the workspace root.

``.spare-<deadline>-<token>/`` holds an empty ``tree`` and ``outbox.git``, the two mounts of
a job's container, until a job's workspace is built in it and it is renamed ``<job-id>/``
(``sandbox.host.workspace.prepare``). Its name carries the spare's deadline (Unix seconds), so
that retention can tell one whose container the reaper has removed, with no engine.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

from sandbox.host.workspace.overlay import share_mount
from sandbox.host.workspace.prepare import OUTBOX, TREE

__all__ = ["SPARE_DIRECTORY_PREFIX", "make_spare_directory", "spare_deadline"]

SPARE_DIRECTORY_PREFIX = ".spare-"


def make_spare_directory(root: Path, deadline: datetime, *, views: bool) -> tuple[str, Path]:
    """A new spare directory under ``root`` with its empty mounts; its token and path.
    ``views``: the job's tree will be a view, mounted on ``tree`` after the spare binds it,
    so ``tree`` is made a shared mount for the view to reach the spare (``share_mount``)."""
    token = secrets.token_hex(8)
    directory = root / f"{SPARE_DIRECTORY_PREFIX}{int(deadline.timestamp())}-{token}"
    root.mkdir(parents=True, exist_ok=True, mode=0o711)
    directory.mkdir()
    # 0711, as the job directory it becomes: the sandbox uid goes through to its mounts.
    directory.chmod(0o711)
    (directory / TREE).mkdir()
    (directory / OUTBOX).mkdir()
    if views:
        share_mount(directory / TREE)
    return token, directory


def spare_deadline(name: str) -> datetime | None:
    """The deadline a spare directory's name carries; None for any other name."""
    if not name.startswith(SPARE_DIRECTORY_PREFIX):
        return None
    stamp = name[len(SPARE_DIRECTORY_PREFIX) :].partition("-")[0]
    return datetime.fromtimestamp(int(stamp), UTC) if stamp.isdigit() else None
