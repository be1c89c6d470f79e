"""``riverbeam submit <kind> --repo NAME …``: queue a job, print its id, optionally follow it.

Everything is checked before anything is stored, as for an API request (the same
``JobRequest``, through the job service): the kind, the fields the kind needs, the
repository (it must be registered), so a bad request is BEM-501 and nothing is queued.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import JsonValue, ValidationError

from bot.core.errors import JobError
from bot.service.schemas import JobRequest
from bot.store.models import invalid_request


def add_submit_command(commands: Any) -> None:
    submit = commands.add_parser(
        "submit",
        help="queue a job and print its id",
        description="Queue a job on a registered repository and print its id.",
    )
    submit.add_argument(
        "kind", help="author, review, summarize, commit-notes or publish", metavar="KIND"
    )
    submit.add_argument("--repo", required=True, help="a repository registered in the config")
    submit.add_argument(
        "--request",
        metavar="TEXT",
        help="what to do, in words (author jobs need it); '-' reads standard input",
    )
    submit.add_argument("--base", help="the base branch (default: the repository's)")
    submit.add_argument("--branch", help="the branch to review, summarize or describe")
    submit.add_argument("--range", help="commit-notes: the commits A..B to describe")
    submit.add_argument(
        "--review-job", metavar="JOB_ID", help="publish: the approving review job to publish"
    )
    submit.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata to store with the job (repeatable)",
    )
    submit.add_argument("--as", dest="as_name", metavar="NAME", help="requester (default: $USER)")
    submit.add_argument(
        "--follow", action="store_true", help="stream the job's frames until it ends or parks"
    )
    submit.set_defaults(handler=_submit)


def job_request(args: argparse.Namespace) -> JobRequest:
    """The request the arguments describe; BEM-501 when it is not a valid request."""
    request = args.request
    if request == "-":
        # `echo ... |` and a heredoc end the text with a newline the writer did not mean.
        request = sys.stdin.read().removesuffix("\n").removesuffix("\r")
    fields: dict[str, Any] = {
        "kind": args.kind,
        "repo": args.repo,
        "request": request or "",
        "base": args.base,
        "branch": args.branch,
        "range": args.range,
        "review_job": args.review_job,
    }
    return checked_request(fields, args.meta)


def checked_request(fields: dict[str, Any], meta: list[str]) -> JobRequest:
    """The API's request for ``fields`` and the ``KEY=VALUE`` metadata pairs ``meta``;
    BEM-501 when it is not a valid request."""
    try:
        return JobRequest(**fields, metadata=metadata_pairs(meta))
    except ValidationError as error:
        raise invalid_request(error) from None


def metadata_pairs(pairs: list[str]) -> dict[str, JsonValue]:
    metadata: dict[str, JsonValue] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise JobError("BEM-501", f"invalid job request: --meta {pair!r} is not KEY=VALUE")
        metadata[key] = value
    return metadata


def _submit(args: argparse.Namespace) -> int:
    from bot.cli.common import console, operator, scripted_model_note, services
    from bot.cli.follow_command import finish, follow
    from bot.cli.render import FrameRenderer
    from bot.config import load_settings

    settings = load_settings()
    request = job_request(args)
    who = operator(args.as_name)
    out = console()
    note = scripted_model_note(settings)
    with services(settings) as running:
        record = running.service.submit(who, request)
        if not args.follow:
            if note is not None:
                print(note, file=sys.stderr)  # standard output is the id alone
            print(record.id)
            return 0
        out.print(f"job {record.id} queued ({request.kind.value} on {request.repo})")
        if note is not None:
            out.print(note)
        return finish(out, follow(running.service, who, record.id, FrameRenderer(out)))
