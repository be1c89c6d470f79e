"""A worker whose one pool process runs a job waits without burning a core, and a chore
broadcast meanwhile runs once the job has ended (``bot.jobs.broker``).

kombu's own transport left the hosts broadcast's socket readable and unread while the worker
had no prefetch credit, and the main process spun on it: a whole core for as long as the job
ran (every live-model job), which on a two-core host halved the model server's speed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.service.access import Principal
from bot.service.queues import REAP_SANDBOXES, send_chore
from bot.store.models import JobKind, JobSpec, JobState
from harness.playbooks import AUTHOR_REQUEST
from harness.procstat import cpu_seconds
from harness.stack import REPO, REQUESTER, Stack, job_stack, wait_until
from harness.stub_model import Hang, StubModel, completion, tool_call
from tests.faults.kit import tool_called

pytestmark = pytest.mark.slow

HANG_SECONDS = 30.0
SAMPLE_SECONDS = 6.0
# An idle event loop wakes for its timers only; the spin took SAMPLE_SECONDS whole.
IDLE_CPU_SECONDS = 1.0


@pytest.fixture(scope="module")
def stub() -> Iterator[StubModel]:
    with StubModel() as running:
        yield running


@pytest.fixture(scope="module")
def stack(stub: StubModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    key = tmp_path_factory.mktemp("key") / "model.key"
    key.write_text("stub-key\n")
    model = {
        "provider": "openai-compatible",
        "base_url": stub.base_url,
        "model": "stub",
        "api_key_file": str(key),
        "context_window": 32768,
        "max_output_tokens": 256,
    }
    with job_stack(model_factory=None, more_config={"model": model}) as running:
        running.start_worker("a")
        yield running


def _chore_ran(log: Path) -> bool:
    return any(
        "reap_sandboxes" in line and "succeeded" in line for line in log.read_text().splitlines()
    )


def test_a_chore_sent_to_a_busy_worker_waits_without_spinning_and_runs_after_the_job(
    stack: Stack, stub: StubModel
) -> None:
    stub.enqueue(
        completion(None, tool_calls=[tool_call("list_tree", {})]),
        *(Hang(HANG_SECONDS) for _ in range(3)),
    )
    spec = JobSpec(kind=JobKind.AUTHOR, repo=REPO, requested_by=REQUESTER, request=AUTHOR_REQUEST)
    job = stack.service.submit(Principal.operator(REQUESTER), spec)
    tool_called(stack, job.id, "list_tree")
    wait_until(lambda: len(stub.requests) == 2, 10, lambda: f"{len(stub.requests)} requests")

    worker = stack.workers["a"]
    try:
        send_chore(stack.app, REAP_SANDBOXES)
        time.sleep(1.0)  # the broadcast has reached the worker's socket
        before = cpu_seconds({worker.process.pid})
        time.sleep(SAMPLE_SECONDS)
        spent = cpu_seconds({worker.process.pid}) - before
        assert not _chore_ran(worker.log), "the chore ran beside the job"
    finally:
        stub.stop()  # the hanging request ends, and the job with it
    assert spent < IDLE_CPU_SECONDS, (
        f"the worker's main process took {spent:.1f} CPU-s in {SAMPLE_SECONDS:.0f} s"
    )
    ended = stack.wait_for(job.id, JobState.FAILED, timeout=60)
    assert ended.error is not None
    wait_until(lambda: _chore_ran(worker.log), 20, worker.log_tail)
