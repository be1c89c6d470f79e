"""The site build on a real repository: encode/uvicorn's MkDocs documentation, built by
``mkdocs build --strict`` with its own ``mkdocs.yml``, Material theme overrides, snippet
include and hook (tests/data/uvicorn, BSD-3-Clause). A change that breaks a link fails the
build and is reported as new, the misspelling the real pages already have is kept apart,
and the fix is clean; each check's time is printed (``pytest -s``)."""

from __future__ import annotations

from pathlib import Path

import docker

from bot.config import RepositoryChecks, SandboxLimits
from harness.snapshots import snapshot_files
from sandbox.host.image.build import ImageInfo
from tests.container.checks_kit import reports_on_edits

PAGE = "docs/deployment.md"


def test_a_broken_link_in_uvicorns_docs_fails_its_own_strict_build_and_the_fix_is_clean(
    tmp_path: Path, docker_client: docker.DockerClient, image: ImageInfo, limits: SandboxLimits
) -> None:
    files = snapshot_files("uvicorn")
    original = files[PAGE]
    broken = original + "\nSee [the settings](setings.md) for every option.\n"
    fixed = original + "\nSee [the settings](settings.md) for every option.\n"
    checks = RepositoryChecks(run=("markdownlint", "codespell", "links", "mkdocs"))
    first, second = reports_on_edits(
        tmp_path, docker_client, image.ref, limits, files, checks, [{PAGE: broken}, {PAGE: fixed}]
    )
    lint, spelling, links, build = first.runs
    assert build.status == "failed" and [f.path for f in build.new] == [PAGE]
    assert "setings.md" in build.new[0].message
    assert spelling.status == "failed" and spelling.new[0].message == "setings ==> settings"
    # What the real pages already have is counted apart and fails nothing.
    assert spelling.existing_total == 1 and "dependant" in spelling.existing[0].message
    assert lint.status == "passed" and lint.existing_total > 0
    assert links.status == "failed"
    assert second.clean, second
    for run in first.runs:
        print(f"uvicorn {run.check}: {run.seconds:.2f} s, base {run.base_seconds} s")
    print(f"uvicorn whole run: {first.seconds:.2f} s, again on the fix: {second.seconds:.2f} s")
