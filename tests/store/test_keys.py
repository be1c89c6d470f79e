"""The key table in docs/storage.md is the stored contract; it is checked against the key
builders of ``bot.store.keys``, generated from them, so a key added, renamed or dropped on
one side fails here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from bot.store import keys
from bot.store.keys import Keys

STORAGE_DOC = Path(__file__).resolve().parents[2] / "docs" / "storage.md"
# How docs/storage.md writes each builder argument; a hashed argument shows as its digest.
PLACEHOLDERS = {
    "job_id": "<id>",
    "repo": "<repo>",
    "run_id": "<run id>",
    "name": "<name>",
    "scope": "<scope>",
    "idempotency_key": "<sha256>",
    "session_id": "<sha256>",
    "delivery_id": "<sha256>",
    "entry_id": "<entry id>",
    "slot": "<sha256>",
}


def documented_keys() -> set[str]:
    """The first column of the table under "## Keys"."""
    section = STORAGE_DOC.read_text().split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(riverbeam:[^`]*)` \|", section, flags=re.MULTILINE))


def built_keys(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Every builder of ``Keys``, called with the table's placeholders."""
    monkeypatch.setattr(keys, "digest", lambda _text: "<sha256>")
    layout = Keys("riverbeam")
    built = set()
    for name, member in vars(Keys).items():
        if name.startswith("_") or name == "of":
            continue
        if isinstance(member, property):
            built.add(getattr(layout, name))
        elif inspect.isfunction(member):
            parameters = list(inspect.signature(member).parameters)[1:]
            built.add(getattr(layout, name)(*(PLACEHOLDERS[p] for p in parameters)))
    return built


def test_the_key_table_in_the_docs_is_the_key_builders(monkeypatch: pytest.MonkeyPatch) -> None:
    documented, built = documented_keys(), built_keys(monkeypatch)
    assert documented, "docs/storage.md has no key table under ## Keys"
    assert sorted(built - documented) == [], "built but not in docs/storage.md"
    assert sorted(documented - built) == [], "in docs/storage.md but built nowhere"


def test_hashed_keys_hold_the_digest_never_the_value() -> None:
    layout = Keys("p")
    assert layout.idem("req-1") == f"p:idem:{keys.digest('req-1')}"
    assert "secret-cookie" not in layout.session("secret-cookie")


def test_every_key_matches_keys_under_a_prefix_with_glob_characters() -> None:
    layout = Keys("team[1]*")
    assert keys.every_key(layout.approval("")) == r"team\[1\]\*:approval:*"
