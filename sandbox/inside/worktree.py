"""A git working tree inside a ``SandboxRoot``, driven through pygit2 (libgit2) only.

Nothing here starts a process: libgit2 has no hooks, fsmonitor, external filters, textconv
or credential helpers to run. Configuration it would honour is neutralised by
``sandbox.inside.repo_guard`` before every operation, so the origin a push goes to and the working
tree git writes in are the ones Riverbeam set, whatever ``.git/config`` said.

Branch names are checked by ``sandbox.inside.refs``: invalid names are BEM-324, refspec or option
syntax BEM-325, protected refs BEM-328, for checkouts as well as pushes. A branch that is a
symbolic ref is BEM-330 wherever it is met (checkout, commit, push): it would move the ref
it names. Working files are staged and diffed from what the jail reads
(``sandbox.inside.staging``). A push sends exactly ``refs/heads/<name>:refs/heads/<name>`` (built
here, never taken from a caller): no ``+``, no deletion, no tags, no push options, no proxy.

A job that looks at a change already committed (a review, a summary, commit notes) gives
the tree a *compare point*: a commit, usually where the branch left its base. ``diff`` then
starts from that commit's tree instead of HEAD's, and ``log`` leaves out its history, so
"the change" is everything since it, committed or not. ``status`` and ``commit`` stay
relative to HEAD: they describe what the next commit would record.

A ``WorkingTree`` is not thread-safe; callers that share one hold ``lock``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import DeltaStatus, FileMode
from pygit2.remotes import PushUpdate

from bot.core.authors import DEFAULT_AUTHOR, Author, Named, compose_message, trailer_line, utf8
from bot.core.errors import BeamError
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.refs import HEADS, ProtectedRefs, branch_name, full_ref
from sandbox.inside.repo_guard import (
    SettledDirectories,
    SettledListings,
    check_layout,
    check_rule_files,
    enforce_config,
    isolate_process_config,
    open_repository,
)
from sandbox.inside.reports import (
    CommitResult,
    ComparePoint,
    DiffReport,
    LogReport,
    PushResult,
    StageReport,
    StatusReport,
)
from sandbox.inside.staging import stage_file
from sandbox.inside.tree_checks import checked_url, compare_commit, compare_target
from sandbox.inside.views import (
    MAX_DIFF_FILES,
    MAX_PATCH_CHARS,
    MAX_STATUS_FILES,
    diff_report,
    log_report,
    stage_report,
    status_report,
)
from sandbox.inside.worktree_changes import (
    MAX_NESTING,
    SCAN_FLAGS,
    Changes,
    TooDeep,
    diff_index_to_workdir,
    scan,
    skipping_deep,
)

if TYPE_CHECKING:
    from bot.core.identity import Trailer

__all__ = ["WorkingTree"]

MAX_MESSAGE_CHARS = 65_536
_ZERO = pygit2.Oid(hex="0" * 40)


def _trailer_lines(trailers: Sequence[Trailer | str]) -> tuple[str, ...]:
    """Each trailer as its checked ``Key: value`` line (ValueError for a bad one)."""
    return tuple(trailer_line(str(trailer)) for trailer in trailers)


@contextmanager
def _libgit2(action: str) -> Iterator[None]:
    """Report a libgit2 failure as BEM-320 with libgit2's own explanation."""
    try:
        yield
    except pygit2.GitError as error:
        raise BeamError("BEM-320", f"{action} failed: {error}") from error
    except TooDeep as error:
        raise BeamError(
            "BEM-333",
            f"{action}: the path lies in {error.skipped[0]!r}, nested {MAX_NESTING} levels "
            "deep, which git cannot look into; the rest of the tree can be used",
        ) from None


class WorkingTree:
    """The repository at a sandbox root: branches, staging, commits and guarded pushes."""

    def __init__(
        self,
        root: SandboxRoot,
        protected_refs: Iterable[str] = ("main", "master"),
        *,
        identity: Named | None = None,
        trailers: Sequence[Trailer | str] = (),
        workers: int | None = None,
        compare_to: str | None = None,
        compare_label: str | None = None,
    ) -> None:
        self._root = root
        self._compare = _compare_point(compare_to, compare_label)
        self._policy = ProtectedRefs(protected_refs)
        # Checked here, without pydantic (the tool server runs without it), whatever the
        # caller built them with.
        self._identity = DEFAULT_AUTHOR if identity is None else Author.of(identity)
        self._trailers = _trailer_lines(trailers)
        self._workers = max(1, workers or min(4, len(os.sched_getaffinity(0))))
        self._origin: str | None = None
        self._repo: pygit2.Repository | None = None
        self._helpers: list[pygit2.Repository] = []
        self._settled: SettledDirectories = {}
        self._listings = SettledListings()
        self.lock = threading.RLock()

    def __repr__(self) -> str:
        return f"WorkingTree({self._root!r}, {list(self._policy.patterns)!r})"

    @property
    def root(self) -> SandboxRoot:
        return self._root

    @property
    def protected_refs(self) -> ProtectedRefs:
        return self._policy

    @property
    def identity(self) -> Author:
        return self._identity

    @property
    def origin(self) -> str | None:
        return self._origin

    def compare_point(self) -> ComparePoint | None:
        """The compare point, once the repository is known to hold it (BEM-320 if not)."""
        if self._compare is not None:
            self._compare_commit(self._open(reads_files=False))
        return self._compare

    # -- setting up ----------------------------------------------------------------------

    def init(self, initial_branch: str = "main") -> None:
        """Create an empty repository at the root; an existing one is kept as it is.

        The initial branch is the host's choice, so it may be protected (``main``): the first
        commit can land there, and pushing it is still refused.
        """
        name = branch_name(initial_branch)
        if not os.path.lexists(self._root.path / ".git"):
            isolate_process_config()  # init reads global config too (templates, defaults)
            with _libgit2("creating the repository"):
                pygit2.init_repository(str(self._root.path), bare=False, initial_head=name)
        self._open()

    def add_origin(self, url: str) -> None:
        """Set where ``push`` sends branches. Kept here, never read back from ``.git/config``."""
        self._origin = checked_url(url)

    # -- branches ------------------------------------------------------------------------

    def current_branch(self) -> str | None:
        """The branch HEAD is on (even before its first commit); None when detached."""
        return _branch_of(self._open(reads_files=False))

    def head_sha(self) -> str | None:
        """The commit HEAD points at; None before the first commit."""
        repo = self._open(reads_files=False)
        return None if repo.head_is_unborn else str(repo.head.target)

    def checkout_branch(self, name: str, create: bool = False) -> str:
        """Switch to branch ``name``, creating it at HEAD with ``create``. Returns the name."""
        branch = self._policy.check_branch(name)
        repo = self._open()
        # The ref itself, not the branch lookup, which resolves a symbolic ref on the way.
        existing = repo.references.get(full_ref(branch))
        with _libgit2(f"checking out {branch!r}"):
            if not create:
                if existing is None:
                    raise BeamError(
                        "BEM-326",
                        f"there is no branch {branch!r}; pass create=True to make it at HEAD",
                    )
                _require_direct(existing)
                repo.checkout(existing)
                return branch
            _refuse_existing(repo, branch)
            if not repo.head_is_unborn:
                repo.branches.local.create(branch, repo.head.peel(pygit2.Commit))
            # Same commit, so the files and the index stay exactly as they are.
            repo.set_head(full_ref(branch))
        return branch

    # -- reading -------------------------------------------------------------------------

    def status(self, *, max_files: int = MAX_STATUS_FILES) -> StatusReport:
        """Staged and unstaged changes per path, untracked files included."""
        repo = self._open()
        with _libgit2("git status"):
            changes = self._scan(repo, _head_tree(repo))
            report = status_report(
                changes,
                branch=_branch_of(repo),
                head=None if repo.head_is_unborn else str(repo.head.target),
                detached=repo.head_is_detached,
                max_files=max_files,
            )
        # libgit2 looked at these files by path; the jail's rules (no hard link, nothing
        # beyond a symlink) hold for every one the report names, as for read_file.
        listed = {entry.path for entry in report.files}
        for change in changes.unstaged:
            if change.path in listed and change.is_file_on_disk:
                self._root.git_file(change.path, read=False)
        return report

    def diff(
        self,
        path: str | None = None,
        *,
        max_chars: int = MAX_PATCH_CHARS,
        max_files: int = MAX_DIFF_FILES,
    ) -> DiffReport:
        """HEAD (or the compare point) against the working files as one unified patch.

        Staged and unstaged changes are shown together, and new (untracked) files with their
        content, so the patch is what committing everything would record; from a compare
        point it also holds the commits made since. ``path`` (a file or directory) narrows it.
        """
        narrowed = self._root.normalize(path) if path else ""
        repo = self._open()
        with _libgit2("git diff"):
            start = self._compare_commit(repo)
            if start is None:
                tree = _head_tree(repo)
                base = None if tree is None else str(repo.head.target)
            else:
                tree, base = start.tree, str(start.id)
            changes = self._scan(repo, tree, narrowed)
            return diff_report(
                repo,
                tree,
                changes,
                base=base,
                against=self._compare,
                narrowed=narrowed or None,
                root=self._root,
                max_chars=max_chars,
                max_files=max_files,
            )

    def log(self, limit: int = 20, path: str = "") -> LogReport:
        """The newest ``limit`` commits from HEAD (since the compare point), newest first;
        with ``path`` (checked as the jail checks paths, but it need not exist: a deleted
        page has a history), only those that changed it."""
        target = self._root.normalize(path)
        repo = self._open(reads_files=False)
        with _libgit2("git log"):
            self._compare_commit(repo)
            return log_report(repo, _branch_of(repo), max(1, limit), self._compare, target)

    # -- writing -------------------------------------------------------------------------

    def add(self, path: str, *, max_files: int = MAX_STATUS_FILES) -> StageReport:
        """Stage ``path`` (a file or directory; ``""`` or ``"."``: everything), deletions too.

        What is staged is what the status scan finds changed under ``path``: ignored files
        stay out, as with ``git add -A``, and nothing behind a symlinked directory is read.
        """
        target = "" if path in ("", ".") else self._root.normalize(path)
        repo = self._open()
        with _libgit2(f"git add {target or '.'}"):
            index = repo.index
            index.read(False)
            found, skipped = self._stage_changes(repo, index, target)
            if target and not found:
                self._explain_nothing_to_add(repo, target)
            index.write()
            staged = self._scan(repo, _head_tree(repo), target).staged
        return stage_report(target or ".", staged, max_files, skipped)

    def objects(self) -> pygit2.Repository:
        """The repository, guarded, for reading commits and trees (no working file read)."""
        return self._open(reads_files=False)

    def tree_of_changes(self) -> str:
        """The tree a ``git add -A`` and a commit would record now, written to the object
        database (for the docs checks); the index on disk is left as it was."""
        repo = self._open()
        with _libgit2("reading the working tree"):
            index = repo.index
            index.read(False)
            try:
                self._stage_changes(repo, index, "")
                return str(index.write_tree())
            finally:
                index.read(True)

    def commit(
        self, message: str, *, trailers: Sequence[Trailer | str] | None = None
    ) -> CommitResult:
        """Record the index as a commit by the bot identity on the current branch.

        The tree's default trailers (say, ``Requested-by:``) and ``trailers`` end the message.
        """
        if not message.strip():
            raise BeamError("BEM-320", "the commit message is empty; say what the change does")
        if len(message) > MAX_MESSAGE_CHARS:
            raise BeamError("BEM-320", f"the commit message is over {MAX_MESSAGE_CHARS} characters")
        nul = message.find("\x00")
        if nul >= 0:
            # libgit2 takes the message as a C string: it would end at the NUL, trailers lost.
            raise BeamError(
                "BEM-331",
                f"the commit message has a NUL character at position {nul}; git cannot store "
                "it (the message would end there and lose its trailers). Remove it",
            )
        utf8(message, "the commit message")
        repo = self._open()
        _require_head_on_a_branch(repo)
        with _libgit2("git commit"):
            index = repo.index
            index.read(False)
            tree = index.write_tree()
            parents = [] if repo.head_is_unborn else [repo.head.target]
            unchanged = repo[parents[0]].peel(pygit2.Commit).tree_id if parents else None
            if tree == unchanged or (not parents and len(index) == 0):
                raise BeamError(
                    "BEM-321", "nothing is staged; stage changes with git_add before committing"
                )
            text = compose_message(message, [*self._trailers, *_trailer_lines(trailers or ())])
            signature = pygit2.Signature(*self._identity)
            sha = repo.create_commit("HEAD", signature, signature, text, tree, parents)
        return CommitResult(
            commit=str(sha),
            branch=_branch_of(repo),
            parents=[str(parent) for parent in parents],
            subject=text.partition("\n")[0],
        )

    def push(self, branch: str | None = None) -> PushResult:
        """Push ``branch`` (default: the current one) to the origin, fast-forward only."""
        repo = self._open(reads_files=False)
        name = self._policy.check_branch(branch if branch is not None else _pushable(repo))
        if self._origin is None:
            raise BeamError(
                "BEM-322", "the working tree has no origin remote; the host must add one"
            )
        ref = full_ref(name)
        local = repo.references.get(ref)
        if local is None:
            raise BeamError("BEM-326", f"there is no local branch {name!r} to push")
        sha = _require_direct(local)
        watch = _PushWatch(ref, sha)
        try:
            # Anonymous: no remote.<name>.* or url.*.insteadOf can apply, even if present.
            remote = repo.remotes.create_anonymous(self._origin)
            remote.push([f"{ref}:{ref}"], callbacks=watch, proxy=None)
        except pygit2.GitError as error:
            raise _push_error(repo, name, watch, error) from error
        watch.raise_if_rejected()
        return PushResult(remote="origin", ref=ref, sha=str(sha))

    # -- internals -----------------------------------------------------------------------

    def _open(self, *, reads_files: bool = True) -> pygit2.Repository:
        """The repository, after the guard has checked its layout and reset its config, and,
        for an operation that ``reads_files`` of the working tree (status, diff, add,
        checkout, commit), its rule files. Reading refs and objects alone (log, push, HEAD)
        opens none of them: tests/sandbox/test_libgit2_opens.py watches each tool's opens."""
        try:
            gitdir = check_layout(self._root.path, self._settled)
            if reads_files:
                check_rule_files(self._root.path, self._listings)
            rewritten = enforce_config(gitdir)
        except BeamError:
            self._repo, self._helpers = None, []
            raise
        if rewritten or self._repo is None:
            # Drop objects that may have cached what the old file said.
            self._repo, self._helpers = open_repository(self._root.path, gitdir), []
        return self._repo

    def _scan(self, repo: pygit2.Repository, tree: pygit2.Tree | None, path: str = "") -> Changes:
        """``tree`` against the index ("staged") and the index against the files."""
        if not path:
            while len(self._helpers) < self._workers - 1:
                self._helpers.append(open_repository(self._root.path, self._root.path / ".git"))
        repos = [repo, *self._helpers] if not path else [repo]
        return scan(repos, tree, [path.encode()] if path else None)

    def _compare_commit(self, repo: pygit2.Repository) -> pygit2.Commit | None:
        if self._compare is None:
            return None
        return compare_commit(repo, self._compare.sha, self._compare.label)

    def _stage_changes(
        self, repo: pygit2.Repository, index: pygit2.Index, target: str
    ) -> tuple[int, tuple[str, ...]]:
        """Stage in ``index`` (in memory) what changed under ``target`` ("": everywhere);
        how many paths, and the folders too deep to look into."""
        pathspec = [target.encode()] if target else None

        def unstaged(paths: Sequence[bytes] | None) -> pygit2.Diff:
            return diff_index_to_workdir(repo, index, paths, SCAN_FLAGS)

        found, skipped = skipping_deep(repo, pathspec, unstaged)
        for delta in found.deltas:
            self._stage(repo, index, delta)
        return len(found), skipped

    def _stage(self, repo: pygit2.Repository, index: pygit2.Index, delta: pygit2.DiffDelta) -> None:
        path = delta.new_file.path
        if delta.status == DeltaStatus.DELETED:
            index.remove(path)
        elif delta.new_file.mode == FileMode.COMMIT:
            # A submodule: libgit2 records the commit its checkout is at (no file content).
            index.add(path)
        elif not path.endswith("/"):
            # (A trailing slash is an untracked nested repository: git would make it a
            # gitlink.) The content comes through the jail, never read by libgit2 by path.
            file = self._root.git_file(path)
            if file.data is None:
                raise BeamError(
                    "BEM-305",
                    f"{path!r} is {file.st.st_size} bytes, over the read cap of "
                    f"{self._root.max_read_bytes} bytes; it cannot be staged",
                )
            stage_file(repo, index, path, file)

    def _explain_nothing_to_add(self, repo: pygit2.Repository, target: str) -> None:
        """Refuse a path that staged nothing because git cannot stage it; else return."""
        if target in repo.index:
            return  # tracked and unchanged
        if repo.path_is_ignored(target):
            raise BeamError("BEM-320", f"{target!r} is ignored by .gitignore; it cannot be staged")
        try:
            # The jail's answer, so a symlink leading outside is refused, not probed.
            real = self._root.resolve(target)
        except (FileNotFoundError, NotADirectoryError):
            raise BeamError(
                "BEM-320",
                f"{target!r} did not match any file; use list_tree or git_status to see paths",
            ) from None
        if real != target:
            raise BeamError(
                "BEM-320",
                f"{target!r} is beyond a symbolic link; git stages a symlink itself, "
                f"not what it points to (the file is {real!r})",
            )


class _PushWatch(pygit2.RemoteCallbacks):
    """Checks the negotiated update before anything is sent, and records refusals."""

    def __init__(self, ref: str, sha: pygit2.Oid) -> None:
        super().__init__()
        self._ref = ref
        self.sha = sha
        self.rejected: dict[str, str] = {}
        # What the remote's branch pointed at when the push was negotiated (zero: absent).
        self.remote_tip: pygit2.Oid | None = None

    def push_negotiation(self, updates: list[PushUpdate]) -> None:
        # A second line of defence: libgit2 must be about to send exactly our one update.
        expected = [(self._ref, self._ref, self.sha)]
        actual = [(u.src_refname, u.dst_refname, u.dst) for u in updates]
        if actual != expected:
            raise BeamError("BEM-325", f"push negotiated {actual!r}, expected {expected!r}")
        self.remote_tip = updates[0].src

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message is not None:
            self.rejected[refname] = message

    def raise_if_rejected(self) -> None:
        for refname, reason in self.rejected.items():
            raise BeamError(
                "BEM-327",
                f"the remote refused to update {refname}: {reason}. Nothing changed there; "
                "if someone else pushed to the branch, start again from the remote's tip",
            )


def _push_error(
    repo: pygit2.Repository, name: str, watch: _PushWatch, error: pygit2.GitError
) -> BeamError:
    """BEM-327 when the origin's branch is not an ancestor of ours, else BEM-320.

    Decided from the tip the origin advertised, not from libgit2's wording: it words a tip
    this clone lacks ("contains commits that are not present locally") and one it has but
    that diverged ("non-fastforwardable") differently, and either may change.
    """
    tip, sha = watch.remote_tip, watch.sha
    if tip is not None and tip != _ZERO and tip != sha:
        if tip not in repo:
            state = "commits this clone has never seen"
        elif not repo.descendant_of(sha, tip):
            state = "commits this branch does not have"
        else:
            state = ""
        if state:
            return BeamError(
                "BEM-327",
                f"{name!r} on the origin is at {str(tip)[:12]}, which has {state} (not a "
                "fast-forward); Riverbeam never force-pushes. Start again from the origin's tip",
            )
    return BeamError("BEM-320", f"pushing {name!r} to origin failed: {error}")


def _head_tree(repo: pygit2.Repository) -> pygit2.Tree | None:
    return None if repo.head_is_unborn else repo.head.peel(pygit2.Tree)


def _branch_of(repo: pygit2.Repository) -> str | None:
    if repo.head_is_detached:
        return None
    target = repo.references["HEAD"].target
    return target.removeprefix(HEADS) if isinstance(target, str) else None


def _require_direct(branch: pygit2.Reference) -> pygit2.Oid:
    """The commit ``branch`` points at itself; BEM-330 when it is a symbolic ref.

    A symbolic branch is another name for the ref it points at: checking it out, committing
    on it or pushing it would move that ref (a protected one, say) while every check saw
    only the alias. Such branches are refused outright, whatever they point at.
    """
    target = branch.target
    if not isinstance(target, pygit2.Oid):
        raise BeamError(
            "BEM-330",
            f"branch {branch.name.removeprefix(HEADS)!r} is a symbolic ref to {target!r}; "
            "Riverbeam only works on branches that point at a commit themselves",
        )
    return target


def _require_head_on_a_branch(repo: pygit2.Repository) -> None:
    """BEM-330 unless a commit through HEAD moves HEAD itself or one plain branch."""
    target = repo.references["HEAD"].target
    if isinstance(target, pygit2.Oid):
        return  # detached: the commit moves HEAD alone
    if not target.startswith(HEADS):
        raise BeamError(
            "BEM-330",
            f"HEAD points at {target!r}, which is not a branch; a commit would move it",
        )
    branch = repo.references.get(target)
    if branch is not None:  # None: unborn, the commit creates the branch
        _require_direct(branch)


def _pushable(repo: pygit2.Repository) -> str:
    """The current branch, when it has a commit to push (BEM-323 otherwise)."""
    branch = _branch_of(repo)
    if branch is None or repo.head_is_unborn:
        state = "detached" if branch is None else f"unborn (no commit on {branch!r} yet)"
        raise BeamError(
            "BEM-323", f"HEAD is {state}; name the branch to push, or commit on a branch first"
        )
    return branch


def _refuse_existing(repo: pygit2.Repository, branch: str) -> None:
    folded = branch.casefold()
    # A case variant is the same ref on a case-insensitive filesystem.
    clash = next((b for b in repo.branches.local if b.casefold() == folded), None)
    if clash is not None:
        same = "already exists" if clash == branch else f"clashes with {clash!r} (case only)"
        raise BeamError("BEM-326", f"branch {branch!r} {same}; check it out without create")
    # Refs are files: 'docs' and 'docs/x' cannot both exist, in either order.
    nested = next(
        (
            b
            for b in repo.branches.local
            if folded.startswith(b.casefold() + "/") or b.casefold().startswith(folded + "/")
        ),
        None,
    )
    if nested is not None:
        raise BeamError(
            "BEM-326",
            f"branch {branch!r} cannot exist beside branch {nested!r} (one would be a folder"
            " of the other); pick another name",
        )


def _compare_point(sha: str | None, label: str | None) -> ComparePoint | None:
    """The compare point as given, checked for shape (whether it exists is checked on use)."""
    target = compare_target(sha, label)
    return None if target is None else ComparePoint(sha=target[0], label=target[1])
