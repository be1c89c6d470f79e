"""What the job service refuses before it stores anything: job metadata over the JSON limits
(the CLI and schedules reach the service without the API's request checks)."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from bot.core.errors import JobError
from bot.service.access import Principal
from harness.stack import REPO, Stack
from tests.store.kit import author, nested


@pytest.mark.parametrize("metadata", [{"x": nested(33)}, {"b": "x" * 65536}], ids=["deep", "large"])
def test_submitting_metadata_over_the_json_limits_is_bem_501_and_stores_nothing(
    stack: Stack, metadata: dict[str, JsonValue]
) -> None:
    before = stack.store.listing.list(limit=1000)
    spec = author(metadata=metadata).model_copy(update={"repo": REPO})

    with pytest.raises(JobError) as caught:
        stack.service.submit(Principal.operator(spec.requested_by), spec)

    assert caught.value.code == "BEM-501" and "metadata" in caught.value.message
    assert stack.store.listing.list(limit=1000) == before
