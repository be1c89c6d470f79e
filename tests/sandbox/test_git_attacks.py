"""The git attack catalogue: pushes and checkouts aimed at protected refs or smuggling options,
hostile repository configuration and attributes, and metadata that redirects git elsewhere.

Every refused attack asserts its exact BEM code, that the bare upstream's refs are exactly
as before, and that nothing outside the sandbox root changed (upstream, decoy and outside
files, byte for byte). Every hostile-config attack runs status, diff, add, commit, push and
a checkout that rewrites files, then asserts that no planted script ran (its marker file is
absent), that the push reached the real upstream and not the decoy, and that the working
tree was not moved. ``test_the_planted_scripts_are_live`` shows with the git CLI that the
same plants do fire when something honours them.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pygit2.enums import ConfigLevel

from bot.core import safe_walk
from bot.core.errors import BeamError, GitError
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.repo_guard import CANONICAL_CONFIG
from sandbox.inside.sandbox_tools import call_tool
from sandbox.inside.worktree import WorkingTree
from tests.sandbox.git_kit import GitEnv, build_git_env, refs_of, snapshot

# -- pushes and checkouts aimed at protected refs, or carrying options --------------------

PUSH_ATTACKS = [
    ("main", "BEM-328"),
    ("MAIN", "BEM-328"),
    ("Main", "BEM-328"),
    ("mAIN", "BEM-328"),
    ("master", "BEM-328"),
    ("refs/heads/main", "BEM-328"),
    ("refs/heads/Main", "BEM-328"),
    ("release/1.0", "BEM-328"),
    ("Release/1.0", "BEM-328"),
    ("RELEASE/1.0", "BEM-328"),
    ("release/1.0/hotfix", "BEM-328"),
    ("release/2.0", "BEM-328"),
    ("+main", "BEM-325"),
    ("+feature", "BEM-325"),
    ("main:main", "BEM-325"),
    ("feature:main", "BEM-325"),
    ("feature:refs/heads/main", "BEM-325"),
    (":main", "BEM-325"),
    (":feature", "BEM-325"),
    ("-f", "BEM-325"),
    ("--force", "BEM-325"),
    ("--force-with-lease", "BEM-325"),
    ("--all", "BEM-325"),
    ("--mirror", "BEM-325"),
    ("--tags", "BEM-325"),
    ("--delete", "BEM-325"),
    ("--receive-pack=touch /tmp/x", "BEM-325"),
    ("-o", "BEM-325"),
    ("refs/tags/v1", "BEM-325"),
    ("refs/remotes/origin/main", "BEM-325"),
    ("Refs/Heads/main", "BEM-325"),
    ("refs/heads/*:refs/heads/*", "BEM-325"),
    ("*", "BEM-325"),
    ("HEAD", "BEM-325"),
    ("HEAD:main", "BEM-325"),
    ("HEAD:refs/heads/main", "BEM-325"),
    ("FETCH_HEAD", "BEM-325"),
    ("main~1", "BEM-325"),
    ("main^", "BEM-325"),
    ("main^{commit}", "BEM-325"),
    ("@", "BEM-325"),
    ("@{-1}", "BEM-325"),
    ("main@{upstream}", "BEM-325"),
    ("ma\u200bin", "BEM-324"),
    ("m\u0430in", "BEM-324"),
    ("\uff4d\uff41\uff49\uff4e", "BEM-324"),
    ("main\u0301", "BEM-324"),
    ("main.lock", "BEM-324"),
    ("main/", "BEM-324"),
    ("main.", "BEM-324"),
    ("refs/heads/../heads/main", "BEM-324"),
    ("feature/../main", "BEM-324"),
    (" main", "BEM-324"),
    ("main ", "BEM-324"),
    ("main\t", "BEM-324"),
    ("x\nmain", "BEM-324"),
    ("feature\nmain", "BEM-324"),
    ("main\x00", "BEM-324"),
    ("", "BEM-324"),
    ("refs/heads/", "BEM-324"),
    ("//main", "BEM-324"),
    ("main?", "BEM-324"),
    ("main[0]", "BEM-324"),
]


@pytest.fixture
def env(tmp_path: Path) -> GitEnv:
    built = build_git_env(tmp_path)
    built.commit_file("docs/index.md", "# Index\n\nA change worth pushing.\n")
    # Local main is ahead of the upstream too: a push that slipped through would land.
    repo = built.repo
    repo.references["refs/heads/main"].set_target(repo.head.target)
    return built


def _local_refs(env: GitEnv) -> dict[str, str] | None:
    try:
        return refs_of(env.work / ".git")
    except pygit2.GitError:
        return None  # the metadata attacks leave no repository pygit2 can open


def _assert_refused(env: GitEnv, code: str, action: Callable[[], object]) -> None:
    upstream, outside, local = refs_of(env.upstream), env.outside_snapshot(), _local_refs(env)
    with pytest.raises(BeamError) as caught:
        action()
    assert caught.value.code == code, caught.value.message
    assert refs_of(env.upstream) == upstream
    assert _local_refs(env) == local
    assert env.outside_snapshot() == outside


@pytest.mark.parametrize(("ref", "code"), PUSH_ATTACKS)
def test_push_attack_is_refused(env: GitEnv, ref: str, code: str) -> None:
    _assert_refused(env, code, lambda: call_tool(env.tree, "git_push", {"ref": ref}))


@pytest.mark.parametrize("branch", ["main", "MAIN", "release/9"])
def test_pushing_a_protected_current_branch_is_refused(env: GitEnv, branch: str) -> None:
    # HEAD put on a protected branch behind Riverbeam's back (a case variant included).
    repo = env.repo
    repo.references.create(f"refs/heads/{branch}", repo.head.target, force=True)
    repo.set_head(f"refs/heads/{branch}")
    _assert_refused(env, "BEM-328", lambda: call_tool(env.tree, "git_push", {}))


CHECKOUT_ATTACKS = [
    ("main", False, "BEM-328"),
    ("main", True, "BEM-328"),
    ("MAIN", True, "BEM-328"),
    ("refs/heads/master", False, "BEM-328"),
    ("release/9.9", True, "BEM-328"),
    ("Release/1.0", True, "BEM-328"),
    ("+feature", False, "BEM-325"),
    ("-b", True, "BEM-325"),
    ("--orphan", True, "BEM-325"),
    ("HEAD", False, "BEM-325"),
    ("main~1", False, "BEM-325"),
    ("refs/tags/v1", False, "BEM-325"),
    ("ma\u200bin", True, "BEM-324"),
    ("x\nmain", True, "BEM-324"),
]


@pytest.mark.parametrize(("name", "create", "code"), CHECKOUT_ATTACKS)
def test_checkout_attack_is_refused(env: GitEnv, name: str, create: bool, code: str) -> None:
    head = env.tree.current_branch()
    _assert_refused(env, code, lambda: env.tree.checkout_branch(name, create=create))
    assert env.tree.current_branch() == head


# -- symbolic refs: a branch that is another name for a (protected) ref -------------------

ALIASES = ["sneaky", "alias/deep", "x"]
ALIAS_ENDS = [
    "refs/heads/main",
    "refs/heads/master",
    "refs/heads/release/1.0",
    "refs/heads/feature",
    "refs/heads/elsewhere",
    "refs/tags/v1",
    "refs/remotes/origin/main",
    "HEAD",
]


@st.composite
def alias_chains(draw: st.DrawFn) -> tuple[list[str], str, str]:
    """Symbolic branches chained to an end ref, and how the job meets the first of them."""
    names = draw(st.permutations(ALIASES))[: draw(st.integers(1, len(ALIASES)))]
    return (
        names,
        draw(st.sampled_from(ALIAS_ENDS)),
        draw(st.sampled_from(["checkout", "head", "push"])),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=alias_chains())
def test_a_symbolic_branch_never_moves_the_ref_it_names(
    tmp_path_factory: pytest.TempPathFactory, chain: tuple[list[str], str, str]
) -> None:
    names, end, entry = chain
    env = build_git_env(tmp_path_factory.mktemp("symref"))
    repo = env.repo
    for name, target in zip(names, [f"refs/heads/{n}" for n in names[1:]] + [end], strict=True):
        repo.references.create(f"refs/heads/{name}", target)
    if entry == "head":
        repo.set_head(f"refs/heads/{names[0]}")
    unrelated = {"HEAD", "refs/heads/feature"}  # the job's own branch may move
    local = {k: v for k, v in refs_of(env.work / ".git").items() if k not in unrelated}
    upstream = {k: v for k, v in refs_of(env.upstream).items() if k not in unrelated}
    codes = []
    steps: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": "docs/index.md", "body": "edited\n"}),
        ("git_add", {"path": "docs/index.md"}),
        ("git_commit", {"message": "Edit"}),
        ("git_push", {"ref": names[0]} if entry == "push" else {}),
    ]
    if entry == "checkout":
        try:
            env.tree.checkout_branch(names[0])
        except BeamError as refused:
            codes.append(refused.code)
    for tool, args in steps:
        try:
            call_tool(env.tree, tool, args)
        except BeamError as refused:
            codes.append(refused.code)
    assert {k: v for k, v in refs_of(env.work / ".git").items() if k not in unrelated} == local
    assert {k: v for k, v in refs_of(env.upstream).items() if k not in unrelated} == upstream
    assert "BEM-330" in codes


@pytest.mark.parametrize("target", ["refs/tags/v1", "refs/remotes/origin/main", "refs/notes/x"])
def test_a_commit_through_a_head_that_names_no_branch_is_bem_330(env: GitEnv, target: str) -> None:
    env.repo.references.create(target, env.repo.head.target, force=True)
    # Written by hand: libgit2's set_head would detach HEAD instead of naming a non-branch.
    (env.work / ".git/HEAD").write_text(f"ref: {target}\n")
    env.write("docs/index.md", "edited\n")
    call_tool(env.tree, "git_add", {"path": "docs/index.md"})
    _assert_refused(env, "BEM-330", lambda: call_tool(env.tree, "git_commit", {"message": "x"}))


# -- hostile repository configuration -----------------------------------------------------

HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-push",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "fsmonitor-watchman",
    "pre-auto-gc",
)


class Plant:
    """Scripts that leave a marker when run, and the places a hostile config points to."""

    def __init__(self, env: GitEnv) -> None:
        self.env = env
        self.markers = env.base / "markers"
        self.bin = env.base / "bin"
        self.elsewhere = env.base / "elsewhere"
        for directory in (self.markers, self.bin, self.elsewhere):
            directory.mkdir()
        (self.elsewhere / "planted.md").write_text("from elsewhere\n")
        self.hooks = self.bin / "hooks"
        self.hooks.mkdir()
        for hook in HOOKS:
            self.script(hook, directory=self.hooks)

    def script(self, name: str, directory: Path | None = None) -> str:
        path = (directory or self.bin) / name
        path.write_text(f'#!/bin/sh\ntouch "{self.markers}/{name}"\ncat\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return str(path)

    def fired(self) -> list[str]:
        return sorted(os.listdir(self.markers))

    def config(self, text: str) -> None:
        """Append ``text`` to the repository's config, as a hostile writer would."""
        with open(self.env.work / ".git/config", "a") as handle:
            handle.write(text)


def _fsmonitor(p: Plant) -> None:
    p.config(f"[core]\n\tfsmonitor = {p.script('fsmonitor')}\n\tfsmonitorHookVersion = 2\n")


def _hooks_path(p: Plant) -> None:
    p.config(f"[core]\n\thooksPath = {p.hooks}\n")


def _default_hooks_dir(p: Plant) -> None:
    hooks = p.env.work / ".git/hooks"
    hooks.mkdir(exist_ok=True)
    for hook in HOOKS:
        p.script(hook, directory=hooks)


def _ssh_command(p: Plant) -> None:
    p.config(
        f"[core]\n\tsshCommand = {p.script('ssh')}\n"
        f'[url "ssh://git@example.invalid/x.git"]\n\tinsteadOf = {p.env.upstream}\n'
    )


def _worktree(p: Plant) -> None:
    p.config(f"[core]\n\tworktree = {p.elsewhere}\n")


def _included(p: Plant) -> Path:
    included = p.env.base / "included.cfg"
    included.write_text(
        f"[core]\n\tworktree = {p.elsewhere}\n\thooksPath = {p.hooks}\n"
        f'[url "{p.env.decoy}"]\n\tinsteadOf = {p.env.upstream}\n'
    )
    return included


def _include_path(p: Plant) -> None:
    p.config(f"[include]\n\tpath = {_included(p)}\n")


def _include_if(p: Plant) -> None:
    p.config(f'[includeIf "gitdir:{p.env.work}/.git"]\n\tpath = {_included(p)}\n')


def _filter(p: Plant) -> None:
    script = p.script("filter")
    p.config(
        f'[filter "evil"]\n\tclean = {script}\n\tsmudge = {script}\n'
        f"\tprocess = {script}\n\trequired = true\n"
    )
    p.env.write(".gitattributes", "* filter=evil\n")


def _textconv(p: Plant) -> None:
    p.config(
        f'[diff "evil"]\n\ttextconv = {p.script("textconv")}\n\tcommand = {p.script("extdiff")}\n'
    )
    p.env.write(".gitattributes", "* diff=evil\n")


def _origin_url(p: Plant) -> None:
    p.config(f'[remote "origin"]\n\turl = {p.env.decoy}\n')


def _push_url(p: Plant) -> None:
    p.config(f'[remote "origin"]\n\turl = {p.env.upstream}\n\tpushurl = {p.env.decoy}\n')


def _instead_of(p: Plant) -> None:
    p.config(f'[url "{p.env.decoy}"]\n\tinsteadOf = {p.env.upstream}\n')


def _push_instead_of(p: Plant) -> None:
    p.config(f'[url "{p.env.decoy}"]\n\tpushInsteadOf = {p.env.upstream}\n')


def _proxies(p: Plant) -> None:
    p.config(
        f"[core]\n\tgitProxy = {p.script('gitproxy')}\n"
        "[http]\n\tproxy = http://127.0.0.1:9\n[https]\n\tproxy = http://127.0.0.1:9\n"
        f'[remote "origin"]\n\tproxy = http://127.0.0.1:9\n\turl = {p.env.upstream}\n'
    )


def _credential_helper(p: Plant) -> None:
    p.config(
        f"[credential]\n\thelper = !{p.script('credential')}\n"
        f"[core]\n\taskPass = {p.script('askpass')}\n"
    )


def _programs(p: Plant) -> None:
    p.config(
        f"[core]\n\teditor = {p.script('editor')}\n\tpager = {p.script('pager')}\n"
        f"[gpg]\n\tprogram = {p.script('gpg')}\n[commit]\n\tgpgSign = true\n"
        f"[sequence]\n\teditor = {p.script('seqeditor')}\n"
        f"[receive]\n\tdenyCurrentBranch = ignore\n\tprocReceiveRefs = refs/heads\n"
    )


def _attributes_file(p: Plant) -> None:
    attributes = p.env.base / "attributes"
    attributes.write_text("* filter=evil diff=evil\n")
    script = p.script("attributes-filter")
    p.config(
        f"[core]\n\tattributesFile = {attributes}\n"
        f'[filter "evil"]\n\tclean = {script}\n\tsmudge = {script}\n'
        f'[diff "evil"]\n\ttextconv = {script}\n'
    )


def _info_attributes(p: Plant) -> None:
    info = p.env.work / ".git/info"
    info.mkdir(exist_ok=True)
    (info / "attributes").write_text("* filter=evil\n")
    script = p.script("info-filter")
    p.config(f'[filter "evil"]\n\tclean = {script}\n\tsmudge = {script}\n')


def _excludes_file(p: Plant) -> None:
    excludes = p.env.base / "excludes"
    excludes.write_text("*\n")
    p.config(f"[core]\n\texcludesFile = {excludes}\n")


def _worktree_config(p: Plant) -> None:
    p.config("[core]\n\trepositoryformatversion = 1\n[extensions]\n\tworktreeConfig = true\n")
    (p.env.work / ".git/config.worktree").write_text(
        f"[core]\n\tworktree = {p.elsewhere}\n\thooksPath = {p.hooks}\n"
    )


def _bare(p: Plant) -> None:
    p.config("[core]\n\tbare = true\n")


def _unknown_extension(p: Plant) -> None:
    p.config("[core]\n\trepositoryformatversion = 1\n[extensions]\n\tevil = true\n")


def _submodule_update(p: Plant) -> None:
    p.env.write(".gitmodules", f'[submodule "x"]\n\tpath = x\n\turl = {p.env.decoy}\n')
    p.config(f'[submodule "x"]\n\tupdate = !{p.script("submodule")}\n\turl = {p.env.decoy}\n')


def _config_symlink(p: Plant) -> None:
    target = p.env.outside / "evil.cfg"
    target.write_text(f"[core]\n\tworktree = {p.elsewhere}\n\thooksPath = {p.hooks}\n")
    config = p.env.work / ".git/config"
    config.unlink()
    config.symlink_to(target)


def _config_hardlink(p: Plant) -> None:
    target = p.env.outside / "evil.cfg"
    target.write_text(f'[url "{p.env.decoy}"]\n\tinsteadOf = {p.env.upstream}\n')
    config = p.env.work / ".git/config"
    config.unlink()
    os.link(target, config)


def _autocrlf(p: Plant) -> None:
    p.config("[core]\n\tautocrlf = true\n\tsafecrlf = true\n\teol = crlf\n")


def _eol_attributes(p: Plant) -> None:
    # Attribute conversions are byte transforms git itself applies; nothing runs.
    p.env.write(".gitattributes", "* text eol=crlf ident\n*.md working-tree-encoding=UTF-16\n")


CONFIG_ATTACKS: dict[str, Callable[[Plant], None]] = {
    "core.fsmonitor": _fsmonitor,
    "core.hooksPath": _hooks_path,
    ".git/hooks": _default_hooks_dir,
    "core.sshCommand": _ssh_command,
    "core.worktree": _worktree,
    "include.path": _include_path,
    "includeIf": _include_if,
    "filter clean/smudge/process": _filter,
    "diff textconv/command": _textconv,
    "remote.origin.url": _origin_url,
    "remote.origin.pushurl": _push_url,
    "url.insteadOf": _instead_of,
    "url.pushInsteadOf": _push_instead_of,
    "core.gitProxy/http.proxy": _proxies,
    "credential.helper/core.askPass": _credential_helper,
    "editor/pager/gpg/receive": _programs,
    "core.attributesFile": _attributes_file,
    ".git/info/attributes": _info_attributes,
    "core.excludesFile": _excludes_file,
    "extensions.worktreeConfig": _worktree_config,
    "core.bare": _bare,
    "unknown extension": _unknown_extension,
    "submodule update command": _submodule_update,
    ".git/config symlink": _config_symlink,
    ".git/config hard link": _config_hardlink,
    "core.autocrlf": _autocrlf,
    ".gitattributes eol/ident/encoding": _eol_attributes,
}


def _run_everything(tree: WorkingTree, env: GitEnv) -> str:
    """Every operation a hostile config could hook into; returns the pushed commit."""
    call_tool(tree, "write_file", {"path": "docs/attack.md", "body": "written\r\nby the bot\n"})
    call_tool(tree, "git_status", {})
    call_tool(tree, "git_diff", {})
    call_tool(tree, "git_add", {"path": "."})
    sha = str(call_tool(tree, "git_commit", {"message": "Attack run"})["commit"])
    call_tool(tree, "git_diff", {})
    call_tool(tree, "git_log", {})
    call_tool(tree, "list_tree", {})
    call_tool(tree, "read_file", {"path": "docs/attack.md"})
    pushed = call_tool(tree, "git_push", {})
    assert pushed["sha"] == sha
    # A branch with different content, and back: checkout rewrites files (smudge, hooks).
    tree.checkout_branch("attack-other", create=True)
    env.write("docs/attack.md", "other\n")
    tree.add("docs/attack.md")
    tree.commit("Other")
    tree.checkout_branch("feature")
    return sha


@pytest.mark.parametrize("fresh", [False, True], ids=["planted-mid-life", "fresh-tree"])
@pytest.mark.parametrize("plant", CONFIG_ATTACKS.values(), ids=CONFIG_ATTACKS.keys())
def test_hostile_config_neither_executes_nor_redirects(
    env: GitEnv, plant: Callable[[Plant], None], fresh: bool
) -> None:
    planted = Plant(env)
    plant(planted)
    elsewhere, outside, decoy = (
        sorted(os.listdir(planted.elsewhere)),
        sorted(os.listdir(env.outside)),
        refs_of(env.decoy),
    )
    secret = (env.outside / "secret.txt").read_bytes()
    tree = env.tree
    if fresh:
        tree = WorkingTree(SandboxRoot(env.work), ("main", "master", "release/*"))
        tree.add_origin(str(env.upstream))
    sha = _run_everything(tree, env)
    assert planted.fired() == [], "a planted script ran"
    assert refs_of(env.upstream)["refs/heads/feature"] == sha, "the push missed the upstream"
    assert refs_of(env.decoy) == decoy, "the push was redirected"
    commit = env.repo[sha]
    assert isinstance(commit, pygit2.Commit)
    assert "docs/attack.md" in commit.tree
    assert "planted.md" not in [entry.name for entry in commit.tree]
    assert sorted(os.listdir(planted.elsewhere)) == elsewhere, "the working tree moved"
    assert sorted(os.listdir(env.outside)) == outside
    assert (env.outside / "secret.txt").read_bytes() == secret
    config = env.work / ".git/config"
    assert not config.is_symlink()
    assert config.read_bytes() == CANONICAL_CONFIG


def test_config_symlink_target_outside_is_left_untouched(env: GitEnv) -> None:
    planted = Plant(env)
    _config_symlink(planted)
    before = (env.outside / "evil.cfg").read_bytes()
    env.tree.status()
    assert (env.outside / "evil.cfg").read_bytes() == before
    assert (env.work / ".git/config").read_bytes() == CANONICAL_CONFIG


def test_repository_config_is_ignored_not_just_replaced(env: GitEnv) -> None:
    # core.autocrlf would turn CRLF into LF in the stored blob; with the config ignored the
    # bytes are stored as written.
    _autocrlf(Plant(env))
    env.write("crlf.md", b"one\r\ntwo\r\n")
    env.tree.add("crlf.md")
    sha = env.tree.commit("CRLF").commit
    commit = env.repo[sha]
    assert isinstance(commit, pygit2.Commit)
    blob = env.repo[commit.tree["crlf.md"].id]
    assert isinstance(blob, pygit2.Blob)
    assert blob.data == b"one\r\ntwo\r\n"


def test_excludes_file_in_config_does_not_hide_files(env: GitEnv) -> None:
    _excludes_file(Plant(env))
    env.write("new.md", "new\n")
    assert [f.path for f in env.tree.add(".").staged] == ["new.md"]


@pytest.mark.parametrize("level", [ConfigLevel.GLOBAL, ConfigLevel.XDG, ConfigLevel.SYSTEM])
def test_global_xdg_and_system_config_are_never_read(
    env: GitEnv, tmp_path_factory: pytest.TempPathFactory, level: ConfigLevel
) -> None:
    planted = Plant(env)
    home = tmp_path_factory.mktemp("evil-home")
    text = (
        f"[core]\n\thooksPath = {planted.hooks}\n\tfsmonitor = {planted.script('fsmonitor')}\n"
        f"\tworktree = {planted.elsewhere}\n"
        f'[url "{env.decoy}"]\n\tinsteadOf = {env.upstream}\n'
        "[user]\n\tname = Mallory\n\temail = mallory@example.com\n"
    )
    for name in (".gitconfig", "config", "gitconfig"):
        (home / name).write_text(text)
    saved = pygit2.settings.search_path[level]
    # Something else in the process points libgit2 at a hostile file after the tree exists;
    # changing the config file makes the tree reopen its repository.
    pygit2.settings.search_path[level] = str(home)
    try:
        planted.config("[core]\n\tfilemode = true\n")
        sha = _run_everything(env.tree, env)
    finally:
        pygit2.settings.search_path[level] = saved
    assert planted.fired() == []
    assert refs_of(env.upstream)["refs/heads/feature"] == sha
    assert refs_of(env.decoy) == {"HEAD": "refs/heads/main"}
    commit = env.repo[sha]
    assert isinstance(commit, pygit2.Commit)
    assert commit.author.name == "Riverbeam"


def test_git_environment_variables_are_ignored(
    env: GitEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = Plant(env)
    monkeypatch.setenv("GIT_DIR", str(env.decoy))
    monkeypatch.setenv("GIT_WORK_TREE", str(planted.elsewhere))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.hooksPath")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(planted.hooks))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor'='{planted.script('fsm')}'")
    monkeypatch.setenv("GIT_SSH_COMMAND", planted.script("ssh-env"))
    sha = _run_everything(env.tree, env)
    assert planted.fired() == []
    assert refs_of(env.upstream)["refs/heads/feature"] == sha


# -- metadata that would point git at another repository ----------------------------------


def _gitfile(env: GitEnv) -> None:
    _move_git(env).write_text(f"gitdir: {env.decoy}\n")


def _git_symlink(env: GitEnv) -> None:
    _move_git(env).symlink_to(env.decoy)


def _move_git(env: GitEnv) -> Path:
    """Move the real .git aside; return the path where something else can take its place."""
    git = env.work / ".git"
    git.rename(env.base / "moved.git")
    return git


def _commondir(env: GitEnv) -> None:
    (env.work / ".git/commondir").write_text(str(env.decoy) + "\n")


def _alternates(env: GitEnv) -> None:
    (env.work / ".git/objects/info").mkdir(exist_ok=True)
    (env.work / ".git/objects/info/alternates").write_text(str(env.decoy / "objects") + "\n")


def _symlinked(name: str) -> Callable[[GitEnv], None]:
    def plant(env: GitEnv) -> None:
        original = env.work / ".git" / name
        moved = env.base / f"moved-{name}"
        original.rename(moved)
        original.symlink_to(moved)

    return plant


def _bare_lookalike(env: GitEnv) -> None:
    _move_git(env)
    for name in ("objects", "refs"):
        (env.work / name).mkdir()
    (env.work / "HEAD").write_text("ref: refs/heads/main\n")


LAYOUT_ATTACKS: dict[str, Callable[[GitEnv], None]] = {
    ".git gitfile": _gitfile,
    ".git symlink": _git_symlink,
    "commondir": _commondir,
    "alternates": _alternates,
    "objects symlink": _symlinked("objects"),
    "refs symlink": _symlinked("refs"),
    "HEAD symlink": _symlinked("HEAD"),
    "index symlink": _symlinked("index"),
    "working tree disguised as a bare repository": _bare_lookalike,
}


@pytest.mark.parametrize("plant", LAYOUT_ATTACKS.values(), ids=LAYOUT_ATTACKS.keys())
@pytest.mark.parametrize("tool", ["git_status", "git_add", "git_commit", "git_push"])
def test_redirecting_metadata_is_bem_329(
    env: GitEnv, plant: Callable[[GitEnv], None], tool: str
) -> None:
    plant(env)
    args = {"git_add": {"path": "."}, "git_commit": {"message": "x"}}.get(tool, {})
    _assert_refused(env, "BEM-329", lambda: call_tool(env.tree, tool, args))


# -- links anywhere inside .git: every place libgit2 reads or writes ----------------------

EDIT = b"edited by the job\n"
# Files and directories a job's add, commit and push write (or append) to, and ones they read.
LINKABLE_FILES = [
    "HEAD",
    "index",
    "logs/HEAD",
    "logs/refs/heads/feature",
    "refs/heads/feature",
    "refs/heads/main",
    "description",
    "info/exclude",
    "packed-refs",
]
LINKABLE_DIRS = [
    "refs",
    "refs/heads",
    "logs",
    "logs/refs",
    "logs/refs/heads",
    "objects",
    "objects/pack",
    f"objects/{pygit2.hash(EDIT)!s:.2}",
    "info",
]
FILE_LINKS = ["symlink", "hardlink", "fifo"]


@st.composite
def link_placements(draw: st.DrawFn) -> list[tuple[str, str]]:
    """One to three (location, kind) pairs inside .git, deepest first, no two alike."""
    spots = st.one_of(
        st.tuples(st.sampled_from(LINKABLE_FILES), st.sampled_from(FILE_LINKS)),
        st.tuples(st.sampled_from(LINKABLE_DIRS), st.just("symlink")),
    )
    chosen = draw(st.lists(spots, min_size=1, max_size=3, unique_by=lambda spot: spot[0]))
    return sorted(chosen, key=lambda spot: -spot[0].count("/"))


def _link_in_git(env: GitEnv, location: str, kind: str) -> None:
    """Make ``.git/<location>`` lead outside: moved out and symlinked, hard-linked, or a FIFO."""
    inside = env.work / ".git" / location
    outside = env.outside / "git" / location.replace("/", "_")
    outside.parent.mkdir(exist_ok=True)
    if kind == "fifo":
        inside.unlink(missing_ok=True)
        os.mkfifo(inside)
    elif kind == "hardlink":
        outside.unlink(missing_ok=True)
        os.link(inside, outside)
    elif inside.exists():
        inside.rename(outside)
        inside.symlink_to(outside)
    else:
        outside.mkdir()
        inside.symlink_to(outside)


@contextmanager
def _unblocking(fifos: list[Path]) -> Iterator[None]:
    """Keep opening ``fifos`` for writing, so that a reader blocked on one sees end of file
    and the test fails on its assertions instead of hanging."""
    done = threading.Event()

    def writer() -> None:
        while not done.wait(0.05):
            for fifo in fifos:
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    continue  # no reader yet (ENXIO), or not a FIFO any more

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _git_env_with_history(base: Path) -> GitEnv:
    env = build_git_env(base)
    env.commit_file("docs/index.md", "# Index\n\nOne more line.\n")
    (env.work / ".git/packed-refs").write_text("# pack-refs with: peeled fully-peeled sorted \n")
    (env.work / ".git/objects" / f"{pygit2.hash(EDIT)!s:.2}").mkdir(exist_ok=True)
    return env


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placements=link_placements())
def test_links_anywhere_in_git_are_refused_before_git_writes_through_them(
    tmp_path_factory: pytest.TempPathFactory, placements: list[tuple[str, str]]
) -> None:
    env = _git_env_with_history(tmp_path_factory.mktemp("gitlinks"))
    for location, kind in placements:
        _link_in_git(env, location, kind)
    outside, upstream = snapshot(env.outside), refs_of(env.upstream)
    env.write("docs/index.md", EDIT)
    codes = set()
    fifos = [env.work / ".git" / spot for spot, kind in placements if kind == "fifo"]
    with _unblocking(fifos):
        for tool, args in [
            ("git_status", {}),
            ("git_add", {"path": "docs/index.md"}),
            ("git_commit", {"message": "Edit"}),
            ("git_diff", {}),
            ("git_log", {}),
            ("git_push", {}),
        ]:
            try:
                call_tool(env.tree, tool, args)
            except BeamError as refused:
                codes.add(refused.code)
    assert snapshot(env.outside) == outside, "a git tool wrote through a link in .git"
    assert refs_of(env.upstream) == upstream
    assert codes == {"BEM-329"}


def test_a_remembered_object_directory_is_checked_again_once_it_changes(
    env: GitEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    blob = str(env.repo.revparse_single("HEAD:README.md").id)
    fanout = env.work / ".git/objects" / blob[:2]
    # Let the filesystem clock pass the directory's last change, so the plant below gets a
    # later ctime even on a coarse clock; then count every directory as settled at once.
    scratch = env.base / "tick"
    while (scratch.touch() or scratch.stat().st_ctime_ns) <= fanout.stat().st_ctime_ns:
        pass
    monkeypatch.setattr(safe_walk, "SETTLE_NS", -(10**12))
    assert env.tree.status().clean  # lists the directory and remembers it
    (fanout / ("0" * 38)).symlink_to(env.outside / "secret.txt")
    _assert_refused(env, "BEM-329", env.tree.status)


@pytest.mark.parametrize("shared", ["loose object", "pack", "pack index"])
def test_object_files_shared_with_a_mirror_are_allowed(env: GitEnv, shared: str) -> None:
    # Workspaces hard-link the mirror's object files into each clone on purpose.
    repo = env.repo
    if shared == "loose object":
        blob = str(repo.revparse_single("HEAD:README.md").id)
        victim = env.work / ".git/objects" / blob[:2] / blob[2:]
    else:
        subprocess.run(["git", "-C", str(env.work), "repack", "-q", "-a", "-d"], check=True)
        suffix = ".pack" if shared == "pack" else ".idx"
        victim = next((env.work / ".git/objects/pack").glob(f"*{suffix}"))
    mirror = env.outside / "mirror-object"
    os.link(victim, mirror)
    before = snapshot(env.outside)
    env.write("docs/index.md", EDIT)
    for tool, args in [("git_add", {"path": "."}), ("git_commit", {"message": "Edit"})]:
        call_tool(env.tree, tool, args)
    assert call_tool(env.tree, "git_push", {})["sha"] == env.tree.head_sha()
    assert snapshot(env.outside) == before


@pytest.mark.parametrize(
    ("location", "kind"),
    [
        ("logs/HEAD", "hardlink"),
        ("logs/refs/heads", "symlink"),
        (f"objects/{pygit2.hash(EDIT)!s:.2}", "symlink"),
    ],
)
def test_links_in_git_are_live_when_nothing_checks(env: GitEnv, location: str, kind: str) -> None:
    # The control: without the guard, libgit2 itself writes through each kind of link.
    (env.work / ".git/objects" / f"{pygit2.hash(EDIT)!s:.2}").mkdir(exist_ok=True)
    _link_in_git(env, location, kind)
    before = snapshot(env.outside)
    repo = env.repo
    env.write("docs/index.md", EDIT)
    repo.index.add("docs/index.md")
    repo.index.write()
    signature = pygit2.Signature("Control", "control@example.com")
    tree = repo.index.write_tree()
    repo.create_commit("HEAD", signature, signature, "Control", tree, [repo.head.target])
    assert snapshot(env.outside) != before


# -- working files that share an inode with a file outside --------------------------------

SECRET = "TOP SECRET: outside the root\n"


def _hard_link_out(env: GitEnv, path: str) -> None:
    """Make ``path`` in the tree a second name of a secret file outside the root."""
    secret = env.outside / "linked-secret.txt"
    secret.write_text(SECRET)
    target = env.work / path
    target.unlink(missing_ok=True)
    os.link(secret, target)


@pytest.mark.parametrize("path", ["docs/index.md", "docs/brand-new.md"], ids=["tracked", "new"])
@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("git_add", {"path": "."}),
        ("git_add", {"path": "docs"}),
        ("git_diff", {}),
        ("git_diff", {"path": "docs"}),
        ("git_status", {}),
    ],
)
def test_a_hard_linked_working_file_is_refused_by_every_git_tool(
    env: GitEnv, path: str, tool: str, args: dict[str, Any]
) -> None:
    # read_file refuses a file with two links; the git tools read files too, so they must
    # refuse it the same way rather than stage it, show it, or compare it.
    _hard_link_out(env, path)
    index = (env.work / ".git/index").read_bytes()
    with pytest.raises(BeamError) as caught:
        result = call_tool(env.tree, tool, args)
        assert SECRET.strip() not in json.dumps(result)
    assert caught.value.code == "BEM-303"
    assert path in caught.value.message and "hard links" in caught.value.message
    assert (env.work / ".git/index").read_bytes() == index


# -- controls: the plants are live when something honours them -----------------------------


def _git(env: GitEnv, *args: str) -> None:
    subprocess.run(["git", "-C", str(env.work), *args], capture_output=True, check=False)


def test_the_planted_scripts_are_live(env: GitEnv) -> None:
    planted = Plant(env)
    _fsmonitor(planted)
    _hooks_path(planted)
    _git(env, "status")
    env.write("docs/control.md", "control\n")
    _git(env, "add", ".")
    _git(env, "commit", "-m", "control")
    planted.config(f'[filter "evil"]\n\tclean = {planted.script("filter")}\n')
    env.write(".gitattributes", "* filter=evil\n")
    _git(env, "add", ".gitattributes")
    assert {"fsmonitor", "filter", "pre-commit", "post-commit"} <= set(planted.fired())


def test_libgit2_alone_would_be_redirected(env: GitEnv) -> None:
    # Opened directly, without the guard, libgit2 honours both redirects below: the guard
    # is what stops them, not libgit2.
    planted = Plant(env)
    _worktree(planted)
    _instead_of(planted)
    raw = pygit2.Repository(str(env.work / ".git"))
    assert raw.workdir is not None
    assert Path(raw.workdir).resolve() == planted.elsewhere
    assert raw.remotes.create_anonymous(str(env.upstream)).url == str(env.decoy)


def test_a_guard_refusal_closes_the_cached_repository(env: GitEnv) -> None:
    env.tree.status()
    _commondir(env)
    with pytest.raises(GitError):
        env.tree.status()
    (env.work / ".git/commondir").unlink()
    assert env.tree.status().branch == "feature"
