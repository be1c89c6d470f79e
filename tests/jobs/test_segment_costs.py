"""What a job segment's time is logged as, and how a worker finds its sandbox image."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
from docker.errors import ImageNotFound

from bot.config import SandboxLimits, Settings
from bot.core.errors import BeamError
from bot.jobs import executor
from bot.jobs.executor import ImageCheck
from bot.jobs.timings import PREFIX, SegmentTimings
from sandbox.host.image.build import ImageInfo


def test_segment_timings_add_up_phases_and_log_one_json_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    timings = SegmentTimings("job1")
    with timings.phase("container"):
        time.sleep(0.02)
    with timings.phase("agent"):
        pass
    with timings.phase("container"):
        time.sleep(0.01)
    with pytest.raises(RuntimeError), timings.phase("park"):
        raise RuntimeError("a failed phase still counts")
    with caplog.at_level(logging.INFO, logger="bot.jobs.timings"):
        timings.log("awaiting_approval")

    (line,) = [record.getMessage() for record in caplog.records]
    assert line.startswith(PREFIX)
    logged = json.loads(line.removeprefix(PREFIX))
    assert logged["job"] == "job1" and logged["state"] == "awaiting_approval"
    assert set(logged["phases_ms"]) == {"container", "agent", "park"}
    assert 30 <= logged["phases_ms"]["container"] < 1000
    assert logged["total_ms"] >= sum(logged["phases_ms"].values())
    assert abs(logged["started"] - time.time()) < 5


class Engine:
    """The engine's image lookups, as ``ImageCheck`` makes them after its first check."""

    def __init__(self) -> None:
        self.looked_up: list[str] = []
        self.removed: set[str] = set()
        self.images = self

    def get(self, ref: str) -> object:
        self.looked_up.append(ref)
        if ref in self.removed:
            raise ImageNotFound(f"no such image: {ref}")
        return object()


def test_the_image_is_found_once_and_then_only_looked_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked: list[SandboxLimits] = []

    def check_image(client: Any, settings: Settings) -> ImageInfo:
        checked.append(settings.sandbox)
        return ImageInfo(f"ref-{len(checked)}", "hash", "id", 1, "rootfs", built=False)

    monkeypatch.setattr(executor, "check_image", check_image)
    engine, images, settings = Engine(), ImageCheck(), Settings()
    client: Any = engine
    assert [images.current(client, settings) for _ in range(3)] == ["ref-1"] * 3
    assert len(checked) == 1 and engine.looked_up == ["ref-1", "ref-1"]
    # Other sandbox settings name another image: found afresh.
    other = settings.model_copy(update={"sandbox": SandboxLimits(image="elsewhere")})
    assert images.current(client, other) == "ref-2"
    assert [limits.image for limits in checked] == ["riverbeam-sandbox", "elsewhere"]
    # Removed since: BEM-401, as the first check says for a missing image.
    engine.removed.add("ref-1")
    with pytest.raises(BeamError) as caught:
        images.current(client, settings)
    assert caught.value.code == "BEM-401" and "ref-1" in caught.value.message
