"""``riverbeam up``: the all-in-one local stack in the foreground, until Ctrl-C."""

from __future__ import annotations

import argparse
from typing import Any

from rich.text import Text


def add_up_command(commands: Any) -> None:
    up = commands.add_parser(
        "up",
        help="run Redis, a worker, beat and the API on this machine, reusing what runs",
        description="Start what is missing of the local stack for this configuration: "
        "Redis on loopback (append-only file on, data in the state directory), the sandbox "
        "image, a worker, beat, and the HTTP API with the web pages on api.host:api.port. "
        "What already runs is reused. Ctrl-C stops what it "
        "started. State: $RIVERBEAM_STATE_DIR or ~/.local/state/riverbeam.",
    )
    up.add_argument(
        "--concurrency", type=int, metavar="N", help="job processes of the worker it starts"
    )
    up.set_defaults(handler=_up)


def _up(args: argparse.Namespace) -> int:
    from bot.cli.common import console, scripted_model_note
    from bot.cli.localstack import LocalStack
    from bot.cli.paths import state_dir
    from bot.config import config_path, load_settings

    out = console()
    settings = load_settings()
    out.print(f"riverbeam up: {config_path()}, state in {state_dir()}")
    note = scripted_model_note(settings)
    if note is not None:
        out.print(Text(note, style="bold yellow"))
    stack = LocalStack(settings, out, concurrency=args.concurrency, api=True)
    stack.start()
    if not stack.started:
        out.print("everything already runs; nothing to start")
        return 0
    out.print(f"ready on {settings.redis_url}; Ctrl-C stops what was started here")
    try:
        reason = stack.wait()
        out.print(f"stopping: {reason}")
    finally:
        stack.stop()
    return 0 if reason.endswith("received") else 1
