"""The one place Riverbeam loads code by a name: a setting of the form
``"package.module:function"`` (``model.factory``, ``forges.<name>.client_factory``) names the
function the workers call to make a client.

Everywhere else an import is an import statement, so the import graph that ``lint-imports``
checks is all there is to who imports whom; ``tests/core/test_contract_loopholes.py`` fails on a
dynamic import anywhere but here. What a setting names is configuration (a test's or the demo's
scripted clients), not one of Riverbeam's own imports, and the contracts do not follow it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from bot.core.errors import BeamError


def load_factory(reference: str, *, setting: str, code: str) -> Callable[..., object]:
    """The function ``reference`` names; ``code`` (the setting's BEM code) when it cannot be
    loaded, the message naming ``setting``."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise BeamError(code, f"{setting} {reference!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise BeamError(
            code, f"{setting} {reference!r}: cannot import {module_name}: {error}"
        ) from None
    factory: object = getattr(module, attribute, None)
    if not callable(factory):
        raise BeamError(code, f"{setting} {reference!r}: {module_name} has no function {attribute}")
    return factory
