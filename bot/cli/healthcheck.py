"""``riverbeam healthcheck worker``: the container health check of a worker.

Exits 0 when a worker on this host (a Celery node named ``…@<this host name>``: in a
container, the container's) answers on the broker's control channel, else 2 with BEM-410.
The API's ``/healthz`` answers for the deployment as a whole; this answers for one worker
container, so its orchestrator can mark that one unhealthy.
"""

from __future__ import annotations

import argparse
import socket
from typing import Any

from bot.core.errors import BeamError

PING_SECONDS = 3.0


def add_healthcheck_commands(commands: Any) -> None:
    """Register ``healthcheck worker`` on the CLI's subcommand group."""
    check = commands.add_parser("healthcheck", help="container health checks")
    actions = check.add_subparsers(dest="healthcheck_command", required=True, metavar="WHAT")
    worker = actions.add_parser(
        "worker", help="exit 0 when the worker on this host answers a ping on the broker"
    )
    worker.add_argument("--timeout", type=float, default=PING_SECONDS, metavar="SECONDS")
    worker.set_defaults(handler=_worker)


def _worker(args: argparse.Namespace) -> int:
    from bot.config import load_settings
    from bot.jobs.celery_app import create_app
    from bot.jobs.workers import active_queues

    here = f"@{socket.gethostname()}"
    answered = active_queues(create_app(load_settings()), args.timeout)
    mine = sorted(name for name in answered if name.endswith(here))
    if not mine:
        raise BeamError(
            "BEM-410",
            f"no worker on {here[1:]} answered a ping within {args.timeout:g} s "
            f"(answering: {', '.join(sorted(answered)) or 'none'})",
        )
    print(f"{', '.join(mine)} answered: queues {', '.join(sorted(set(answered[mine[0]])))}")
    return 0
