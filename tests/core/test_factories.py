"""``load_factory``: the function a ``module:function`` setting names, or the setting's code."""

from __future__ import annotations

import pytest

from bot.core.errors import BeamError
from bot.core.factories import load_factory
from bot.demo import demo_model


def test_the_named_function_is_loaded() -> None:
    assert load_factory("bot.demo:demo_model", setting="model.factory", code="BEM-508") is (
        demo_model
    )


@pytest.mark.parametrize(
    ("reference", "says"),
    [
        ("bot.demo", "must look like 'package.module:function'"),
        ("bot.no_such_module:make", "cannot import bot.no_such_module"),
        ("bot.demo:no_such_function", "bot.demo has no function no_such_function"),
        ("bot.demo:__doc__", "bot.demo has no function __doc__"),
    ],
)
def test_what_cannot_be_loaded_is_the_settings_code(reference: str, says: str) -> None:
    with pytest.raises(BeamError) as caught:
        load_factory(reference, setting="forges.gh.client_factory", code="BEM-810")

    assert caught.value.code == "BEM-810"
    assert caught.value.message.startswith(f"forges.gh.client_factory {reference!r}")
    assert says in caught.value.message
