"""``riverbeam image build``: the deployment's service and Redis images, without a registry."""

from __future__ import annotations

import argparse
from typing import Any


def add_image_commands(commands: Any) -> None:
    """Register ``image build`` on the CLI's subcommand group."""
    image = commands.add_parser(
        "image",
        help="build the service and Redis images of docker/compose.yaml",
        description="Build the service image (API, worker and beat) and the Redis image from "
        "a Debian root filesystem and wheels made here; each is a no-op when current. "
        "The sandbox image is `riverbeam sandbox build`.",
    )
    actions = image.add_subparsers(dest="image_command", required=True, metavar="ACTION")
    build = actions.add_parser("build", help="build the images unless they are current")
    build.add_argument(
        "--force", action="store_true", help="rebuild even when current (fresh Debian packages)"
    )
    build.set_defaults(handler=_build)


def _build(args: argparse.Namespace) -> int:
    from bot.config import load_settings
    from sandbox.host.image.deploy_images import build_deploy_images

    for image in build_deploy_images(load_settings(), force=args.force):
        state = "built" if image.built else "already current"
        print(f"{image.ref} {state} ({image.size_bytes / (1 << 20):.0f} MiB)")
    return 0
