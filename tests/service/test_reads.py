"""A decision reads the job once, inside its transaction, whichever surface makes it: the
API, the web pages or the CLI. Counted on the Redis server (``MONITOR``), so the API
process, the page handler and the command are counted alike, whatever client they use."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest
import redis

from bot.store.models import Approval, ApprovalState, JobKind, JobSpec
from harness.api_server import ApiServer
from harness.parking import park
from harness.stack import REPO, Stack
from tests.cli.kit import cli
from tests.web.kit import Web, decision_form, sign_in

WATCH_SECONDS = 30.0


@contextmanager
def commands_run(url: str) -> Iterator[list[str]]:
    """Every command the Redis server at ``url`` runs while the block runs, as ``MONITOR``
    shows them (``GET <key>``...). The watch ends at a marker the block's end sends, so no
    command of the block is missed however late it arrives."""
    marker = f"end-of-watch-{uuid.uuid4().hex}"
    seen: list[str] = []
    with redis.Redis.from_url(url) as watcher, watcher.monitor() as monitor:

        def collect() -> None:
            while (command := monitor.next_command()["command"]) != f"ECHO {marker}":
                seen.append(command)

        thread = threading.Thread(target=collect, daemon=True)
        thread.start()
        try:
            yield seen
        finally:
            with redis.Redis.from_url(url) as client:
                client.echo(marker)
            thread.join(WATCH_SECONDS)
    assert not thread.is_alive(), "the watch never saw its end marker"


def job_reads(stack: Stack, job_id: str, decide: Callable[[Approval], object]) -> int:
    """How many times the job's record is read while ``decide`` decides its approval."""
    approval = stack.store.approvals.get(job_id)
    assert approval is not None
    with commands_run(stack.redis_url) as seen:
        decide(approval)
    return seen.count(f"GET {stack.store.gateway.key('job', job_id)}")


def parked(stack: Stack) -> str:
    spec = JobSpec(kind=JobKind.AUTHOR, repo=REPO, request="fix it", requested_by="writer")
    return park(stack.store, spec).job_id


def decided(stack: Stack, job_id: str) -> ApprovalState:
    approval = stack.store.approvals.get(job_id)
    assert approval is not None
    return approval.state


def test_the_watch_counts_each_read_of_the_record(stack: Stack) -> None:
    """The counter is not blind: two reads of the record are two."""
    job_id = parked(stack)
    assert job_reads(stack, job_id, lambda _: [stack.store.jobs.get(job_id) for _ in range(2)]) == 2


def test_an_api_decision_reads_the_job_once(stack: Stack, api: ApiServer) -> None:
    job_id = parked(stack)

    def approve(approval: Approval) -> None:
        binding = approval.binding().model_dump()
        reply = httpx.post(
            f"{api.url}/v1/approvals/{job_id}/approve",
            headers=api.auth("reviewer"),
            json={"comment": "fine", **binding},
        )
        assert reply.status_code == 200, reply.text

    assert job_reads(stack, job_id, approve) == 1
    assert decided(stack, job_id) is ApprovalState.APPROVED


def test_a_web_decision_reads_the_job_once(web: Web) -> None:
    job_id = parked(web.stack)
    with sign_in(web, "reviewer") as browser:
        form = decision_form(browser.get(f"/jobs/{job_id}").text, job_id)

        def refuse(_: Approval) -> None:
            # The decision only: the job page it sends the browser back to reads the job to
            # show it, as any view of the page does.
            reply = browser.post(
                f"/approvals/{job_id}",
                data={**form, "decision": "refuse", "comment": "no"},
                follow_redirects=False,
            )
            assert reply.status_code == 303, reply.text

        assert job_reads(web.stack, job_id, refuse) == 1
    assert decided(web.stack, job_id) is ApprovalState.REFUSED


@pytest.mark.usefixtures("configured")
def test_a_cli_decision_reads_the_job_once(stack: Stack) -> None:
    job_id = parked(stack)

    def approve(approval: Approval) -> None:
        named = ["--approval", approval.id, "--commit", approval.commit_sha or ""]
        named += ["--digest", approval.diff_digest]
        ran = cli("approvals", "approve", job_id, *named, "--as", "reviewer")
        assert ran.code == 0, ran.err

    assert job_reads(stack, job_id, approve) == 1
    assert decided(stack, job_id) is ApprovalState.APPROVED
