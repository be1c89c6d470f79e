"""``riverbeam up`` on the demo's configuration (what ``riverbeam demo --keep`` leaves), then
``riverbeam submit`` of every kind and ``riverbeam ci`` through the API, with no model key:
each job ends with a real result from the scripted demo model, computed from the sample
repository through the real tools. Real processes throughout: Redis, a worker, beat and the
API that ``up`` starts, and each command a ``riverbeam`` process of its own."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.demo import (
    PAGE,
    PAGES,
    PUBLISH_REF,
    REPO_NAME,
    REQUEST,
    SCRIPTED_LABEL,
    branch_commit,
    config_text,
    create_upstream,
    fix_links,
    fix_typos,
)
from harness.gitkit import traversable_dir, upstream_push
from harness.workers import free_port
from tests.cli.kit import PROJECT_ROOT, Background, Ran, approval_flags, cli, environment

pytestmark = pytest.mark.slow

FIXED = "docs/fixed"
FAQ = "docs/faq"
FAQ_PAGE = "# FAQ\n\nSee the [install guide](instal.md); you recieve a version number.\n"


@dataclass
class Demo:
    base: Path
    config: Path
    upstream: Path
    env: dict[str, str]
    api_url: str
    token: str
    up: Background

    def run(self, *argv: str, env: dict[str, str] | None = None) -> Ran:
        """``riverbeam --config CONFIG ARGV`` as a process of its own."""
        done = subprocess.run(
            [sys.executable, "-m", "bot.cli", "--config", str(self.config), *argv],
            env={**self.env, **(env or {})},
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
        return Ran(done.returncode, done.stdout, done.stderr)

    def approve(self, job_id: str) -> Ran:
        """Approve what ``approvals show`` shows, and follow the job to its end."""
        flags = approval_flags(self.run("approvals", "show", job_id).out, job_id)
        return self.run("approvals", "approve", job_id, *flags, "--follow")

    def ci(self, *argv: str) -> Ran:
        return self.run(
            "ci", *argv, env={"RIVERBEAM_API_URL": self.api_url, "RIVERBEAM_TOKEN": self.token}
        )


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    with traversable_dir("riverbeam-demo-kinds-") as base:
        upstream = base / "upstream.git"
        create_upstream(upstream)
        fixed = fix_links(fix_typos(PAGES[PAGE])[0], PAGE, list(PAGES))[0]
        upstream_push(upstream, FIXED, {PAGE: fixed}, "main")
        upstream_push(upstream, FAQ, {"docs/faq.md": FAQ_PAGE}, "main")
        made = cli("tokens", "new", "--name", "pipeline", "--role", "ci")
        token, _, *table = made.out.splitlines()
        api_port = free_port()
        config = base / "riverbeam.toml"
        redis_url = f"redis://127.0.0.1:{free_port()}/0"
        config.write_text(
            config_text(redis_url=redis_url, upstream=upstream, workspaces=base, scripted=True)
            + f"\n[api]\nport = {api_port}\n\n"
            + "\n".join(table)
            + "\n"
        )
        env = environment(base / "state")
        with Background(["--config", str(config), "up", "--concurrency", "1"], env) as up:
            up.wait_for("ready on", timeout=300)
            yield Demo(base, config, upstream, env, f"http://127.0.0.1:{api_port}", token, up)
            up.process.send_signal(signal.SIGINT)
            assert up.finish() == 0, up.output


def _job_id(output: str) -> str:
    found = re.search(r"job ([0-9a-f]{12}) queued", output)
    assert found, output
    return found.group(1)


def _followed(ran: Ran, *texts: str) -> str:
    """The job id of a ``submit --follow`` that ended as it should, saying what it shows."""
    assert ran.code == 0, ran.out + ran.err
    for text in (SCRIPTED_LABEL, *texts):
        assert text in ran.out, f"{text!r} missing from:\n{ran.out}"
    return _job_id(ran.out)


def test_up_says_the_model_is_scripted(demo: Demo) -> None:
    assert f"model: {SCRIPTED_LABEL}" in demo.up.output


def test_an_author_job_fixes_the_page_and_pushes_once_approved(demo: Demo) -> None:
    parked = demo.run("submit", "author", "--repo", REPO_NAME, "--request", REQUEST, "--follow")
    job_id = _followed(parked, "▸ read_file path=docs/install.md", "⏸ git_push waits")

    approved = demo.approve(job_id)
    assert approved.code == 0 and "● job succeeded" in approved.out, approved.out
    landed = branch_commit(demo.upstream, f"riverbeam/{job_id}")
    assert landed is not None and landed.subject.startswith("Fix typos and broken links")


def test_a_review_finds_the_misspelling_and_the_broken_link(demo: Demo) -> None:
    ran = demo.run("submit", "review", "--repo", REPO_NAME, "--branch", FAQ, "--follow")
    _followed(
        ran,
        "▸ read_file path=docs/faq.md",
        "▸ review_change",
        "Verdict: request_changes. Findings: 1 major, 2 minor.",
        "docs/faq.md:3: The link to 'instal.md' points at a file that does not exist.",
        "● job succeeded",
    )


def test_a_summary_names_the_commits_files_and_fixes(demo: Demo) -> None:
    ran = demo.run("submit", "summarize", "--repo", REPO_NAME, "--branch", FIXED, "--follow")
    _followed(
        ran,
        f"### `{FIXED}` compared with `main`",
        "- **Files touched**: modified: `docs/install.md`",
        "corrects 4 misspelling(s) (recomend → recommend, enviroment → environment, teh → the,",
        "repoints 1 link(s) (configure.md → configuration.md)",
        "● job succeeded",
    )


def test_commit_notes_by_submit_and_by_ci(demo: Demo) -> None:
    ran = demo.run("submit", "commit-notes", "--repo", REPO_NAME, "--branch", FIXED, "--follow")
    _followed(ran, "Fix typos and broken links in docs/install.md", "● job succeeded")

    notes = demo.ci("commit-notes", "--repo", REPO_NAME, "--range", f"main..{FIXED}")
    assert notes.code == 0, notes.err
    subject, blank, *body = notes.out.splitlines()
    assert (subject, blank) == ("Fix typos and broken links in docs/install.md", "")
    assert body[0].startswith("Readers met misspelled words or links to pages that do not")


def test_ci_reviews_approve_a_clean_change_and_request_changes_on_a_broken_one(
    demo: Demo,
) -> None:
    clean = demo.ci("review", "--repo", REPO_NAME, "--branch", FIXED)
    assert clean.code == 0, clean.err
    assert clean.out.startswith("verdict: approve\n")

    broken = demo.ci("review", "--repo", REPO_NAME, "--branch", FAQ)
    assert broken.code == 0, broken.err
    assert broken.out.startswith("verdict: request_changes\n")
    assert "- major docs/faq.md:3: The link to 'instal.md'" in broken.out


def test_a_publish_of_the_approved_review_lands_once_approved(demo: Demo) -> None:
    review = demo.run("submit", "review", "--repo", REPO_NAME, "--branch", FIXED, "--follow")
    review_id = _followed(review, "Verdict: approve.", "● job succeeded")

    argv = ("submit", "publish", "--repo", REPO_NAME, "--review-job", review_id, "--follow")
    job_id = _followed(demo.run(*argv), "⏸ publish_docset waits for a person's approval")
    approved = demo.approve(job_id)
    assert approved.code == 0 and "● job succeeded" in approved.out, approved.out

    published = branch_commit(demo.upstream, PUBLISH_REF)
    reviewed = branch_commit(demo.upstream, FIXED)
    assert published is not None and reviewed is not None and published.sha == reviewed.sha
    assert f"Published {reviewed.sha} to {PUBLISH_REF}." in approved.out
