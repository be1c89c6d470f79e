"""``riverbeam jobs list|show|follow|cancel``: what jobs there are, one job in full, its live
frames, and stopping it."""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import TYPE_CHECKING, Any

from bot.core.errors import JobError
from bot.store.models import JobKind, JobState

if TYPE_CHECKING:
    from bot.store.store import JobStore

CANCEL_WAIT_SECONDS = 30.0
# A full stream entry id, ASCII digits only.
_EVENT_ID = re.compile(r"^[0-9]{1,20}-[0-9]{1,20}$")


def add_jobs_commands(commands: Any) -> None:
    jobs = commands.add_parser("jobs", help="list, show, follow or cancel jobs")
    actions = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="jobs, newest first")
    listing.add_argument("--state", help="only jobs in this state")
    listing.add_argument("--kind", help="only jobs of this kind")
    listing.add_argument("--repo", help="only jobs on this repository")
    listing.add_argument("--by", metavar="NAME", help="only jobs this person requested")
    listing.add_argument(
        "--limit", type=int, default=20, metavar="N", help="at most this many (default 20)"
    )
    listing.add_argument("--json", action="store_true", help="JSON records, one a line")
    listing.set_defaults(handler=_list)

    show = actions.add_parser("show", help="one job: request, state, result, error, approval")
    show.add_argument("job_id", metavar="JOB_ID")
    show.add_argument("--json", action="store_true", help="the record and approval as JSON")
    show.set_defaults(handler=_show)

    follow = actions.add_parser("follow", help="stream a job's frames until it ends or parks")
    follow.add_argument("job_id", metavar="JOB_ID")
    follow.add_argument(
        "--after",
        default="0-0",
        metavar="EVENT_ID",
        help="start after this event, an id like 1700000000000-3 that an earlier follow "
        "printed (default: from the start)",
    )
    follow.add_argument(
        "--until-end",
        action="store_true",
        help="keep following while the job waits for approval, until it ends",
    )
    follow.set_defaults(handler=_follow)

    cancel = actions.add_parser("cancel", help="cancel a job in any state")
    cancel.add_argument("job_id", metavar="JOB_ID")
    cancel.add_argument(
        "--wait",
        type=float,
        default=CANCEL_WAIT_SECONDS,
        metavar="SECONDS",
        help=f"how long to wait for a running job to stop (default {CANCEL_WAIT_SECONDS:.0f})",
    )
    cancel.set_defaults(handler=_cancel)


def _choice(enum: type[JobState] | type[JobKind], value: str | None, what: str) -> Any:
    if value is None:
        return None
    try:
        return enum(value)
    except ValueError:
        known = ", ".join(member.value for member in enum)
        raise JobError("BEM-501", f"{value!r} is not a job {what} ({known})") from None


def _list(args: argparse.Namespace) -> int:
    from bot.cli.common import operator, print_listing, services
    from bot.cli.render import jobs_table

    state = _choice(JobState, args.state, "state")
    kind = _choice(JobKind, args.kind, "kind")
    if args.limit < 1:
        raise JobError("BEM-501", "--limit must be at least 1")
    with services() as running:
        found = running.service.jobs(
            operator(None),
            state=state,
            kind=kind,
            repo=args.repo,
            requested_by=args.by,
            limit=args.limit,
        )
    out = print_listing(found.records, as_json=args.json, empty="no jobs", table=jobs_table)
    if out is not None and found.next_cursor:
        out.print(f"(more: raise --limit above {args.limit})", style="dim")
    return 0


def _show(args: argparse.Namespace) -> int:
    from bot.cli.common import console, operator, services
    from bot.cli.render import show_job

    with services() as running:
        record = running.service.job(operator(None), args.job_id)
        approval = running.store.approvals.get(record.id)
    if args.json:
        shown = {
            "job": record.model_dump(mode="json"),
            "approval": approval.model_dump(mode="json") if approval else None,
        }
        print(json.dumps(shown, indent=2))
        return 0
    show_job(console(), record, approval)
    return 0


def _follow(args: argparse.Namespace) -> int:
    from bot.cli.common import console, operator, services
    from bot.cli.follow_command import finish, follow
    from bot.cli.render import FrameRenderer

    out = console()
    with services() as running:
        check_follow_start(running.store, args.job_id, args.after)
        followed = follow(
            running.service,
            operator(None),
            args.job_id,
            FrameRenderer(out),
            after=args.after,
            stop_when_parked=not args.until_end,
        )
    if not followed.record.state.is_final:
        out.print(
            f"  (followed up to event {followed.last_event}; to go on from there: "
            f"riverbeam jobs follow {args.job_id} --after {followed.last_event})"
        )
    return finish(out, followed)


def check_follow_start(store: JobStore, job_id: str, after: str) -> None:
    """BEM-501 unless ``after`` is the start (``0-0``) or an event of the job's stream.
    Redis reads ``3`` as ``3-0``, a moment in 1970, so a mistyped id would silently replay
    everything: only a full id the stream holds is taken."""
    if after == "0-0":
        return
    if not _EVENT_ID.match(after) or not store.events.has(job_id, after):
        raise JobError(
            "BEM-501",
            f"{after!r} is not an event of job {job_id}: pass an id like 1700000000000-3 "
            "that a follow printed, or leave --after out to start from the beginning",
        )


def _cancel(args: argparse.Namespace) -> int:
    from bot.cli.common import console, operator, services
    from bot.cli.render import state_text

    out = console()
    with services() as running:
        before = running.store.jobs.get(args.job_id)
        if before.state.is_final:
            out.print(f"job {before.id} already ended:", state_text(before.state))
            return 0
        record = running.service.cancel(operator(None), args.job_id)
        deadline = time.monotonic() + max(args.wait, 0.0)
        # A running job stops at its worker's next model or tool call.
        while not record.state.is_final and time.monotonic() < deadline:
            time.sleep(0.2)
            record = running.store.jobs.get(args.job_id)
    if record.state is JobState.CANCELLED:
        out.print(f"job {record.id} cancelled (it was {before.state.value})")
        return 0
    if record.state.is_final:
        out.print(f"job {record.id} ended before the cancel reached it:", state_text(record.state))
        return 0
    out.print(
        f"job {record.id} is still {record.state.value}: its worker stops it at the next model "
        f"or tool call (follow it: riverbeam jobs follow {record.id})"
    )
    return 1
