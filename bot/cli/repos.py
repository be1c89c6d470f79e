"""``riverbeam repos trust NAME``: pin the SSH host key of a repository's upstream.

It connects the way the workers do (libgit2 picks the key type), shows the key the server
presents with its ``SHA256:`` fingerprint, and after a confirmation (a ``y`` on standard
input, ``--yes``, or ``--fingerprint`` naming that key, checked out of band) appends it to
the repository's known_hosts file. The connection ends at the key: nothing is authenticated,
fetched or pushed. A host whose pinned key differs is never re-pinned here (BEM-345).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bot.core.errors import BeamError


def add_repos_commands(commands: Any) -> None:
    repos = commands.add_parser(
        "repos",
        help="manage the registered repositories' upstreams",
        description="Manage the registered repositories' upstreams.",
    )
    actions = repos.add_subparsers(dest="repos_command", required=True, metavar="ACTION")
    trust = actions.add_parser(
        "trust",
        help="pin the SSH host key of a repository's upstream",
        description="Connect to the repository's SSH upstream, show its host key and "
        "fingerprint, and after confirmation pin it in the repository's known_hosts file "
        "(`known_hosts`, else `workspaces.known_hosts`).",
    )
    trust.add_argument("name", metavar="NAME", help="a repository registered in riverbeam.toml")
    trust.add_argument("--yes", action="store_true", help="pin without asking")
    trust.add_argument(
        "--fingerprint",
        metavar="SHA256:...",
        help="pin only if the server's key has this fingerprint (verified out of band); "
        "no question asked",
    )
    trust.set_defaults(handler=_trust)


def _trust(args: argparse.Namespace) -> int:
    from bot.config import load_settings
    from sandbox.host.upstream.credentials import public_url, scan_host_key, upstream_access
    from sandbox.host.upstream.known_hosts import Verdict, lookup, pin, verify

    settings = load_settings()
    access = upstream_access(args.name, settings.repository(args.name), settings.workspaces)
    expected = _fingerprint(args.fingerprint) if args.fingerprint else None
    endpoint, key = scan_host_key(access)
    found = lookup(access.known_hosts, endpoint, key)
    print(f"upstream:    {public_url(access.url)}")
    print(f"host:        {endpoint.name}")
    print(f"key:         {key.label} ({key.key_type})")
    print(f"fingerprint: {key.fingerprint}")
    print(f"known_hosts: {access.known_hosts}")
    if found.verdict is Verdict.TRUSTED:
        print(f"{endpoint.name} is already trusted with this key; nothing to do.")
        return 0
    if found.verdict is not Verdict.UNKNOWN:
        verify(access.known_hosts, endpoint, key, args.name)  # says why, and what to do
    if expected is not None and expected != key.fingerprint:
        raise BeamError(
            "BEM-348",
            f"{endpoint} presents {key.fingerprint}, not {expected}: the key is not the one "
            "you verified, so nothing was pinned. Someone may be intercepting the connection; "
            "check with the server's administrator.",
        )
    if expected is None and not args.yes and not _confirmed(endpoint.name, access.known_hosts):
        print("Not trusted; nothing was written.")
        return 1
    pin(access.known_hosts, endpoint, key)
    print(f"pinned: {key.known_hosts_line(endpoint)}")
    return 0


def _fingerprint(given: str) -> str:
    """``SHA256:<base64>`` as OpenSSH prints it (padding ignored); BEM-348 for anything else."""
    prefix, _, digest = given.strip().partition(":")
    digest = digest.rstrip("=")
    if prefix != "SHA256" or len(digest) != 43:
        raise BeamError(
            "BEM-348",
            f"{given!r} is not a SHA256 fingerprint; give it as `ssh-keygen -lf` prints it "
            "(SHA256: and 43 characters)",
        )
    return f"SHA256:{digest}"


def _confirmed(name: str, known_hosts: Path) -> bool:
    print(
        "Compare the fingerprint with the one the server's administrator gives you "
        "(`ssh-keygen -lf` on the server's public host key)."
    )
    print(f"Trust this key for {name} and add it to {known_hosts}? [y/N] ", end="", flush=True)
    answer = sys.stdin.readline()
    print()
    return answer.strip().lower() in ("y", "yes")
