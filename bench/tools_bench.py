"""The sandbox tools on a large repository, beside the git CLI doing the same work, in one run.

    python -m bench.tools_bench [--runs 15] [--files 20000] [--commits 5000] [--repo DIR]

The repository is the cached generated one of ``bench._repo`` (20,000 markdown pages in
nested directories, 5,000 commits), copied to a scratch directory so the cache stays
pristine, with a few edited, deleted and untracked files. Each tool runs in process through
the synchronous dispatcher (``sandbox.inside.sandbox_tools.call_tool``), as the in-container
tool server runs it; each baseline is one git (or ``cat``) process doing the same work:

* ``list_tree``: ``git ls-files --cached --others --exclude-standard`` (our result is capped
  at 2,000 entries, so the one-section row is the like-for-like comparison);
* ``read_file``: ``cat`` of the same page;
* ``git_status``: ``git status --porcelain=v2``;
* ``git_diff``: ``git diff HEAD`` (ours also includes the new files' content);
* ``git_log``: ``git log -20`` with sha, author, date, subject and body; and with one
  page's path, ``git log -20 -- <page>``.

``--repo DIR`` measures a checkout of a real repository instead (a clone of a mirror that
the search tool's ``fetch`` brought, such as tldr-pages/tldr; see bench/README.md).

After warm-up rounds (the first ``git status`` also refreshes the index's stat cache, which
both sides then use), rounds alternate which side goes first. Medians are printed, with the
ratio to git and whether it meets the target of at most 1.5x; nothing is asserted.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._repo import bench_repository
from bot.core import safe_walk
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.sandbox_tools import call_tool
from sandbox.inside.worktree import WorkingTree

TARGET_RATIO = 1.5
WARM_UP = 3
_LOG_FORMAT = "--format=%H%x00%an <%ae>%x00%aI%x00%s%x00%b"


@dataclass(frozen=True)
class Case:
    label: str
    ours: Callable[[], Any]
    git: list[str]


def main() -> None:
    options = _arguments()
    if options.repo is None:
        generated = bench_repository(options.files, options.commits)
        source, paths = generated.path, generated.paths
    else:
        source, paths = options.repo.resolve(), _pages_of(options.repo)
    scratch = Path(tempfile.mkdtemp(prefix="riverbeam-tools-bench-"))
    try:
        work = scratch / "work"
        shutil.copytree(source, work, symlinks=True)
        page = _make_dirty(work, paths)
        # The rule-file check remembers a directory's listing once it is older than its
        # settle window (sandbox.inside.repo_guard): measured as a job meets it after that.
        time.sleep(safe_walk.SETTLE_NS / 1e9)
        tree = WorkingTree(SandboxRoot(work), ("main",))
        _report(_measure(_cases(tree, work, page), options.runs), source)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--commits", type=int, default=5_000)
    parser.add_argument(
        "--repo",
        type=Path,
        default=None,
        help="a checkout of a real repository to measure instead of the generated one",
    )
    return parser.parse_args()


def _pages_of(repo: Path) -> tuple[str, ...]:
    """The tracked Markdown pages of ``repo`` that are regular files, sorted."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-s", "--", "*.md"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    regular = (line.split("\t", 1) for line in listed.splitlines() if line.startswith("100"))
    return tuple(sorted(path for _, path in regular))


def _make_dirty(work: Path, paths: tuple[str, ...]) -> str:
    """Edit three pages, delete one, add three new ones; return a page to read."""
    for path in paths[10:13]:
        with open(work / path, "a") as handle:
            handle.write("\nAn edit the bench leaves uncommitted.\n")
    (work / paths[20]).unlink()
    (work / "bench-new-section").mkdir()
    for name in ("bench-new-page.md", "bench-new-section/a.md", "bench-new-section/b.md"):
        (work / name).write_text("# New\n\nA page that is not tracked yet.\n")
    return paths[len(paths) // 2]


def _cases(tree: WorkingTree, work: Path, page: str) -> list[Case]:
    def tool(name: str, **args: Any) -> Callable[[], Any]:
        return lambda: call_tool(tree, name, args)

    section = page.rpartition("/")[0]
    ls_files = ["ls-files", "--cached", "--others", "--exclude-standard"]
    git = ["git", "-C", str(work)]
    return [
        # First, so that its warm-up refreshes the index for everything after it.
        Case("git_status", tool("git_status"), [*git, "status", "--porcelain=v2"]),
        Case("list_tree (root, capped)", tool("list_tree"), [*git, *ls_files]),
        Case(
            f"list_tree ({section})",
            tool("list_tree", path=section),
            [*git, *ls_files, "--", section],
        ),
        Case("read_file", tool("read_file", path=page), ["cat", str(work / page)]),
        Case("git_diff", tool("git_diff"), [*git, "diff", "HEAD"]),
        Case("git_log", tool("git_log"), [*git, "log", "-20", _LOG_FORMAT]),
        Case(
            "git_log (one page)",
            tool("git_log", path=page),
            [*git, "log", "-20", _LOG_FORMAT, "--", page],
        ),
    ]


def _measure(cases: list[Case], runs: int) -> list[tuple[Case, float, float]]:
    results = []
    samples: dict[str, tuple[list[float], list[float]]] = {c.label: ([], []) for c in cases}
    for round_number in range(WARM_UP + runs):
        for case in cases:
            ours, theirs = samples[case.label]
            sides: list[tuple[list[float], Callable[[], object]]] = [
                (ours, case.ours),
                (theirs, functools.partial(_run, case.git)),
            ]
            # Alternate who goes first, so cache warmth and drift favour neither side.
            for sink, action in sides if round_number % 2 else sides[::-1]:
                started = time.perf_counter()
                action()
                if round_number >= WARM_UP:
                    sink.append((time.perf_counter() - started) * 1000)
    for case in cases:
        ours, theirs = samples[case.label]
        results.append((case, statistics.median(ours), statistics.median(theirs)))
    return results


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _report(results: list[tuple[Case, float, float]], source: Path) -> None:
    print(f"repository: {source} (copied; 3 edited, 1 deleted, 3 untracked files)")
    print()
    header = (
        f"{'tool':<28} {'ours ms':>9} {'git CLI ms':>11} {'ratio':>7}  target <= {TARGET_RATIO}x"
    )
    print(header)
    print("-" * len(header))
    for case, ours, theirs in results:
        ratio = ours / theirs
        verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
        print(f"{case.label:<28} {ours:>9.2f} {theirs:>11.2f} {ratio:>6.2f}x  {verdict}")
    print()
    print("git CLI times include starting a git process (about 1-2 ms); ours run in process.")


if __name__ == "__main__":
    main()
