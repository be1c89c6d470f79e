"""Following a job's event stream until it ends or parks for a person: the job service's
follow (``bot.service.follow``), printed."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Console
from rich.text import Text

from bot.cli.render import FrameRenderer
from bot.service.access import Principal
from bot.service.follow import StreamEnd
from bot.service.jobs import JobService
from bot.store.models import ApprovalState, JobEvent, JobRecord, JobState

# How long one blocking read waits before the follower looks at the job record: a job
# parks (or waits in its queue) without writing an event to say so.
POLL_MS = 500
# Silence this long while no worker holds the job: say why nothing happens.
IDLE_NOTICE_SECONDS = 3.0


@dataclass(frozen=True)
class Followed:
    """Where following stopped: the last event id read (to go on from) and the job then."""

    last_event: str
    record: JobRecord

    @property
    def parked(self) -> bool:
        return self.record.state is JobState.AWAITING_APPROVAL


def follow(
    service: JobService,
    who: Principal,
    job_id: str,
    renderer: FrameRenderer,
    *,
    after: str = "0-0",
    stop_when_parked: bool = True,
) -> Followed:
    """Print the job's frames from after event ``after`` until it ends, or until it waits
    for a decision nobody has made yet (with ``stop_when_parked``). A job whose decision is
    made but not yet applied is followed on: its resume is on the way."""
    last, quiet_since, told = after, time.monotonic(), False
    # The record is looked at after every quiet read: a parked job writes no event.
    for item in service.follow(who, job_id, after=after, wait_ms=POLL_MS, look_every=0):
        if isinstance(item, JobEvent):
            quiet_since, told, last = time.monotonic(), False, item.id
            if item.end is not None:
                renderer.end(item.end)
                return Followed(last, service.job(who, job_id))
            if item.frame is not None:
                renderer.frame(item.frame)
            continue
        if isinstance(item, StreamEnd):
            # The end entry was trimmed from a capped stream or never written: say it anyway.
            renderer.end(item.record.state)
            return Followed(last, item.record)
        record = item.record
        if record is None:
            continue
        person = _waits_for_a_person(service, record)
        if stop_when_parked and person:
            return Followed(last, record)
        quiet = time.monotonic() - quiet_since > IDLE_NOTICE_SECONDS
        if quiet and not told and record.state is not JobState.RUNNING:
            renderer.note(_why_idle(record, waits_for_a_person=person))
            told = True
    raise AssertionError("a follow ends with the job's end")


def _waits_for_a_person(service: JobService, record: JobRecord) -> bool:
    if record.state is not JobState.AWAITING_APPROVAL:
        return False
    approval = service.store.approvals.get(record.id)
    return approval is not None and approval.state is ApprovalState.PENDING


def _why_idle(record: JobRecord, *, waits_for_a_person: bool) -> str:
    """Why nothing happens to a job that is not running: a parked job waits for a decision
    (no worker is needed for that); a queued job, or a decided one whose resume is queued,
    waits for a worker."""
    if waits_for_a_person:
        return (
            f"  … {record.state.value}: waiting for a person to approve or refuse "
            f"(`riverbeam approvals show {record.id}`); following on until the job ends"
        )
    return (
        f"  … {record.state.value}: waiting for a worker to take it (is `riverbeam "
        "worker` or `riverbeam up` running for this Redis?)"
    )


def finish(out: Console, followed: Followed) -> int:
    """Say what to do next, and the exit code of a follow: 0 when the job succeeded or
    waits for approval, 1 when it ended any other way."""
    record = followed.record
    if followed.parked:
        out.print(
            Text.assemble(
                ("\nThe push waits for a person:\n", "yellow"),
                f"  see it    riverbeam approvals show {record.id}\n",
                "  then decide with the command it prints, which names what you saw",
            )
        )
        return 0
    if record.error is not None:
        out.print(Text(f"{record.error.code}: {record.error.message}", style="red"))
    return 0 if record.state is JobState.SUCCEEDED else 1
