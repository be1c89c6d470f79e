"""Who Riverbeam commits as, and how the person who asked for a change is credited.

The rules themselves are ``bot.core.authors``' (plain Python, for the tool server); these
models apply them where Riverbeam's settings and jobs carry an identity or a trailer."""

from __future__ import annotations

import re

import pygit2
from pydantic import BaseModel, ConfigDict, Field, field_validator

from bot.core.authors import (
    DEFAULT_EMAIL,
    DEFAULT_NAME,
    MAX_PERSON_CHARS,
    MAX_TRAILER_VALUE_CHARS,
    TRAILER_KEY_PATTERN,
    Named,
    compose_message,
    storable,
    trailer_value,
    utf8,
)

__all__ = ["Identity", "Named", "Trailer", "compose_message", "utf8"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Identity(BaseModel):
    """A name and email as git records them: ``Riverbeam <riverbeam@localhost>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(default=DEFAULT_NAME, min_length=1, max_length=MAX_PERSON_CHARS)
    email: str = Field(default=DEFAULT_EMAIL, min_length=1, max_length=MAX_PERSON_CHARS)

    @field_validator("name", "email")
    @classmethod
    def _storable(cls, value: str) -> str:
        return storable(value)

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

    key: str = Field(pattern=TRAILER_KEY_PATTERN)
    value: str = Field(min_length=1, max_length=MAX_TRAILER_VALUE_CHARS)

    @field_validator("value")
    @classmethod
    def _one_line(cls, value: str) -> str:
        return trailer_value(value)

    @classmethod
    def requested_by(cls, person: Named | str) -> Trailer:
        """Credit for the person who asked: ``Name <email>``, or the name a job recorded
        (its ``requested_by``) on one line, control characters and runs of blanks made one
        space."""
        if not isinstance(person, str):
            return cls(key="Requested-by", value=str(Identity.of(person)))
        value = " ".join(_CONTROL.sub(" ", person).split())[:MAX_TRAILER_VALUE_CHARS]
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
