"""Which files one job segment walks through: a scripted-model author job's first segment
(it reads the tree, edits, commits and parks on its push), run in process on the harness's
real stack (Redis, Docker, a git upstream), traced with ``sys.settrace`` from the moment
``Executor.execute`` is entered until it returns, on every thread it starts.

    python -m bench.segment_walk

Counted, over the project's own files (``bot/``, ``sandbox/``, ``skills/``):

- **files entered**: distinct files a frame of the segment ran in;
- **returns to a left file**: times the walk came back (by a call or a return) to a file it
  had been in and left; and, per file, the most returned-to ones.

Nothing is asserted: the figures are for comparing the segment's structure before and after.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import bot
from bot.jobs.executor import Executor
from bot.store.models import JobKind
from harness.playbooks import AUTHOR_REQUEST
from harness.stack import job_stack

# The tree whose code was imported (a checkout of another release can be measured too).
ROOT = Path(bot.__file__).resolve().parent.parent
OWN = tuple(str(ROOT / package) + "/" for package in ("bot", "sandbox", "skills"))


class Walk:
    """The project files the traced frames ran in, in order, per thread."""

    def __init__(self) -> None:
        self.entered: set[str] = set()
        self.returns: Counter[str] = Counter()
        self._current: dict[int, str] = {}
        self._lock = threading.Lock()

    def _arrive(self, filename: str) -> None:
        if not filename.startswith(OWN):
            return
        name = str(Path(filename).relative_to(ROOT))
        thread = threading.get_ident()
        with self._lock:
            if self._current.get(thread) == name:
                return
            if name in self.entered:
                self.returns[name] += 1
            self.entered.add(name)
            self._current[thread] = name

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            self._arrive(frame.f_code.co_filename)
            return self.trace
        if event == "return" and frame.f_back is not None:
            self._arrive(frame.f_back.f_code.co_filename)
        return self.trace


def main() -> None:
    walk = Walk()
    execute = Executor.execute

    def traced(self: Executor, record: Any) -> Any:
        threading.settrace(walk.trace)
        sys.settrace(walk.trace)
        try:
            return execute(self, record)
        finally:
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]

    Executor.execute = traced  # type: ignore[method-assign]
    with job_stack() as stack:
        job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        ended = stack.worker("w").run_job(job.id)
        state = ended.state.value if ended is not None else "none"
    print(f"segment ended: {state}")
    print(f"files entered: {len(walk.entered)}")
    print(f"returns to a left file: {sum(walk.returns.values())}")
    for name, count in walk.returns.most_common(8):
        print(f"  {count:4d}  {name}")


if __name__ == "__main__":
    main()
