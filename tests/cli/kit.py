"""Running ``riverbeam`` in tests: in this process (``cli``), or as a real process, and
looking for processes a command left behind."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bot.cli import main
from harness.stack import clean_environment

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


def cli(*argv: str, stdin: str = "") -> Ran:
    """``riverbeam ARGV`` in this process, with its output captured; an argparse usage
    error is exit code 2 like any other."""
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        _stdin(stdin),
    ):
        try:
            code = main(list(argv))
        except SystemExit as exit:
            code = int(exit.code or 0)
    return Ran(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _stdin(text: str) -> Iterator[None]:
    saved, sys.stdin = sys.stdin, io.StringIO(text)
    try:
        yield
    finally:
        sys.stdin = saved


def started_pids(output: str) -> list[int]:
    """The pids of the processes ``up`` or ``demo`` said it started."""
    return [
        int(pid)
        for line in output.splitlines()
        if line.strip().startswith("started")
        for pid in re.findall(r"\(pid (\d+)", line)
    ]


def process_groups() -> dict[int, list[int]]:
    """Every live process by its process group: pgid -> pids."""
    groups: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            groups.setdefault(int(fields[2]), []).append(int(entry.name))
    return groups


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    return any(pid in pids for pids in process_groups().values())


class Background:
    """A ``riverbeam`` process whose output is read as it comes, line by line."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot.cli", *argv],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 90.0) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self._reader.join(timeout=5)
                raise AssertionError(f"no {text!r} in the output:\n{self.output}")
            time.sleep(0.05)
        return self.output

    def finish(self, timeout: float = 90.0) -> int:
        """Wait for the process to exit, read the rest of its output; its exit code."""
        try:
            code = self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._reader.join(timeout=5)
            assert self.process.stdout is not None
            self.process.stdout.close()
        return code

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        """A test that failed midway: kill the process, keep nothing open."""
        if self.process.poll() is None:
            self.process.kill()
        if self.process.stdout is not None and not self.process.stdout.closed:
            self.finish()


def environment(state: Path) -> dict[str, str]:
    """The test's environment for a ``riverbeam`` process: no Riverbeam settings (but the
    sandbox image name) or model keys from the shell, the state directory given."""
    clean = clean_environment()
    return {**clean, "RIVERBEAM_STATE_DIR": str(state), "PYTHONPATH": str(PROJECT_ROOT)}


def assert_all_gone(pids: list[int]) -> None:
    """Every process started (``pids``, each its own process group's leader) and everything
    in their groups has exited."""
    assert pids
    groups = process_groups()
    left = {pid: groups[pid] for pid in pids if pid in groups}
    assert not [pid for pid in pids if alive(pid)] and not left, f"still running: {left}"


def approval_flags(shown: str, job_id: str) -> list[str]:
    """The flags that name the job's approval, from what ``approvals show`` printed for the
    reviewer to decide with."""
    found = re.search(rf"riverbeam approvals approve {job_id} (--approval .+?) \[--comment", shown)
    assert found, shown
    return found.group(1).split()
