"""The one safe walk: no symlink followed, no special file opened, every fd closed."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.core import safe_walk
from bot.core.safe_walk import Entry, EntryKind


@pytest.fixture
def top_fd(tmp_path: Path) -> Iterator[int]:
    fd = safe_walk.open_directory(tmp_path / "tree")
    try:
        yield fd
    finally:
        os.close(fd)


@pytest.fixture(autouse=True)
def tree(tmp_path: Path) -> Path:
    """tree/{a.txt, sub/b.txt, sub/deep/c.txt}, and outside/secret.txt beside it."""
    top = tmp_path / "tree"
    (top / "sub" / "deep").mkdir(parents=True)
    (top / "a.txt").write_text("a")
    (top / "sub" / "b.txt").write_text("b")
    (top / "sub" / "deep" / "c.txt").write_text("c")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret")
    return top


def _kinds(top_fd: int, **options: object) -> dict[str, EntryKind]:
    return {entry.path: entry.kind for entry in safe_walk.walk(top_fd, **options)}  # type: ignore[arg-type]


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_walks_every_entry_with_its_kind(top_fd: int) -> None:
    assert _kinds(top_fd) == {
        "a.txt": EntryKind.FILE,
        "sub": EntryKind.DIRECTORY,
        "sub/b.txt": EntryKind.FILE,
        "sub/deep": EntryKind.DIRECTORY,
        "sub/deep/c.txt": EntryKind.FILE,
    }


def test_a_symlink_to_a_directory_is_reported_not_followed(tree: Path, top_fd: int) -> None:
    (tree / "link").symlink_to(tree.parent / "outside")
    kinds = _kinds(top_fd)
    assert kinds["link"] is EntryKind.SYMLINK
    assert not any(path.startswith("link/") for path in kinds)


def test_a_fifo_is_reported_not_opened(tree: Path, top_fd: int) -> None:
    os.mkfifo(tree / "pipe")
    # Opening a FIFO with no writer would block the walk for ever; it ends, and says what it saw.
    assert _kinds(top_fd)["pipe"] is EntryKind.OTHER


def test_a_directory_swapped_for_a_symlink_after_listing_is_not_entered(
    tree: Path, top_fd: int
) -> None:
    seen: list[str] = []
    for entry in safe_walk.walk(top_fd):
        seen.append(entry.path)
        if entry.path == "sub":
            # Listed as a directory; before the walk enters it, it becomes a link outside.
            os.rename(tree / "sub", tree.parent / "moved")
            (tree / "sub").symlink_to(tree.parent / "outside")
    assert "sub/secret.txt" not in seen
    assert not any(path.startswith("sub/") for path in seen)


def test_enter_decides_which_directories_are_walked(top_fd: int) -> None:
    kinds = _kinds(top_fd, enter=lambda entry: entry.name != "deep")
    assert "sub/deep" in kinds
    assert "sub/deep/c.txt" not in kinds


@pytest.mark.parametrize(
    ("max_depth", "deepest"), [(0, {"a.txt", "sub"}), (1, {"sub/b.txt", "sub/deep"})]
)
def test_max_depth_bounds_the_walk(top_fd: int, max_depth: int, deepest: set[str]) -> None:
    kinds = _kinds(top_fd, max_depth=max_depth)
    assert deepest <= kinds.keys()
    assert all(path.count("/") <= max_depth for path in kinds)


def test_entry_lstat_does_not_follow(tree: Path, top_fd: int) -> None:
    (tree / "link").symlink_to(tree / "a.txt")
    stats = {entry.name: entry.lstat() for entry in safe_walk.walk(top_fd) if entry.depth == 0}
    assert os.path.islink(tree / "link")
    assert stats["link"].st_ino == (tree / "link").lstat().st_ino
    assert stats["link"].st_ino != stats["a.txt"].st_ino


def test_fds_are_closed_after_an_early_break(tree: Path, top_fd: int) -> None:
    before = _open_fds()
    walk = safe_walk.walk(top_fd)
    for entry in walk:
        if entry.path == "sub/deep/c.txt":
            # Two directories below the top are open here.
            assert len(_open_fds() - before) == 2
            break
    walk.close()
    assert _open_fds() == before


def test_fds_are_closed_when_the_caller_raises(top_fd: int) -> None:
    before = _open_fds()

    def refuse(entry: Entry) -> bool:
        if entry.name == "deep":
            raise RuntimeError("refused")
        return True

    with pytest.raises(RuntimeError):
        list(safe_walk.walk(top_fd, enter=refuse))
    assert _open_fds() == before


def test_the_top_is_borrowed_not_closed(top_fd: int) -> None:
    list(safe_walk.walk(top_fd))
    os.fstat(top_fd)  # still open: the caller owns it


def test_open_directory_refuses_a_symlink(tree: Path) -> None:
    (tree / "link").symlink_to(tree / "sub")
    with pytest.raises(OSError) as refused:
        safe_walk.open_directory(tree / "link")
    assert refused.value.errno in (errno.ELOOP, errno.ENOTDIR)
