"""What a job segment costs: its time as logged, how a worker finds its sandbox image, and
the upstream callbacks it builds (once)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from bot.config import SandboxLimits, Settings
from bot.jobs import executor
from bot.jobs.executor import ImageCheck
from bot.jobs.timings import PREFIX, SegmentTimings
from bot.store.models import JobKind, JobRecord, JobState
from harness.playbooks import AUTHOR_REQUEST, FIXED_INSTALL
from harness.stack import PUBLISH_REF, REPO, job_stack
from sandbox.host.image.build import ImageInfo, check_image
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
    """An engine that records every image lookup (it has no image to be removed)."""

    def __init__(self) -> None:
        self.looked_up: list[str] = []
        self.images = self

    def get(self, ref: str) -> object:
        self.looked_up.append(ref)
        return object()


def test_the_image_is_found_once_and_then_never_asked_for(
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
    # Found once; later segments ask the engine nothing (a start names the image).
    assert len(checked) == 1 and engine.looked_up == []
    # Other sandbox settings name another image: found afresh.
    other = settings.model_copy(update={"sandbox": SandboxLimits(image="elsewhere")})
    assert images.current(client, other) == "ref-2"
    assert [limits.image for limits in checked] == [settings.sandbox.image, "elsewhere"]


@pytest.mark.slow
def test_an_image_removed_after_the_first_check_fails_the_next_start_with_bem_401(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No spare: one made from the tag before it is removed would serve the second job, which
    # then never starts a container from the removed tag (and rightly parks).
    with job_stack(more_config={"jobs": {"spare_containers": 0}}) as stack:
        worker = stack.worker("w")
        client = worker.docker
        # The worker's image under a tag of this test's own, which it then removes.
        current = check_image(client, worker.settings)
        copy = f"riverbeam-sandbox-removed:{uuid.uuid4().hex[:12]}"
        client.images.get(current.ref).tag(copy)
        monkeypatch.setattr(
            executor, "check_image", lambda *args: dataclasses.replace(current, ref=copy)
        )
        first = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        parked = worker.run_job(first.id)
        assert parked is not None and parked.state is JobState.AWAITING_APPROVAL
        client.images.remove(copy)
        second = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        ended = worker.run_job(second.id)
        assert ended is not None and ended.state is JobState.FAILED
        assert ended.error is not None and ended.error.code == "BEM-401"
        assert copy in ended.error.message and "riverbeam sandbox build" in ended.error.message
        assert stack.sandbox_containers(second.id) == []


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
        approval = stack.store.approvals.get(author.id)
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


@pytest.mark.slow
def test_a_segment_opens_no_redis_connection_of_its_own() -> None:
    with job_stack() as stack:
        worker = stack.worker("w")

        def connections_opened(segment: Callable[[], JobRecord | None]) -> int:
            before = stack.store.gateway.client.info("stats")["total_connections_received"]
            assert segment() is not None, stack.log_tails()
            return int(
                stack.store.gateway.client.info("stats")["total_connections_received"] - before
            )

        # The first job opens the worker's pooled connections, which later segments reuse.
        warm = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        assert worker.run_job(warm.id) is not None
        job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        assert connections_opened(lambda: worker.run_job(job.id)) == 0
        stack.decide(job.id, approve=True)
        assert connections_opened(lambda: worker.resume_job(job.id)) == 0


@pytest.mark.slow
def test_model_max_rounds_is_the_workers_round_limit() -> None:
    # The author playbook needs more than two completions; with model.max_rounds = 2 the
    # worker's loop stops it at the third, and the error names the setting.
    with job_stack(more_config={"model": {"max_rounds": 2}}) as stack:
        worker = stack.worker("w")
        job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        ended = worker.run_job(job.id)
        assert ended is not None and ended.state is JobState.FAILED
        assert ended.error is not None and ended.error.code == "BEM-088"
        assert "made 2 completions" in ended.error.message
        assert "model.max_rounds" in ended.error.message
