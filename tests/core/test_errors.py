import pickle
import re
from pathlib import Path

import pytest

from bot.core.errors import CODES, BeamError, ForgeRetryLater, GitError, JailError, RoutingError

DOCS = Path(__file__).parents[2] / "docs" / "errors.md"


def test_the_code_picks_the_family() -> None:
    error = BeamError("BEM-302", "no '..' here")
    assert type(error) is JailError
    assert str(error) == "BEM-302: no '..' here"
    assert error.to_dict() == {"code": "BEM-302", "message": "no '..' here"}


def test_a_family_refuses_a_code_of_another_family() -> None:
    with pytest.raises(ValueError, match="BEM-020 belongs to RoutingError"):
        GitError("BEM-020", "wrong family")


def test_unknown_codes_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="not a registered BEM code"):
        BeamError("BEM-999", "nope")


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_error_survives_pickling_and_the_wire(code: str) -> None:
    error = BeamError(code, f"message for {code}")
    for copy in (pickle.loads(pickle.dumps(error)), BeamError.from_dict(error.to_dict())):
        assert type(copy) is type(error)
        assert (copy.code, copy.message) == (code, f"message for {code}")


def test_codes_are_well_formed_and_grouped() -> None:
    for code, entry in CODES.items():
        assert re.fullmatch(r"BEM-\d{3}", code)
        assert entry.code == code
        assert entry.meaning
    assert CODES["BEM-020"].family is RoutingError


def test_docs_list_every_code_with_its_meaning() -> None:
    rows = dict(re.findall(r"^\| (BEM-\d{3}) \| ([^|]+?) \|", DOCS.read_text(), re.MULTILINE))
    assert sorted(rows) == sorted(CODES)
    for code, entry in CODES.items():
        assert rows[code] == entry.meaning, code


def test_a_retry_later_keeps_its_wait_through_pickling() -> None:
    error = ForgeRetryLater("BEM-825", "secondary rate limit", retry_after_seconds=42.0)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ForgeRetryLater
    assert (copy.code, copy.retry_after_seconds) == ("BEM-825", 42.0)
    assert BeamError("BEM-821", "a 502").retry_after_seconds is None  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="BEM-823 belongs to ForgeRefused"):
        ForgeRetryLater("BEM-823", "a 404 is not retried")
