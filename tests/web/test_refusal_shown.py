"""A model's refusal is its own ending: the job record, the API's job view, the job page's
outcome, the live log line, the CLI's job view and its live renderer all say the model
declined, with its words."""

from __future__ import annotations

import io
import json

from rich.console import Console

from bot.cli.render import FrameRenderer, show_job
from bot.core.frames import AgentResult, DoneFrame, ResultStatus
from bot.service.schemas import JobView
from bot.store.models import JobKind, JobRecord, JobResult, JobSpec, JobState
from bot.web.outcome import describe
from bot.web.present import frame_line

WORDS = "I can't help with rewriting that page."


def refused_job() -> JobRecord:
    spec = JobSpec(kind=JobKind.AUTHOR, repo="docs", request="Rewrite it")
    result = JobResult(text="", refusal=WORDS)
    return JobRecord(id="job1", spec=spec, state=JobState.REFUSED, result=result)


def test_the_job_record_and_the_api_view_keep_the_refusal() -> None:
    record = JobRecord.model_validate_json(refused_job().model_dump_json())
    assert record.result is not None and record.result.refusal == WORDS
    view = JobView.of(record).model_dump(mode="json")
    assert (view["state"], view["result"]["refusal"]) == ("refused", WORDS)


def test_a_job_record_saved_before_refusals_still_loads() -> None:
    document = json.loads(refused_job().model_dump_json())
    del document["result"]["refusal"]
    for key in ("cached_tokens", "reasoning_tokens"):
        del document["result"]["usage"][key]
    record = JobRecord.model_validate(document)
    assert record.result is not None and record.result.refusal is None


def test_the_job_page_says_the_model_declined_in_its_own_words() -> None:
    outcome = describe(refused_job(), None)
    assert outcome.headline == "The model declined the request; nothing was changed."
    assert any(WORDS in detail for detail in outcome.details)


def test_the_live_log_line_of_a_refused_run() -> None:
    done = DoneFrame(result=AgentResult(status=ResultStatus.REFUSED, refusal=WORDS))
    line = frame_line(done)
    assert (line.title, line.body, line.failed) == ("The model declined the request", WORDS, True)


def test_the_cli_shows_the_refusal_in_the_job_and_the_live_view() -> None:
    out = Console(file=io.StringIO(), width=200)
    show_job(out, refused_job(), None)
    FrameRenderer(out).frame(
        DoneFrame(result=AgentResult(status=ResultStatus.REFUSED, refusal=WORDS))
    )
    printed = out.file.getvalue()  # type: ignore[attr-defined]
    assert f"the model declined: {WORDS}" in printed
    assert f"the model declined the request: {WORDS}" in printed
