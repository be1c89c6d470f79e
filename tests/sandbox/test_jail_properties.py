"""Property tests: whatever path the model sends, an accepted call touches only inside files.

The tree mixes real files, symlinks that stay inside (some through ``..``), symlinks that
leave (absolute, relative, through a directory), loops, links into ``.git`` and a dangling
link. Paths are built from those names plus ``..``, ``.``, separators, backslashes, ``.git``
disguises, look-alike dots, NUL and random text. ``RecordingRoot`` notes, for every
resolution, the real directory the jail ended in (``/proc/self/fd``) and the identity of
every file it opened; the properties check those against the set of inside files.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from bot.core.errors import JailError
from sandbox.inside.jail import SandboxRoot, _Cursor, _Found, is_repository_metadata
from tests.sandbox.jail_kit import OUTSIDE_SECRET, deadline, snapshot_tree

PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
FILES = ["top.md", "a/f.md", "a/b/g.md", "a/b/c/h.md"]
LINKS = {
    "in_file": "a/f.md",
    "in_dir": "a",
    "in_deep": "a/b/c",
    "chain": "in_dir/b",
    "a/b/up": "../f.md",
    "a/b/up2": "../..",
    "out_abs": "{outside}/secret.txt",
    "out_rel": "../outside",
    "a/out_rel2": "../../outside/secret.txt",
    "a/b/back_out": "../../../root/a",
    "loop1": "loop2",
    "loop2": "loop1",
    "to_git": ".git",
    "a/to_git_cfg": "../.git/config",
    "dangling": "nowhere",
}
EXTRA = ["a/hard", "a/pipe"]  # a hard link to the outside secret, and a FIFO
# The in-jail directory links, by canonical path, and the directory each one reaches.
DIR_LINKS = {"in_dir": "a", "in_deep": "a/b/c", "chain": "a/b", "a/b/up2": ""}
# fmt: off
HOSTILE = ["..", ".", "", ".git", ".GIT", "git~1", ".git.", "．ｇｉｔ", ".g\u200bit", "\x00",
           "%2e%2e", "．．", "x\\..", "..\\x", "C:", "outside", "root", "secret.txt", "new", "é"]
# fmt: on
SEPARATORS = ["/", "/", "/", "//", "/./", "\\"]


@dataclass
class Opened:
    directories: list[str] = field(default_factory=list)
    files: list[tuple[int, int]] = field(default_factory=list)


class RecordingRoot(SandboxRoot):
    """A SandboxRoot that records where each resolution ended and which files it opened."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.opened = Opened()

    def _find(self, cursor: _Cursor, parts: list[str], *, create: bool) -> _Found:
        found = super()._find(cursor, parts, create=create)
        self.opened.directories.append(os.path.realpath(f"/proc/self/fd/{found.dir_fd}"))
        return found

    def _open_leaf(self, found: _Found, flags: int) -> int:  # type: ignore[override]
        fd = super()._open_leaf(found, flags)
        st = os.fstat(fd)
        self.opened.files.append((st.st_dev, st.st_ino))
        return fd


def build_tree(base: Path) -> Path:
    root = base / "root"
    pygit2.init_repository(str(root))
    (root / ".git" / "secret").write_bytes(b"METADATA")
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(f"inside:{rel}".encode())
    for rel, target in LINKS.items():
        (root / rel).symlink_to(target.replace("{outside}", str(base / "outside")))
    (base / "outside").mkdir()
    (base / "outside" / "secret.txt").write_bytes(OUTSIDE_SECRET)
    os.link(base / "outside" / "secret.txt", root / EXTRA[0])
    os.mkfifo(root / EXTRA[1])
    return root.resolve()


def inside_files(root: Path) -> dict[tuple[int, int], Path]:
    """Regular files inside the root, not in metadata and not hard links, by identity."""
    found: dict[tuple[int, int], Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [name for name in dirnames if not is_repository_metadata(name)]
        for name in filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                found[(st.st_dev, st.st_ino)] = path
    return found


def assert_inside(root: Path, real_directory: str) -> None:
    relative = Path(real_directory).relative_to(root)  # raises if the directory is outside
    assert not any(is_repository_metadata(part) for part in relative.parts), real_directory


def _listing() -> dict[str, list[str]]:
    listing: dict[str, set[str]] = {"": {".git"}}
    for rel in [*FILES, *LINKS, *EXTRA]:
        parts = rel.split("/")
        for depth in range(len(parts)):
            listing.setdefault("/".join(parts[:depth]), set()).add(parts[depth])
    return {directory: sorted(names) for directory, names in listing.items()}


LISTING = _listing()
hostile = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=3))


@st.composite
def paths(draw: st.DrawFn) -> str:
    """A walk down the tree's real names (through its directory links) until it reaches
    something that is not a directory, with hostile pieces, odd separators and absolute
    leads mixed in."""
    position = ""
    pieces = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.integers(0, 4)) < 4:
            piece = draw(st.sampled_from(LISTING[position]))
        else:
            piece = draw(hostile)
        pieces.append(piece)
        here = f"{position}/{piece}" if position else piece
        position = DIR_LINKS.get(here, here)
        if position not in LISTING:
            break  # a file, an escaping link or a hostile piece: the path ends here
    text = "".join(piece + draw(st.sampled_from(SEPARATORS)) for piece in pieces)
    lead = draw(st.sampled_from(["", "./", "/", "\\"])) if draw(st.integers(0, 5)) == 5 else ""
    return lead + text.rstrip("/\\")


def outcome(call: Callable[[], object]) -> str:
    """Run ``call``; name how it ended, for hypothesis statistics and for the assertions."""
    try:
        call()
    except JailError as refused:
        return refused.code
    except (FileNotFoundError, NotADirectoryError) as missing:
        return type(missing).__name__
    return "accepted"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tree(tmp_path_factory.mktemp("read-tree"))


@PROPERTY_SETTINGS
@given(path=paths())
def test_accepted_reads_open_only_inside_files(tree: Path, path: str) -> None:
    jail = RecordingRoot(tree)
    result: list[bytes] = []
    with deadline(5):
        ended = outcome(lambda: result.append(jail.read_bytes(path)))
    event(f"read: {ended}")
    if ended != "accepted":
        return
    inside = inside_files(tree)
    assert jail.opened.files, "read_bytes returned without opening a file"
    assert all(identity in inside for identity in jail.opened.files)
    for directory in jail.opened.directories:
        assert_inside(tree, directory)
    assert result[0].startswith(b"inside:")


@PROPERTY_SETTINGS
@given(path=paths())
def test_accepted_resolutions_name_inside_entries(tree: Path, path: str) -> None:
    jail = RecordingRoot(tree)
    result: list[str] = []
    ended = outcome(lambda: result.append(jail.resolve(path)))
    event(f"resolve: {ended}")
    if ended != "accepted":
        return
    for directory in jail.opened.directories:
        assert_inside(tree, directory)
    canonical = result[0]
    assert_inside(tree, os.path.realpath(tree / canonical))
    assert jail.normalize(canonical) == canonical
    assert jail.exists(path)


@PROPERTY_SETTINGS
@given(path=paths())
def test_accepted_walks_list_only_inside_names(tree: Path, path: str) -> None:
    jail = RecordingRoot(tree)
    result: list[list[str]] = []
    ended = outcome(lambda: result.append(list(jail.walk(path))))
    event(f"walk: {ended}")
    if ended != "accepted":
        return
    for directory in jail.opened.directories:
        assert_inside(tree, directory)
    for entry in result[0]:
        assert jail.normalize(entry) == entry
        assert (tree / entry).is_symlink() or (tree / entry).is_file()


@PROPERTY_SETTINGS
@given(path=paths(), payload=st.binary(min_size=1, max_size=32))
def test_accepted_writes_land_inside_and_touch_nothing_else(
    tmp_path_factory: pytest.TempPathFactory, path: str, payload: bytes
) -> None:
    base = tmp_path_factory.mktemp("write-tree")
    root = build_tree(base)
    jail = RecordingRoot(root)
    outside_before = snapshot_tree(base / "outside")
    tree_before = snapshot_tree(root)
    marked = b"payload:" + payload
    with deadline(5):
        ended = outcome(lambda: jail.write_bytes(path, marked))
    event(f"write: {ended}")
    if ended == "accepted":
        holders = [p for p in inside_files(root).values() if p.read_bytes() == marked]
        assert len(holders) == 1, holders
        for directory in jail.opened.directories:
            assert_inside(root, directory)
        git_now = {k: v for k, v in snapshot_tree(root).items() if k.startswith(".git/")}
        assert git_now == {k: v for k, v in tree_before.items() if k.startswith(".git/")}
    else:
        assert snapshot_tree(root) == tree_before, "a refused write changed the tree"
    assert snapshot_tree(base / "outside") == outside_before


@PROPERTY_SETTINGS
@given(path=st.one_of(paths(), st.text(max_size=40)))
def test_normalize_is_canonical_and_idempotent(tree: Path, path: str) -> None:
    jail = SandboxRoot(tree)
    result: list[str] = []
    ended = outcome(lambda: result.append(jail.normalize(path)))
    event(f"normalize: {ended}")
    if ended != "accepted":
        assert ended in {"BEM-300", "BEM-301", "BEM-302", "BEM-304"}
        return
    canonical = result[0]
    assert jail.normalize(canonical) == canonical
    assert not canonical.startswith(("/", "\\"))
    parts = canonical.split("/") if canonical else []
    assert all(part not in ("", ".", "..") for part in parts)
    assert not any(is_repository_metadata(part) for part in parts)


# fmt: off
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u202a", "\u202e", "\u2060",
             "\u2063", "\ufeff", "\u00ad", "\x7f", "\ufe0f"]
# fmt: on
DOTGIT_LOOKALIKES = (".．﹒", "gGｇＧ", "iIｉＩ", "tTｔＴ")


@st.composite
def disguised_dotgit(draw: st.DrawFn) -> str:
    letters = [draw(st.sampled_from(options)) for options in DOTGIT_LOOKALIKES]
    for _ in range(draw(st.integers(0, 3))):
        letters.insert(draw(st.integers(0, len(letters))), draw(st.sampled_from(INVISIBLE)))
    tail = draw(st.text(alphabet=". \u00a0", max_size=4))
    stream = draw(st.sampled_from(["", ":", "::$INDEX_ALLOCATION", ":x"]))
    return "".join(letters) + tail + stream


@PROPERTY_SETTINGS
@given(name=disguised_dotgit())
def test_every_disguise_of_dotgit_is_metadata(name: str) -> None:
    assert is_repository_metadata(name)


@PROPERTY_SETTINGS
@given(name=st.text(alphabet="abcdefhijklmnopqrstuvwxyzT.-_~:0123456789 é\u200b", max_size=12))
def test_names_without_a_g_are_never_metadata(name: str) -> None:
    assert not is_repository_metadata(name)
