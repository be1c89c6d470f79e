"""One service for every web test: Redis, a worker, a real upstream and ``riverbeam api``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.web.kit import Web, web_service


@pytest.fixture(scope="package")
def web() -> Iterator[Web]:
    with web_service() as running:
        yield running
