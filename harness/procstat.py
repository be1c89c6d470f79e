"""What ``/proc/<pid>/stat`` says about a process: its fields, and its CPU time (for the
benches' per-job figures and the tests that bound a process's CPU)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

TICKS: Final = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3 onwards); None
    for a process that is gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pids: set[int]) -> float:
    """User + system time of ``pids`` and of the children each has reaped."""
    total = 0
    for pid in pids:
        fields = stat_fields(pid)
        if fields is not None:
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / TICKS
