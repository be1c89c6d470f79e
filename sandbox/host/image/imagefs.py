"""The last step of both image builds: accounts, directories, the import path, and the pruning
of every program the tool server does not need.

It runs on the host over an unpacked root filesystem (the registry-free build) and inside the
build container as ``python3 imagefs.py / --site auto --uid 10001`` (the Dockerfile build), so
it uses the standard library only.

What is removed, and why: shells, package managers, interpreters other than Python, and
every other program. The tool server needs none of them, and code that escapes its jail
should find nothing to run: no ``sh`` for a shell-out, no ``apt``/``dpkg``/``pip`` to install
one, no ``perl``. Python itself stays, with its standard library; ``pip`` and ``ensurepip``
do not.
"""

from __future__ import annotations

import argparse
import os
import shutil
import site
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["APP_DIR", "CHECKS_DIR", "KEPT_PROGRAMS", "SITE_DIR", "add_account", "finish", "prune"]

APP_DIR = "/opt/riverbeam/app"
SITE_DIR = "/opt/riverbeam/site"
# The docs checks' tools: on the import path of the checks' processes only (docs/checks.md).
CHECKS_DIR = "/opt/riverbeam/checks"
KEPT_PROGRAMS = frozenset({"python3", "python3.11"})
_PROGRAM_DIRS = ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "usr/local/sbin")
_DROPPED = (
    "etc/apt",
    "var/lib/apt",
    "var/cache/apt",
    "var/lib/dpkg",
    "var/log",
    "usr/lib/apt",
    "usr/lib/dpkg",
    "usr/share/doc",
    "usr/share/info",
    "usr/share/lintian",
    "usr/share/locale",
    "usr/share/man",
    "usr/share/perl",
    "usr/share/bug",
    "usr/libexec",
    "etc/cron.daily",
    "opt/riverbeam/site/bin",
    "opt/riverbeam/checks/bin",
    "usr/share/perl5",
    "usr/lib/x86_64-linux-gnu/perl",
    "usr/lib/x86_64-linux-gnu/perl-base",
    "usr/lib/aarch64-linux-gnu/perl",
    "usr/lib/aarch64-linux-gnu/perl-base",
    "build",
)
# Package installers inside Python's own directories.
_DROPPED_PYTHON = ("ensurepip", "pip", "setuptools", "wheel", "idlelib", "turtledemo")
# checks/trees and checks/work are the mount points of the docs checks' two tmpfs.
_EMPTY_DIRS = ("workspace", "outbox", "tmp", "usr/lib/ssl/certs", "checks/trees", "checks/work")


def finish(root: Path, *, site_packages: str, uid: int, checks_uid: int) -> list[str]:
    """Make ``root`` ready to run the tool server as ``uid`` and the docs checks as
    ``checks_uid``; returns what was pruned."""
    _write_accounts(root, uid, checks_uid)
    for name in _EMPTY_DIRS:
        # pygit2 insists that a certificate location exists at import; an empty one trusts
        # nothing, which suits a container without a network.
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)  # sticky and world-writable, like any /tmp
    pth = root / site_packages.lstrip("/") / "riverbeam.pth"
    pth.parent.mkdir(parents=True, exist_ok=True)
    pth.write_text(f"{APP_DIR}\n{SITE_DIR}\n")
    return prune(root)


def prune(root: Path, keep: frozenset[str] = KEPT_PROGRAMS) -> list[str]:
    """Remove every program but those named in ``keep`` (Python), and the package managers'
    files."""
    removed: list[str] = []
    for directory in _PROGRAM_DIRS:
        path = root / directory
        if path.is_symlink() or not path.is_dir():
            continue  # merged /usr: /bin -> usr/bin is pruned through its target
        for entry in sorted(path.iterdir()):
            if entry.name not in keep:
                _remove(entry)
                removed.append(str(entry.relative_to(root)))
    for name in _DROPPED:
        if _remove(root / name):
            removed.append(name)
    for python_lib in sorted(root.glob("usr/*lib/python3*")) + sorted(
        root.glob("usr/local/lib/python3*/site-packages")
    ):
        for name in _DROPPED_PYTHON:
            if _remove(python_lib / name):
                removed.append(str((python_lib / name).relative_to(root)))
    _drop_exec_bits(root, keep)
    return removed


def _drop_exec_bits(root: Path, keep: frozenset[str]) -> None:
    """Leave the kept programs the only files with an execute bit (shared libraries aside):
    standard library modules ship as executable scripts, which the kernel would run by their
    shebang."""
    for top, _, files in os.walk(root):
        for name in files:
            path = Path(top, name)
            mode = path.lstat().st_mode
            runnable = stat.S_ISREG(mode) and mode & 0o111
            if runnable and name not in keep and ".so" not in name:
                path.chmod(stat.S_IMODE(mode) & ~0o111)


def _remove(path: Path) -> bool:
    if path.is_symlink() or path.is_file():
        path.unlink()
        return True
    if path.is_dir():
        shutil.rmtree(path)
        return True
    return False


def _write_accounts(root: Path, uid: int, checks_uid: int) -> None:
    add_account(root, "root", 0, "/root")
    add_account(root, "sandbox", uid, "/tmp")
    add_account(root, "checks", checks_uid, "/checks/work")


def add_account(root: Path, name: str, uid: int, home: str) -> None:
    """A user ``name`` with its own group, both ``uid``, and no login shell."""
    etc = root / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    _set_line(etc / "passwd", f"{name}:", f"{name}:x:{uid}:{uid}:{name}:{home}:/nonexistent")
    _set_line(etc / "group", f"{name}:", f"{name}:x:{uid}:")


def _set_line(path: Path, prefix: str, line: str) -> None:
    lines = path.read_text().splitlines() if path.exists() else []
    lines = [existing for existing in lines if not existing.startswith(prefix)]
    path.write_text("\n".join([*lines, line]) + "\n")


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="imagefs.py")
    parser.add_argument("root", type=Path)
    parser.add_argument("--site", default="auto", help="site-packages to put riverbeam.pth in")
    parser.add_argument("--uid", type=int, default=int(os.environ.get("SANDBOX_UID", "10001")))
    parser.add_argument(
        "--checks-uid", type=int, default=int(os.environ.get("CHECKS_UID", "10002"))
    )
    args = parser.parse_args(argv)
    site_packages = site.getsitepackages()[0] if args.site == "auto" else args.site
    pruned = finish(
        args.root, site_packages=site_packages, uid=args.uid, checks_uid=args.checks_uid
    )
    for path in pruned:
        print(f"removed {path}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
