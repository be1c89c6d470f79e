"""What a person sees when a command fails in a way no BEM code covers: one line that says
what failed and where the details are, never a traceback (unless ``--debug`` asks for it).

The traceback goes to ``riverbeam-errors.log`` in the state directory
(``bot.cli.paths.state_dir``), or to the system's temporary directory when that one cannot
be written.
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bot.cli.paths import state_dir

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_UNEXPECTED", "error_log_path", "report_unexpected"]

# sysexits.h's EX_SOFTWARE: an internal error, neither a usage error nor a failed job.
EXIT_UNEXPECTED = 70
# What a shell reports for a writer killed by SIGPIPE (128 + 13): `riverbeam jobs list | head`.
EXIT_BROKEN_PIPE = 141
ERROR_LOG_NAME = "riverbeam-errors.log"


def error_log_path() -> Path:
    """Where unexpected failures are logged (see the module doc)."""
    return state_dir() / ERROR_LOG_NAME


def report_unexpected(error: BaseException, argv: Sequence[str], *, debug: bool) -> int:
    """Log ``error`` with its traceback, print one line on standard error, and return the
    exit code. With ``debug`` the traceback goes to standard error instead."""
    details = "".join(traceback.format_exception(error))
    summary = _one_line(error)
    if debug:
        sys.stderr.write(details)
        print(f"riverbeam: unexpected error: {summary}", file=sys.stderr)
        return EXIT_UNEXPECTED
    where = _append_to_log(details, argv)
    print(
        f"riverbeam: unexpected error: {summary} (the traceback is in {where}; "
        "run again with --debug to see it here)",
        file=sys.stderr,
    )
    return EXIT_UNEXPECTED


def _one_line(error: BaseException) -> str:
    """``Type: first line of the message``, plus the innermost frame of our own code, so a
    reader knows which part failed without opening the log."""
    message = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    ours = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if any(f"{os.sep}{top}{os.sep}" in frame.filename for top in ("bot", "sandbox", "skills"))
    ]
    if ours:
        frame = ours[-1]
        module = _module_of(frame.filename)
        text += f" [in {module}:{frame.lineno}]"
    return text


def _module_of(filename: str) -> str:
    parts = Path(filename).with_suffix("").parts
    for index in range(len(parts) - 1, -1, -1):
        if parts[index] in ("bot", "sandbox", "skills"):
            return ".".join(parts[index:])
    return filename


def _append_to_log(details: str, argv: Sequence[str]) -> Path:
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    entry = f"--- {stamp} pid {os.getpid()}: riverbeam {' '.join(argv)}\n{details}\n"
    for path in (error_log_path(), Path(tempfile.gettempdir()) / ERROR_LOG_NAME):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as log:
                log.write(entry)
        except OSError:
            continue
        return path
    return Path("(nowhere: no writable log directory)")
