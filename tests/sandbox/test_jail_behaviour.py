"""What the jail lets through, and how: normalisation, symlinks inside, writes, walking."""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.core import safe_walk
from bot.core.errors import JailError
from sandbox.inside.jail import SandboxRoot, is_repository_metadata
from tests.sandbox.jail_kit import INSIDE_INDEX, JailEnv, build_jail_env


@pytest.fixture
def env(tmp_path: Path) -> JailEnv:
    return build_jail_env(tmp_path)


# -- construction --------------------------------------------------------------------------


def test_root_must_be_an_existing_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ValueError, match="does not exist"):
        SandboxRoot(tmp_path / "missing")
    with pytest.raises(ValueError, match="not a directory"):
        SandboxRoot(tmp_path / "file")
    with pytest.raises(ValueError, match="positive"):
        SandboxRoot(tmp_path, max_read_bytes=0)
    with pytest.raises(ValueError, match="empty"):
        SandboxRoot("")


def test_root_path_is_stored_resolved(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to("real")
    jail = SandboxRoot(str(tmp_path / "alias"), max_read_bytes=5, max_write_bytes=7)
    assert jail.path == (tmp_path / "real").resolve()
    assert (jail.max_read_bytes, jail.max_write_bytes) == (5, 7)


def test_copies_and_pickles_hold_no_file_descriptor(
    env: JailEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The root is reopened per call, so a copy can never use an fd its original closed.
    monkeypatch.setattr(safe_walk, "SETTLE_NS", 0)
    list(env.jail.walk())
    assert len(env.jail._listings) > 0
    for clone in (copy.copy(env.jail), pickle.loads(pickle.dumps(env.jail))):
        assert clone.read_bytes("docs/index.md") == INSIDE_INDEX
        assert clone.path == env.jail.path
        assert len(clone._listings) == 0  # nothing remembered travels with it


# -- normalize -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("", ""),
        (".", ""),
        ("./", ""),
        ("./a//b", "a/b"),
        ("a/./b/", "a/b"),
        ("docs/index.md", "docs/index.md"),
        ("a\\b", "a\\b"),
        ("%2e%2e/x", "%2e%2e/x"),
        ("．．/x", "．．/x"),
        (".gitignore", ".gitignore"),
        (".github/workflows/ci.yml", ".github/workflows/ci.yml"),
        ("docs/.gitattributes", "docs/.gitattributes"),
        ("my.git/x", "my.git/x"),
        ("...", "..."),
    ],
)
def test_normalize(env: JailEnv, given: str, canonical: str) -> None:
    assert env.jail.normalize(given) == canonical


# -- reading and writing -------------------------------------------------------------------


def test_nested_paths_read_and_write(env: JailEnv) -> None:
    env.jail.write_bytes("a/b/c/d.md", b"deep\n")
    assert (env.root / "a/b/c/d.md").read_bytes() == b"deep\n"
    assert env.jail.read_bytes("./a//b/c/d.md") == b"deep\n"
    assert stat.S_IMODE((env.root / "a/b").stat().st_mode) == 0o755


def test_inside_symlink_to_file_reads_and_writes_the_target(env: JailEnv) -> None:
    env.link("docs/alias.md", "index.md")
    env.link("latest", "docs/guide")
    assert env.jail.read_bytes("docs/alias.md") == INSIDE_INDEX
    env.jail.write_bytes("docs/alias.md", b"new\n")
    assert (env.root / "docs/index.md").read_bytes() == b"new\n"
    assert (env.root / "docs/alias.md").is_symlink()
    env.jail.write_bytes("latest/new.md", b"through a dir link\n")
    assert (env.root / "docs/guide/new.md").read_bytes() == b"through a dir link\n"


def test_symlinks_with_dotdot_that_stay_inside_work(env: JailEnv) -> None:
    env.link("docs/guide/up.md", "../index.md")
    env.link("docs/guide/top", "../..")
    assert env.jail.read_bytes("docs/guide/up.md") == INSIDE_INDEX
    assert env.jail.read_bytes("docs/guide/top/README.md") == b"# Readme\n"
    assert env.jail.resolve("docs/guide/top") == ""
    assert env.jail.resolve("docs/guide/up.md") == "docs/index.md"


def test_dangling_inside_symlink_write_creates_the_target(env: JailEnv) -> None:
    env.link("docs/next.md", "guide/next.md")
    assert not env.jail.exists("docs/next.md")
    env.jail.write_bytes("docs/next.md", b"created\n")
    assert (env.root / "docs/guide/next.md").read_bytes() == b"created\n"


def test_symlink_targets_never_get_parent_directories_created(env: JailEnv) -> None:
    env.link("docs/next.md", "missing/next.md")
    with pytest.raises(FileNotFoundError):
        env.jail.write_bytes("docs/next.md", b"x")
    assert not (env.root / "docs/missing").exists()


def test_write_preserves_mode_and_new_files_are_0644(env: JailEnv) -> None:
    script = env.root / "docs/build.sh"
    script.write_bytes(b"#!/bin/sh\n")
    script.chmod(0o755)
    old_umask = os.umask(0o077)
    try:
        env.jail.write_bytes("docs/build.sh", b"#!/bin/sh\necho hi\n")
        env.jail.write_bytes("docs/fresh.md", b"fresh\n")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert stat.S_IMODE((env.root / "docs/fresh.md").stat().st_mode) == 0o644


def test_write_is_atomic_and_leaves_no_temporary_files(env: JailEnv) -> None:
    original = (env.root / "docs/index.md").stat().st_ino
    env.jail.write_bytes("docs/index.md", b"replaced\n")
    assert (env.root / "docs/index.md").stat().st_ino != original
    assert sorted(os.listdir(env.root / "docs")) == ["guide", "index.md"]


def test_setuid_bits_are_not_carried_over(env: JailEnv) -> None:
    (env.root / "docs/index.md").chmod(0o4755)
    env.jail.write_bytes("docs/index.md", b"x")
    assert stat.S_IMODE((env.root / "docs/index.md").stat().st_mode) == 0o755


def test_write_rejects_non_bytes_before_touching_disk(env: JailEnv) -> None:
    with pytest.raises(TypeError):
        env.jail.write_bytes("new/x.md", "text")  # type: ignore[arg-type]
    assert not (env.root / "new").exists()


def test_missing_files_and_non_directories_are_os_errors(env: JailEnv) -> None:
    with pytest.raises(FileNotFoundError):
        env.jail.read_bytes("docs/missing.md")
    with pytest.raises(FileNotFoundError):
        env.jail.read_bytes("missing/index.md")
    with pytest.raises(NotADirectoryError):
        env.jail.read_bytes("README.md/x")
    with pytest.raises(NotADirectoryError):
        env.jail.write_bytes("README.md/x", b"x")


def test_legitimate_git_named_files_are_ordinary(env: JailEnv) -> None:
    for name in (".gitignore", ".gitattributes", ".gitmodules"):
        assert env.jail.read_bytes(name) == f"# {name}\n".encode()
        env.jail.write_bytes(name, b"changed\n")
    env.jail.write_bytes(".github/workflows/ci.yml", b"on: push\n")
    assert env.jail.read_bytes(".github/workflows/ci.yml") == b"on: push\n"


def test_a_file_exactly_at_the_cap_is_read(tmp_path: Path) -> None:
    env = build_jail_env(tmp_path, max_read_bytes=4)
    (env.root / "docs/index.md").write_bytes(b"1234")
    assert env.jail.read_bytes("docs/index.md") == b"1234"


# -- resolve, exists, is_dir ---------------------------------------------------------------


def test_resolve_follows_inside_symlinks(env: JailEnv) -> None:
    env.link("guide", "docs/guide")
    env.link("docs/guide/me.md", "install.md")
    assert env.jail.resolve("") == ""
    assert env.jail.resolve("./docs") == "docs"
    assert env.jail.resolve("guide/me.md") == "docs/guide/install.md"
    assert env.jail.resolve("guide") == "docs/guide"
    with pytest.raises(FileNotFoundError):
        env.jail.resolve("docs/nope.md")


def test_exists_and_is_dir(env: JailEnv) -> None:
    env.link("dangling", "nowhere")
    env.link("guide", "docs/guide")
    os.mkfifo(env.root / "docs/pipe")
    assert env.jail.exists("docs/index.md") and not env.jail.is_dir("docs/index.md")
    assert env.jail.exists("") and env.jail.is_dir("")
    assert env.jail.is_dir("guide") and env.jail.is_dir("docs/guide")
    assert env.jail.exists("docs/pipe") and not env.jail.is_dir("docs/pipe")
    assert not env.jail.exists("dangling") and not env.jail.is_dir("dangling")
    assert not env.jail.exists("docs/missing") and not env.jail.is_dir("missing/deeper")
    assert not env.jail.exists("README.md/x")


# -- walk ----------------------------------------------------------------------------------


def test_walk_lists_files_and_symlinks_sorted_and_skips_metadata(env: JailEnv) -> None:
    (env.root / "docs/sub/.git").mkdir(parents=True)
    (env.root / "docs/sub/.git/config").write_bytes(b"")
    (env.root / "docs/sub/page.md").write_bytes(b"")
    (env.root / "vendor/x").mkdir(parents=True)
    (env.root / "vendor/x/.git").write_bytes(b"gitdir: ../../.git/modules/x\n")
    (env.root / ".GIT").mkdir()
    (env.root / ".GIT/HEAD").write_bytes(b"")
    (env.root / "git~1").mkdir()
    (env.root / "a-b").mkdir()
    (env.root / "a-b/x.md").write_bytes(b"")
    (env.root / "a").mkdir()
    (env.root / "a/x.md").write_bytes(b"")
    env.link("guide", "docs/guide")
    env.link("out", "../outside")
    os.mkfifo(env.root / "docs/pipe")
    listed = list(env.jail.walk())
    assert listed == sorted(listed)
    assert listed == [
        ".gitattributes",
        ".gitignore",
        ".gitmodules",
        "README.md",
        "a-b/x.md",
        "a/x.md",
        "docs/guide/install.md",
        "docs/index.md",
        "docs/sub/page.md",
        "guide",
        "out",
    ]


def test_walk_a_subdirectory_and_through_a_symlinked_start(env: JailEnv) -> None:
    env.link("g", "docs/guide")
    assert list(env.jail.walk("docs")) == ["docs/guide/install.md", "docs/index.md"]
    assert list(env.jail.walk("g")) == ["docs/guide/install.md"]
    assert list(env.jail.walk("./docs/guide/")) == ["docs/guide/install.md"]


def test_walk_omits_names_the_jail_would_refuse(env: JailEnv) -> None:
    (env.root / "C:evil").write_bytes(b"")
    (env.root / "\\lead").write_bytes(b"")
    os.close(os.open(os.fsencode(env.root) + b"/bad-\xff.md", os.O_CREAT | os.O_WRONLY))
    deep = env.root / "/".join(["d"] * 520)
    deep.mkdir(parents=True)
    (deep / "x.md").write_bytes(b"")
    (env.root / "docs/C:fine.md").write_bytes(b"")
    listed = list(env.jail.walk())
    assert "docs/C:fine.md" in listed
    assert not any(path.startswith(("C:", "\\", "bad-", "d/")) for path in listed)
    for path in listed:
        assert env.jail.normalize(path) == path


def test_a_remembered_listing_follows_every_change_and_is_used_only_while_unchanged(
    env: JailEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(safe_walk, "SETTLE_NS", 0)  # every directory counts as settled
    first = list(env.jail.walk())
    listed: list[str] = []
    real_scandir = os.scandir

    def counting(fd: int) -> object:
        listed.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_scandir(fd)

    monkeypatch.setattr(safe_walk.os, "scandir", counting)
    assert list(env.jail.walk()) == first and listed == []
    # Each change is seen: a new file, a file swapped for a symlink, a folder swapped for a
    # link to outside (listed as an entry, not entered), a removed folder.
    (env.root / "docs/new.md").write_bytes(b"")
    (env.root / "README.md").unlink()
    env.link("README.md", "docs/index.md")
    shutil.rmtree(env.root / "docs/guide")
    env.link("docs/guide", "../outside")
    listed.clear()  # rmtree lists too
    changed = list(env.jail.walk())
    assert listed == [str(env.root), str(env.root / "docs")]
    assert "docs/new.md" in changed and "README.md" in changed
    assert "docs/guide" in changed and "docs/guide/install.md" not in changed
    assert changed == sorted(env.jail.walk()) == list(SandboxRoot(env.root).walk())


def test_walk_is_refused_on_missing(env: JailEnv) -> None:
    with pytest.raises(FileNotFoundError):
        list(env.jail.walk("nope"))
    with pytest.raises(JailError):
        list(env.jail.walk("../outside"))


# -- the metadata detector -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        ".git",
        ".GIT",
        ".gIt",
        ".git.",
        ".git  ",
        ".git. .",
        "git~1",
        "GIT~9",
        "gitdoc~2",
        "gi7eba~1",
        ".g\u200bit",
        "\u2062.git",
        ".git\u206f",
        ".git\U000e0001",
        "．ｇｉｔ",
        ".git::$INDEX_ALLOCATION",
        ".git:x",
        "a\\.git",
        ".git\u034f",
        ".git\u3164",
        "ｇｉｔ～１",
    ],
)
def test_metadata_names(name: str) -> None:
    assert is_repository_metadata(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "git",
        ".gitignore",
        ".gitattributes",
        ".gitmodules",
        ".github",
        "my.git",
        ".git-backup",
        ".gits",
        "git~",
        "git~x",
        "gi7eba",
        " .git",
        "docs",
        ".g it",
        "gıt~1",
    ],
)
def test_ordinary_names(name: str) -> None:
    assert not is_repository_metadata(name)


# -- resources -----------------------------------------------------------------------------


def test_resolution_depth_is_bounded_even_through_symlinks(env: JailEnv) -> None:
    # A short path whose symlink expands 600 directories deep: refused rather than holding
    # 600 directory fds open, since no path that deep could be named anyway.
    deep = "/".join(["d"] * 600)
    (env.root / deep).mkdir(parents=True)
    env.link("deep", deep)
    assert env.jail.is_dir("/".join(["d"] * 400))
    with pytest.raises(JailError, match="deeper than 513 directories") as refused:
        env.jail.resolve("deep")
    assert refused.value.code == "BEM-300"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_ten_thousand_calls_leak_no_file_descriptors(env: JailEnv) -> None:
    env.link("docs/out", "../../outside")
    env.link("docs/alias.md", "index.md")
    os.mkfifo(env.root / "docs/pipe")
    calls: list[Callable[[], object]] = [
        lambda: env.jail.read_bytes("docs/alias.md"),
        lambda: env.jail.write_bytes("docs/new/page.md", b"x"),
        lambda: env.jail.resolve("docs/guide"),
        lambda: env.jail.exists("docs/missing/x"),
        lambda: env.jail.is_dir("docs"),
        lambda: env.jail.read_bytes("docs/out/secret.txt"),
        lambda: env.jail.read_bytes("docs/pipe"),
        lambda: env.jail.read_bytes("README.md/x"),
        lambda: env.jail.read_bytes("docs/missing.md"),
        lambda: list(env.jail.walk("docs")),
    ]
    before = _open_fds()
    for index in range(10_000):
        with contextlib.suppress(JailError, OSError):
            calls[index % len(calls)]()
    assert _open_fds() == before
