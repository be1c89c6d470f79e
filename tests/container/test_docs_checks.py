"""The docs checks on real tools in the real sandbox image: a new failure is reported, a
warning already on the base is kept apart, and the fix turns the check green
(docs/checks.md). Each sample repository has deliberate warnings on its base."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from bot.config import RepositoryChecks, SandboxLimits
from sandbox.host.image.build import ImageInfo
from tests.container.checks_kit import reports_on_edits

MKDOCS = {
    "mkdocs.yml": "site_name: Sample\nnav:\n  - index.md\n  - retired.md\n",
    "docs/index.md": "# Sample\n\nSee [the guide](guide.md).\n",
    "docs/guide.md": "# Guide\n\nRun the installer.\n",
}
SPHINX = {
    "manual/conf.py": 'project = "Sample"\nextensions = ["myst_parser"]\n',
    "manual/index.rst": "Sample\n======\n\n.. toctree::\n\n   guide\n\nSee :ref:`retired-label`.\n",
    "manual/guide.md": "# Guide\n\nRun the installer.\n",
}
LINT = {
    ".codespellrc": "[codespell]\nignore-words-list = teh\n",
    "docs/a.md": "# A\n\nThe recieve step.\n",
    "docs/b.md": "# B\n\nFine text.\n",
}


def test_mkdocs_reports_the_new_warning_apart_from_the_old_and_the_fix_is_clean(
    tmp_path: Path, docker_client: docker.DockerClient, image: ImageInfo, limits: SandboxLimits
) -> None:
    broken = {"docs/index.md": "# Sample\n\nSee [the guide](guide.md) and [more](nope.md).\n"}
    fixed = {"docs/index.md": "# Sample\n\nSee [the guide](guide.md) and [more](guide.md).\n"}
    checks = RepositoryChecks(run=("mkdocs",))
    first, second = reports_on_edits(
        tmp_path, docker_client, image.ref, limits, MKDOCS, checks, [broken, fixed]
    )
    (run,) = first.runs
    assert run.status == "failed", run
    assert [finding.path for finding in run.new] == ["docs/index.md"]
    assert "nope.md" in run.new[0].message
    assert run.existing_total == 1 and "retired.md" in run.existing[0].message
    assert run.base_seconds is not None
    (run,) = second.runs
    assert run.status == "passed" and run.new_total == 0 and run.existing_total == 1
    assert second.clean


def test_sphinx_reports_the_new_warning_apart_from_the_old_and_the_fix_is_clean(
    tmp_path: Path, docker_client: docker.DockerClient, image: ImageInfo, limits: SandboxLimits
) -> None:
    broken = {"manual/guide.md": "# Guide\n\nRun [the installer](missing.md).\n"}
    fixed = {"manual/guide.md": "# Guide\n\nRun the installer ({doc}`index`).\n"}
    checks = RepositoryChecks(run=("sphinx",), sphinx_source="manual")
    first, second = reports_on_edits(
        tmp_path, docker_client, image.ref, limits, SPHINX, checks, [broken, fixed]
    )
    (run,) = first.runs
    assert run.status == "failed", run
    assert [(f.path, f.line, f.rule) for f in run.new] == [
        ("manual/guide.md", 3, "myst.xref_missing")
    ]
    assert run.existing_total == 1 and run.existing[0].rule == "ref.ref"
    (run,) = second.runs
    assert run.status == "passed", run
    assert run.existing_total == 1


def test_page_checks_read_the_repository_config_and_look_only_at_changed_pages(
    tmp_path: Path, docker_client: docker.DockerClient, image: ImageInfo, limits: SandboxLimits
) -> None:
    broken = {
        "docs/a.md": "# A\n\nThe recieve step, teh end.\n## Tight\n",
        ".markdownlint.json": '{"default": true, "MD041": false}\n',
    }
    fixed = {"docs/a.md": "# A\n\nThe recieve step, teh end.\n\n## Tight\n"}
    checks = RepositoryChecks(run=("markdownlint", "codespell", "links"))
    first, second = reports_on_edits(
        tmp_path, docker_client, image.ref, limits, LINT, checks, [broken, fixed]
    )
    lint, spelling, links = first.runs
    assert lint.status == "failed" and {f.rule for f in lint.new} == {"MD022"}
    # "teh" is in the repository's ignore list; "recieve" was on the base already.
    assert spelling.status == "passed", spelling
    assert spelling.existing_total == 1 and "recieve" in spelling.existing[0].message
    assert links.status == "passed"
    assert [run.status for run in second.runs] == ["passed", "passed", "passed"]


def test_a_site_build_the_image_lacks_is_an_error_never_green(
    tmp_path: Path, docker_client: docker.DockerClient, image: ImageInfo, limits: SandboxLimits
) -> None:
    checks = RepositoryChecks(run=("mdbook",))
    (report,) = reports_on_edits(
        tmp_path, docker_client, image.ref, limits, {"book.toml": "[book]\n"}, checks, [{}]
    )
    (run,) = report.runs
    assert run.status == "error" and "mdbook is not in the sandbox image" in run.detail
    assert not report.clean and report.new_failures == 1


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        ({"mkdocs.yml": "site_name: S\nplugins:\n  - absent-plugin\n"}, "absent-plugin"),
        ({"manual/conf.py": 'extensions = ["absent_extension"]\n'}, "absent_extension"),
    ],
)
def test_a_plugin_the_image_lacks_is_an_error_that_names_it(
    tmp_path: Path,
    docker_client: docker.DockerClient,
    image: ImageInfo,
    limits: SandboxLimits,
    files: dict[str, str],
    needle: str,
) -> None:
    build = "mkdocs" if "mkdocs.yml" in files else "sphinx"
    files = {**files, "manual/index.rst": "I\n=\n"}
    checks = RepositoryChecks(run=(build,), sphinx_source="manual")
    (report,) = reports_on_edits(tmp_path, docker_client, image.ref, limits, files, checks, [{}])
    (run,) = report.runs
    assert run.status in {"error", "failed"}
    assert not report.clean
    shown = run.detail + " ".join(finding.message for finding in run.new)
    assert needle in shown, run
