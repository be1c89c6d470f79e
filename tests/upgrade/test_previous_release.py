"""``harness.previous_release.accepted_config``: the code before issue 18 (the job benchmarks'
baseline) gets a copy of a config without the keys its schema refuses, checked by that
code itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.previous_release import unpack

pytestmark = pytest.mark.slow

BEFORE_ISSUE_18 = "eb61274"
CONFIG = """redis_url = "redis://127.0.0.1:6379/0"

[repositories.docs]
upstream = "/srv/git/docs.git"
publish_ref = "docs-live"

[model]
factory = "bench._jobs_model:for_job"

[jobs]
prefix = "rbtest"
container_start = "ahead"
lease_seconds = 30.0
spare_containers = 1

[sandbox]
image = "riverbeam-sandbox"
runtime = "crun"

[mcp.skills]
author = []
"""


def test_the_keys_the_old_code_refuses_are_left_out(tmp_path: Path) -> None:
    previous = unpack(
        BEFORE_ISSUE_18, tmp_path / "previous", "unused", model_factory="bench._jobs_model:for_job"
    )
    config, accepted = tmp_path / "new.toml", tmp_path / "old.toml"
    config.write_text(CONFIG)

    dropped = previous.accepted_config(config, accepted)

    assert sorted(dropped) == [
        "jobs.container_start",
        "jobs.spare_containers",
        "mcp",
        "sandbox.runtime",
    ]
    kept = accepted.read_text()
    for line in ('prefix = "rbtest"', "lease_seconds = 30.0", 'image = "riverbeam-sandbox"'):
        assert line in kept
    for gone in ("container_start", "spare_containers", "runtime", "mcp", "author = []"):
        assert gone not in kept
    # What is left, the old code takes as it is.
    assert previous.accepted_config(accepted, tmp_path / "again.toml") == []
