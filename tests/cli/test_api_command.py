"""``riverbeam api`` on a port another process holds: a BEM code and exit 2, not uvicorn's
own exit code."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_a_port_in_use_is_bem_906_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "bot.cli", "api", "--host", "127.0.0.1", "--port", str(port)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"riverbeam: BEM-906: cannot listen on 127.0.0.1:{port}")
    assert "Traceback" not in done.stderr
