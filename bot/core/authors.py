"""Who a commit is by, and the lines that end its message, checked in plain Python.

The rules git needs of a name, an email and a trailer line live here, without pydantic, so the
in-container tool server can commit without loading it (pydantic would be a large share of
its start-up). ``bot.core.identity``'s models apply the same rules through these functions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from bot.core.errors import BeamError

__all__ = [
    "DEFAULT_AUTHOR",
    "DEFAULT_EMAIL",
    "DEFAULT_NAME",
    "MAX_PERSON_CHARS",
    "MAX_TRAILER_VALUE_CHARS",
    "TRAILER_KEY_PATTERN",
    "Author",
    "Named",
    "compose_message",
    "storable",
    "trailer_line",
    "trailer_value",
    "utf8",
]

DEFAULT_NAME = "Riverbeam"
DEFAULT_EMAIL = "riverbeam@localhost"
MAX_PERSON_CHARS = 200
MAX_TRAILER_VALUE_CHARS = 500
TRAILER_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$"

# Characters git cannot store in a signature, or that would forge a second header line.
_SIGNATURE_FORBIDDEN = re.compile(r"[<>\x00-\x1f\x7f]")
_TRAILER_KEY = re.compile(TRAILER_KEY_PATTERN)
_TRAILER_LINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*: \S")


class Named(Protocol):
    """Anything with a name and an email, such as ``bot.config.Identity``."""

    @property
    def name(self) -> str: ...

    @property
    def email(self) -> str: ...


class Author(NamedTuple):
    """A name and an email that git can record (``Author.of`` checks them)."""

    name: str
    email: str

    @classmethod
    def of(cls, person: Named) -> Author:
        """``person``'s name and email; ValueError when git cannot store them."""
        for what, value in (("name", person.name), ("email", person.email)):
            if not isinstance(value, str) or not 1 <= len(value) <= MAX_PERSON_CHARS:
                raise ValueError(f"the {what} must be 1 to {MAX_PERSON_CHARS} characters")
            storable(value)
        return cls(person.name, person.email)

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


DEFAULT_AUTHOR = Author(DEFAULT_NAME, DEFAULT_EMAIL)


def storable(value: str) -> str:
    """``value`` if a git signature can hold it; ValueError otherwise."""
    if _SIGNATURE_FORBIDDEN.search(value) or value != value.strip():
        raise ValueError("must not contain '<', '>', control characters or edge spaces")
    return value


def trailer_value(value: str) -> str:
    """``value`` if it is one line without edge spaces; ValueError otherwise."""
    if any(ch in value for ch in "\r\n\x00") or value != value.strip():
        raise ValueError("a trailer value is one line without edge spaces")
    return value


def trailer_line(line: str) -> str:
    """``line`` if it is one ``Key: value`` trailer, as ``bot.core.identity.Trailer`` would
    accept it; ValueError otherwise."""
    key, _, value = line.partition(": ")
    if not _TRAILER_KEY.fullmatch(key):
        raise ValueError(f"trailer key {key!r} must match {TRAILER_KEY_PATTERN}")
    if not 1 <= len(value) <= MAX_TRAILER_VALUE_CHARS:
        raise ValueError(f"a trailer value is 1 to {MAX_TRAILER_VALUE_CHARS} characters")
    return f"{key}: {trailer_value(value)}"


def compose_message(message: str, trailers: Sequence[object]) -> str:
    """The message with trailing blanks trimmed and ``trailers`` (each one ``Key: value`` line
    once made a string) in its final paragraph."""
    body = "\n".join(line.rstrip() for line in message.strip().splitlines())
    if not trailers:
        return body + "\n"
    added = "\n".join(str(trailer) for trailer in trailers)
    # git reads only the last paragraph as trailers: join one the message already ends with.
    _, gap, last = body.rpartition("\n\n")
    ends_with_trailers = bool(gap) and all(_TRAILER_LINE.match(line) for line in last.splitlines())
    separator = "\n" if ends_with_trailers else "\n\n"
    return body + separator + added + "\n"


def utf8(text: str, what: str) -> bytes:
    """``text`` as UTF-8, or BEM-332 when it holds a lone surrogate (JSON's ``"\\ud800"``
    decodes to one, and no UTF-8 encoding of it exists)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise BeamError(
            "BEM-332",
            f"{what} has a lone surrogate ({text[error.start]!r}) at character {error.start}, "
            "which is not a Unicode character and cannot be stored as UTF-8; send the text "
            "as proper characters",
        ) from None
