"""The TLS context every outbound HTTP client shares (the model client, the forge clients).

httpx makes a new context for each client it builds, and reading the CA bundle into it is
the slow part: 55 ms of CPU here, on every model call, since each call builds its own
client. One context per process serves them all; it holds no connection or event loop.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def shared_tls_context() -> ssl.SSLContext:
    """httpx's default context (verification on, the CA bundle it reads), made once."""
    return httpx.create_ssl_context()
