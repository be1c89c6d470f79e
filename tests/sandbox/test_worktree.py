"""WorkingTree on real repositories: set-up, branches, status, diff, log, add, commit, push."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pygit2.enums import CheckoutStrategy, FileStatus, ResetMode

from bot.config import Identity as ConfiguredIdentity
from bot.core.authors import Author
from bot.core.errors import BeamError, ConfigError, GitError, JailError
from bot.core.identity import Identity, Trailer, compose_message
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.reports import ComparePoint
from sandbox.inside.views import file_statuses
from sandbox.inside.worktree import WorkingTree, _PushWatch
from sandbox.inside.worktree_changes import _SortedPaths, plan_groups, scan
from tests.sandbox.git_kit import PROTECTED, GitEnv, build_git_env, refs_of


@pytest.fixture
def env(tmp_path: Path) -> GitEnv:
    return build_git_env(tmp_path)


def _code(error: pytest.ExceptionInfo[BeamError]) -> str:
    return error.value.code


# -- set-up ------------------------------------------------------------------------------


def test_init_creates_an_empty_repository_on_the_initial_branch(tmp_path: Path) -> None:
    tree = WorkingTree(SandboxRoot(tmp_path))
    tree.init("trunk")
    assert (tmp_path / ".git").is_dir()
    assert tree.current_branch() == "trunk"
    assert tree.head_sha() is None
    assert tree.log().commits == []


def test_init_keeps_an_existing_repository(env: GitEnv) -> None:
    head = env.tree.head_sha()
    env.tree.init("other")
    assert env.tree.head_sha() == head
    assert env.tree.current_branch() == "feature"


def test_init_refuses_an_invalid_initial_branch(tmp_path: Path) -> None:
    with pytest.raises(GitError) as caught:
        WorkingTree(SandboxRoot(tmp_path)).init("bad name")
    assert _code(caught) == "BEM-324"
    assert not (tmp_path / ".git").exists()


def test_a_directory_that_is_not_a_repository_is_bem_329(tmp_path: Path) -> None:
    tree = WorkingTree(SandboxRoot(tmp_path))
    for action in (tree.status, tree.current_branch, lambda: tree.commit("x")):
        with pytest.raises(GitError) as caught:
            action()
        assert _code(caught) == "BEM-329"


def test_a_parent_repository_is_never_used(tmp_path: Path) -> None:
    pygit2.init_repository(str(tmp_path))
    inner = tmp_path / "inner"
    inner.mkdir()
    with pytest.raises(GitError) as caught:
        WorkingTree(SandboxRoot(inner)).status()
    assert _code(caught) == "BEM-329"


@pytest.mark.parametrize(
    "url",
    [
        "",
        " /srv/x.git",
        "relative/path.git",
        "ext::sh -c touch% /tmp/x",
        "ssh://-oProxyCommand=touch/x",
        "fd::17",
        "/srv/x.git\n[core]",
        "ftp://example.com/x.git",
    ],
)
def test_add_origin_refuses_unusable_urls(env: GitEnv, url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        env.tree.add_origin(url)
    assert _code(caught) == "BEM-900"
    assert env.tree.origin == str(env.upstream)


@pytest.mark.parametrize(
    "url", ["/srv/outbox.git", "file:///srv/outbox.git", "https://git.example.com/docs.git"]
)
def test_add_origin_accepts_paths_and_urls(env: GitEnv, url: str) -> None:
    env.tree.add_origin(url)
    assert env.tree.origin == url


def test_repr_names_the_root_and_policy(env: GitEnv) -> None:
    assert "refs/heads/main" in repr(env.tree)
    assert str(env.work) in repr(env.tree)
    assert env.tree.root.path == env.work
    assert env.tree.protected_refs.is_protected("MAIN")
    assert env.tree.identity == Author.of(Identity())


# -- branches ----------------------------------------------------------------------------


def test_checkout_create_branches_at_head_keeping_changes(env: GitEnv) -> None:
    env.write("docs/index.md", "# Changed\n")
    head = env.tree.head_sha()
    assert env.tree.checkout_branch("docs/fix", create=True) == "docs/fix"
    assert env.tree.current_branch() == "docs/fix"
    assert env.tree.head_sha() == head
    assert (env.work / "docs/index.md").read_text() == "# Changed\n"


def test_checkout_switches_files_to_an_existing_branch(env: GitEnv) -> None:
    env.commit_file("docs/new.md", "new\n")
    env.tree.checkout_branch("other", create=True)
    env.tree.checkout_branch("feature")
    env.tree.checkout_branch("topic", create=True)
    (env.work / "docs/new.md").unlink()
    env.tree.add(".")
    env.tree.commit("Remove new")
    env.tree.checkout_branch("feature")
    assert (env.work / "docs/new.md").read_text() == "new\n"


def test_checkout_refuses_to_overwrite_local_changes(env: GitEnv) -> None:
    env.tree.checkout_branch("other", create=True)
    env.commit_file("docs/index.md", "# Other\n")
    env.tree.checkout_branch("feature")
    env.write("docs/index.md", "# Unsaved\n")
    with pytest.raises(GitError) as caught:
        env.tree.checkout_branch("other")
    assert _code(caught) == "BEM-320"
    assert (env.work / "docs/index.md").read_text() == "# Unsaved\n"


def test_checkout_of_a_missing_branch_is_bem_326(env: GitEnv) -> None:
    with pytest.raises(GitError) as caught:
        env.tree.checkout_branch("nope")
    assert _code(caught) == "BEM-326"
    assert "create=True" in caught.value.message


@pytest.mark.parametrize("name", ["feature", "Feature", "FEATURE", "refs/heads/feature"])
def test_creating_an_existing_branch_or_a_case_variant_is_bem_326(env: GitEnv, name: str) -> None:
    with pytest.raises(GitError) as caught:
        env.tree.checkout_branch(name, create=True)
    assert _code(caught) == "BEM-326"
    assert env.tree.current_branch() == "feature"


@pytest.mark.parametrize("name", ["feature/x", "Feature/deeper/x"])
def test_a_branch_nested_under_an_existing_one_is_bem_326(env: GitEnv, name: str) -> None:
    with pytest.raises(GitError) as caught:
        env.tree.checkout_branch(name, create=True)
    assert _code(caught) == "BEM-326"
    assert "beside branch 'feature'" in caught.value.message
    assert env.tree.current_branch() == "feature"


@pytest.mark.parametrize("create", [False, True])
def test_checkout_of_a_protected_branch_is_bem_328(env: GitEnv, create: bool) -> None:
    with pytest.raises(GitError) as caught:
        env.tree.checkout_branch("main", create=create)
    assert _code(caught) == "BEM-328"
    assert env.tree.current_branch() == "feature"


def test_checkout_create_on_an_unborn_head_moves_head(tmp_path: Path) -> None:
    tree = WorkingTree(SandboxRoot(tmp_path))
    tree.init()
    tree.checkout_branch("draft", create=True)
    assert tree.current_branch() == "draft"
    (tmp_path / "a.md").write_text("a\n")
    tree.add("a.md")
    tree.commit("First")
    assert pygit2.Repository(str(tmp_path)).branches.local["draft"] is not None


def test_detached_head_has_no_current_branch(env: GitEnv) -> None:
    repo = env.repo
    repo.set_head(repo.head.target)
    assert env.tree.current_branch() is None
    assert env.tree.status().detached is True


# -- status ------------------------------------------------------------------------------


def test_status_reports_staged_unstaged_and_untracked(env: GitEnv) -> None:
    env.write("docs/index.md", "# Staged\n")
    env.tree.add("docs/index.md")
    env.write("docs/index.md", "# Staged then edited\n")
    env.write("docs/new/page.md", "new\n")
    (env.work / "README.md").unlink()
    report = env.tree.status()
    assert report.branch == "feature"
    assert report.head == env.tree.head_sha()
    assert not report.clean
    assert [f.as_json() for f in report.files] == [
        {"path": "README.md", "staged": None, "unstaged": "deleted"},
        {"path": "docs/index.md", "staged": "modified", "unstaged": "modified"},
        {"path": "docs/new/page.md", "staged": None, "unstaged": "untracked"},
    ]


def test_status_skips_ignored_files(env: GitEnv) -> None:
    env.commit_file(".gitignore", "build/\n")
    env.write("build/out.html", "x")
    assert env.tree.status().clean


def test_status_caps_the_file_list(env: GitEnv) -> None:
    for number in range(12):
        env.write(f"many/{number:02d}.md", "x\n")
    report = env.tree.status(max_files=5)
    assert report.truncated
    assert report.total_files == 12
    assert len(report.files) == 5
    assert report.note is not None and "git_diff with path" in report.note


def test_status_on_an_unborn_head(tmp_path: Path) -> None:
    tree = WorkingTree(SandboxRoot(tmp_path))
    tree.init()
    (tmp_path / "a.md").write_text("a\n")
    report = tree.status()
    assert (report.branch, report.head, report.detached) == ("main", None, False)
    assert [f.unstaged for f in report.files] == ["untracked"]


# -- diff --------------------------------------------------------------------------------


def test_diff_shows_staged_and_unstaged_together_against_head(env: GitEnv) -> None:
    env.write("docs/index.md", "# Index\n\nWelcome.\nStaged line.\n")
    env.tree.add("docs/index.md")
    env.write("docs/index.md", "# Index\n\nWelcome.\nStaged line.\nUnstaged line.\n")
    report = env.tree.diff()
    assert report.base == env.tree.head_sha()
    assert [f.as_json() for f in report.files] == [
        {
            "path": "docs/index.md",
            "old_path": None,
            "status": "modified",
            "binary": False,
            "additions": 2,
            "deletions": 0,
        }
    ]
    assert "+Staged line.\n+Unstaged line.\n" in report.patch
    assert report.patch.startswith("diff --git a/docs/index.md b/docs/index.md\n")
    assert not report.truncated


def test_diff_includes_new_files_with_content_and_deletions(env: GitEnv) -> None:
    env.write("docs/new.md", "brand new\n")
    (env.work / "README.md").unlink()
    report = env.tree.diff()
    assert [(f.path, f.status) for f in report.files] == [
        ("README.md", "deleted"),
        ("docs/new.md", "untracked"),
    ]
    assert "+brand new\n" in report.patch
    assert "-# Docs\n" in report.patch


def test_diff_marks_binary_files_without_content(env: GitEnv) -> None:
    env.write("img/logo.png", b"\x89PNG\x00\x01\x02" * 10)
    (file,) = env.tree.diff().files
    assert file.binary
    assert "Binary files" in env.tree.diff().patch


def test_diff_treats_files_over_the_read_cap_as_binary(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    tree = WorkingTree(SandboxRoot(tmp_path / "work", max_read_bytes=1000))
    tree.init()
    (tmp_path / "work/big.md").write_text("line\n" * 1000)
    (file,) = tree.diff().files
    assert file.binary


def test_diff_narrows_to_a_path(env: GitEnv) -> None:
    env.write("docs/index.md", "changed\n")
    env.write("README.md", "changed\n")
    report = env.tree.diff("docs")
    assert report.path == "docs"
    assert [f.path for f in report.files] == ["docs/index.md"]
    assert "README" not in report.patch
    assert env.tree.diff("nothing/here").files == []


def test_diff_path_goes_through_the_jail(env: GitEnv) -> None:
    for path, code in (("../outside", "BEM-302"), ("/etc", "BEM-301"), (".git", "BEM-304")):
        with pytest.raises(JailError) as caught:
            env.tree.diff(path)
        assert _code(caught) == code


def test_diff_cuts_the_patch_and_says_how_to_narrow(env: GitEnv) -> None:
    for number in range(3):
        env.write(f"docs/p{number}.md", "".join(f"line {i}\n" for i in range(300)))
    report = env.tree.diff(max_chars=2_000, max_files=2)
    assert report.truncated
    assert report.total_files == 3
    assert len(report.files) == 2
    assert len(report.patch) < 2_100
    assert "patch cut at 2000 characters" in report.patch
    assert report.files[0].additions == 300
    assert report.files[1].additions is None
    assert report.note is not None and "path=" in report.note


def test_diff_with_no_changes(env: GitEnv) -> None:
    report = env.tree.diff()
    assert (report.files, report.patch, report.truncated) == ([], "", False)
    assert report.note == "no changes against HEAD"


def test_diff_on_an_unborn_head_shows_everything_as_new(tmp_path: Path) -> None:
    tree = WorkingTree(SandboxRoot(tmp_path))
    tree.init()
    (tmp_path / "a.md").write_text("a\n")
    tree.add("a.md")
    report = tree.diff()
    assert report.base is None
    assert [(f.path, f.status) for f in report.files] == [("a.md", "added")]


# -- log ---------------------------------------------------------------------------------


def test_log_lists_newest_first_with_a_limit(env: GitEnv) -> None:
    shas = [env.commit_file("docs/index.md", f"v{n}\n", f"Edit {n}\n\nBody {n}.") for n in range(3)]
    report = env.tree.log(2)
    assert report.branch == "feature"
    assert [c.sha for c in report.commits] == shas[::-1][:2]
    assert report.more
    first = report.commits[0]
    assert (first.subject, first.body) == ("Edit 2", "Body 2.")
    assert first.author == "Riverbeam <riverbeam@localhost>"
    assert first.date.endswith("+00:00")
    assert not env.tree.log(10).more


def test_log_caps_long_bodies(env: GitEnv) -> None:
    env.commit_file("a.md", "a\n", "Subject\n\n" + "x" * 5_000)
    body = env.tree.log(1).commits[0].body
    assert len(body) < 2_100
    assert body.endswith("[...]")


# -- a compare point ---------------------------------------------------------------------


def _since(env: GitEnv, sha: str, label: str | None = "main") -> WorkingTree:
    """A second view of the env's repository, comparing with ``sha``."""
    return WorkingTree(SandboxRoot(env.work), PROTECTED, compare_to=sha, compare_label=label)


def _branch_with_commits(env: GitEnv) -> tuple[str, list[str]]:
    """Where 'feature' starts (main's tip), and three commits made on it since."""
    start = env.tree.head_sha()
    assert start is not None
    commits = [
        env.commit_file("docs/index.md", "# Index\n\nWelcome, readers.\n", "Greet readers"),
        env.commit_file("docs/install.md", "# Install\n\nRun it.\n", "Add the install page"),
    ]
    (env.work / "README.md").unlink()
    env.tree.add("README.md")
    commits.append(env.tree.commit("Drop the README").commit)
    return start, commits


def test_diff_from_a_compare_point_shows_commits_since_and_uncommitted_changes(
    env: GitEnv,
) -> None:
    start, _ = _branch_with_commits(env)
    env.write("docs/install.md", "# Install\n\nRun it.\nThen check it.\n")  # unstaged
    env.write("docs/staged.md", "staged\n")
    env.tree.add("docs/staged.md")
    env.write("notes.md", "untracked\n")
    report = _since(env, start).diff()
    assert report.base == start
    assert report.against == ComparePoint(sha=start, label="main")
    assert [(f.path, f.status, f.additions, f.deletions) for f in report.files] == [
        ("README.md", "deleted", 0, 1),
        ("docs/index.md", "modified", 1, 1),
        ("docs/install.md", "added", 4, 0),  # committed since, then edited
        ("docs/staged.md", "added", 1, 0),
        ("notes.md", "untracked", 1, 0),
    ]
    for line in ("-# Docs", "+Welcome, readers.", "+Run it.", "+Then check it.", "+untracked"):
        assert f"\n{line}\n" in report.patch, line
    assert report.note is None
    # The plain view is unchanged: HEAD against the files, and no compare point.
    plain = env.tree.diff()
    assert (plain.base, plain.against) == (env.tree.head_sha(), None)
    assert [f.path for f in plain.files] == ["docs/install.md", "docs/staged.md", "notes.md"]


def test_diff_from_a_compare_point_at_head_is_the_plain_diff(env: GitEnv) -> None:
    env.write("docs/index.md", "changed\n")
    env.write("docs/new.md", "new\n")
    head = env.tree.head_sha()
    assert head is not None
    compared = _since(env, head, None).diff()
    assert compared.against == ComparePoint(sha=head, label=head[:12])
    assert dataclasses.replace(compared, against=None) == env.tree.diff()
    # What the tool returns: every report nested in it an object too, nothing left out.
    assert compared.as_json() == dataclasses.asdict(compared)
    assert compared.as_json()["against"] == {"sha": head, "label": head[:12]}


def test_a_change_undone_since_the_compare_point_is_no_change(env: GitEnv) -> None:
    start, _ = _branch_with_commits(env)
    repo = env.repo
    # The files and the index go back to the start; HEAD keeps the three commits.
    repo.checkout_tree(repo[start].peel(pygit2.Tree), strategy=CheckoutStrategy.FORCE)
    since = _since(env, start)
    report = since.diff()
    assert (report.files, report.patch) == ([], "")
    assert report.note == f"no changes since main ({start[:12]})"
    assert since.diff("docs").note == f"no changes since main ({start[:12]}) under 'docs'"
    assert not since.status().clean  # status still describes HEAD to the files


def test_diff_from_a_compare_point_narrows_to_a_path(env: GitEnv) -> None:
    start, _ = _branch_with_commits(env)
    report = _since(env, start).diff("docs/install.md")
    assert [f.path for f in report.files] == ["docs/install.md"]
    assert "README" not in report.patch and "Welcome" not in report.patch


def test_log_from_a_compare_point_lists_only_the_commits_since(env: GitEnv) -> None:
    start, commits = _branch_with_commits(env)
    since = _since(env, start)
    report = since.log()
    assert [c.sha for c in report.commits] == commits[::-1]
    assert report.since == ComparePoint(sha=start, label="main")
    assert (report.branch, report.more) == ("feature", False)
    short = since.log(2)
    assert [c.sha for c in short.commits] == commits[:0:-1]
    assert short.more
    assert env.tree.log().since is None
    assert len(env.tree.log().commits) == 4  # the plain log still reaches the first commit


def test_log_from_a_compare_point_after_a_merge_follows_git(env: GitEnv) -> None:
    # git log start..HEAD: commits HEAD reaches and start does not, merged ones included.
    start, commits = _branch_with_commits(env)
    repo = env.repo
    author = pygit2.Signature("Upstream", "upstream@example.com", 1_900_000_000, 0)
    old = repo[start].peel(pygit2.Commit)
    on_main = repo.create_commit(None, author, author, "Main moved", old.tree_id, [old.id])
    head = repo.head.peel(pygit2.Commit)
    later = pygit2.Signature("Upstream", "upstream@example.com", 1_900_000_100, 0)
    merge = repo.create_commit("HEAD", later, later, "Merge main", head.tree_id, [head.id, on_main])
    report = _since(env, start).log()
    assert [c.sha for c in report.commits] == [str(merge), str(on_main), *commits[::-1]]
    assert [c.sha for c in _since(env, str(on_main)).log().commits] == [
        str(merge),
        *commits[::-1],
    ]


def _git_log_of(env: GitEnv, path: str) -> list[str]:
    shown = subprocess.run(
        ["git", "-C", str(env.work), "log", "--format=%H", "--", path],
        check=True,
        capture_output=True,
        text=True,
    )
    return shown.stdout.split()


def test_log_of_a_path_lists_the_commits_git_log_lists_for_it(env: GitEnv) -> None:
    # Edits, an unrelated commit, a mode change, a deletion and a merge that takes one
    # side's version of the page unchanged: the commits are git's, in git's order.
    env.commit_file("docs/page.md", "one\n", "Add the page")
    env.commit_file("docs/other.md", "other\n", "Another page")
    env.commit_file("docs/page.md", "two\n", "Edit the page")
    (env.work / "docs/page.md").chmod(0o755)
    env.commit_file("docs/page.md", "two\n", "Make it executable")
    repo = env.repo
    head = repo.head.peel(pygit2.Commit)
    author = pygit2.Signature("Upstream", "upstream@example.com", 1_900_000_000, 0)
    side = repo.create_commit(None, author, author, "Side", head.tree_id, [head.id])
    later = pygit2.Signature("Upstream", "upstream@example.com", 1_900_000_100, 0)
    repo.create_commit("HEAD", later, later, "Merge side", head.tree_id, [head.id, side])
    (env.work / "docs/page.md").unlink()
    env.commit_file("README.md", "moved on\n", "Remove the page")
    subprocess.run(["git", "-C", str(env.work), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(env.work), "-c", "user.name=R", "-c", "user.email=r@x",
         "commit", "-qm", "Delete the page"],
        check=True,
    )  # fmt: skip

    for path in ("docs/page.md", "docs", "README.md", "docs/never.md"):
        expected = _git_log_of(env, path)
        report = env.tree.log(50, path)
        assert [commit.sha for commit in report.commits] == expected, path
        assert report.path == path and report.more is False
    assert len(_git_log_of(env, "docs/page.md")) == 4  # added, edited, mode, deleted
    assert env.tree.log(2, "docs").more is True
    assert env.tree.log(5).path is None


@pytest.mark.parametrize(("path", "code"), [("../x", "BEM-302"), (".git/config", "BEM-304")])
def test_log_of_a_path_the_jail_refuses_is_refused(env: GitEnv, path: str, code: str) -> None:
    with pytest.raises(JailError) as caught:
        env.tree.log(5, path)
    assert _code(caught) == code


def test_a_compare_point_is_a_lowercased_full_commit_id(env: GitEnv) -> None:
    head = env.tree.head_sha()
    assert head is not None
    assert _since(env, head.upper()).compare_point() == ComparePoint(sha=head, label="main")
    assert WorkingTree(SandboxRoot(env.work)).compare_point() is None


@pytest.mark.parametrize("sha", ["", "abc1234", "g" * 40, "a" * 39, "a" * 41, " " + "a" * 40])
def test_a_compare_point_that_is_not_a_commit_id_is_refused(env: GitEnv, sha: str) -> None:
    with pytest.raises(GitError) as caught:
        _since(env, sha)
    assert _code(caught) == "BEM-320"
    assert "40-character" in caught.value.message


@pytest.mark.parametrize("label", ["", " ", " main", "main\n", "a\x1bb", "x" * 201])
def test_a_compare_label_must_be_printable_text(env: GitEnv, label: str) -> None:
    head = env.tree.head_sha()
    assert head is not None
    with pytest.raises(GitError) as caught:
        _since(env, head, label)
    assert _code(caught) == "BEM-320"


def test_a_compare_label_needs_a_compare_point(env: GitEnv) -> None:
    with pytest.raises(GitError) as caught:
        WorkingTree(SandboxRoot(env.work), compare_label="main")
    assert _code(caught) == "BEM-320"


def test_a_compare_point_the_repository_lacks_is_refused_on_use(env: GitEnv) -> None:
    repo = env.repo
    head = repo.head.peel(pygit2.Commit)
    not_commits = {"missing": "0" * 40, "a tree": str(head.tree_id)}
    not_commits["a blob"] = str(head.tree["README.md"].id)
    for what, sha in not_commits.items():
        since = _since(env, sha)
        for action in (since.compare_point, since.diff, since.log):
            with pytest.raises(GitError) as caught:
                action()
            assert _code(caught) == "BEM-320", what
            assert sha in caught.value.message and "not a commit" in caught.value.message
        assert since.status().clean  # status needs no compare point


# -- add ---------------------------------------------------------------------------------


def test_add_a_file_stages_only_that_file(env: GitEnv) -> None:
    env.write("docs/index.md", "changed\n")
    env.write("README.md", "changed\n")
    report = env.tree.add("docs/index.md")
    assert [(f.path, f.staged) for f in report.staged] == [("docs/index.md", "modified")]
    assert report.path == "docs/index.md"


def test_add_dot_stages_everything_including_deletions(env: GitEnv) -> None:
    env.write("docs/new.md", "new\n")
    (env.work / "README.md").unlink()
    report = env.tree.add(".")
    assert [(f.path, f.staged) for f in report.staged] == [
        ("README.md", "deleted"),
        ("docs/new.md", "added"),
    ]
    assert env.tree.add("").total_staged == 2


def test_add_a_directory_stages_its_changes_and_deletions(env: GitEnv) -> None:
    env.write("docs/a/new.md", "new\n")
    (env.work / "docs/index.md").unlink()
    env.write("README.md", "outside docs\n")
    report = env.tree.add("docs")
    assert [(f.path, f.staged) for f in report.staged] == [
        ("docs/a/new.md", "added"),
        ("docs/index.md", "deleted"),
    ]


def test_add_records_what_libgit2_itself_would_stage(env: GitEnv) -> None:
    # Content now comes through the jail, so filters, modes and links must come out exactly
    # as libgit2's own staging by path makes them; and the next scan must not see a change.
    env.commit_file(".gitattributes", "*.txt text eol=crlf\n*.id ident\n*.auto text=auto\n")
    files = {
        "a.txt": b"one\r\ntwo\r\n",
        "b.id": b"$Id: 123 $\nx\n",
        "c.auto": b"x\r\ny\r\n",
        "run.sh": b"#!/bin/sh\n",
        "blob.bin": b"\x00\x01\r\n" * 50,
    }
    for name, data in files.items():
        env.write(name, data)
    (env.work / "run.sh").chmod(0o755)
    (env.work / "link").symlink_to("a.txt")
    env.tree.add(".")
    ours = {entry.path: (entry.id, entry.mode) for entry in env.repo.index}
    index = env.repo.index
    for name in [*files, "link"]:
        index.add(name)
    assert ours == {entry.path: (entry.id, entry.mode) for entry in index}
    assert all(f.unstaged is None for f in env.tree.status().files)


def test_add_of_a_file_over_the_read_cap_is_bem_305(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    tree = WorkingTree(SandboxRoot(tmp_path / "work", max_read_bytes=1000))
    tree.init()
    (tmp_path / "work/big.md").write_text("line\n" * 1000)
    with pytest.raises(JailError) as caught:
        tree.add(".")
    assert _code(caught) == "BEM-305"
    assert "big.md" in caught.value.message


def test_add_of_a_deleted_tracked_file_stages_the_deletion(env: GitEnv) -> None:
    (env.work / "README.md").unlink()
    assert [(f.path, f.staged) for f in env.tree.add("README.md").staged] == [
        ("README.md", "deleted")
    ]


def test_add_of_a_path_that_matches_nothing_is_bem_320(env: GitEnv) -> None:
    with pytest.raises(GitError) as caught:
        env.tree.add("docs/missing.md")
    assert _code(caught) == "BEM-320"
    assert "did not match" in caught.value.message


def test_add_of_an_unchanged_file_stages_nothing(env: GitEnv) -> None:
    report = env.tree.add("README.md")
    assert report.staged == []
    assert report.note == "nothing is staged: the index matches HEAD"


def test_add_of_an_ignored_file_is_bem_320(env: GitEnv) -> None:
    env.commit_file(".gitignore", "*.log\n")
    env.write("debug.log", "x")
    with pytest.raises(GitError) as caught:
        env.tree.add("debug.log")
    assert "ignored" in caught.value.message
    assert env.tree.add(".").staged == []


def test_add_does_not_follow_a_symlinked_directory(env: GitEnv) -> None:
    (env.work / "linked").symlink_to(env.outside)
    report = env.tree.add(".")
    assert [(f.path, f.staged) for f in report.staged] == [("linked", "added")]
    blob = env.repo[env.repo.index["linked"].id]
    assert isinstance(blob, pygit2.Blob)
    assert blob.data == str(env.outside).encode()
    with pytest.raises(JailError) as caught:
        env.tree.add("linked/secret.txt")
    assert _code(caught) == "BEM-303"


def test_add_beyond_an_in_tree_symlink_is_refused(env: GitEnv) -> None:
    (env.work / "alias").symlink_to("docs")
    env.tree.add(".")
    env.tree.commit("Add alias")
    with pytest.raises(GitError) as caught:
        env.tree.add("alias/index.md")
    assert "beyond a symbolic link" in caught.value.message
    assert "'docs/index.md'" in caught.value.message


@pytest.mark.parametrize(
    ("path", "code"), [("../x", "BEM-302"), ("/etc/passwd", "BEM-301"), (".git/config", "BEM-304")]
)
def test_add_paths_go_through_the_jail(env: GitEnv, path: str, code: str) -> None:
    with pytest.raises(JailError) as caught:
        env.tree.add(path)
    assert _code(caught) == code


def test_add_caps_its_report(env: GitEnv) -> None:
    for number in range(6):
        env.write(f"n/{number}.md", "x\n")
    report = env.tree.add(".", max_files=4)
    assert (report.truncated, report.total_staged, len(report.staged)) == (True, 6, 4)


# -- commit ------------------------------------------------------------------------------


def test_commit_records_the_bot_identity_and_returns_the_id(env: GitEnv) -> None:
    env.write("docs/index.md", "changed\n")
    env.tree.add(".")
    parent = env.tree.head_sha()
    result = env.tree.commit("Fix the index page\n\nIt said the wrong thing.  \n")
    assert result.branch == "feature"
    assert result.parents == [parent]
    assert result.subject == "Fix the index page"
    commit = env.repo[result.commit]
    assert isinstance(commit, pygit2.Commit)
    assert (commit.author.name, commit.author.email) == ("Riverbeam", "riverbeam@localhost")
    assert (commit.committer.name, commit.committer.email) == ("Riverbeam", "riverbeam@localhost")
    assert commit.message == "Fix the index page\n\nIt said the wrong thing.\n"
    assert env.tree.head_sha() == result.commit
    assert env.tree.status().clean


def test_commit_credits_the_requester_with_trailers(tmp_path: Path) -> None:
    requester = Identity(name="Ada Lovelace", email="ada@example.com")
    bot = Identity(name="Docs Bot", email="bot@example.com")
    env = build_git_env(tmp_path, identity=bot)
    tree = WorkingTree(
        SandboxRoot(env.work), identity=bot, trailers=[Trailer.requested_by(requester)]
    )
    env.write("a.md", "a\n")
    tree.add("a.md")
    result = tree.commit("Add a", trailers=[Trailer.co_authored_by(requester)])
    commit = env.repo[result.commit]
    assert isinstance(commit, pygit2.Commit)
    assert commit.author.email == "bot@example.com"
    assert commit.message == (
        "Add a\n\n"
        "Requested-by: Ada Lovelace <ada@example.com>\n"
        "Co-authored-by: Ada Lovelace <ada@example.com>\n"
    )


def test_trailers_join_a_trailer_block_the_message_already_has() -> None:
    credit = Trailer(key="Requested-by", value="Ada <ada@example.com>")
    assert compose_message("Subject\n\nSigned-off-by: B <b@x>", [credit]) == (
        "Subject\n\nSigned-off-by: B <b@x>\nRequested-by: Ada <ada@example.com>\n"
    )
    assert (
        compose_message("Subject", [credit]) == "Subject\n\nRequested-by: Ada <ada@example.com>\n"
    )
    assert compose_message("Subject: colon in a subject", []) == "Subject: colon in a subject\n"


def test_any_name_and_email_pair_is_an_identity(tmp_path: Path) -> None:
    configured = ConfiguredIdentity(name="Docs Bot", email="bot@example.com")
    tree = WorkingTree(SandboxRoot(tmp_path), identity=configured)
    assert tree.identity == Author("Docs Bot", "bot@example.com")
    assert str(Trailer.requested_by(configured)) == "Requested-by: Docs Bot <bot@example.com>"
    with pytest.raises(ValueError):
        WorkingTree(SandboxRoot(tmp_path), identity=ConfiguredIdentity(name="a\nb"))


def test_a_recorded_requester_is_credited_on_one_line_and_survives_the_command_line() -> None:
    """A job records its requester as free text (a login, a token name): the trailer keeps
    it on one line, and the tool server's ``--trailer`` argument reads it back the same."""
    for recorded, shown in (
        ("writer@example.com", "writer@example.com"),
        ("Ada  Lovelace\nInjected: yes", "Ada Lovelace Injected: yes"),
        ("\t", "anonymous"),
    ):
        trailer = Trailer.requested_by(recorded)
        assert str(trailer) == f"Requested-by: {shown}"
        assert Trailer.parse(str(trailer)) == trailer


@pytest.mark.parametrize(
    ("field", "value"), [("name", "Eve <e@x>"), ("email", "a\nb"), ("name", ""), ("name", " x")]
)
def test_identities_git_cannot_store_are_refused(field: str, value: str) -> None:
    with pytest.raises(ValueError):
        Identity(**{field: value})


@pytest.mark.parametrize(("key", "value"), [("Bad Key", "x"), ("Ok", "two\nlines"), ("Ok", "")])
def test_malformed_trailers_are_refused(key: str, value: str) -> None:
    with pytest.raises(ValueError):
        Trailer(key=key, value=value)


def test_commit_with_nothing_staged_is_bem_321(env: GitEnv) -> None:
    env.write("docs/index.md", "unstaged only\n")
    with pytest.raises(GitError) as caught:
        env.tree.commit("Nothing")
    assert _code(caught) == "BEM-321"
    assert "git_add" in caught.value.message


def test_commit_on_an_unborn_head_needs_something_staged(tmp_path: Path) -> None:
    tree = WorkingTree(SandboxRoot(tmp_path))
    tree.init()
    with pytest.raises(GitError) as caught:
        tree.commit("Empty")
    assert _code(caught) == "BEM-321"
    (tmp_path / "a.md").write_text("a\n")
    tree.add(".")
    assert tree.commit("First").parents == []


@pytest.mark.parametrize("message", ["", "  \n\t", "x" * 70_000])
def test_commit_refuses_empty_or_huge_messages(env: GitEnv, message: str) -> None:
    env.write("a.md", "a\n")
    env.tree.add(".")
    with pytest.raises(GitError) as caught:
        env.tree.commit(message)
    assert _code(caught) == "BEM-320"


# -- push --------------------------------------------------------------------------------


def test_push_sends_the_current_branch_and_reports_it(env: GitEnv) -> None:
    sha = env.commit_file("docs/index.md", "pushed\n")
    before = refs_of(env.upstream)
    result = env.tree.push()
    assert result.as_json() == {"remote": "origin", "ref": "refs/heads/feature", "sha": sha}
    assert refs_of(env.upstream) == {**before, "refs/heads/feature": sha}


def test_push_of_a_named_branch(env: GitEnv) -> None:
    env.tree.checkout_branch("other", create=True)
    sha = env.commit_file("a.md", "a\n")
    env.tree.checkout_branch("feature")
    assert env.tree.push("other").sha == sha
    assert refs_of(env.upstream)["refs/heads/other"] == sha
    assert "refs/heads/feature" not in refs_of(env.upstream)


def test_push_again_is_a_no_op(env: GitEnv) -> None:
    env.tree.push()
    assert env.tree.push().ref == "refs/heads/feature"


def test_push_without_origin_is_bem_322(tmp_path: Path) -> None:
    env = build_git_env(tmp_path)
    tree = WorkingTree(SandboxRoot(env.work))
    with pytest.raises(GitError) as caught:
        tree.push()
    assert _code(caught) == "BEM-322"


def test_push_of_a_detached_head_is_bem_323(env: GitEnv) -> None:
    repo = env.repo
    repo.set_head(repo.head.target)
    with pytest.raises(GitError) as caught:
        env.tree.push()
    assert _code(caught) == "BEM-323"
    assert "detached" in caught.value.message


def test_push_of_an_unborn_branch_is_bem_323(env: GitEnv) -> None:
    env.repo.set_head("refs/heads/unborn")
    with pytest.raises(GitError) as caught:
        env.tree.push()
    assert _code(caught) == "BEM-323"
    assert "unborn" in caught.value.message


def test_push_of_a_missing_local_branch_is_bem_326(env: GitEnv) -> None:
    with pytest.raises(GitError) as caught:
        env.tree.push("never-made")
    assert _code(caught) == "BEM-326"


def _rewind_local_branch(env: GitEnv) -> None:
    # The local branch drops the pushed commit: the clone has it, the branch does not.
    repo = env.repo
    head = repo.head.peel(pygit2.Commit)
    repo.references["refs/heads/feature"].set_target(head.parents[0].id)


def _commit_upstream_only(env: GitEnv) -> None:
    # Someone else pushed to the branch: the clone never fetched their commit, so libgit2
    # refuses with "contains commits that are not present locally", not "non-fastforward".
    upstream = pygit2.Repository(str(env.upstream))
    theirs = upstream.references["refs/heads/feature"].peel(pygit2.Commit)
    signature = pygit2.Signature("Someone", "someone@example.com")
    upstream.create_commit(
        "refs/heads/feature", signature, signature, "Theirs", theirs.tree_id, [theirs.id]
    )


@pytest.mark.parametrize(
    ("diverge", "state"),
    [(_rewind_local_branch, "does not have"), (_commit_upstream_only, "never seen")],
    ids=["diverged", "commits-the-clone-lacks"],
)
def test_push_that_is_not_a_fast_forward_is_bem_327(
    env: GitEnv, diverge: Callable[[GitEnv], None], state: str
) -> None:
    env.commit_file("a.md", "one\n")
    env.tree.push()
    diverge(env)
    env.commit_file("a.md", "two\n")
    before = refs_of(env.upstream)
    with pytest.raises(GitError) as caught:
        env.tree.push()
    assert _code(caught) == "BEM-327"
    assert "never force-pushes" in caught.value.message and state in caught.value.message
    assert refs_of(env.upstream) == before


def test_a_rejection_reported_by_the_remote_is_bem_327(env: GitEnv) -> None:
    # The local transport reports a ref it cannot lock as a per-ref rejection, just as a
    # server reports a hook's refusal; no exception is raised for it.
    (env.upstream / "refs/heads/feature.lock").write_text("held")
    before = refs_of(env.upstream)
    with pytest.raises(GitError) as caught:
        env.tree.push()
    assert _code(caught) == "BEM-327"
    assert "refs/heads/feature" in caught.value.message
    assert refs_of(env.upstream) == before


def test_push_to_an_unreachable_origin_is_bem_320(env: GitEnv) -> None:
    env.tree.add_origin(str(env.base / "missing.git"))
    with pytest.raises(GitError) as caught:
        env.tree.push()
    assert _code(caught) == "BEM-320"
    assert caught.value.message.startswith("pushing 'feature' to origin failed: ")


# -- the parallel scan -------------------------------------------------------------------

SCAN_PATHS = [
    "README.md",
    "top.md",
    "a/x.md",
    "a/b/y.md",
    "a/b/c/z.md",
    "a/b/c/w.md",
    "a/new/q.md",
    "d/e.md",
    "d/f/g.md",
    "fresh/dir/n.md",
    "a-b.md",
    "a.md",
]
SCAN_DIRS = ["a", "a/b", "a/b/c", "d", "d/f", "fresh"]
_STAGED = {
    FileStatus.INDEX_NEW: "added",
    FileStatus.INDEX_MODIFIED: "modified",
    FileStatus.INDEX_DELETED: "deleted",
    FileStatus.INDEX_TYPECHANGE: "typechange",
}
_UNSTAGED = {
    FileStatus.WT_NEW: "untracked",
    FileStatus.WT_MODIFIED: "modified",
    FileStatus.WT_DELETED: "deleted",
    FileStatus.WT_TYPECHANGE: "typechange",
}
edits = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["write", "delete", "stage"]), st.sampled_from(SCAN_PATHS)),
        st.tuples(st.sampled_from(["rmtree", "stage"]), st.sampled_from(SCAN_DIRS)),
    ),
    max_size=10,
)


@pytest.fixture(scope="module")
def scan_env(tmp_path_factory: pytest.TempPathFactory) -> GitEnv:
    env = build_git_env(tmp_path_factory.mktemp("scan"), workers=3)
    for number, path in enumerate(SCAN_PATHS[:9]):
        env.write(path, f"{number}\n")
    for number in range(30):
        env.write(f"a/b/many/{number:02d}.md", "x\n")
    env.tree.add(".")
    env.tree.commit("Scan fixture")
    return env


def _apply(env: GitEnv, action: str, path: str) -> None:
    target = env.work / path
    try:
        if action == "write":
            env.write(path, f"edited {path}\n")
        elif action == "delete" and target.is_file():
            target.unlink()
        elif action == "rmtree" and target.is_dir():
            shutil.rmtree(target)
        elif action == "stage":
            env.tree.add(path)
    except (OSError, BeamError):
        return  # a parent is now a file, or nothing to stage: the edit is skipped


def _libgit2_status(repo: pygit2.Repository) -> list[tuple[str, str | None, str | None]]:
    rows = []
    for path, flags in sorted(repo.status().items()):
        staged = next((word for flag, word in _STAGED.items() if flags & flag), None)
        unstaged = next((word for flag, word in _UNSTAGED.items() if flags & flag), None)
        rows.append((path, staged, unstaged))
    return rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits)
def test_the_parallel_scan_matches_libgit2_status(
    scan_env: GitEnv, edits: list[tuple[str, str]]
) -> None:
    env = scan_env
    repo = env.repo
    repo.reset(repo.head.target, ResetMode.HARD)
    repo.checkout(repo.head, strategy=CheckoutStrategy.FORCE | CheckoutStrategy.REMOVE_UNTRACKED)
    for action, path in edits:
        _apply(env, action, path)
    repos = [pygit2.Repository(str(env.work / ".git")) for _ in range(3)]
    changes = scan(repos, repos[0].head.peel(pygit2.Tree), min_parallel=0)
    ours = [(f.path, f.staged, f.unstaged) for f in file_statuses(changes)]
    assert ours == _libgit2_status(repos[0])
    assert ours == [(f.path, f.staged, f.unstaged) for f in env.tree.status().files]


def test_planning_splits_a_tree_into_balanced_covering_groups(scan_env: GitEnv) -> None:
    repo = scan_env.repo
    groups = plan_groups(_SortedPaths(repo.index), os.fsencode(repo.workdir), 3)
    assert len(groups) == 3
    units = [unit for group in groups for unit in group]
    assert len(units) == len(set(units))
    for path in [entry.path.encode() for entry in repo.index]:
        assert any(path == unit or path.startswith(unit + b"/") for unit in units), path


def test_the_negotiation_check_stops_an_unexpected_update_before_it_is_sent(env: GitEnv) -> None:
    # The second line of defence, driven through libgit2's real callback: a watch expecting
    # another commit aborts the push, and the upstream never sees it.
    sha = env.commit_file("a.md", "a\n")
    other = env.repo.head.peel(pygit2.Commit).parents[0].id
    before = refs_of(env.upstream)
    remote = env.repo.remotes.create_anonymous(str(env.upstream))
    with pytest.raises(GitError) as caught:
        remote.push(
            ["refs/heads/feature:refs/heads/feature"],
            callbacks=_PushWatch("refs/heads/feature", other),
        )
    assert _code(caught) == "BEM-325"
    assert sha in caught.value.message
    assert refs_of(env.upstream) == before
