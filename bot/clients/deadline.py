"""One deadline for a whole outbound call, from synchronous code.

httpx's timeouts bound each connect, each read and each write, never the request: a server
that sends a byte every two seconds never trips a three-second read timeout, and holds the
caller as long as it likes. ``within`` runs an async call (httpx's ``AsyncClient``) under one
deadline for all of it (connect, send, status line, headers, body) and cancels it wherever it
is when the deadline passes, which closes its connection.

The callers are synchronous (Celery tasks, host tools): each call gets an event loop of its
own, on a thread of its own when the calling thread already runs one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class DeadlinePassed(TimeoutError):
    """The call did not end within its deadline; it was cancelled."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no complete answer within {seconds:g} s")
        self.seconds = seconds


def within(seconds: float, call: Callable[[], Awaitable[T]]) -> T:
    """``await call()`` on a fresh event loop, cancelled after ``seconds`` (DeadlinePassed)."""

    async def bounded() -> T:
        try:
            async with asyncio.timeout(seconds):
                return await call()
        except TimeoutError:
            raise DeadlinePassed(seconds) from None

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded())
    return _on_own_thread(bounded)


def _on_own_thread(bounded: Callable[[], Awaitable[T]]) -> T:
    # asyncio.run refuses a thread whose loop runs; the caller blocks either way.
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(asyncio.run(_awaited(bounded)))
        except BaseException as error:  # handed to the caller's thread as it is
            failure.append(error)

    thread = threading.Thread(target=run, name="riverbeam-deadline", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


async def _awaited(bounded: Callable[[], Awaitable[T]]) -> T:
    return await bounded()
