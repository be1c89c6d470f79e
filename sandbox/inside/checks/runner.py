"""The docs checks on one exported tree: ``python -I -X utf8 -m sandbox.inside.checks.runner``,
started by the host in the job's container as the checks' uid (``sandbox.checks_uid``).

It reads one JSON request on stdin::

    {"tree": "/checks/trees/<id>", "files": [changed paths], "checks": [{"name": ..., options}],
     "limits": {"timeout": s, "cpu": s, "memory": bytes, "processes": n, "output": bytes,
                "findings": n}}

and writes one JSON line on stdout: ``{"runs": [{"check", "status", "seconds", "findings",
"total", "detail"}]}``, a run per check in order. ``status`` is ``passed`` (no finding, or
nothing to look at), ``failed`` (findings) or ``error`` (the check could not say: a tool the
image lacks, a cap reached, a crash). Only ``passed`` is green.

Each check is a process of its own, in a work folder of its own under ``/checks/work`` (the
checks' tmpfs, which only their uid can write), with the tree (read-only to this uid) as its
working directory and caps the kernel enforces: CPU seconds, address space, processes, file
size and no core files (``setrlimit``), its OOM score raised so that the kernel kills a
check before the tool server, and a wall-clock deadline and an output cap the runner
enforces. When a check ends, whatever it left running is killed (``kill(-1)`` reaches every
process of this uid in the container, and this process reaps them as the subreaper).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sandbox.inside.checks.check_catalog import (
    CHECKS_DIR,
    Context,
    Invocation,
    Unavailable,
    invocation,
    parse,
    unfinished,
)

__all__ = ["main"]

WORK_ROOT = Path("/checks/work")
_REQUEST_CAP = 1 << 22
_FILE_BYTES = 64 << 20  # the largest file a check may write (a built page, its report)
_PR_SET_CHILD_SUBREAPER = 36
_READ_BYTES = 1 << 16
_REAP_SECONDS = 5.0
_DETAIL_CHARS = 800
_SIGNALS: dict[int, str] = {
    signal.SIGXCPU: "used up its CPU time",
    signal.SIGXFSZ: "wrote a file over the size cap",
    signal.SIGKILL: "was killed (over its memory cap, or its CPU time's hard limit)",
}


def main() -> int:
    request = json.loads(sys.stdin.buffer.read(_REQUEST_CAP))
    # The checks' packages (PyYAML for a YAML markdownlint configuration).
    sys.path.append(CHECKS_DIR)
    _become_subreaper()
    _raise_oom_score()
    tree = Path(request["tree"])
    files = [str(path) for path in request.get("files", [])]
    limits: dict[str, Any] = request["limits"]
    runs = [
        _run(index, check, tree, files, limits)
        for index, check in enumerate(request.get("checks", []))
    ]
    sys.stdout.write(json.dumps({"runs": runs}) + "\n")
    return 0


def _run(
    index: int, check: Mapping[str, Any], tree: Path, files: list[str], limits: Mapping[str, Any]
) -> dict[str, Any]:
    name = str(check["name"])
    work = WORK_ROOT / f"{index}-{name}"
    started = time.monotonic()
    try:
        _fresh(work)
        context = Context(name, tree, work, tuple(files), check)
        planned = invocation(context)
        if planned is None:
            return _result(name, started, "passed", [], detail="nothing to check")
        if isinstance(planned, Unavailable):
            return _result(name, started, "error", [], detail=planned.reason)
        return _run_process(context, planned, limits, started)
    except (OSError, ValueError) as error:
        return _result(name, started, "error", [], detail=f"{type(error).__name__}: {error}")
    finally:
        _kill_leftovers()
        shutil.rmtree(work, ignore_errors=True)


def _run_process(
    context: Context, planned: Invocation, limits: Mapping[str, Any], started: float
) -> dict[str, Any]:
    name = context.name
    for file_name, text in planned.prepared.items():
        (context.work / file_name).write_text(text, encoding="utf-8")
    process = subprocess.Popen(
        planned.argv,
        cwd=context.tree,
        env=_environment(context.work),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        close_fds=True,
        preexec_fn=_capped(limits),
    )
    output, problem = _collect(process, float(limits["timeout"]), int(limits["output"]))
    code = process.wait()
    text = output_text = output.decode("utf-8", "replace")
    if planned.report_file:
        text = _read_capped(Path(planned.report_file), int(limits["output"])) or text
    findings = parse(text, context)
    if problem is None and code < 0:
        problem = f"{name} {_SIGNALS.get(-code, f'ended on signal {-code}')}"
    if problem is None and (unfinished(name, output_text, code) or (code != 0 and not findings)):
        problem = f"{name} exited {code}: {_why(output_text)}"
    if problem is not None:
        return _result(name, started, "error", findings, limits, detail=problem)
    if findings:
        return _result(name, started, "failed", findings, limits)
    return _result(name, started, "passed", [])


def _why(text: str) -> str:
    """The lines of a failed run that say why: those naming an error, then its last two."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()][:3]
    chosen = [*errors, *(line for line in lines[-2:] if line not in errors)]
    return " | ".join(chosen)[:_DETAIL_CHARS] or "no output"


def _collect(
    process: subprocess.Popen[bytes], timeout: float, cap: int
) -> tuple[bytes, str | None]:
    """The process's output up to ``cap`` bytes; a problem when it went past the cap or the
    ``timeout`` (the process group is killed then)."""
    assert process.stdout is not None
    output = bytearray()
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _kill_group(process)
                return bytes(output), f"did not finish within {timeout:g} s"
            if not selector.select(min(remaining, 0.5)):
                if process.poll() is not None:
                    # Ended, but something it started still holds the pipe open.
                    _kill_leftovers()
                continue
            chunk = os.read(process.stdout.fileno(), _READ_BYTES)
            if not chunk:
                return bytes(output), None
            output += chunk
            if len(output) > cap:
                _kill_group(process)
                return bytes(output[:cap]), f"wrote more than {cap} bytes of output"


def _capped(limits: Mapping[str, Any]) -> Callable[[], None]:
    cpu, memory = int(limits["cpu"]), int(limits["memory"])
    processes = int(limits["processes"])

    def apply() -> None:
        os.setsid()  # a group of its own, killed as one
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (_FILE_BYTES, _FILE_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _environment(work: Path) -> dict[str, str]:
    home, temporary = work / "home", work / "tmp"
    home.mkdir(exist_ok=True)
    temporary.mkdir(exist_ok=True)
    return {
        "PATH": f"{CHECKS_DIR}/bin:/usr/local/bin:/usr/bin",
        "HOME": str(home),
        "TMPDIR": str(temporary),
        "PYTHONPATH": CHECKS_DIR,
        "PYTHONDONTWRITEBYTECODE": "1",
        # The image has no locales but C; -X utf8 makes text UTF-8 all the same.
        "LANG": "C",
        "NO_COLOR": "1",
    }


def _fresh(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(mode=0o700, parents=True)


def _read_capped(path: Path, cap: int) -> str:
    try:
        with path.open("rb") as file:
            return file.read(cap).decode("utf-8", "replace")
    except OSError:
        return ""


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _kill_leftovers() -> None:
    """Kill every other process of this uid in the container (what a check left behind, in
    any process group), and reap them."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)
    deadline = time.monotonic() + _REAP_SECONDS
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)


def _become_subreaper() -> None:
    # Orphans of a check come to this process, not to the tool server (pid 1), which
    # would leave them as zombies.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _raise_oom_score() -> None:
    # Inherited by every check: under memory pressure the kernel kills a check first.
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("1000")


def _result(
    name: str,
    started: float,
    status: str,
    findings: list[dict[str, Any]],
    limits: Mapping[str, Any] | None = None,
    *,
    detail: str = "",
) -> dict[str, Any]:
    kept = int(limits["findings"]) if limits is not None else len(findings)
    ordered = sorted(findings, key=lambda item: (item["path"], item["line"], item["rule"]))
    return {
        "check": name,
        "status": status,
        "seconds": round(time.monotonic() - started, 3),
        "findings": ordered[:kept],
        "total": len(findings),
        "detail": detail,
    }


if __name__ == "__main__":
    sys.exit(main())
