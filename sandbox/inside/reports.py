"""What the working tree reports back: typed here, plain JSON once ``model_dump``-ed.

Every list a model reads is capped; a capped report says so (``truncated``) and its ``note``
says how to ask for the rest.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Report(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FileStatus(_Report):
    """One path that differs. ``staged``: HEAD → index; ``unstaged``: index → files."""

    path: str
    staged: str | None
    unstaged: str | None


class StatusReport(_Report):
    branch: str | None
    head: str | None
    detached: bool
    clean: bool
    files: list[FileStatus]
    total_files: int
    truncated: bool
    note: str | None


class FileDiff(_Report):
    """Per-file stats; ``additions``/``deletions`` are None once the patch cap was reached."""

    path: str
    old_path: str | None
    status: str
    binary: bool
    additions: int | None
    deletions: int | None


class ComparePoint(_Report):
    """The commit a job's change is compared with, and the host's name for it (``main``)."""

    sha: str
    label: str


class DiffReport(_Report):
    """``base`` is the old side's commit; ``against`` is set when that is a compare point."""

    base: str | None
    against: ComparePoint | None
    path: str | None
    files: list[FileDiff]
    total_files: int
    patch: str
    truncated: bool
    note: str | None


class LogEntry(_Report):
    sha: str
    author: str
    date: str
    subject: str
    body: str


class LogReport(_Report):
    """``since``: the compare point whose history is left out (``git log <since>..HEAD``)."""

    branch: str | None
    since: ComparePoint | None
    commits: list[LogEntry]
    more: bool


class StageReport(_Report):
    path: str
    staged: list[FileStatus]
    total_staged: int
    truncated: bool
    note: str | None


class CommitResult(_Report):
    commit: str
    branch: str | None
    parents: list[str]
    subject: str


class PushResult(_Report):
    remote: str
    ref: str
    sha: str
