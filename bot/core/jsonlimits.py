"""Bounds on the depth and size of JSON documents that come from outside: API bodies, job
metadata, a model's replies and tool-call arguments, paging cursors.

Every JSON reader recurses and stops somewhere: pydantic's JSON parser at 200 levels, its
Python validation of ``JsonValue`` near 255, Python's ``json`` near 1000 (``RecursionError``).
A document that passes one of them and is stored can fail the next one that reads it, and then
nobody can read it back. So each entry refuses what is nested deeper than ``MAX_DEPTH`` (far
below every reader's limit, whatever the document is stored inside) or larger than its size
cap, before anything is parsed further or stored.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BeforeValidator, JsonValue
from pydantic_core import PydanticCustomError

# Levels of arrays and objects: real tool arguments and metadata use a handful.
MAX_DEPTH = 32
# A model's reply or a tool call's arguments (a file written whole fits with room to spare).
MAX_BYTES = 16 << 20
# A job's metadata is stored in its record and read with every page of the jobs list.
METADATA_MAX_BYTES = 64 << 10
# The pydantic error type the API answers as BEM-710.
ERROR_TYPE = "json_limit"


class JsonLimitError(ValueError):
    """A JSON document over a limit. A ValueError, so every caller that already refuses
    malformed JSON refuses this one the same way."""


def check(
    value: object, *, what: str, max_depth: int = MAX_DEPTH, max_bytes: int | None = None
) -> None:
    """Refuse ``value`` (parsed JSON) nested deeper than ``max_depth`` or, given
    ``max_bytes``, longer than that as compact JSON. Walks without recursion."""
    level: list[tuple[object, int]] = [(value, 1)]
    while level:
        item, depth = level.pop()
        if not isinstance(item, dict | list | tuple):
            continue
        if depth > max_depth:
            raise JsonLimitError(f"{what} is nested more than {max_depth} levels deep")
        children = item.values() if isinstance(item, dict) else item
        level.extend((child, depth + 1) for child in children)
    if max_bytes is not None:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
        if size > max_bytes:
            raise JsonLimitError(f"{what} is {size} bytes as JSON; the limit is {max_bytes}")


def loads(
    text: str | bytes, *, what: str, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES
) -> Any:
    """``json.loads`` within the limits: JsonLimitError (a ValueError) when ``text`` is
    over ``max_bytes`` or nests deeper than ``max_depth``; malformed JSON is a ValueError as
    before."""
    size = len(text) if isinstance(text, bytes) else len(text.encode(errors="surrogatepass"))
    if size > max_bytes:
        raise JsonLimitError(f"{what} is {size} bytes; the limit is {max_bytes}")
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonLimitError(f"{what} is nested more than {max_depth} levels deep") from None
    check(value, what=what, max_depth=max_depth)
    return value


def _bounded_metadata(value: object) -> object:
    try:
        check(value, what="metadata", max_bytes=METADATA_MAX_BYTES)
    except JsonLimitError as error:
        raise PydanticCustomError(ERROR_TYPE, str(error)) from None
    except (TypeError, ValueError):
        pass  # not JSON at all: the type's own validation says what is wrong
    return value


# Job metadata as a request carries it: checked before pydantic validates it (which
# recurses), refused with the ``json_limit`` error type.
RequestMetadata = Annotated[dict[str, JsonValue], BeforeValidator(_bounded_metadata)]
