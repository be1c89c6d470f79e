"""What a job segment costs: its time as logged, how a worker finds its sandbox image, and
the upstream callbacks it builds (once)."""

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
from bot.store.models import JobKind, JobState
from harness.playbooks import AUTHOR_REQUEST, FIXED_INSTALL
from harness.stack import PUBLISH_REF, REPO, job_stack
from sandbox.host.image.build import ImageInfo
from sandbox.host.upstream.credentials import UpstreamAccess, UpstreamCallbacks


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


@pytest.mark.slow
def test_the_upstream_callbacks_are_built_once_per_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every UpstreamCallbacks this process builds is counted, wherever it is built (the
    # executor, the workspace, the mirror, the publish tool): a segment shares one. The
    # relay's per-push subclass, which only collects that push's verdict, is not one.
    built: list[str] = []
    build = UpstreamCallbacks.__init__

    def counted(self: UpstreamCallbacks, access: UpstreamAccess) -> None:
        if type(self) is UpstreamCallbacks:
            built.append(access.repo_name)
        build(self, access)

    monkeypatch.setattr(UpstreamCallbacks, "__init__", counted)
    with job_stack() as stack:
        worker = stack.worker("w")

        def segments(job_id: str, *, resume: bool = False) -> JobState:
            built.clear()
            record = worker.resume_job(job_id) if resume else worker.run_job(job_id)
            assert record is not None and built == [REPO], stack.log_tails()
            return record.state

        # An author job: a segment that opens a tree and parks its push, a resume that
        # pushes through the relay.
        author = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        assert segments(author.id) is JobState.AWAITING_APPROVAL
        stack.decide(author.id, approve=True)
        assert segments(author.id, resume=True) is JobState.SUCCEEDED
        approval = stack.store.approval(author.id)
        assert approval is not None
        assert stack.upstream_ref(f"riverbeam/{author.id}") == approval.commit_sha
        # A review (one segment), and the publish of what it approved (two segments).
        stack.push_branch("docs/fix", {"docs/install.md": FIXED_INSTALL}, "Fix the install page")
        review = stack.submit(JobKind.REVIEW, "review-approve", branch="docs/fix")
        assert segments(review.id) is JobState.SUCCEEDED
        publish = stack.submit(JobKind.PUBLISH, "publish", review_job=review.id)
        assert segments(publish.id) is JobState.AWAITING_APPROVAL
        stack.decide(publish.id, approve=True)
        assert segments(publish.id, resume=True) is JobState.SUCCEEDED
        assert stack.upstream_ref(PUBLISH_REF) == stack.upstream_ref("docs/fix")
