"""``riverbeam ci``: a real ``riverbeam`` process talking to a real API server, with a real
worker and the scripted model, the way a pipeline step runs it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.api.schemas import JobRequest, JobView
from bot.cli import build_parser
from bot.cli.ci import draft, idempotency_key, missing_result
from bot.jobs.models import JobKind, JobResult, JobState, ReviewOutcome
from tests.cli.kit import PROJECT_ROOT, Ran, cli
from tests.support.api_server import ApiServer, api_server
from tests.support.playbooks import (
    FIXED_INSTALL,
    NOTES_BODY,
    NOTES_SUBJECT,
    REVIEW_SUMMARY,
    SUMMARY_TEXT,
)
from tests.support.stack import Stack, job_stack

TOKENS = {"ci": ("ci", None), "ci-handbook": ("ci", ("handbook",)), "writer": ("submitter", None)}
FIXED_BRANCH = "docs/fix-install"
FIXED_RANGE = f"main..{FIXED_BRANCH}"
GITHUB = {"GITHUB_RUN_ID": "4242", "GITHUB_RUN_ATTEMPT": "1", "GITHUB_JOB": "notes"}


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack() as running:
        running.start_worker("a")
        yield running


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[ApiServer]:
    with api_server(stack, TOKENS) as server:
        yield server


@pytest.fixture(scope="module")
def fixed(stack: Stack) -> str:
    """A branch upstream that fixes the install page, one commit past main."""
    stack.push_branch(FIXED_BRANCH, {"docs/install.md": FIXED_INSTALL}, "Fix install")
    return FIXED_BRANCH


def riverbeam_ci(
    api: ApiServer, *argv: str, token: str | None = None, env: Mapping[str, str] = {}
) -> Ran:
    """``riverbeam ci ARGV`` as its own process, in an environment holding only what a
    pipeline would set (no CI variables unless ``env`` has them)."""
    environment = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(PROJECT_ROOT),
        "RIVERBEAM_API_URL": api.url,
        "RIVERBEAM_TOKEN": api.tokens["ci"] if token is None else token,
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "ci", *argv],
        env=environment,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def _job_ids(stack: Stack, kind: JobKind) -> list[str]:
    records, _ = stack.store.list(kind=kind, limit=100)
    return [record.id for record in records]


# -- against the service ---------------------------------------------------------------------


def test_commit_notes_prints_the_draft_and_a_retried_step_makes_no_second_job(
    stack: Stack, api: ApiServer, fixed: str
) -> None:
    argv = ("commit-notes", "--repo", "docs", "--range", f"main..{fixed}", "--timeout", "120")
    argv += ("--metadata", "playbook=commit-notes")
    first = riverbeam_ci(api, *argv, env=GITHUB)

    assert first.code == 0, first.err
    assert first.out == f"{NOTES_SUBJECT}\n\n{NOTES_BODY}\n"
    (job_id,) = _job_ids(stack, JobKind.COMMIT_NOTES)
    assert f"job {job_id} succeeded" in first.err

    # The pipeline step is retried: same run, same step, same arguments.
    retried = riverbeam_ci(api, *argv, env={**GITHUB, "GITHUB_RUN_ATTEMPT": "2"})
    assert (retried.code, retried.out) == (0, first.out)
    assert _job_ids(stack, JobKind.COMMIT_NOTES) == [job_id]


def test_summarize_prints_the_summary(api: ApiServer, fixed: str) -> None:
    ran = riverbeam_ci(
        api, "summarize", "--repo", "docs", "--branch", fixed, "--metadata", "playbook=summarize"
    )

    assert ran.code == 0, ran.err
    assert ran.out == SUMMARY_TEXT + "\n"


def test_review_prints_the_verdict_and_findings(api: ApiServer, fixed: str) -> None:
    ran = riverbeam_ci(
        api, "review", "--repo", "docs", "--branch", fixed, "--metadata", "playbook=review-approve"
    )

    assert ran.code == 0, ran.err
    assert ran.out == (
        "verdict: approve_with_suggestions\n\n"
        f"{REVIEW_SUMMARY}\n\n"
        "findings:\n"
        "- nit docs/install.md:3: Name the minimum pip version.\n"
        "  suggestion: Install the tool with pip 23 or newer:\n"
    )


# -- a job without its result fails the step ------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "target", "playbook", "code"),
    [
        ("review", ("--branch", FIXED_BRANCH), "review-no-verdict", "BEM-521"),
        ("summarize", ("--branch", FIXED_BRANCH), "summarize-empty", "BEM-522"),
        ("commit-notes", ("--range", FIXED_RANGE), "commit-notes-no-subject", "BEM-523"),
        ("commit-notes", ("--range", FIXED_RANGE), "commit-notes-unknown-tools", "BEM-520"),
    ],
)
def test_a_job_without_its_result_is_exit_1_with_nothing_on_stdout(
    api: ApiServer, fixed: str, kind: str, target: tuple[str, str], playbook: str, code: str
) -> None:
    ran = riverbeam_ci(api, kind, "--repo", "docs", *target, "--metadata", f"playbook={playbook}")

    assert ran.code == 1, ran.err
    assert ran.out == ""
    assert re.search(rf"riverbeam: job [0-9a-f]{{12}} failed: {code}: ", ran.err), ran.err


def _documented_gate() -> str:
    """The shell block of docs/ci.md that gates a merge on a review."""
    text = (PROJECT_ROOT / "docs" / "ci.md").read_text()
    after = text[text.index("To gate a merge on a review") :]
    found = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert found is not None
    return found.group(1)


def _run_gate(api: ApiServer, directory: Path, branch: str, playbook: str) -> int:
    """The documented gate in bash, in a pipeline's working directory, with a ``riverbeam``
    on the PATH (this checkout, its scripted model picked by ``playbook``)."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True)
    command = bin_dir / "riverbeam"
    command.write_text(
        f'#!/bin/sh\nexec {sys.executable} -m bot.cli "$@" --metadata "playbook=$PLAYBOOK"\n'
    )
    command.chmod(0o755)
    environment = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(PROJECT_ROOT),
        "RIVERBEAM_API_URL": api.url,
        "RIVERBEAM_TOKEN": api.tokens["ci"],
        "BRANCH": branch,
        "PLAYBOOK": playbook,
    }
    gate = subprocess.run(
        ["bash", "-c", _documented_gate()], env=environment, cwd=directory, timeout=180
    )
    return gate.returncode


def test_the_documented_gate_fails_on_a_review_without_a_verdict(
    api: ApiServer, fixed: str, tmp_path: Path
) -> None:
    assert "riverbeam ci review" in _documented_gate()
    assert _run_gate(api, tmp_path / "none", fixed, "review-no-verdict") != 0
    assert (tmp_path / "none" / "review.txt").read_text() == ""
    assert _run_gate(api, tmp_path / "changes", fixed, "review-request-changes") != 0
    assert _run_gate(api, tmp_path / "approve", fixed, "review-approve") == 0


def test_the_gate_test_alone_lets_no_verdict_through() -> None:
    """The second half of the gate on the draft an older release printed for a review
    without a verdict: it fails too, where the old ``grep -qv request_changes`` passed."""
    gate = _documented_gate()
    check = gate[gate.index("head -n 1") :].strip()
    for draft_text, passes in (("verdict: none\n", False), ("", False),
                               ("verdict: approve\n", True)):  # fmt: skip
        ran = subprocess.run(
            ["bash", "-c", check.replace("review.txt", "/dev/stdin")], input=draft_text.encode()
        )
        assert (ran.returncode == 0) is passes, draft_text
    old = subprocess.run(
        ["bash", "-c", "head -1 | grep -qv request_changes"], input=b"verdict: none\n"
    )
    assert old.returncode == 0


def test_a_succeeded_review_without_a_verdict_is_still_missing_its_result() -> None:
    """A job an older release recorded as succeeded without a verdict: the command exits 1."""
    now = datetime.now(UTC)
    view = _view(now, JobResult(outcome=ReviewOutcome(branch="b", commit_sha="c" * 40)))

    assert missing_result(view) == (
        "BEM-521: the review of b delivered no verdict (no review_change call)"
    )
    assert missing_result(view.model_copy(update={"result": None})) == (
        "a summarize job must have an outcome, and this one has none"
    )


def test_an_unknown_token_is_exit_2_with_bem_701(api: ApiServer) -> None:
    ran = riverbeam_ci(
        api, "commit-notes", "--repo", "docs", "--range", "main..x", token="rb_not-a-token"
    )

    assert ran.code == 2
    assert "BEM-701" in ran.err and ran.out == ""


def test_an_unknown_repository_is_bem_501_and_one_outside_the_scope_bem_703(
    stack: Stack, api: ApiServer
) -> None:
    unknown = riverbeam_ci(api, "summarize", "--repo", "nowhere", "--branch", "main")
    outside = riverbeam_ci(
        api, "summarize", "--repo", "docs", "--branch", "main", token=api.tokens["ci-handbook"]
    )

    assert (unknown.code, outside.code) == (2, 2)
    assert "BEM-501" in unknown.err and "nowhere" in unknown.err
    assert "BEM-703" in outside.err
    records, _ = stack.store.list(limit=100)
    assert all(record.spec.requested_by != "ci-handbook" for record in records)


def test_a_job_past_the_timeout_is_exit_3_and_goes_on(stack: Stack, api: ApiServer) -> None:
    ran = riverbeam_ci(
        api,
        "summarize",
        "--repo",
        "docs",
        "--branch",
        "main",
        "--timeout",
        "0.5",
        "--metadata",
        "playbook=summarize-slow",
    )

    assert ran.code == 3
    assert "did not finish within 0.5 s" in ran.err and ran.out == ""


def test_an_unreachable_api_is_exit_2_naming_the_url(api: ApiServer) -> None:
    ran = riverbeam_ci(
        api, "review", "--repo", "docs", "--branch", "main", "--api-url", "http://127.0.0.1:9"
    )

    assert ran.code == 2
    assert "cannot reach the Riverbeam API at http://127.0.0.1:9" in ran.err


# -- without a service -----------------------------------------------------------------------


def test_without_a_token_nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RIVERBEAM_TOKEN", raising=False)
    monkeypatch.setenv("RIVERBEAM_API_URL", "http://127.0.0.1:9")

    ran = cli("ci", "review", "--repo", "docs", "--branch", "main")

    assert ran.code == 2
    assert "BEM-700" in ran.err and "RIVERBEAM_TOKEN" in ran.err


def _request(**fields: Any) -> JobRequest:
    return JobRequest(**{"kind": JobKind.COMMIT_NOTES, "repo": "docs", "range": "a..b", **fields})


def test_the_key_is_one_per_ci_run_step_and_request() -> None:
    key = idempotency_key(None, _request(), GITHUB)

    assert key == idempotency_key(None, _request(), {**GITHUB, "GITHUB_RUN_ATTEMPT": "3"})
    assert key != idempotency_key(None, _request(), {**GITHUB, "GITHUB_RUN_ID": "4243"})
    assert key != idempotency_key(None, _request(), {**GITHUB, "GITHUB_JOB": "other"})
    assert key != idempotency_key(None, _request(range="a..c"), GITHUB)
    gitlab = {"CI_PIPELINE_ID": "7", "CI_JOB_NAME": "notes"}
    assert idempotency_key(None, _request(), gitlab) == idempotency_key(None, _request(), gitlab)
    assert idempotency_key(None, _request(), {}) != idempotency_key(None, _request(), {})
    assert idempotency_key("given", _request(), GITHUB) == "given"
    assert len(key) <= 200 and key.isprintable()


def _view(now: datetime, result: JobResult) -> JobView:
    return JobView(
        id="abc",
        kind=JobKind.SUMMARIZE,
        repo="docs",
        state=JobState.SUCCEEDED,
        requested_by="ci",
        request="",
        base=None,
        branch="main",
        range=None,
        review_job=None,
        pages=[],
        job_branch=None,
        created_at=now,
        updated_at=now,
        attempt=1,
        approval_id=None,
        cancel_requested=False,
        result=result,
        error=None,
    )


def test_a_draft_without_an_outcome_is_the_answer_text() -> None:
    view = _view(datetime.now(UTC), JobResult(text="Nothing changed."))

    assert draft(view) == "Nothing changed."


def _pipeline_commands() -> list[list[str]]:
    """The ``riverbeam ci`` command lines of docs/ci.md's pipeline examples, continuation
    lines (a shell ``\\`` or a YAML folded ``>``) joined."""
    text = (PROJECT_ROOT / "docs" / "ci.md").read_text()
    commands = []
    for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL):
        joined = re.sub(r"\\\n\s*|\n\s+(?=--)", " ", block)
        for line in joined.splitlines():
            if "riverbeam ci " in line:
                command = line[line.index("riverbeam ci ") :].split(" > ")[0]
                commands.append(shlex.split(command)[1:])
    return commands


def test_the_pipeline_examples_are_valid_commands() -> None:
    commands = _pipeline_commands()

    assert len(commands) == 2
    for argv in commands:
        args = build_parser().parse_args(argv)
        assert (args.command, args.ci_kind, args.repo) == ("ci", "commit-notes", "docs")
        assert ".." in args.range
