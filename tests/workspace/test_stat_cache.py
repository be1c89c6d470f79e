"""A prepared tree's index holds stat data that matches its files as the sandbox uid sees them.

When it does not (another owner, another ctime), libgit2 hashes every file on every status
and diff in the container. Timings would make a flaky test, so the index file is read here
directly and each entry compared with ``lstat``; libgit2 itself is then asked, as the
sandbox uid, to refresh what it had to hash, and must find nothing to write back.
"""

from __future__ import annotations

import os
import signal
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from pygit2.enums import DiffOption

from bot.config import RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from harness.gitkit import as_sandbox
from sandbox.host.workspace import checkout
from sandbox.host.workspace.prepare import SANDBOX_UID, Workspace, hand_over, prepare_workspace
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.repo_guard import open_repository
from sandbox.inside.worktree import WorkingTree

_HEADER = struct.Struct(">4sII")
_STAT = struct.Struct(">10I")  # ctime s, ns; mtime s, ns; dev, ino, mode, uid, gid, size
_EXTENDED = 0x4000
_LOW_32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Stat:
    """The stat fields git and libgit2 compare, as the index stores them (32 bits each)."""

    ctime: tuple[int, int]
    mtime: tuple[int, int]
    ino: int
    uid: int
    gid: int
    size: int

    @classmethod
    def of(cls, info: os.stat_result) -> Stat:
        return cls(
            ctime=(info.st_ctime_ns // 10**9 & _LOW_32, info.st_ctime_ns % 10**9),
            mtime=(info.st_mtime_ns // 10**9 & _LOW_32, info.st_mtime_ns % 10**9),
            ino=info.st_ino & _LOW_32,
            uid=info.st_uid,
            gid=info.st_gid,
            size=info.st_size & _LOW_32,
        )


def index_entries(path: Path) -> dict[str, Stat]:
    """The stat data of every entry of a version 2 or 3 index file, by path."""
    data = path.read_bytes()
    signature, version, count = _HEADER.unpack_from(data)
    assert signature == b"DIRC" and version in (2, 3), (signature, version)
    entries: dict[str, Stat] = {}
    position = _HEADER.size
    for _ in range(count):
        fields = _STAT.unpack_from(data, position)
        (flags,) = struct.unpack_from(">H", data, position + _STAT.size + 20)
        start = position + _STAT.size + 22 + (2 if flags & _EXTENDED else 0)
        end = data.index(b"\0", start)
        entries[data[start:end].decode()] = Stat(
            ctime=(fields[0], fields[1]),
            mtime=(fields[2], fields[3]),
            ino=fields[5],
            uid=fields[7],
            gid=fields[8],
            size=fields[9],
        )
        # Entries are NUL-padded to a multiple of 8 bytes, with at least one NUL.
        position += (end - position + 8) // 8 * 8
    return entries


def index_state(workspace: Workspace) -> tuple[bytes, int, int]:
    index = workspace.tree / ".git" / "index"
    info = index.stat()
    return index.read_bytes(), info.st_mtime_ns, info.st_ino


def test_every_index_entry_matches_its_file_and_is_older_than_the_index(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("job-1", "docs", repo_config, None, settings)

    index = workspace.tree / ".git" / "index"
    entries = index_entries(index)
    assert sorted(entries) == ["README.md", "docs/install.md"]
    written = index.stat().st_mtime_ns
    for name, recorded in entries.items():
        info = (workspace.tree / name).lstat()
        assert recorded == Stat.of(info), name
        assert (recorded.uid, recorded.gid) == (SANDBOX_UID, SANDBOX_UID)
        # Not "racily clean": a file as new as the index is hashed on every status.
        assert info.st_mtime_ns < written, name


def test_status_as_the_sandbox_uid_is_clean_and_has_nothing_to_refresh(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("job-2", "docs", repo_config, None, settings)
    before = index_state(workspace)

    def in_the_container() -> tuple[bool, int]:
        clean = WorkingTree(SandboxRoot(workspace.tree)).status().clean
        # UPDATE_INDEX writes back the stat data of every file libgit2 had to hash.
        repo = open_repository(workspace.tree, workspace.tree / ".git")
        changed = len(repo.index.diff_to_workdir(flags=DiffOption.UPDATE_INDEX))
        return clean, changed

    assert as_sandbox(in_the_container) == (True, 0)
    assert index_state(workspace) == before


def test_hand_over_leaves_what_the_uid_owns_as_it_is(base_dir: Path) -> None:
    top = base_dir / "top"
    (top / "objects").mkdir(parents=True)
    owned, foreign, shared = top / "owned", top / "foreign", top / "objects" / "pack"
    for path in (owned, foreign, shared):
        path.write_text("x")
    os.chown(top, SANDBOX_UID, SANDBOX_UID)
    os.chown(owned, SANDBOX_UID, SANDBOX_UID)
    ctime = owned.lstat().st_ctime_ns

    hand_over(top, top / "objects", SANDBOX_UID)

    assert owned.lstat().st_ctime_ns == ctime
    assert (foreign.lstat().st_uid, foreign.lstat().st_gid) == (SANDBOX_UID, SANDBOX_UID)
    assert (top / "objects").lstat().st_uid == SANDBOX_UID
    assert shared.lstat().st_uid == os.geteuid()


def _kill_myself() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _no_cap_setuid(groups: list[int]) -> None:
    raise PermissionError(1, "Operation not permitted")


@pytest.mark.parametrize(
    ("target", "name", "replacement", "expected"),
    [
        (checkout, "isolate_process_config", _kill_myself, "killed by SIGKILL"),
        (os, "setgroups", _no_cap_setuid, "CAP_SETUID and CAP_SETGID"),
    ],
    ids=["killed", "no-cap-setuid"],
)
def test_a_failed_checkout_is_bem_342_and_leaves_nothing_behind(
    target: object,
    name: str,
    replacement: object,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    repo_config: RepositoryConfig,
    settings: WorkspaceSettings,
) -> None:
    # The child is a fork of this process: it runs the replacement.
    monkeypatch.setattr(target, name, replacement)

    with pytest.raises(BeamError) as caught:
        prepare_workspace("job-3", "docs", repo_config, None, settings)

    assert caught.value.code == "BEM-342"
    assert expected in caught.value.message
    assert f"as uid {SANDBOX_UID}" in caught.value.message
    assert os.listdir(settings.root) == []


def test_a_root_the_sandbox_uid_cannot_enter_is_bem_342(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    settings.root.mkdir(mode=0o700)

    with pytest.raises(BeamError) as caught:
        prepare_workspace("job-4", "docs", repo_config, None, settings)

    assert caught.value.code == "BEM-342"
    assert f"uid {SANDBOX_UID} cannot reach" in caught.value.message
    assert os.listdir(settings.root) == []
