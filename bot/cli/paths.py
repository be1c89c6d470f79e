"""Where the command line keeps its local state."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["state_dir"]


def state_dir() -> Path:
    """Where the local stack keeps Redis data, logs and beat's schedule, and where unexpected
    failures are logged: ``$RIVERBEAM_STATE_DIR``, else ``$XDG_STATE_HOME/riverbeam``, else
    ``~/.local/state/riverbeam``."""
    explicit = os.environ.get("RIVERBEAM_STATE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME")
    return (Path(base) if base else Path.home() / ".local" / "state") / "riverbeam"
