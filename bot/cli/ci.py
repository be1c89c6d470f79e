"""``riverbeam ci commit-notes|summarize|review``: one job through the HTTP API, for a CI
pipeline step.

The command submits the job with a ``ci`` token (``$RIVERBEAM_TOKEN``) to the API at
``$RIVERBEAM_API_URL`` (or ``--api-url``), follows its event stream (``GET
/v1/jobs/{id}/events``; a dropped connection is reopened with ``Last-Event-ID``, the last
event seen, as the web page and ``jobs follow`` do) for at most ``--timeout`` seconds, and
prints the draft on standard output: nothing else goes there, so a pipeline can redirect it
into a file. Progress (one line per tool call) and errors go to standard error.

The submit carries an ``Idempotency-Key`` derived from the CI run (``--idempotency-key``,
else the run's id from the CI environment plus the arguments, else a random one), so a
retried pipeline step returns the job the first attempt made and waits on it, instead of
making a second one. The command itself retries a submit that failed in transit with the
same key.

Exit codes: 0 the draft is printed; 1 the job failed, was refused or was cancelled, or
lacks the result its kind must produce (a review without a verdict); 2 the
API refused the request (the BEM code of its problem document), could not be reached, or
the command was used wrongly; 3 the job did not finish within ``--timeout``: the command
cancels it, so no job nobody waits for piles up (with ``--leave-running`` it goes on, and a
retry with the same key waits for it again).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
from pydantic import ValidationError

from bot.cli.render import tool_line
from bot.cli.submit import checked_request
from bot.clients.sse import SseDecoder, SseError, SseEvent
from bot.core.errors import CODES, BeamError
from bot.core.frames import ErrorFrame, ToolFrame, frame_adapter
from bot.service.schemas import JobRequest, JobView
from bot.store.models import (
    CommitNotesOutcome,
    JobState,
    ReviewOutcome,
    SummaryOutcome,
)

TOKEN_ENV = "RIVERBEAM_TOKEN"
URL_ENV = "RIVERBEAM_API_URL"
DEFAULT_TIMEOUT_SECONDS = 600.0
POLL_SECONDS = 1.0
REQUEST_TIMEOUT_SECONDS = 30.0
# Longer than the API's keep-alive (``api.sse_keepalive_seconds``, 15 by default): a stream
# silent this long is a dead connection, reopened after the last event seen.
STREAM_READ_SECONDS = 60.0
SUBMIT_ATTEMPTS = 3
EXIT_JOB_FAILED = 1
EXIT_REFUSED = 2
EXIT_TIMEOUT = 3
# What names one run of a pipeline step across its retries: (run variable, step variable).
# A retried step keeps both (GitHub's re-run keeps GITHUB_RUN_ID and only bumps
# GITHUB_RUN_ATTEMPT; GitLab's retry keeps the pipeline and the job name).
CI_RUNS: tuple[tuple[str, str | None], ...] = (
    ("GITHUB_RUN_ID", "GITHUB_JOB"),
    ("CI_PIPELINE_ID", "CI_JOB_NAME"),
    ("BUILD_TAG", None),
)
# The statuses worth a second try of the same request: the API or a proxy in front of it
# was briefly unavailable.
TRANSIENT_STATUSES = frozenset({502, 503, 504})


class CiFailure(Exception):
    """The command ran and must report a failure: a message and an exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class TimedOut(CiFailure):
    """The job was not final within ``--timeout``: exit 3, and the job to cancel."""

    def __init__(self, job: JobView, timeout: float) -> None:
        super().__init__(
            f"job {job.id} did not finish within {timeout:g} s (it is {job.state.value})",
            EXIT_TIMEOUT,
        )
        self.job_id = job.id


def add_ci_commands(commands: Any) -> None:
    ci = commands.add_parser(
        "ci",
        help="run a commit-notes, summarize or review job through the API (for CI)",
        description="Submit a job through the HTTP API with a ci token ($RIVERBEAM_TOKEN), "
        "wait for it, and print the draft on standard output. See docs/ci.md.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--repo", required=True, help="a repository registered with the service")
    common.add_argument(
        "--api-url", metavar="URL", help=f"the API's base URL (default: ${URL_ENV})"
    )
    common.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"how long to wait for the job (default: {DEFAULT_TIMEOUT_SECONDS:g}); "
        "past it the job is cancelled",
    )
    common.add_argument(
        "--leave-running",
        action="store_true",
        help="past --timeout, leave the job running (a retry with the same key waits for it)",
    )
    common.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="the submit's Idempotency-Key (default: derived from the CI run and the arguments)",
    )
    common.add_argument("--request", metavar="TEXT", help="more instructions, in words")
    # Stored with the job; the test suite's scripted model reads its playbook from it.
    common.add_argument("--metadata", action="append", default=[], help=argparse.SUPPRESS)
    kinds = ci.add_subparsers(dest="ci_kind", required=True, metavar="KIND")
    notes = kinds.add_parser(
        "commit-notes",
        parents=[common],
        help="draft a commit message for a range of commits",
        description="Print a commit message for the commits A..B: subject, blank line, body.",
    )
    notes.add_argument("--range", required=True, metavar="A..B", help="the commits to describe")
    summarize = kinds.add_parser(
        "summarize",
        parents=[common],
        help="summarize what a branch changed",
        description="Print a summary of what BRANCH changed since it left BASE.",
    )
    summarize.add_argument("--branch", required=True, help="the branch to summarize")
    summarize.add_argument("--base", help="compare with this branch (default: the repository's)")
    review = kinds.add_parser(
        "review",
        parents=[common],
        help="review a branch",
        description="Print a review of BRANCH: the verdict, a summary and the findings.",
    )
    review.add_argument("--branch", required=True, help="the branch to review")
    review.add_argument("--base", help="compare with this branch (default: the repository's)")
    for parser in (notes, summarize, review):
        parser.set_defaults(handler=_ci)


def job_request(args: argparse.Namespace) -> JobRequest:
    fields: dict[str, Any] = {
        "kind": args.ci_kind,
        "repo": args.repo,
        "request": args.request or "",
        "range": getattr(args, "range", None),
        "branch": getattr(args, "branch", None),
        "base": getattr(args, "base", None),
    }
    return checked_request(fields, args.metadata)


def idempotency_key(given: str | None, body: JobRequest, env: Mapping[str, str]) -> str:
    """``given``; else one key per CI run, step and request; else a random one (still
    making the command's own retries of the submit safe)."""
    if given:
        return given
    for run_variable, step_variable in CI_RUNS:
        run = env.get(run_variable)
        if run:
            step = env.get(step_variable, "") if step_variable else ""
            identity = {"run": [run_variable, run, step], "request": body.model_dump(mode="json")}
            digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
            return f"ci-{digest[:40]}"
    return f"cli-{secrets.token_hex(20)}"


class ApiClient:
    """The two calls the command makes, with errors turned into BEM errors or failures."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=REQUEST_TIMEOUT_SECONDS,
        )

    def close(self) -> None:
        self._http.close()

    def submit(self, body: JobRequest, key: str) -> JobView:
        payload = body.model_dump(mode="json", exclude_none=True)
        attempt = 1
        while True:
            try:
                reply = self._http.post("/v1/jobs", json=payload, headers={"Idempotency-Key": key})
                if reply.status_code not in TRANSIENT_STATUSES or attempt == SUBMIT_ATTEMPTS:
                    return self._job(reply)
            except httpx.TransportError as error:
                if attempt == SUBMIT_ATTEMPTS:
                    raise self._unreachable(error) from None
            # The same key makes the retry safe: a job the lost attempt made comes back.
            time.sleep(POLL_SECONDS * attempt)
            attempt += 1

    def job(self, job_id: str) -> JobView | None:
        """The job, or None when the API is briefly unavailable (the caller polls on)."""
        try:
            reply = self._http.get(f"/v1/jobs/{job_id}")
        except httpx.TransportError:
            return None
        if reply.status_code in TRANSIENT_STATUSES:
            return None
        return self._job(reply)

    def events(self, job_id: str, *, after: str, read_timeout: float) -> Iterator[SseEvent]:
        """The job's events after event ``after``, as they come, until the server ends the
        stream; nothing when the API is briefly unavailable. A read that waits
        ``read_timeout`` raises ``httpx.ReadTimeout``."""
        headers = {"Accept": "text/event-stream", "Last-Event-ID": after}
        timeout = httpx.Timeout(REQUEST_TIMEOUT_SECONDS, read=read_timeout)
        path = f"/v1/jobs/{job_id}/events"
        with self._http.stream("GET", path, headers=headers, timeout=timeout) as reply:
            if reply.status_code in TRANSIENT_STATUSES:
                return
            if not reply.is_success:
                reply.read()
                raise _problem(reply)
            decoder = SseDecoder()
            for chunk in reply.iter_bytes():
                yield from decoder.feed(chunk)
            yield from decoder.close()

    def cancel(self, job_id: str) -> JobView:
        return self._job(self._http.post(f"/v1/jobs/{job_id}/cancel"))

    def _job(self, reply: httpx.Response) -> JobView:
        if reply.is_success:
            return JobView.model_validate(reply.json())
        raise _problem(reply)

    def _unreachable(self, error: httpx.TransportError) -> CiFailure:
        return CiFailure(f"cannot reach the Riverbeam API at {self.url}: {error}", EXIT_REFUSED)


def _problem(reply: httpx.Response) -> Exception:
    """The BEM error of a problem document; a failure naming the status for any other
    answer (a proxy's error page)."""
    try:
        document = reply.json()
    except ValueError:
        document = None
    if isinstance(document, dict):
        code, detail = document.get("code"), document.get("detail")
        if isinstance(code, str) and code in CODES and isinstance(detail, str):
            return BeamError(code, detail)
    text = reply.text.strip().splitlines()[:1] or ["(no body)"]
    return CiFailure(f"the API answered HTTP {reply.status_code}: {text[0][:200]}", EXIT_REFUSED)


def follow(client: ApiClient, job: JobView, timeout: float) -> JobView:
    """The job once it is final, saying on standard error what it does meanwhile; TimedOut
    when ``timeout`` runs out first. A stream that drops (the API restarted, a proxy cut
    it, an ``error`` event) is opened again after the last event seen, so nothing is shown
    twice or skipped: also when the job ended while the stream was down, since the events
    it missed are read before the job is returned."""
    deadline = time.monotonic() + timeout
    last = "0"
    drained = job.state.is_final
    while not drained:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimedOut(job, timeout)
        ended = False
        try:
            for event in client.events(
                job.id, after=last, read_timeout=min(left, STREAM_READ_SECONDS)
            ):
                last = event.id or last
                if event.event != "frame":
                    ended = event.event == "end"
                    break  # "end": the job is final; "error": the store failed, reopen
                _progress(job.id, event.data)
        except (httpx.TransportError, SseError):
            pass  # a read past the deadline, or a dropped connection: look, then reopen
        was_final, job = job.state.is_final, client.job(job.id) or job
        # A final job's stream is read to its "end" once more, then no more: a store
        # that lost the stream's tail must not keep the step waiting.
        drained = job.state.is_final and (ended or was_final)
        if not job.state.is_final:
            time.sleep(max(0.0, min(POLL_SECONDS, deadline - time.monotonic())))
    return job


def _progress(job_id: str, data: str) -> None:
    """One line on standard error for a tool call or an error of the agent."""
    try:
        frame = frame_adapter.validate_json(data)
    except ValidationError:
        return  # a frame type of a newer server: nothing to show
    if isinstance(frame, ToolFrame):
        _note(f"job {job_id}: {tool_line(frame.record).plain.strip()}")
    elif isinstance(frame, ErrorFrame):
        _note(f"job {job_id}: {frame.error.code}: {frame.error.message}")


def cancel_timed_out(client: ApiClient, job_id: str) -> str:
    """Cancel the job the command gave up on; what became of it, in words."""
    try:
        job = client.cancel(job_id)
    except (BeamError, CiFailure, httpx.TransportError) as error:
        return f"could not cancel job {job_id}: {error}"
    if job.state is JobState.CANCELLED:
        return f"job {job_id} cancelled"
    if job.state.is_final:
        return f"job {job_id} {job.state.value} meanwhile"
    return f"job {job_id} cancel requested: its worker stops it before its next step"


def draft(job: JobView) -> str:
    """What the job produced, as the pipeline wants it on standard output."""
    result = job.result
    if result is None:
        return ""
    outcome = result.outcome
    if isinstance(outcome, CommitNotesOutcome):
        return outcome.subject + (f"\n\n{outcome.body}" if outcome.body else "")
    if isinstance(outcome, SummaryOutcome) and outcome.summary:
        return outcome.summary
    if isinstance(outcome, ReviewOutcome):
        return _review(outcome)
    return result.text


def _review(outcome: ReviewOutcome) -> str:
    lines = [f"verdict: {outcome.verdict or 'none'}"]
    if outcome.summary:
        lines += ["", outcome.summary]
    if outcome.findings:
        lines += ["", "findings:"]
    for finding in outcome.findings:
        where = finding.path if finding.line is None else f"{finding.path}:{finding.line}"
        lines.append(f"- {finding.severity} {where}: {finding.note}")
        if finding.suggestion:
            lines.append(f"  suggestion: {finding.suggestion}")
    return "\n".join(lines)


def _settings_from(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[str, str]:
    token = env.get(TOKEN_ENV, "").strip()
    if not token:
        raise BeamError("BEM-700", f"set {TOKEN_ENV} to a ci token (`riverbeam tokens new`)")
    url = args.api_url or env.get(URL_ENV, "").strip()
    if not url:
        raise BeamError("BEM-900", f"set {URL_ENV} or pass --api-url with the API's base URL")
    if args.timeout <= 0:
        raise BeamError("BEM-900", "--timeout must be more than 0 seconds")
    return url, token


def _ci(args: argparse.Namespace) -> int:
    url, token = _settings_from(args, os.environ)
    body = job_request(args)
    key = idempotency_key(args.idempotency_key, body, os.environ)
    client = ApiClient(url, token)
    try:
        job = client.submit(body, key)
        _note(f"job {job.id} ({body.kind.value} on {body.repo}), state: {job.state.value}")
        done = follow(client, job, args.timeout)
    except TimedOut as failure:
        _note(str(failure))
        if args.leave_running:
            _note("it goes on: a retry with the same idempotency key waits for it again")
        else:
            _note(cancel_timed_out(client, failure.job_id))
        return failure.exit_code
    except CiFailure as failure:
        _note(str(failure))
        return failure.exit_code
    finally:
        client.close()
    if done.state is not JobState.SUCCEEDED:
        reason = f": {done.error.code}: {done.error.message}" if done.error else ""
        _note(f"job {done.id} {done.state.value}{reason}")
        return EXIT_JOB_FAILED
    missing = missing_result(done)
    if missing is not None:
        # A job recorded as succeeded by an older release can still lack its result.
        _note(f"job {done.id} succeeded without its result: {missing}")
        return EXIT_JOB_FAILED
    _note(f"job {done.id} succeeded")
    print(draft(done))
    return 0


def missing_result(job: JobView) -> str | None:
    """What the job's kind must produce and this job lacks, or None."""
    outcome = job.result.outcome if job.result is not None else None
    if outcome is None:
        return f"a {job.kind.value} job must have an outcome, and this one has none"
    missing = outcome.missing()
    return str(missing) if missing is not None else None


def _note(text: str) -> None:
    print(f"riverbeam: {text}", file=sys.stderr)
