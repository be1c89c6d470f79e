"""Who Riverbeam commits as, and how the person who asked for a change is credited."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

import pygit2
from pydantic import BaseModel, ConfigDict, Field, field_validator

from bot.core.errors import BeamError

__all__ = ["Identity", "Named", "Trailer", "compose_message", "utf8"]


class Named(Protocol):
    """Anything with a name and an email, such as ``bot.config.Identity``."""

    @property
    def name(self) -> str: ...

    @property
    def email(self) -> str: ...


# Characters git cannot store in a signature, or that would forge a second header line.
_SIGNATURE_FORBIDDEN = re.compile(r"[<>\x00-\x1f\x7f]")
_TRAILER_KEY = r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$"
_TRAILER_LINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*: \S")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Identity(BaseModel):
    """A name and email as git records them: ``Riverbeam <riverbeam@localhost>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(default="Riverbeam", min_length=1, max_length=200)
    email: str = Field(default="riverbeam@localhost", min_length=1, max_length=200)

    @field_validator("name", "email")
    @classmethod
    def _storable(cls, value: str) -> str:
        if _SIGNATURE_FORBIDDEN.search(value) or value != value.strip():
            raise ValueError("must not contain '<', '>', control characters or edge spaces")
        return value

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"

    @classmethod
    def of(cls, person: Named) -> Identity:
        """``person``'s name and email, checked as git needs them (pydantic ValidationError)."""
        return person if isinstance(person, Identity) else cls(name=person.name, email=person.email)

    def signature(self) -> pygit2.Signature:
        """A signature stamped now."""
        return pygit2.Signature(self.name, self.email)


class Trailer(BaseModel):
    """One ``Key: value`` line in a commit message's trailer block."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(pattern=_TRAILER_KEY)
    value: str = Field(min_length=1, max_length=500)

    @field_validator("value")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if any(ch in value for ch in "\r\n\x00") or value != value.strip():
            raise ValueError("a trailer value is one line without edge spaces")
        return value

    @classmethod
    def requested_by(cls, person: Named | str) -> Trailer:
        """Credit for the person who asked: ``Name <email>``, or the name a job recorded
        (its ``requested_by``) on one line, control characters and runs of blanks made one
        space."""
        if not isinstance(person, str):
            return cls(key="Requested-by", value=str(Identity.of(person)))
        value = " ".join(_CONTROL.sub(" ", person).split())[:500]
        return cls(key="Requested-by", value=value or "anonymous")

    @classmethod
    def parse(cls, line: str) -> Trailer:
        """A trailer from its ``Key: value`` line (pydantic ValidationError when it is not)."""
        key, _, value = line.partition(": ")
        return cls(key=key, value=value)

    @classmethod
    def co_authored_by(cls, person: Named) -> Trailer:
        return cls(key="Co-authored-by", value=str(Identity.of(person)))

    def __str__(self) -> str:
        return f"{self.key}: {self.value}"


def compose_message(message: str, trailers: Sequence[Trailer]) -> str:
    """The message with trailing blanks trimmed and ``trailers`` in its final paragraph."""
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
