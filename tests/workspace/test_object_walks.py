"""The walks a worker makes per segment (``bot.core.safe_walk`` under each) keep what the
``os.walk`` ones guaranteed: every file linked, what the sandbox uid must own handed over
and the linked objects left the worker's, and nothing but plain files and directories
accepted in an object store the container wrote (BEM-350)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.core.errors import BeamError
from sandbox.host.workspace.objectstore import link_objects
from sandbox.host.workspace.outbox import untrusted_odb
from sandbox.host.workspace.prepare import SANDBOX_UID, hand_over


def _store(top: Path) -> set[str]:
    """A small object store under ``top``: loose objects, a pack, an ``info`` at the top and
    one deeper; returns the files, relative to ``top``."""
    files = {"ab/cdef01", "ab/cdef02", "9f/0123", "pack/pack-1.pack", "pack/pack-1.idx"}
    files |= {"info/alternates", "pack/info/note"}
    for name in files:
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(name)
    return files


def test_link_objects_links_every_file_but_the_top_info(base_dir: Path) -> None:
    source, target = base_dir / "source", base_dir / "target"
    files = _store(source)

    count = link_objects(source, target)

    linked = {"ab/cdef01", "ab/cdef02", "9f/0123", "pack/pack-1.pack", "pack/pack-1.idx"}
    linked.add("pack/info/note")  # only the store's own ``info`` describes the mirror
    assert count == len(linked) == len(files) - 1
    for name in linked:
        assert (target / name).stat().st_ino == (source / name).stat().st_ino
    assert not (target / "info").exists()
    assert link_objects(source, base_dir / "again") == count


def test_hand_over_gives_all_but_the_object_files(base_dir: Path) -> None:
    top = base_dir / "tree"
    objects = top / ".git" / "objects"
    objects.mkdir(parents=True)
    object_files = _store(objects)
    (top / ".git" / "config").write_text("[core]\n")
    (top / ".git" / "refs" / "heads").mkdir(parents=True)
    (top / ".git" / "refs" / "heads" / "main").write_text("0" * 40)
    os.symlink("config", top / ".git" / "config-link")

    hand_over(top, objects, SANDBOX_UID)

    worker = os.geteuid()
    for entry in [top, *top.rglob("*")]:
        info = entry.lstat()
        relative = entry.relative_to(objects) if entry.is_relative_to(objects) else None
        if relative is not None and str(relative) in object_files:
            assert (info.st_uid, info.st_gid) == (worker, worker), entry
        else:
            assert (info.st_uid, info.st_gid) == (SANDBOX_UID, SANDBOX_UID), entry


def test_hand_over_enters_no_directory_link(base_dir: Path) -> None:
    outside = base_dir / "outside"
    outside.mkdir()
    (outside / "secret").write_text("x")
    top = base_dir / "tree"
    (top / "objects").mkdir(parents=True)
    os.symlink(outside, top / "docs")

    hand_over(top, top / "objects", SANDBOX_UID)

    worker = os.geteuid()
    assert (top / "docs").lstat().st_uid == SANDBOX_UID  # the link itself
    for path in (outside, outside / "secret"):
        assert (path.stat().st_uid, path.stat().st_gid) == (worker, worker)


@pytest.mark.parametrize(
    "plant",
    [
        lambda store: os.mkfifo(store / "pack" / "info" / "pipe"),
        lambda store: os.symlink("/etc", store / "ab" / "etc"),
        lambda store: os.symlink("/etc/passwd", store / "9f" / "4567"),
    ],
    ids=["a deep FIFO", "a directory link", "a file link"],
)
def test_an_object_store_with_a_link_or_special_file_is_refused(
    base_dir: Path, plant: Callable[[Path], None]
) -> None:
    store = base_dir / "objects"
    _store(store)
    untrusted_odb(store)  # plain files and directories: accepted
    plant(store)

    with pytest.raises(BeamError) as refused:
        untrusted_odb(store)

    assert refused.value.code == "BEM-350"
    assert "objects/" in refused.value.message
