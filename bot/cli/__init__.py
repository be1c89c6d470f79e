"""The ``riverbeam`` command: a thin layer over the library and the service."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import version

from bot.cli.sandbox import add_sandbox_commands
from bot.cli.skills import add_skills_commands
from bot.errors import BeamError

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="riverbeam", description="A sandboxed, git-publishing docs bot."
    )
    parser.add_argument("--version", action="version", version=version("riverbeam"))
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add_skills_commands(commands)
    add_sandbox_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except BeamError as error:
        print(f"riverbeam: {error}", file=sys.stderr)
        return 2
