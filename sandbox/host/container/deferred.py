"""A job segment's container, started when the segment needs it (``DeferredSandbox``).

It wraps one ``ContainerSandbox`` and the call that starts it. The tools it hands the agent
carry the static in-process specs (``sandbox.inside.tool_specs``), so what the model sees,
and the tool digest a parked run is checked against, never depend on the container having
started. The container starts:

- ahead, on a background thread, when the owner calls ``begin`` (it knows a tool call is
  coming, and has other work to do meanwhile: the agent's set-up, the first model call);
- or at the first tool call, which otherwise only waits for a start under way.

A start that failed is kept and raised again, as it was raised, by every later tool call and
by ``raise_if_failed``: the owner ends the segment with the very error a start in line would
have raised. ``stop`` waits for a start under way, then removes the container, so a stop never
races a start into leaving one behind; after it nothing starts any more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import JsonValue

from bot.core.tools import Tool
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.container.remote_tools import ContainerTool
from sandbox.inside.tool_specs import TOOL_SPECS

__all__ = ["DeferredSandbox"]


class DeferredSandbox:
    """``sandbox``, started by ``start(sandbox)`` once, ahead (``begin``) or on first use."""

    def __init__(
        self, sandbox: ContainerSandbox, start: Callable[[ContainerSandbox], None]
    ) -> None:
        self._sandbox = sandbox
        self._start = start
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._failure: BaseException | None = None
        self.start_seconds = 0.0
        """How long the start took (engine create to the ready line), wherever it ran."""
        self.wait_seconds = 0.0
        """How long tool calls waited for the start: the part of it nothing overlapped."""

    @property
    def begun(self) -> bool:
        """Whether a start was begun (it may have failed, or be under way)."""
        return self._thread is not None

    @property
    def running(self) -> bool:
        """Whether the container started and is not stopped: a call now waits for nothing."""
        thread = self._thread
        done = thread is not None and not thread.is_alive()
        return done and self._failure is None and not self._stopped

    def begin(self) -> None:
        """Start the container on a background thread, unless begun already or stopped."""
        with self._lock:
            if self._thread is not None or self._stopped:
                return
            self._thread = threading.Thread(target=self._run_start, name="sandbox-start")
            self._thread.start()

    def ready(self) -> None:
        """Start the container if need be and wait until it is ready; raise its failure."""
        self.begin()
        thread = self._thread
        if thread is not None and thread.is_alive():
            waited = time.perf_counter()
            thread.join()
            self.wait_seconds += time.perf_counter() - waited
        self.raise_if_failed()

    def call(self, tool: str, args: dict[str, Any], timeout: float | None = None) -> JsonValue:
        """Run ``tool`` in the container, once it is ready."""
        self.ready()
        # Stopped before it ever started: the sandbox says so (BEM-404).
        return self._sandbox.call(tool, args, timeout)

    def run_program(
        self, module: str, request: Mapping[str, Any], *, checks: bool, timeout: float
    ) -> dict[str, Any]:
        """Run a program of the image beside the tool server, once the container is ready."""
        self.ready()
        return self._sandbox.run_program(module, request, checks=checks, timeout=timeout)

    def tools(self) -> list[Tool]:
        """The nine tools, with the in-process specs; a call starts the container if need be."""
        return [ContainerTool(spec, self) for spec in TOOL_SPECS.values()]

    def failure(self) -> BaseException | None:
        """What a finished start raised, or None (not begun, under way, or it succeeded)."""
        thread = self._thread
        if thread is None or thread.is_alive():
            return None
        return self._failure

    def raise_if_failed(self) -> None:
        """Raise again what a finished start raised; never waits."""
        failure = self.failure()
        if failure is not None:
            raise failure

    def stop(self) -> None:
        """Wait for a start under way, then remove the container; nothing starts after."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        if thread is not None:
            thread.join()
        self._sandbox.stop()

    def _run_start(self) -> None:
        began = time.perf_counter()
        try:
            self._start(self._sandbox)
        except BaseException as error:  # kept for the caller's thread, raised there
            self._failure = error
        finally:
            self.start_seconds = time.perf_counter() - began
