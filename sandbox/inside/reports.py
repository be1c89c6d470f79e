"""What the working tree reports back: typed here, plain JSON once ``as_json``-ed.

Every list a model reads is capped; a capped report says so (``truncated``) and its ``note``
says how to ask for the rest.

The reports are frozen dataclasses, not pydantic models: the tool server builds them on every
git call and would otherwise load pydantic and build twelve validators at its start. The host
reads a report from a tool's JSON result with ``pydantic.TypeAdapter(<report>)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Report:
    def as_json(self) -> dict[str, Any]:
        """The report as the JSON object a tool returns: nested reports as objects too.
        (``dataclasses.asdict`` would deep-copy every value: ten times slower on a status of
        a thousand files.)"""
        return {name: _json(getattr(self, name)) for name in self.__dataclass_fields__}


def _json(value: Any) -> Any:
    if isinstance(value, _Report):
        return value.as_json()
    if isinstance(value, list):
        return [_json(item) for item in value]
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileStatus(_Report):
    """One path that differs. ``staged``: HEAD → index; ``unstaged``: index → files."""

    path: str
    staged: str | None
    unstaged: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class StatusReport(_Report):
    branch: str | None
    head: str | None
    detached: bool
    clean: bool
    files: list[FileStatus]
    total_files: int
    truncated: bool
    note: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class FileDiff(_Report):
    """Per-file stats; ``additions``/``deletions`` are None once the patch cap was reached."""

    path: str
    old_path: str | None
    status: str
    binary: bool
    additions: int | None
    deletions: int | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComparePoint(_Report):
    """The commit a job's change is compared with, and the host's name for it (``main``)."""

    sha: str
    label: str


@dataclasses.dataclass(frozen=True, kw_only=True)
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogEntry(_Report):
    sha: str
    author: str
    date: str
    subject: str
    body: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class LogReport(_Report):
    """``since``: the compare point whose history is left out (``git log <since>..HEAD``);
    ``path``: the file or directory the commits are limited to (``git log -- <path>``)."""

    branch: str | None
    since: ComparePoint | None
    commits: list[LogEntry]
    more: bool
    # Last, with a default: a result saved by a release before it still reads as a report.
    path: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class StageReport(_Report):
    path: str
    staged: list[FileStatus]
    total_staged: int
    truncated: bool
    note: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommitResult(_Report):
    commit: str
    branch: str | None
    parents: list[str]
    subject: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class PushResult(_Report):
    remote: str
    ref: str
    sha: str
