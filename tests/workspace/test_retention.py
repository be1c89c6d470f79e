"""Workspace garbage collection: what goes, what stays, and no symlink is ever followed."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.config import RepositoryConfig, WorkspaceSettings
from sandbox.host.workspace.bases import BASES
from sandbox.host.workspace.overlay import mounts_under
from sandbox.host.workspace.prepare import (
    FINISHED,
    METADATA,
    SANDBOX_UID,
    Workspace,
    prepare_workspace,
    release_workspace,
)
from sandbox.host.workspace.retention import STAGING_GRACE, collect_workspaces
from sandbox.host.workspace.spare_dirs import make_spare_directory

HOUR = 3600.0


def bases_of(workspace: Workspace) -> list[str]:
    """What retention names for the base of ``workspace`` when it removes it."""
    if workspace.view_of is None:
        return []
    return [f"{BASES}/{workspace.repo}/{workspace.base_sha}"]


def _age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(path, (when, when), follow_symlinks=False)


def test_finished_and_expired_and_unknown_go_active_and_recent_stay(
    repo_config: RepositoryConfig, settings: WorkspaceSettings, base_dir: Path
) -> None:
    for job in ("done-old", "done-new", "active-old", "crashed-old"):
        prepare_workspace(job, "docs", repo_config, None, settings)
    release_workspace("done-old", settings)
    release_workspace("done-new", settings)
    _age(settings.root / "done-old" / FINISHED, 25 * HOUR)
    _age(settings.root / "active-old" / METADATA, 100 * HOUR)
    # Finished without ever being released (the worker died): the record's age counts.
    _age(settings.root / "crashed-old" / METADATA, 25 * HOUR)
    (settings.root / "no-record").mkdir()
    (settings.root / "stray.txt").write_text("?")
    (settings.root / "stray-link").symlink_to(base_dir)
    (settings.root / ".staging-young-x").mkdir()
    (settings.root / ".staging-old-x").mkdir()
    _age(settings.root / ".staging-old-x", STAGING_GRACE + 1)
    finished = {"done-old", "done-new", "crashed-old"}

    removed = collect_workspaces(settings, finished.__contains__, time.time())

    assert sorted(removed) == sorted(
        ["done-old", "crashed-old", "no-record", "stray.txt", "stray-link", ".staging-old-x"]
    )
    bases = [BASES] if settings.views != "never" else []
    assert sorted(os.listdir(settings.root)) == [
        *bases,
        ".staging-young-x",
        "active-old",
        "done-new",
    ]
    assert base_dir.is_dir()
    assert not mounts_under(settings.root / "done-old")


def test_the_clock_is_the_callers(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    workspace = prepare_workspace("done", "docs", repo_config, None, settings)
    release_workspace("done", settings)

    _age(settings.root / "done" / FINISHED, HOUR)
    release_workspace("done", settings)  # a retried release keeps the first time

    assert collect_workspaces(settings, lambda _: True, time.time() + 22 * HOUR) == []
    removed = collect_workspaces(settings, lambda _: True, time.time() + 23.5 * HOUR)
    # The base it was a view of goes with it: no workspace names it and none took it lately.
    assert removed == ["done", *bases_of(workspace)]


def test_a_symlink_planted_in_a_tree_is_removed_not_followed(
    repo_config: RepositoryConfig, settings: WorkspaceSettings, base_dir: Path
) -> None:
    outside = base_dir / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "precious.txt").write_text("do not delete\n")
    workspace = prepare_workspace("hostile", "docs", repo_config, None, settings)
    for link, target in (
        (workspace.tree / "escape", outside),
        (workspace.tree / "docs" / "deep-escape", outside / "keep"),
        (workspace.outbox / "refs" / "heads" / "escape", outside),
        (workspace.tree / "file-escape", outside / "keep" / "precious.txt"),
    ):
        link.symlink_to(target)
        os.lchown(link, SANDBOX_UID, SANDBOX_UID)
    release_workspace("hostile", settings)

    removed = collect_workspaces(settings, lambda _: True, time.time() + 25 * HOUR)

    assert removed == ["hostile", *bases_of(workspace)]
    assert not (settings.root / "hostile").exists()
    assert (outside / "keep" / "precious.txt").read_text() == "do not delete\n"


def test_a_missing_root_is_nothing_to_collect(base_dir: Path) -> None:
    settings = WorkspaceSettings(root=base_dir / "absent", mirrors=base_dir / "m")
    assert collect_workspaces(settings, lambda _: True) == []


def test_a_spare_directory_stays_until_its_deadline_and_a_claimed_one_is_its_jobs(
    repo_config: RepositoryConfig, settings: WorkspaceSettings
) -> None:
    now = datetime.now(UTC)
    # Live spares, one past its creation grace for staging: its container may be waiting.
    views = settings.views != "never"
    _, live = make_spare_directory(settings.root, now + timedelta(minutes=30), views=views)
    _age(live, STAGING_GRACE + 1)
    _, overdue = make_spare_directory(settings.root, now - timedelta(seconds=1), views=views)
    # A claimed spare: the job's workspace was built in it and it was renamed the job's.
    _, claimed = make_spare_directory(settings.root, now - timedelta(hours=1), views=views)
    prepare_workspace("claimed-job", "docs", repo_config, None, settings, staging=claimed)
    (settings.root / ".spare-nonsense").mkdir()

    removed = collect_workspaces(settings, lambda _: False, now.timestamp())

    assert sorted(removed) == sorted([overdue.name, ".spare-nonsense"])
    assert sorted(os.listdir(settings.root)) == sorted(
        ["claimed-job", live.name, *([BASES] if views else [])]
    )
    assert (settings.root / "claimed-job" / "tree" / ".git").is_dir()
    assert not claimed.exists()
    assert not mounts_under(settings.root / overdue.name)
