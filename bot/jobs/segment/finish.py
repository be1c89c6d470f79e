"""The segment's last phase when the run ended (no park): the kind's outcome, judged, and
the job's final state; and the end every failed or cancelled segment writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.core.errors import BeamError
from bot.core.frames import ErrorInfo, ResultStatus
from bot.jobs.kinds.kind import Ended, Kind
from bot.jobs.outcomes import ended_refused, unrecovered_error
from bot.runner.state import RunState
from bot.store.models import JobRecord, JobResult, JobState
from bot.store.store import JobStore


@dataclass(frozen=True)
class Ending:
    """How worker ``worker`` writes job ``job_id``'s end: only from running, only while it
    holds the job; ``branch`` is the job's own branch to record, once its tree exists."""

    store: JobStore
    worker: str
    job_id: str
    branch: str | None

    def end(
        self,
        to: JobState,
        *,
        error: BeamError | ErrorInfo | None = None,
        result: JobResult | None = None,
    ) -> JobRecord | None:
        if isinstance(error, BeamError):
            error = ErrorInfo(code=error.code, message=error.message)
        changes: dict[str, Any] = {"error": error, **branch_change(self.branch)}
        if result is not None:
            changes["result"] = result
        ended = self.store.jobs.transition(
            self.job_id, to, from_states=(JobState.RUNNING,), owner=self.worker, **changes
        )
        if ended is not None:
            self.store.blobs.drop_parked(self.job_id)
        return ended


def finish(ending: Ending, kind: Kind, ended: Ended) -> JobRecord | None:
    """End the job as its run ended: failed, refused, or the kind's outcome judged."""
    state = ended.state
    result = run_result(state)
    if state.status is ResultStatus.FAILED:
        error = state.error or ErrorInfo(code="BEM-509", message="the run failed")
        return ending.end(final_state(error.code), error=error, result=result)
    if state.status is ResultStatus.REFUSED:
        # The model declined: nothing it would have done is reported as an outcome.
        return ending.end(JobState.REFUSED, result=result)
    result.outcome = kind.outcome(ended)
    if ended_refused(state):
        return ending.end(JobState.REFUSED, result=result)
    # Fail closed: what the kind must produce is checked, never assumed.
    missing = unrecovered_error(state) or kind.judge(ended, result.outcome)
    if missing is not None:
        return ending.end(JobState.FAILED, error=missing, result=result)
    return ending.end(JobState.SUCCEEDED, result=result)


def branch_change(branch: str | None) -> dict[str, Any]:
    """The record's ``branch`` change: none until the job has a branch of its own."""
    return {} if branch is None else {"branch": branch}


def final_state(code: str) -> JobState:
    return JobState.CANCELLED if code == "BEM-506" else JobState.FAILED


def run_result(state: RunState) -> JobResult:
    return JobResult(
        text=state.text,
        usage=state.usage,
        model_used=state.model_used,
        tool_calls=len(state.records),
        refusal=state.refusal,
    )
