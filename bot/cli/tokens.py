"""``riverbeam tokens new --name NAME --role ROLE [--repo R ...]``: make an API token.

The token is printed once, on the first line of standard output, followed by the
``[[api.tokens]]`` table that holds its SHA-256 (never the token) for ``riverbeam.toml``.
Nothing is written anywhere: the configuration file is the operator's to edit.
"""

from __future__ import annotations

import argparse
import json
import sys
import typing
from typing import Any

from pydantic import ValidationError

from bot.config import Role, TokenConfig
from bot.core.errors import BeamError
from bot.service.access import new_token, token_digest

ROLES: tuple[str, ...] = typing.get_args(Role)


def add_tokens_commands(commands: Any) -> None:
    tokens = commands.add_parser(
        "tokens",
        help="make bearer tokens for the HTTP API",
        description="Make bearer tokens for the HTTP API (see docs/api.md for the roles).",
    )
    actions = tokens.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    new = actions.add_parser(
        "new",
        help="print a fresh token and its [[api.tokens]] entry",
        description="Print a fresh token (once: store it now) and the [[api.tokens]] table "
        "to paste into riverbeam.toml; send `riverbeam api` SIGHUP to load it.",
    )
    new.add_argument("--name", required=True, help="who holds it; recorded on jobs and decisions")
    new.add_argument("--role", required=True, choices=ROLES, help="what it may do")
    new.add_argument(
        "--repo",
        dest="repos",
        action="append",
        metavar="NAME",
        help="limit it to this repository (repeatable; default: every repository)",
    )
    new.set_defaults(handler=_new)


def token_table(entry: TokenConfig) -> str:
    """The ``[[api.tokens]]`` TOML table of ``entry`` (JSON strings are TOML strings)."""
    lines = [
        "[[api.tokens]]",
        f"name = {json.dumps(entry.name)}",
        f"role = {json.dumps(entry.role)}",
        f"sha256 = {json.dumps(entry.sha256)}",
    ]
    if entry.repos is not None:
        lines.append(f"repos = [{', '.join(json.dumps(repo) for repo in entry.repos)}]")
    return "\n".join(lines) + "\n"


def _new(args: argparse.Namespace) -> int:
    if args.repos:
        from bot.config import load_settings

        settings = load_settings()
        for repo in args.repos:
            settings.repository(repo)  # BEM-900 for a name the configuration does not register
    token = new_token()
    try:
        entry = TokenConfig(
            name=args.name,
            role=args.role,
            sha256=token_digest(token),
            repos=tuple(args.repos) if args.repos else None,
        )
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise BeamError("BEM-900", f"invalid token entry: {where}: {first['msg']}") from None
    print(token)
    print()
    print(token_table(entry), end="")
    print(
        f"\nThe first line is {entry.name}'s token, shown this once: hand it over or store it "
        "(a CI secret named RIVERBEAM_TOKEN, a password manager) now.\nPaste the table into "
        "riverbeam.toml and send `riverbeam api` SIGHUP (kill -HUP <pid>) to load it; only the "
        "digest is kept there.",
        file=sys.stderr,
    )
    return 0
