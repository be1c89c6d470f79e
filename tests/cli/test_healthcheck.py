"""``riverbeam healthcheck worker``: the compose worker's health check fails readably when
no worker on this host answers (it passes in ``tests/deploy/test_deployment.py``, where the
worker containers report healthy)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from harness.redis_server import redis_server


def test_no_worker_on_this_host_is_bem_410_naming_the_host(tmp_path: Path) -> None:
    with redis_server(tmp_path) as url:
        done = subprocess.run(
            [sys.executable, "-m", "bot.cli", "healthcheck", "worker", "--timeout", "1"],
            capture_output=True,
            text=True,
            env={**os.environ, "RIVERBEAM_REDIS_URL": url, "RIVERBEAM_CONFIG": "/nonexistent"},
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert "BEM-410" in done.stderr
    assert f"no worker on {socket.gethostname()} answered" in done.stderr
    assert "answering: none" in done.stderr
