"""Status, diff and log reports built from libgit2 objects, with the caps a model needs."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta, timezone

import pygit2
from pygit2.enums import DeltaStatus, SortMode

from sandbox.inside.jail import SandboxRoot
from sandbox.inside.reports import (
    ComparePoint,
    DiffReport,
    FileDiff,
    FileStatus,
    LogEntry,
    LogReport,
    StageReport,
    StatusReport,
)
from sandbox.inside.staging import worktree_patch
from sandbox.inside.worktree_changes import (
    MAX_NESTING,
    SCAN_FLAGS,
    Change,
    Changes,
    diff_index_to_workdir,
    diff_tree_to_index,
    files_on_disk,
)

__all__ = ["diff_report", "file_statuses", "log_report", "stage_report", "status_report"]

MAX_STATUS_FILES = 1_000
MAX_DIFF_FILES = 500
MAX_PATCH_CHARS = 100_000
MAX_BODY_CHARS = 2_000

_WORDS = {
    DeltaStatus.ADDED: "added",
    DeltaStatus.DELETED: "deleted",
    DeltaStatus.MODIFIED: "modified",
    DeltaStatus.RENAMED: "renamed",
    DeltaStatus.COPIED: "copied",
    DeltaStatus.TYPECHANGE: "typechange",
    DeltaStatus.UNTRACKED: "untracked",
    DeltaStatus.UNREADABLE: "unreadable",
    DeltaStatus.CONFLICTED: "conflicted",
}
# Untracked content is never loaded by libgit2: the patch of every file on disk comes from
# the jail (sandbox.inside.staging).
_PATCH_FLAGS = SCAN_FLAGS


def _word(status: DeltaStatus) -> str:
    return _WORDS.get(status, status.name.lower())


def file_statuses(changes: Changes) -> list[FileStatus]:
    """One entry per path, with its staged and its unstaged change side by side."""
    staged = {change.path: _word(change.status) for change in changes.staged}
    unstaged = {change.path: _word(change.status) for change in changes.unstaged}
    return [
        FileStatus(path=path, staged=staged.get(path), unstaged=unstaged.get(path))
        for path in sorted(staged.keys() | unstaged.keys())
    ]


def status_report(
    changes: Changes,
    *,
    branch: str | None,
    head: str | None,
    detached: bool,
    max_files: int = MAX_STATUS_FILES,
) -> StatusReport:
    files = file_statuses(changes)
    truncated = len(files) > max_files
    note = None
    if truncated:
        note = (
            f"{len(files)} paths changed; the first {max_files} are listed. "
            "Call git_diff with path=<directory> to look at one part of the tree."
        )
    elif not files and not changes.skipped:
        note = "nothing to commit: the files match HEAD"
    note = _with_skipped(note, changes.skipped)
    return StatusReport(
        branch=branch,
        head=head,
        detached=detached,
        # What was left out is not known to match HEAD.
        clean=not files and not changes.skipped,
        files=files[:max_files],
        total_files=len(files),
        truncated=truncated,
        note=note,
    )


def _with_skipped(note: str | None, skipped: Sequence[str]) -> str | None:
    """``note``, and what a scan left out because libgit2 cannot enter it (BEM-333)."""
    if not skipped:
        return note
    shown = ", ".join(repr(_shortened(path)) for path in skipped[:3])
    shown += ", ..." if len(skipped) > 3 else ""
    left_out = (
        f"BEM-333: {len(skipped)} director{'y' if len(skipped) == 1 else 'ies'} nested "
        f"{MAX_NESTING} levels deep left out, which git cannot look into: {shown}"
    )
    return left_out if note is None else f"{note}. {left_out}"


def _shortened(path: str, keep: int = 60) -> str:
    """A path of a hundred parts, shown by its start and its last part."""
    if len(path) <= 2 * keep:
        return path
    return f"{path[:keep]}.../{path.rsplit('/', 1)[-1][-keep:]}"


def stage_report(
    path: str, staged: Sequence[Change], max_files: int, skipped: Sequence[str] = ()
) -> StageReport:
    files = [FileStatus(path=c.path, staged=_word(c.status), unstaged=None) for c in staged]
    truncated = len(files) > max_files
    if truncated:
        note: str | None = f"{len(files)} paths are staged; the first {max_files} are listed"
    elif not files:
        note = "nothing is staged: the index matches HEAD"
    else:
        note = None
    note = _with_skipped(note, skipped)
    return StageReport(
        path=path,
        staged=files[:max_files],
        total_staged=len(files),
        truncated=truncated,
        note=note,
    )


def diff_report(
    repo: pygit2.Repository,
    tree: pygit2.Tree | None,
    changes: Changes,
    *,
    base: str | None,
    against: ComparePoint | None,
    narrowed: str | None,
    root: SandboxRoot,
    max_chars: int = MAX_PATCH_CHARS,
    max_files: int = MAX_DIFF_FILES,
) -> DiffReport:
    """``tree`` (commit ``base``) against the files: index and files together, new files too.

    ``changes`` must come from a scan against the same ``tree``. Files on disk are read
    through ``root`` (over its read cap: shown as binary, unread).
    """
    paths = [path.encode() for path in changes.paths()]
    if not paths:
        since = "against HEAD" if against is None else f"since {_named(against)}"
        return DiffReport(
            base=base,
            against=against,
            path=narrowed,
            files=[],
            total_files=0,
            patch="",
            truncated=False,
            note=_with_skipped(
                f"no changes {since}" + (f" under {narrowed!r}" if narrowed else ""),
                changes.skipped,
            ),
        )
    index = repo.index
    # Only the changed paths are compared again, so this second pass costs little.
    diff = diff_tree_to_index(repo, tree, index, paths, _PATCH_FLAGS, root.max_read_bytes)
    unstaged = diff_index_to_workdir(repo, index, paths, _PATCH_FLAGS, root.max_read_bytes)
    # Paths whose new side is a file on disk: their patches are made from what the jail
    # reads (sandbox.inside.staging); libgit2 renders only those whose sides are both objects.
    on_disk = files_on_disk(unstaged)
    diff.merge(unstaged)
    files, patch, cut = _render(_Patches(repo, diff, root, on_disk), max_chars, max_files)
    total = len(diff)
    truncated = cut or total > len(files)
    return DiffReport(
        base=base,
        against=against,
        path=narrowed,
        files=files,
        total_files=total,
        patch=patch,
        truncated=truncated,
        note=_with_skipped(
            _diff_note(total, len(files), cut, max_chars) if truncated else None,
            changes.skipped,
        ),
    )


def _named(point: ComparePoint) -> str:
    short = point.sha[:12]
    return short if point.label == short else f"{point.label} ({short})"


class _Patches:
    """The merged diff's deltas and, on demand, each one's patch text."""

    def __init__(
        self, repo: pygit2.Repository, diff: pygit2.Diff, root: SandboxRoot, on_disk: set[str]
    ) -> None:
        self._repo, self._diff, self._root, self._on_disk = repo, diff, root, on_disk
        self.deltas = diff.deltas

    def patch(self, number: int, delta: pygit2.DiffDelta) -> tuple[str, tuple[int, int], bool]:
        """The text, (added, removed) line counts and binary flag of delta ``number``."""
        path = self._on_disk_file(delta)
        if path is not None:
            return worktree_patch(self._repo, delta, self._root.git_file(path))
        patch = self._diff[number]
        if patch is None:
            return "", (0, 0), bool(delta.is_binary)
        _, added, removed = patch.line_stats
        return patch.text or "", (added, removed), bool(patch.delta.is_binary)

    def check(self, delta: pygit2.DiffDelta) -> None:
        """Apply the jail's rules to a file on disk that is listed without its patch."""
        path = self._on_disk_file(delta)
        if path is not None:
            self._root.git_file(path, read=False)

    def _on_disk_file(self, delta: pygit2.DiffDelta) -> str | None:
        path = delta.new_file.path
        return path if path in self._on_disk else None


def _render(patches: _Patches, max_chars: int, max_files: int) -> tuple[list[FileDiff], str, bool]:
    """Per-file stats and the patch text, until the patch reaches ``max_chars``."""
    files: list[FileDiff] = []
    chunks: list[str] = []
    room = max_chars
    cut = False
    for number, delta in enumerate(itertools.islice(patches.deltas, max_files)):
        stats: tuple[int, int] | None = None
        binary = bool(delta.is_binary)
        if cut:
            # Past the cap no more patches are made: their content is never even loaded.
            patches.check(delta)
        else:
            text, stats, binary = patches.patch(number, delta)
            if len(text) > room:
                text = text[:room] + f"\n[... patch cut at {max_chars} characters ...]\n"
                cut = True
            room -= len(text)
            chunks.append(text)
        files.append(_file_diff(delta, binary, stats))
    return files, "".join(chunks), cut


def _file_diff(delta: pygit2.DiffDelta, binary: bool, stats: tuple[int, int] | None) -> FileDiff:
    old, new = delta.old_file.path, delta.new_file.path
    return FileDiff(
        path=new,
        old_path=old if old != new else None,
        status=_word(delta.status),
        binary=binary,
        additions=None if stats is None else stats[0],
        deletions=None if stats is None else stats[1],
    )


def _diff_note(total: int, listed: int, cut: bool, max_chars: int) -> str:
    parts = []
    if cut:
        parts.append(f"the patch is cut at {max_chars} characters")
    if total > listed:
        parts.append(f"{total} files changed and {listed} are listed")
    return (
        "; ".join(parts).capitalize()
        + ". Call git_diff with path=<file or directory> to see one part in full, "
        "or read_file for a new file."
    )


def log_report(
    repo: pygit2.Repository,
    branch: str | None,
    limit: int,
    since: ComparePoint | None = None,
    path: str = "",
) -> LogReport:
    """The newest ``limit`` commits reachable from HEAD and not from ``since``, newest first;
    with ``path``, only those that changed what is at it."""
    shown_path = path or None
    if repo.head_is_unborn:
        return LogReport(branch=branch, since=since, path=shown_path, commits=[], more=False)
    # SortMode.NONE is libgit2's git-log order and walks incrementally: 20 commits of a long
    # history cost 20 commit reads, where time sorting would visit them all first. With a
    # hidden commit libgit2 first marks the range, as git does for A..B; still newest first.
    walker = repo.walk(repo.head.target, SortMode.NONE)
    if since is not None:
        walker.hide(pygit2.Oid(hex=since.sha))
    found: Iterable[pygit2.Commit] = filter(_PathChanges(repo, path), walker) if path else walker
    commits = [_commit_info(commit) for commit in itertools.islice(found, limit + 1)]
    return LogReport(
        branch=branch,
        since=since,
        path=shown_path,
        commits=commits[:limit],
        more=len(commits) > limit,
    )


class _PathChanges:
    """Whether a commit changed the file or directory at ``path``: what is there differs
    from what is there in each of its parents (a root commit: it is there), so a merge that
    took one side's version unchanged is not shown, as in ``git log -- <path>``.

    The path is followed one name at a time, each (tree, name) looked up once per walk:
    commits share most of their trees, and a large directory's tree object (4,000 entries
    on tldr-pages) costs far more to inflate and parse than to remember."""

    def __init__(self, repo: pygit2.Repository, path: str) -> None:
        self._repo = repo
        self._names = path.split("/")
        self._entries: dict[tuple[pygit2.Oid, str], tuple[pygit2.Oid, int] | None] = {}

    def __call__(self, commit: pygit2.Commit) -> bool:
        here = self._entry_at(commit.tree_id)
        if not commit.parents:
            return here is not None
        return all(self._entry_at(parent.tree_id) != here for parent in commit.parents)

    def _entry_at(self, tree_id: pygit2.Oid) -> tuple[pygit2.Oid, int] | None:
        found: tuple[pygit2.Oid, int] | None = None
        for name in self._names:
            key = (tree_id, name)
            if key in self._entries:
                found = self._entries[key]
            else:
                found = self._entries[key] = _entry_named(self._repo[tree_id], name)
            if found is None:
                return None
            tree_id = found[0]
        return found


def _entry_named(tree: pygit2.Object, name: str) -> tuple[pygit2.Oid, int] | None:
    """The id and mode of ``name`` in ``tree``; None when it is not there, or ``tree`` is a
    file (the path goes through one)."""
    if not isinstance(tree, pygit2.Tree):
        return None
    try:
        entry = tree[name]
    except KeyError:
        return None
    return entry.id, entry.filemode


def _commit_info(commit: pygit2.Commit) -> LogEntry:
    message = commit.raw_message.decode("utf-8", "replace")
    subject, _, body = message.strip().partition("\n")
    body = body.strip()
    if len(body) > MAX_BODY_CHARS:
        body = body[:MAX_BODY_CHARS] + " [...]"
    author = commit.author
    zone = timezone(timedelta(minutes=author.offset)) if author.offset else UTC
    return LogEntry(
        sha=str(commit.id),
        author=f"{author.name} <{author.email}>",
        date=datetime.fromtimestamp(author.time, zone).isoformat(),
        subject=subject.strip(),
        body=body,
    )
