"""``riverbeam approvals list|show|approve|refuse``: the pushes waiting for a person, the
diff each would land, and deciding them."""

from __future__ import annotations

import argparse
import json
from typing import Any

from bot.store.models import DecisionBinding


def add_approvals_commands(commands: Any) -> None:
    approvals = commands.add_parser("approvals", help="see and decide parked pushes")
    actions = approvals.add_subparsers(dest="approvals_command", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="pushes waiting for a decision, oldest first")
    listing.add_argument("--repo", help="only this repository's")
    listing.add_argument("--json", action="store_true", help="JSON approvals, one a line")
    listing.set_defaults(handler=_list)

    show = actions.add_parser("show", help="the diff a parked push would land, and its target")
    show.add_argument("job_id", metavar="JOB_ID")
    show.add_argument("--json", action="store_true", help="the approval as JSON")
    show.set_defaults(handler=_show)

    for name, verb in (("approve", "approve"), ("refuse", "refuse")):
        decide = actions.add_parser(name, help=f"{verb} a parked push; the job resumes")
        decide.add_argument("job_id", metavar="JOB_ID")
        decide.add_argument(
            "--comment",
            required=name == "refuse",
            default="",
            help="what the model reads with the decision"
            + (" (required: say why)" if name == "refuse" else ""),
        )
        decide.add_argument(
            "--approval",
            metavar="ID",
            help="the approval you looked at, as `approvals show` prints it"
            + (" (required)" if name == "approve" else " (optional: refusing releases nothing)"),
        )
        decide.add_argument("--commit", metavar="SHA", help="its commit, as shown")
        decide.add_argument("--digest", metavar="DIGEST", help="its diff digest, as shown")
        decide.add_argument(
            "--as",
            dest="as_name",
            metavar="NAME",
            help="reviewer name to record (default: $USER); your OS account is recorded beside it",
        )
        decide.add_argument("--follow", action="store_true", help="then stream the job's frames")
        if name == "approve":
            decide.add_argument(
                "--override-checks",
                action="store_true",
                help="approve over a blocking docs-check failure (admins; recorded)",
            )
        decide.set_defaults(handler=_decide, approve=name == "approve")


def _list(args: argparse.Namespace) -> int:
    from bot.cli.common import operator, print_listing, services
    from bot.cli.render import approvals_table

    with services() as running:
        pending = running.service.approvals(operator(None), repo=args.repo)
    print_listing(
        pending, as_json=args.json, empty="no pushes wait for a decision", table=approvals_table
    )
    return 0


def _show(args: argparse.Namespace) -> int:
    from bot.cli.common import console, operator, services
    from bot.cli.render import show_approval
    from bot.review.words import word_changes

    with services() as running:
        approval = running.service.approval(operator(None), args.job_id)
    if args.json:
        document = approval.model_dump(mode="json")
        # As the API shows it too: computed from the diff, never stored.
        document["word_changes"] = [c.model_dump(mode="json") for c in word_changes(approval.diff)]
        print(json.dumps(document, indent=2))
        return 0
    show_approval(console(), approval)
    return 0


def _decide(args: argparse.Namespace) -> int:
    from bot.cli.common import console, operator, os_account, services
    from bot.cli.follow_command import finish, follow
    from bot.cli.render import FrameRenderer

    out = console()
    binding = DecisionBinding.named(args.approval, args.commit, args.digest)
    who = operator(args.as_name)
    with services() as running:
        # Decided from here on: frames already in the stream belong to the parked segment.
        resume_from = running.store.events.last_id(args.job_id)
        decided = running.service.decide(
            who,
            args.job_id,
            approve=args.approve,
            comment=args.comment,
            binding=binding,
            os_user=os_account(),
            override_checks=getattr(args, "override_checks", False),
        )
        target = f"{decided.target_ref} (commit {(decided.commit_sha or '')[:12]})"
        out.print(
            f"{decided.state.value}: job {decided.job_id}'s {decided.tool} to {target}, "
            f"by {decided.decider}; the job resumes on a worker"
        )
        if not args.follow:
            return 0
        renderer = FrameRenderer(out)
        followed = follow(running.service, who, args.job_id, renderer, after=resume_from)
        return finish(out, followed)
