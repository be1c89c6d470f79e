"""The tool server's wire format: one JSON object per line over the container's attached stream.

Host → server, one request per line::

    {"id": "7", "tool": "read_file", "args": {"path": "docs/index.md"}, "timeout": 30.0}

Server → host, one reply per request, in order, with the request's ``id``::

    {"id": "7", "ok": true, "result": ...}
    {"id": "7", "ok": false, "error": {"code": "BEM-303", "message": "..."}}

Before any reply the server writes ``{"ready": true, "version": 1, "tools": [...],
"stages": {...}}`` once it has checked the working tree (``stages``: when it reached each
step of its start). Lines are capped at ``max_message_bytes`` in both directions.
``timeout`` is optional (seconds; the server's ``--call-timeout`` otherwise).

This module runs inside the container too, so it imports nothing outside the standard library.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "PROTOCOL_VERSION",
    "encode_frame",
    "error_reply",
    "ok_reply",
    "ready_frame",
]

PROTOCOL_VERSION = 1


def encode_frame(frame: dict[str, Any]) -> bytes:
    """One protocol line. JSON escapes every newline inside strings, so a frame is one line.

    Raises ``ValueError`` for values JSON cannot carry (NaN, lone surrogates, cycles) and
    ``TypeError`` for objects it does not know.
    """
    text = json.dumps(frame, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # A lone surrogate (an undecodable file name) is not UTF-8: encode raises ValueError.
    return text.encode("utf-8") + b"\n"


def ready_frame(tools: list[str], stages: dict[str, float] | None = None) -> dict[str, Any]:
    """``stages``: when the server reached each stage of its start, in ``time.monotonic``
    seconds (the host's clock as well)."""
    frame: dict[str, Any] = {"ready": True, "version": PROTOCOL_VERSION, "tools": tools}
    if stages is not None:
        frame["stages"] = stages
    return frame


def ok_reply(request_id: str | None, result: Any) -> dict[str, Any]:
    return {"id": request_id, "ok": True, "result": result}


def error_reply(request_id: str | None, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "error": {"code": code, "message": message}}
