"""An author job on the demo repository, on the live model, through the real workers: real
Redis, a Celery worker, the job's container and a bare upstream. The model is tiny, so
either end is acceptable (a parked push, or a failure); what must hold is that the end is a
documented one, its failure carries a BEM code and no traceback, and its frames and usage
agree with each other and with what the server counted."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from bot.core.frames import DoneFrame, ToolFrame, Usage
from bot.service.access import Principal
from bot.store.models import JobKind, JobSpec, JobState
from harness import figures
from harness.model_server import ModelServer
from harness.playbooks import AUTHOR_REQUEST
from harness.stack import REPO, REQUESTER, Stack, job_stack

pytestmark = [pytest.mark.live_model, pytest.mark.serial]

ENDS = (JobState.AWAITING_APPROVAL, JobState.SUCCEEDED, JobState.FAILED)


@pytest.fixture(scope="module")
def stack(model_server: ModelServer) -> Iterator[Stack]:
    # Bounds on a run of the tiny model, which may never stop calling tools: each is a
    # documented end (BEM-067, BEM-073). Each request reprocesses a prompt of about 3,500
    # tokens, 40 s at the slowest prompt speed seen here (90 tokens/s): three requests fit
    # the wait below with room.
    model = model_server.model_table(max_output_tokens=256, max_requests=3)
    with job_stack(model_factory=None, more_config={"model": model}) as running:
        running.start_worker("a")
        yield running


def test_an_author_job_on_the_live_model_ends_where_the_docs_say(
    stack: Stack, model_server: ModelServer, request: pytest.FixtureRequest
) -> None:
    before = model_server.metrics()
    started = time.perf_counter()
    spec = JobSpec(kind=JobKind.AUTHOR, repo=REPO, requested_by=REQUESTER, request=AUTHOR_REQUEST)
    job = stack.service.submit(Principal.operator(REQUESTER), spec)

    ended = stack.wait_for(job.id, *ENDS, timeout=300)
    figures.measure(request.node, "live_model.author_job_seconds", time.perf_counter() - started)
    after = model_server.metrics()

    frames = [event.frame for event in stack.store.events.read(job.id, count=10_000)]
    done = [frame for frame in frames if isinstance(frame, DoneFrame)]
    assert done, "every segment ends with a done frame"
    ran = [frame.record for frame in frames if isinstance(frame, ToolFrame)]
    assert sum(len(frame.result.tool_calls) for frame in done) == len(ran)
    usage = sum((frame.result.usage for frame in done), Usage())
    generated = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    assert usage.completion_tokens == generated > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    end = ended.error.code if ended.error is not None else ended.state.value
    figures.count(request.node, f"live_model.author_job_ended.{end}")

    if ended.state is JobState.FAILED:
        assert ended.error is not None
        assert re.fullmatch(r"BEM-\d{3}", ended.error.code), ended.error
        assert "Traceback" not in ended.error.message, ended.error
        assert done[-1].result.error is not None
        assert done[-1].result.error.code == ended.error.code
    else:
        assert ended.result is not None and ended.result.model_used
        assert ended.result.usage == usage
