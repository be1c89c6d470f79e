"""A large docs-like repository for the benchmarks, generated once and cached under /tmp.

Files are markdown pages spread over ``docs/<section>/<topic>/``. The first commit adds every
page; each later commit edits one to three pages. Commits are built in process with pygit2
(blobs and trees written directly, only the trees on a changed path rebuilt), so 5,000 of
them take seconds, not the minutes 5,000 git invocations would. One ``git repack`` at the end
packs the objects the way a real clone's are.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
from pygit2.enums import CheckoutStrategy, FileMode

__all__ = ["BenchRepo", "bench_repository"]

CACHE = Path("/tmp/riverbeam-bench")
_FORMAT = 1  # bump when the generator's output changes, so old caches are not reused
_WORDS = (
    "install",
    "configure",
    "branch",
    "commit",
    "review",
    "publish",
    "docs",
    "page",
    "section",
    "guide",
    "reference",
    "token",
    "cluster",
    "worker",
    "queue",
    "approval",
    "sandbox",
    "container",
    "mirror",
    "relay",
    "upstream",
    "schema",
    "example",
    "note",
    "warning",
    "option",
    "default",
    "value",
    "request",
    "response",
    "error",
    "retry",
    "limit",
)
_EPOCH = 1_700_000_000


@dataclass(frozen=True)
class BenchRepo:
    """A generated repository: its working tree, and the parameters it was built with."""

    path: Path
    files: int
    commits: int
    paths: tuple[str, ...] = field(repr=False)


def bench_repository(files: int = 20_000, commits: int = 5_000, seed: int = 1) -> BenchRepo:
    """The cached repository for these parameters, generating it on first use."""
    home = CACHE / f"repo-f{files}-c{commits}-s{seed}-v{_FORMAT}"
    paths = _layout(files)
    if not (home / "complete").exists():
        shutil.rmtree(home, ignore_errors=True)
        _generate(home / "work", paths, commits, random.Random(seed))
        (home / "complete").write_text("ok\n")
    return BenchRepo(home / "work", files, commits, paths)


def _layout(files: int) -> tuple[str, ...]:
    # 20 sections x 20 topics x N pages: a nested tree like a large documentation site.
    per_topic = max(1, -(-files // 400))
    names = (
        f"docs/section-{index // (20 * per_topic) % 20:02d}/topic-{index // per_topic % 20:02d}/"
        f"page-{index % per_topic:03d}.md"
        for index in range(files)
    )
    return tuple(sorted(names))


def _page(rng: random.Random, title: str) -> bytes:
    paragraphs = [
        " ".join(rng.choice(_WORDS) for _ in range(rng.randint(20, 60))).capitalize() + "."
        for _ in range(rng.randint(3, 8))
    ]
    return ("# " + title + "\n\n" + "\n\n".join(paragraphs) + "\n").encode()


class _TreeState:
    """Directory entries in memory; only directories under a changed path are rewritten."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self.dirs: dict[str, dict[str, tuple[pygit2.Oid, int]]] = {"": {}}
        self.dirty: set[str] = {""}

    def put(self, path: str, blob: pygit2.Oid) -> None:
        parent, _, name = path.rpartition("/")
        self._ensure(parent)
        self.dirs[parent][name] = (blob, FileMode.BLOB)
        self._mark(parent)

    def _ensure(self, directory: str) -> None:
        if directory in self.dirs:
            return
        self.dirs[directory] = {}
        parent = directory.rpartition("/")[0]
        self._ensure(parent)

    def _mark(self, directory: str) -> None:
        while True:
            self.dirty.add(directory)
            if not directory:
                return
            directory = directory.rpartition("/")[0]

    def write(self) -> pygit2.Oid:
        # Deepest first, so a parent is written after the subtrees it points at.
        for directory in sorted(self.dirty, key=lambda d: d.count("/") + bool(d), reverse=True):
            builder = self.repo.TreeBuilder()
            for name, (oid, mode) in sorted(self.dirs[directory].items()):
                builder.insert(name, oid, mode)
            oid = builder.write()
            if directory:
                parent, _, name = directory.rpartition("/")
                self.dirs[parent][name] = (oid, FileMode.TREE)
            else:
                root = oid
        self.dirty.clear()
        return root


def _generate(work: Path, paths: tuple[str, ...], commits: int, rng: random.Random) -> None:
    work.mkdir(parents=True)
    repo = pygit2.init_repository(str(work), initial_head="main")
    state = _TreeState(repo)
    for path in paths:
        state.put(path, repo.create_blob(_page(rng, path)))
    parents: list[pygit2.Oid] = []
    for number in range(commits):
        if number:
            for path in rng.sample(paths, rng.randint(1, 3)):
                state.put(path, repo.create_blob(_page(rng, path)))
        when = pygit2.Signature("Bench", "bench@example.com", _EPOCH + number * 600, 0)
        message = "Initial import" if not number else f"Edit pages ({number})"
        parents = [repo.create_commit(None, when, when, message, state.write(), parents)]
    main = repo.references.create("refs/heads/main", parents[0], force=True)
    repo.checkout(main, strategy=CheckoutStrategy.FORCE)
    subprocess.run(["git", "-C", str(work), "repack", "-adq"], check=True)
    subprocess.run(["git", "-C", str(work), "prune-packed"], check=True)
