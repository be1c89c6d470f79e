"""The docs checks on a real repository's files: 21 pages of tldr-pages/tldr with its own
markdownlint rules (tests/data/tldr, CC-BY 4.0). A change that breaks a page is reported,
what the real pages already have is kept apart, and the fix is clean; each check's time is
printed (``pytest -s``)."""

from __future__ import annotations

from pathlib import Path

import docker

from bot.config import RepositoryChecks, SandboxLimits
from harness.snapshots import snapshot_files
from sandbox.host.image.build import ImageInfo
from tests.container.checks_kit import reports_on_edits


def test_a_broken_tldr_page_is_reported_apart_from_the_pages_own_findings_and_the_fix_is_clean(
    tmp_path: Path, docker_client: docker.DockerClient, image: ImageInfo, limits: SandboxLimits
) -> None:
    files = snapshot_files("tldr")
    page = "pages/common/tar.md"
    original = files[page]
    broken = original.replace(
        "- [c]reate an archive", "## Usage\n- Recieve and [c]reate an archive", 1
    )
    assert broken != original
    fixed = original.replace("Archiving", "Archiving and extracting")
    checks = RepositoryChecks(run=("markdownlint", "codespell", "links"))
    first, second = reports_on_edits(
        tmp_path, docker_client, image.ref, limits, files, checks, [{page: broken}, {page: fixed}]
    )
    lint, spelling, links = first.runs
    assert lint.status == "failed" and {f.path for f in lint.new} == {page}
    assert {f.rule for f in lint.new} >= {"MD022"}
    assert spelling.status == "failed" and "Recieve" in spelling.new[0].message
    assert links.status == "passed"
    assert second.clean, second
    for run in first.runs:
        print(f"tldr {run.check}: {run.seconds:.2f} s, base {run.base_seconds} s")
    print(f"tldr whole run: {first.seconds:.2f} s, again on the fix: {second.seconds:.2f} s")
