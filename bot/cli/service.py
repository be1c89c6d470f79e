"""``riverbeam worker`` and ``riverbeam beat``: the Celery processes of the job service, for
the configured app (``riverbeam.toml`` or ``$RIVERBEAM_CONFIG``, plus ``RIVERBEAM_*``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _queues(text: str) -> list[str]:
    from bot.service.queues import worker_queues

    known = worker_queues()
    queues = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in queues if name not in known]
    if unknown or not queues:
        raise argparse.ArgumentTypeError(
            f"unknown queue {', '.join(unknown) or '(none)'}; the queues are {','.join(known)}"
        )
    return queues


def add_service_commands(commands: Any) -> None:
    worker = commands.add_parser(
        "worker",
        help="run a Celery worker for the job queues",
        description="Run a Celery worker that takes jobs from the queues (default: all of "
        "them, and the per-host chores). It checks the Docker engine and the sandbox image "
        "first. SIGTERM is a warm shutdown: the current job segment finishes.",
    )
    worker.add_argument(
        "--queues", type=_queues, help="comma-separated queues to consume (default: all)"
    )
    worker.add_argument(
        "--concurrency", type=int, help="job processes (default: one per CPU)", metavar="N"
    )
    worker.add_argument("--loglevel", choices=LOG_LEVELS, default="INFO")
    worker.set_defaults(handler=_worker)

    beat = commands.add_parser(
        "beat",
        help="run Celery beat: the schedules",
        description="Run Celery beat with the app's schedule: the per-host chores and each "
        "repository's summary schedule. Run one beat per Redis.",
    )
    beat.add_argument(
        "--schedule", type=Path, metavar="PATH", help="beat's schedule file (default: state dir)"
    )
    beat.add_argument("--loglevel", choices=LOG_LEVELS, default="INFO")
    beat.set_defaults(handler=_beat)


def _worker(args: argparse.Namespace) -> int:
    from bot.cli.localstack import node_name
    from bot.config import load_settings
    from bot.jobs.celery_app import create_app
    from bot.service.queues import worker_queues
    from sandbox.host.engine import connect
    from sandbox.host.image.build import check_image

    settings = load_settings()
    # A worker that cannot start containers would fail every job it takes: refuse to start.
    check_image(connect(timeout=10), settings)
    argv = ["worker", "--queues", ",".join(args.queues or worker_queues())]
    argv += ["--hostname", node_name("worker", settings), "--loglevel", args.loglevel]
    # Jobs use neither revokes nor worker-to-worker events; mingle alone costs a second at start.
    argv += ["--without-mingle", "--without-gossip"]
    if args.concurrency:
        argv += ["--concurrency", str(args.concurrency)]
    create_app(settings).worker_main(argv)
    return 0


def _beat(args: argparse.Namespace) -> int:
    from bot.cli.localstack import beat_schedule_file, node_name
    from bot.config import load_settings
    from bot.jobs.celery_app import create_app

    settings = load_settings()
    schedule = args.schedule or beat_schedule_file(settings)
    schedule.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Remote control on: `riverbeam up` finds a running beat with a ping.
    argv = ["beat", "--schedule", str(schedule), "--loglevel", args.loglevel]
    argv += ["--enable-remote-control", "--hostname", node_name("beat", settings)]
    create_app(settings).start(argv)
    return 0
