"""The ``riverbeam`` command: a thin layer over the library and the service.

Exit codes: 0 done; 1 the command ran but what it reports failed (a followed job that
failed, `sandbox doctor` not ready, a stack process that died); 2 a BEM error or a usage
error, with nothing changed; 70 an unexpected failure (one line on standard error, the
traceback in the error log: ``bot.cli.failures``); 130 interrupted; 141 the reader of
standard output went away (``riverbeam jobs list | head -1``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path

from bot.cli.api import add_api_command
from bot.cli.approvals_command import add_approvals_commands
from bot.cli.ci import add_ci_commands
from bot.cli.demo_command import add_demo_command
from bot.cli.failures import EXIT_BROKEN_PIPE, report_unexpected
from bot.cli.healthcheck import add_healthcheck_commands
from bot.cli.images import add_image_commands
from bot.cli.jobs_command import add_jobs_commands
from bot.cli.mcp_command import add_mcp_command
from bot.cli.model import add_model_commands
from bot.cli.repos import add_repos_commands
from bot.cli.sandbox import add_sandbox_commands
from bot.cli.service import add_service_commands
from bot.cli.skills import add_skills_commands
from bot.cli.submit import add_submit_command
from bot.cli.tokens import add_tokens_commands
from bot.cli.up import add_up_command
from bot.core.errors import BeamError

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="riverbeam", description="A sandboxed, git-publishing docs bot."
    )
    parser.add_argument("--version", action="version", version=version("riverbeam"))
    parser.add_argument(
        "-c",
        "--config",
        type=Path,
        metavar="PATH",
        help="the riverbeam.toml to use (default: $RIVERBEAM_CONFIG or ./riverbeam.toml)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an unexpected failure, print the traceback here instead of to the error log",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add_demo_command(commands)
    add_up_command(commands)
    add_submit_command(commands)
    add_jobs_commands(commands)
    add_approvals_commands(commands)
    add_service_commands(commands)
    add_api_command(commands)
    add_mcp_command(commands)
    add_tokens_commands(commands)
    add_ci_commands(commands)
    add_repos_commands(commands)
    add_skills_commands(commands)
    add_sandbox_commands(commands)
    add_image_commands(commands)
    add_healthcheck_commands(commands)
    add_model_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(arguments)
    if args.config is not None:
        # Through the environment, so the processes a command starts read it too.
        os.environ["RIVERBEAM_CONFIG"] = str(args.config.resolve())
    handler: Handler = args.handler
    try:
        code = handler(args)
        sys.stdout.flush()  # a reader that left shows here, not at the interpreter's exit
        return code
    except BeamError as error:
        print(f"riverbeam: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("riverbeam: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (`| head`): say nothing more, and let the interpreter's final
        # flush of stdout go to /dev/null instead of raising again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as error:
        return report_unexpected(error, arguments, debug=args.debug)
