"""Restarting this machine's Docker engine the way an operator would, and putting it back
exactly as ``docker/provision`` started it (``docker/start-engine``).

The engine is shared with every other test and session on the machine, so the restart
refuses to touch an engine it did not start that way (a systemd-managed one, say): the test
fails with the reason instead of replacing someone's daemon.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from harness.stack import PROJECT_ROOT

PID_FILE = Path("/var/run/docker.pid")
START_ENGINE = PROJECT_ROOT / "docker" / "start-engine"
STOP_SECONDS = 60.0


def restart_engine() -> None:
    """SIGTERM the plain ``dockerd``, wait until it is gone (it stops its containers first),
    then start it again with ``docker/start-engine``, which waits until it answers."""
    pid = int(PID_FILE.read_text().strip())
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if command[:1] != [b"dockerd"] or any(command[1:]):
        raise AssertionError(
            f"the running engine ({b' '.join(command).decode()}) was not started by "
            "docker/start-engine; restart it yourself"
        )
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"dockerd (pid {pid}) did not stop within {STOP_SECONDS} s")
        time.sleep(0.1)
    subprocess.run([str(START_ENGINE)], check=True, timeout=90)
