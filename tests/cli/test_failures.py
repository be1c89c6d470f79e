"""No traceback reaches a person from ``riverbeam``: an unexpected failure is one line naming
what failed and where the traceback went (``--debug`` shows it instead), and a reader that
goes away (``| head``) ends the command quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bot.cli.failures import ERROR_LOG_NAME, EXIT_BROKEN_PIPE, EXIT_UNEXPECTED

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# A real `riverbeam skills` process whose handler hits a bug no BEM code covers: the
# command's own module raises, as a library fault would.
CRASHING = """
import sys
import bot.cli.skills as skills

def broken(args):
    {}["missing"]

skills._skills = broken
sys.exit(__import__("bot.cli", fromlist=["main"]).main(sys.argv[1:]))
"""


def _run(*argv: str, state: Path, script: str = CRASHING) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *argv],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        env={**os.environ, "RIVERBEAM_STATE_DIR": str(state)},
        timeout=60,
        check=False,
    )


def test_an_unexpected_failure_is_one_line_and_the_traceback_is_logged(tmp_path: Path) -> None:
    done = _run("skills", state=tmp_path)
    assert done.returncode == EXIT_UNEXPECTED
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    log = tmp_path / ERROR_LOG_NAME
    assert lines[0].startswith("riverbeam: unexpected error: KeyError: 'missing'")
    assert str(log) in lines[0] and "--debug" in lines[0]
    logged = log.read_text()
    assert "riverbeam skills" in logged
    assert "Traceback (most recent call last)" in logged and "KeyError: 'missing'" in logged


def test_debug_prints_the_traceback_instead(tmp_path: Path) -> None:
    done = _run("--debug", "skills", state=tmp_path)
    assert done.returncode == EXIT_UNEXPECTED
    assert "Traceback (most recent call last)" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("riverbeam: unexpected error: KeyError")
    assert not (tmp_path / ERROR_LOG_NAME).exists()


def test_an_unwritable_state_directory_still_gets_one_line(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    done = _run("skills", state=blocked)
    assert done.returncode == EXIT_UNEXPECTED
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "skills"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=PROJECT_ROOT,
        # Block-buffered, as a pipe is by default: the write meets the closed pipe only at
        # the final flush.
        env={**_buffered(os.environ), "RIVERBEAM_STATE_DIR": str(tmp_path)},
    )
    assert process.stdout is not None and process.stderr is not None
    with process.stderr:
        process.stdout.close()  # before the command writes: its first write meets a closed pipe
        stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == EXIT_BROKEN_PIPE
    assert stderr == ""


def _buffered(environment: os._Environ[str]) -> dict[str, str]:
    return {name: value for name, value in environment.items() if name != "PYTHONUNBUFFERED"}
