"""``riverbeam ci``: a real ``riverbeam`` process talking to a real API server, with a real
worker and the scripted model, the way a pipeline step runs it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.cli import build_parser
from bot.cli.ci import draft, idempotency_key, missing_result
from bot.service.schemas import JobRequest, JobView
from bot.store.models import JobKind, JobResult, JobState, ReviewOutcome
from harness.api_server import ApiServer, api_server
from harness.playbooks import (
    FIXED_INSTALL,
    NOTES_BODY,
    NOTES_SUBJECT,
    REVIEW_SUMMARY,
    SUMMARY_TEXT,
)
from harness.stack import Stack, job_stack, wait_until
from tests.cli.kit import PROJECT_ROOT, Ran, cli

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
    records, _ = stack.store.listing.list(kind=kind, limit=100)
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
    # Progress from the job's event stream, one line per tool call, on standard error.
    for tool in ("git_status", "git_log", "git_diff"):
        assert f"riverbeam: job {job_id}: ▸ {tool}" in first.err, first.err

    # The pipeline step is retried: same run, same step, same arguments.
    retried = riverbeam_ci(api, *argv, env={**GITHUB, "GITHUB_RUN_ATTEMPT": "2"})
    assert (retried.code, retried.out) == (0, first.out)
    # The replayed submission is the finished job: its state is named, in plain English.
    assert f"job {job_id} (commit-notes on docs), state: succeeded" in retried.err, retried.err
    assert _job_ids(stack, JobKind.COMMIT_NOTES) == [job_id]


class _CuttingProxy(ThreadingHTTPServer):
    """A reverse proxy to the API that drops the first event stream it serves right after
    its first frame (as a proxy timing out a long request would), and records the
    Last-Event-ID of every event-stream request."""

    daemon_threads = True

    def __init__(self, upstream: str, *, cut_when_final: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream = upstream
        self.resumed_from: list[str | None] = []
        # Hold the cut connection until the job is final: the drop and the job's end race
        # no more, and the client must still read what it missed.
        self.cut_when_final = cut_when_final

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(BaseHTTPRequestHandler):
    server: _CuttingProxy

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        skip = {"host", "content-length", "connection"}
        headers = {name: value for name, value in self.headers.items() if name.lower() not in skip}
        events = self.path.split("?")[0].endswith("/events")
        if events:
            self.server.resumed_from.append(self.headers.get("Last-Event-ID"))
        cut = events and len(self.server.resumed_from) == 1
        url = self.server.upstream + self.path
        with httpx.stream(self.command, url, headers=headers, content=body, timeout=60) as reply:
            self.send_response(reply.status_code)
            for name, value in reply.headers.items():
                if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(name, value)
            self.end_headers()  # HTTP/1.0: the body ends when the connection closes
            held = b""
            for chunk in reply.iter_raw():
                if not cut:
                    self.wfile.write(chunk)
                    continue
                held += chunk
                first = re.search(rb"event: frame\r?\n.*?\r?\n\r?\n", held, re.DOTALL)
                if first is not None:
                    self.wfile.write(held[: first.end()])
                    self.wfile.flush()
                    if self.server.cut_when_final:
                        self._wait_until_final(url.split("?")[0].removesuffix("/events"), headers)
                    return  # the connection drops after one whole frame

    def _wait_until_final(self, job_url: str, headers: dict[str, str]) -> None:
        wanted = {name: value for name, value in headers.items() if name.lower() == "authorization"}

        def final() -> bool:
            return JobView.model_validate(httpx.get(job_url, headers=wanted).json()).state.is_final

        wait_until(
            final,
            timeout=60,
            explain=lambda: f"{job_url} is not final",
        )


@contextmanager
def cutting_proxy(api: ApiServer, *, cut_when_final: bool = False) -> Iterator[_CuttingProxy]:
    proxy = _CuttingProxy(api.url, cut_when_final=cut_when_final)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.mark.parametrize("cut_when_final", [False, True], ids=["while-running", "after-the-end"])
def test_a_dropped_event_stream_is_reopened_after_the_last_event_seen(
    stack: Stack, api: ApiServer, fixed: str, cut_when_final: bool
) -> None:
    argv = ("commit-notes", "--repo", "docs", "--range", f"main..{fixed}", "--timeout", "120")
    with cutting_proxy(api, cut_when_final=cut_when_final) as proxy:
        ran = riverbeam_ci(
            api, *argv, "--metadata", "playbook=commit-notes", env={"RIVERBEAM_API_URL": proxy.url}
        )

    assert ran.code == 0, ran.err
    assert ran.out == f"{NOTES_SUBJECT}\n\n{NOTES_BODY}\n"
    first, *again = proxy.resumed_from
    assert first == "0" and again, proxy.resumed_from
    assert again[0] is not None and re.fullmatch(r"\d+-\d+", again[0]), proxy.resumed_from
    # Each tool call shown once: nothing repeated after the reconnect, nothing skipped.
    for tool in ("git_status", "git_log", "git_diff"):
        assert ran.err.count(f": ▸ {tool}") == 1, ran.err


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
        ("summarize", ("--branch", FIXED_BRANCH), "summarize-empty", "BEM-071"),
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
    records, _ = stack.store.listing.list(limit=100)
    assert all(record.spec.requested_by != "ci-handbook" for record in records)


def _slow_summary(api: ApiServer, *more: str) -> tuple[Ran, str]:
    """``riverbeam ci summarize`` of a job that outlives a 2-second timeout; its id."""
    argv = ("summarize", "--repo", "docs", "--branch", "main", "--timeout", "2")
    ran = riverbeam_ci(api, *argv, "--metadata", "playbook=summarize-slow", *more)
    started = re.search(r"job ([0-9a-f]+) \(summarize on docs\)", ran.err)
    assert started is not None, ran.err
    return ran, started.group(1)


def test_a_job_past_the_timeout_is_exit_3_and_is_cancelled(stack: Stack, api: ApiServer) -> None:
    ran, job_id = _slow_summary(api)

    assert ran.code == 3, ran.err
    assert f"job {job_id} did not finish within 2 s" in ran.err and ran.out == ""
    assert f"job {job_id} cancel" in ran.err
    stack.wait_for(job_id, JobState.CANCELLED, timeout=60)
    # Its worker removed its container: none labelled with the job is left on the engine.
    wait_until(
        lambda: not stack.sandbox_containers(job_id),
        30,
        lambda: f"containers of {job_id}: {stack.sandbox_containers(job_id)}",
    )


def test_leave_running_keeps_a_timed_out_job_going(stack: Stack, api: ApiServer) -> None:
    ran, job_id = _slow_summary(api, "--leave-running")

    assert ran.code == 3, ran.err
    assert "a retry with the same idempotency key waits for it again" in ran.err
    assert not stack.store.jobs.get(job_id).cancel_requested
    stack.wait_for(job_id, JobState.SUCCEEDED, timeout=60)


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
