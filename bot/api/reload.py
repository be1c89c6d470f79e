"""Loading new tokens into a running API: SIGHUP re-reads ``[[api.tokens]]`` from the
configuration (``riverbeam tokens new`` prints the table to add). Nothing else is
re-read: other settings take a restart. A configuration that no longer loads keeps the
tokens in force and says why in the log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from bot.config import load_settings
from bot.core.errors import BeamError
from bot.service.access import TokenRegistry

__all__ = ["reload_tokens", "tokens_reload_on_sighup"]

log = logging.getLogger(__name__)


def reload_tokens(registry: TokenRegistry) -> bool:
    """Replace ``registry``'s tokens with the configuration's; False (and the old tokens
    kept) when it cannot be read."""
    try:
        tokens = load_settings().api.tokens
    except BeamError as error:
        log.error("tokens not reloaded, the old ones stay in force: %s", error)
        return False
    registry.replace(tokens)
    log.warning("tokens reloaded: %d configured", len(tokens))
    return True


def tokens_reload_on_sighup(
    registry: Callable[[], TokenRegistry],
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """A lifespan that reloads ``registry()``'s tokens on SIGHUP while the app serves. Only
    where signals can be had (the main thread of the serving process)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, lambda: reload_tokens(registry()))
        except (RuntimeError, ValueError):  # not the main thread: an in-process test client
            yield
            return
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGHUP)

    return lifespan
