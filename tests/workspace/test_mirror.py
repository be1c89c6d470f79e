"""The mirror cache: created on first use, refreshed with pruning, safe under concurrency."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bot.config import Credentials, RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from harness.gitkit import git, upstream_push
from sandbox.host.upstream import mirror as mirror_module
from sandbox.host.upstream.mirror import mirror_lock, mirror_path, sync_mirror
from sandbox.host.workspace.bases import BASES, base_directory
from sandbox.host.workspace.prepare import Workspace, prepare_workspace
from tests.workspace.conftest import assert_secret_absent, bases_named


def _sync(config: RepositoryConfig, settings: WorkspaceSettings) -> Path:
    return sync_mirror("docs", config, settings)


def _branches(mirror: Path) -> dict[str, str]:
    listing = git("-C", str(mirror), "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ") for line in listing.splitlines())


def test_the_first_sync_creates_a_bare_mirror_of_every_branch(
    upstream: Path, token: str, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    mirror = _sync(repo_config, settings)

    assert mirror == settings.mirrors / "docs.git"
    assert git("-C", str(mirror), "rev-parse", "--is-bare-repository") == "true"
    assert _branches(mirror) == _branches(upstream)
    assert git("config", "--file", str(mirror / "config"), "--list").splitlines() == [
        "core.repositoryformatversion=0",
        "core.filemode=true",
        "core.bare=true",
    ]
    assert_secret_absent(token, settings.mirrors)


def test_a_refresh_brings_new_commits_and_branches_and_prunes_deleted_ones(
    upstream: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    mirror = _sync(repo_config, settings)
    new_main = upstream_push(upstream, "main", {"docs/faq.md": "FAQ\n"}, "main")
    upstream_push(upstream, "docs/new", {"docs/new.md": "New\n"}, "main")
    git("-C", str(upstream), "branch", "-D", "docs/old")

    _sync(repo_config, settings)

    assert _branches(mirror) == _branches(upstream)
    assert _branches(mirror)["refs/heads/main"] == new_main
    assert "refs/heads/docs/old" not in _branches(mirror)


def test_an_unreachable_upstream_is_bem_340_without_secrets(
    base_dir: Path, token: str, settings: WorkspaceSettings
) -> None:
    config = RepositoryConfig(
        upstream=str(base_dir / "missing.git"),
        credentials=Credentials(token_env="RIVERBEAM_TEST_UPSTREAM_TOKEN"),
    )

    with pytest.raises(BeamError) as caught:
        _sync(config, settings)
    assert caught.value.code == "BEM-340"
    assert "missing.git" in caught.value.message
    assert token not in caught.value.message


@pytest.mark.parametrize("name", ["../up", "a/b", ".hidden", "", "x" * 101])
def test_a_repository_name_unfit_for_a_file_name_is_refused(
    name: str, settings: WorkspaceSettings
) -> None:
    with pytest.raises(BeamError) as caught:
        mirror_path(settings, name)
    assert caught.value.code == "BEM-900"


def test_a_fetch_waits_for_the_mirror_lock(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    mirror = _sync(repo_config, settings)
    done = threading.Event()

    def fetch() -> None:
        _sync(repo_config, settings)
        done.set()

    with mirror_lock(mirror, exclusive=False):
        worker = threading.Thread(target=fetch)
        worker.start()
        assert not done.wait(0.5), "the fetch ran while a reader held the mirror"
    worker.join(10)
    assert done.is_set()


def _prepare(
    job_id: str,
    config: RepositoryConfig,
    settings: WorkspaceSettings,
    start: threading.Barrier,
) -> Workspace:
    start.wait()
    return prepare_workspace(job_id, "docs", config, None, settings)


def test_concurrent_prepares_in_separate_processes_share_one_sound_mirror(
    upstream: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    context = multiprocessing.get_context("spawn")
    jobs = [f"par-{index}" for index in range(4)]
    with context.Manager() as manager:
        start = manager.Barrier(len(jobs))
        with context.Pool(len(jobs)) as pool:
            results = pool.starmap(_prepare, [(job, repo_config, settings, start) for job in jobs])

    main = git("-C", str(upstream), "rev-parse", "refs/heads/main")
    assert [result.base_sha for result in results] == [main] * len(jobs)
    assert sorted(os.listdir(settings.mirrors)) == ["docs.git", "docs.lock"]
    git("-C", str(settings.mirrors / "docs.git"), "fsck", "--strict", "--no-dangling")
    views = settings.views != "never"
    assert sorted(os.listdir(settings.root)) == ([BASES] if views else []) + jobs
    # Four prepares at once on one commit: one base, the same for all.
    assert bases_named(settings, "docs") == ([main] if views else [])
    assert {result.view_of for result in results} == (
        {base_directory(settings.root, "docs", main) / "tree"} if views else {None}
    )
    for result in results:
        assert (result.tree / "docs" / "install.md").read_text() == "Install it with pip.\n"


def test_an_upstream_missing_a_blob_is_bem_349_not_a_network_problem(
    upstream: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    upstream_push(upstream, "main", {"docs/damaged.md": "a page whose blob goes missing\n"}, "main")
    blob = git("-C", str(upstream), "rev-parse", "main:docs/damaged.md")
    loose = upstream / "objects" / blob[:2] / blob[2:]
    assert loose.is_file()  # pushed as a loose object, so it can be taken away
    loose.unlink()

    with pytest.raises(BeamError) as failed:
        _sync(repo_config, settings)

    assert failed.value.code == "BEM-349"
    assert blob in failed.value.message and "git fsck" in failed.value.message
    assert "Check the upstream URL" not in failed.value.message


def test_a_fetch_that_received_objects_hands_the_freed_heap_back(
    upstream: Path,
    repo_config: RepositoryConfig,
    settings: WorkspaceSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[None] = []
    monkeypatch.setattr(mirror_module, "return_freed_heap", lambda: trims.append(None))
    _sync(repo_config, settings)
    assert len(trims) == 1
    _sync(repo_config, settings)  # nothing new upstream: nothing was indexed
    assert len(trims) == 1
    upstream_push(upstream, "main", {"docs/faq.md": "FAQ\n"}, "main")
    _sync(repo_config, settings)
    assert len(trims) == 2


_FREED_HEAP = """
import ctypes
from sandbox.host.upstream.mirror import return_freed_heap

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
before = rss()
blocks = [libc.malloc(2000) for _ in range(100_000)]  # 200 MB in small blocks, as an
for block in blocks:                                  # indexer's allocations are
    ctypes.memset(block, 1, 2000)
pin = libc.malloc(2000)  # still in use above them: the heap's top cannot shrink past it
for block in blocks:
    libc.free(block)
kept = rss()
return_freed_heap()
print(before, kept, rss())
"""


def test_return_freed_heap_gives_freed_small_blocks_back_to_the_system() -> None:
    # In a process of its own: glibc keeps small blocks freed in its heap until trimmed.
    shown = subprocess.run(
        [sys.executable, "-c", _FREED_HEAP], check=True, capture_output=True, text=True
    ).stdout
    before, kept, after = map(int, shown.split())
    assert kept - before > 150_000  # KiB still held after free()
    assert after - before < 50_000
