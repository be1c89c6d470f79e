"""One job stack and one ``riverbeam api`` process per module: the API tests' own fixtures
and tokens (``tests.api.conftest``), so the MCP tools are held to the same roles and
scopes."""

from __future__ import annotations

from tests.api.conftest import api, stack

__all__ = ["api", "stack"]
