"""``riverbeam sandbox build|doctor``: build the sandbox image, check what a worker sees."""

from __future__ import annotations

import argparse
from typing import Any


def add_sandbox_commands(commands: Any) -> None:
    """Register ``sandbox build`` and ``sandbox doctor`` on the CLI's subcommand group."""
    sandbox = commands.add_parser("sandbox", help="build or check the sandbox image")
    actions = sandbox.add_subparsers(dest="sandbox_command", required=True, metavar="ACTION")
    build = actions.add_parser("build", help="build the sandbox image unless it is current")
    build.add_argument(
        "--force", action="store_true", help="rebuild even when current (fresh Debian packages)"
    )
    build.set_defaults(handler=_build)
    check = actions.add_parser("doctor", help="check engine, image, hardening and free disk")
    check.set_defaults(handler=_doctor)


def _build(args: argparse.Namespace) -> int:
    from bot.config import load_settings
    from sandbox.host.image.build import build_image

    image = build_image(load_settings(), force=args.force)
    state = "built" if image.built else "already current"
    print(f"{image.ref} {state} ({image.method}, {image.size_bytes / (1 << 20):.0f} MiB)")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from bot.config import load_settings
    from sandbox.host.doctor import doctor

    report = doctor(load_settings())
    print(report.render())
    return 0 if report.ok else 1
