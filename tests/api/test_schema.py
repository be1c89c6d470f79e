"""schemathesis against the running server's own OpenAPI document: generated requests, valid
and invalid, to every operation. No answer may be a 5xx; every 4xx must be a problem
document carrying a BEM code; every answer must match what the document says (status,
media type, headers, body schema); invalid requests must be refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import Case, CheckContext, GenerationMode, Response
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from bot.core.errors import CODES
from harness.api_server import ApiServer
from tests.api.kit import PROBLEM_TYPE

pytestmark = pytest.mark.slow

# Generated requests per mode, spread over every operation: small enough for the module to
# run in well under a minute on a shared machine.
EXAMPLES = 300


@pytest.fixture(scope="module")
def api_schema(api: ApiServer) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{api.url}/openapi.json")


def problem_document(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """Every 4xx is ``application/problem+json`` with a known BEM code and its own status."""
    if not 400 <= response.status_code < 500:
        return None
    media_type = response.headers.get("content-type", [""])[0]
    assert media_type == PROBLEM_TYPE, f"a {response.status_code} answered as {media_type!r}"
    body: dict[str, Any] = json.loads(response.content)
    assert body.get("code") in CODES, f"no known BEM code in {body}"
    assert body.get("status") == response.status_code, body
    assert body.get("type") == f"urn:riverbeam:error:{body['code']}", body
    return True


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
    problem_document,
]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_answer_keeps_to_the_document(
    api_schema: schemathesis.BaseSchema, api: ApiServer, mode: GenerationMode
) -> None:
    # An admin may do everything, so generated requests reach past the role checks;
    # ignored_auth sends each one again without the token.
    admin = api.auth("admin")

    @given(case=api_schema.as_strategy(generation_mode=mode, headers=admin))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def every_answer(case: Case) -> None:
        case.call_and_validate(checks=CHECKS, timeout=10)

    every_answer()
