"""When a job segment starts its container (``jobs.container_start``): ahead on a background
thread when the segment knows a tool call is coming, else at the first tool call, and never
for a segment that calls no tool; a start that fails fails the job as a start in line did."""

from __future__ import annotations

import errno
import threading
from typing import Any

import pytest
from pydantic import JsonValue

from bot.core.errors import BeamError
from bot.core.frames import ToolCallRecord, ToolFrame
from bot.service.access import Principal
from bot.store.models import Approval, ApprovalState, JobKind, JobRecord, JobState
from harness.playbooks import AUTHOR_REQUEST
from harness.stack import REQUESTER, Stack, job_stack
from sandbox.host.container.deferred import DeferredSandbox
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.workspace import outbox_staging
from sandbox.host.workspace.outbox import outbox_branch
from sandbox.host.workspace.prepare import open_workspace
from sandbox.inside.tool_specs import TOOL_SPECS

# -- the wrapper alone -------------------------------------------------------------------


class Sandbox:
    """What ``DeferredSandbox`` drives of a ``ContainerSandbox``: start, call, stop."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def call(self, tool: str, args: dict[str, Any], timeout: float | None = None) -> JsonValue:
        if "stop" in self.events:
            raise BeamError("BEM-404", "the sandbox is not running (stopped, or never started)")
        self.events.append(f"call {tool}")
        return {"tool": tool}

    def stop(self) -> None:
        self.events.append("stop")


def _deferred(sandbox: Sandbox, start: Any) -> DeferredSandbox:
    inner: Any = sandbox
    return DeferredSandbox(inner, start)


def test_the_tools_have_the_static_specs_and_nothing_starts_until_one_is_called() -> None:
    sandbox, starts = Sandbox(), []
    deferred = _deferred(sandbox, lambda inner: starts.append(inner))
    assert [tool.spec() for tool in deferred.tools()] == list(TOOL_SPECS.values())
    assert starts == [] and not deferred.begun
    assert deferred.call("list_tree", {}) == {"tool": "list_tree"}
    assert deferred.call("read_file", {"path": "a"}) == {"tool": "read_file"}
    deferred.begin()
    assert starts == [sandbox], "started once, however often asked"
    deferred.stop()
    assert sandbox.events == ["call list_tree", "call read_file", "stop"]


def test_a_stop_waits_for_a_start_under_way_and_nothing_starts_after_it() -> None:
    sandbox, entered, release = Sandbox(), threading.Event(), threading.Event()

    def start(inner: Any) -> None:
        entered.set()
        release.wait()
        sandbox.events.append("started")

    deferred = _deferred(sandbox, start)
    deferred.begin()
    entered.wait()
    stopper = threading.Thread(target=deferred.stop)
    stopper.start()
    release.set()
    stopper.join()
    # The container the start made is removed after it, never left running.
    assert sandbox.events == ["started", "stop"]
    deferred.begin()
    with pytest.raises(BeamError) as caught:
        deferred.call("list_tree", {})
    assert sandbox.events == ["started", "stop"]
    assert caught.value.code == "BEM-404"


def test_stopped_before_it_began_it_never_starts() -> None:
    sandbox = Sandbox()
    deferred = _deferred(sandbox, lambda inner: sandbox.events.append("started"))
    deferred.stop()
    deferred.begin()
    assert not deferred.begun and sandbox.events == ["stop"]


class Sabotaged(Exception):
    pass


@pytest.mark.parametrize(
    "failure", [BeamError("BEM-402", "the tool server did not become ready"), Sabotaged("x")]
)
def test_a_failed_start_is_raised_again_as_it_was_raised(failure: BaseException) -> None:
    sandbox = Sandbox()

    def start(inner: Any) -> None:
        raise failure

    deferred = _deferred(sandbox, start)
    deferred.begin()
    with pytest.raises(type(failure)) as caught:
        deferred.call("list_tree", {})
    assert caught.value is failure
    with pytest.raises(type(failure)):
        deferred.raise_if_failed()
    deferred.stop()
    assert sandbox.events == ["stop"], "no call reached a container that never started"


# -- in the worker, on the real engine ---------------------------------------------------


def _first_arguments(monkeypatch: pytest.MonkeyPatch, method: str) -> list[str]:
    """The first argument of every ``ContainerSandbox.<method>`` call in this process (the
    in-process worker's)."""
    seen: list[str] = []
    original = getattr(ContainerSandbox, method)

    def recorded(self: ContainerSandbox, first: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(first)
        return original(self, first, *args, **kwargs)

    monkeypatch.setattr(ContainerSandbox, method, recorded)
    return seen


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job ids of every container start."""
    return _first_arguments(monkeypatch, "start")


@pytest.fixture
def container_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tool of every call into a container."""
    return _first_arguments(monkeypatch, "call")


def _segment(stack: Stack, job_id: str, *, resume: bool = False) -> JobRecord:
    worker = stack.worker("w")
    record = worker.resume_job(job_id) if resume else worker.run_job(job_id)
    assert record is not None, stack.log_tails()
    assert stack.sandbox_containers(job_id) == [], "a segment leaves no container"
    return record


@pytest.mark.slow
def test_a_resume_that_calls_no_tool_starts_no_container(starts: list[str]) -> None:
    with job_stack() as stack:
        refused = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        assert _segment(stack, refused.id).state is JobState.AWAITING_APPROVAL
        assert starts == [refused.id]
        # Refused: the model is told so and answers; no tool runs, no container starts.
        stack.decide(refused.id, approve=False, comment="not now")
        ended = _segment(stack, refused.id, resume=True)
        assert ended.state.is_final and ended.result is not None
        assert "refused" in ended.result.text
        assert starts == [refused.id]

        # Approved: the parking segment staged the branch into the outbox on the host, so
        # the resume on this host relays it from there with no container.
        approved = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        assert _segment(stack, approved.id).state is JobState.AWAITING_APPROVAL
        decided = stack.decide(approved.id, approve=True)
        pushed = _segment(stack, approved.id, resume=True)
        assert pushed.state is JobState.SUCCEEDED
        assert stack.upstream_ref(f"riverbeam/{approved.id}") == decided.commit_sha
        assert starts == [refused.id, approved.id]
        # The model reads the same answer from the push as when the container ran it.
        (record,) = [r for r in _tool_records(stack, approved.id) if r.name == "git_push"]
        assert record.ok and isinstance(record.result, dict)
        assert record.result["sha"] == decided.commit_sha
        assert record.result["ref"] == f"refs/heads/riverbeam/{approved.id}"
        assert record.result["remote"] == "origin"
        assert record.result["upstream"] == {
            "branch": f"riverbeam/{approved.id}",
            "sha": decided.commit_sha,
            "pushed": True,
            "already_there": False,
        }


@pytest.mark.slow
def test_a_resume_on_another_host_stages_the_push_there_and_starts_none(
    starts: list[str],
) -> None:
    with job_stack() as stack:
        # Another host rebuilds the tree from the parked snapshot and stages the approved
        # commit into its fresh outbox itself: the relay sends it with no container.
        job, decided = _approved_and_resumed_elsewhere(stack)
        assert starts == [job.id]
        (record,) = [r for r in _tool_records(stack, job.id) if r.name == "git_push"]
        assert record.ok and isinstance(record.result, dict)
        assert record.result["sha"] == decided.commit_sha
        assert isinstance(record.result["upstream"], dict)
        assert record.result["upstream"]["pushed"] is True


@pytest.mark.slow
def test_a_resume_elsewhere_that_cannot_stage_pushes_from_a_container(
    starts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The outbox write fails on the host: the container pushes, as before staging existed.
    monkeypatch.setattr(outbox_staging, "copy_commit", _full_disk)
    with job_stack() as stack:
        job, _ = _approved_and_resumed_elsewhere(stack)
        assert starts == [job.id, job.id]
        assert stack.sandbox_containers(job.id) == []


def _full_disk(*args: Any) -> int:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.slow
def test_the_park_stages_the_push_on_the_host_with_no_call_into_the_container(
    container_calls: list[str],
) -> None:
    with job_stack() as stack:
        job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        parked = _segment(stack, job.id)
        assert parked.state is JobState.AWAITING_APPROVAL
        assert "git_commit" in container_calls and "git_push" not in container_calls
        # Staged before anyone decided: the branch the person is asked about, at its commit.
        asked = stack.store.approvals.get(job.id)
        assert asked is not None and asked.state is ApprovalState.PENDING
        workspace = open_workspace(job.id, stack.worker_settings("w").workspaces)
        assert outbox_branch(workspace.outbox, workspace.branch) == asked.commit_sha
        # Nothing went upstream before the decision, nor after a refusal: the staged commit
        # stays in the job's own outbox, which only the relay of an approved push reads.
        assert stack.upstream_ref(workspace.branch) is None
        stack.decide(job.id, approve=False, comment="not this")
        assert _segment(stack, job.id, resume=True).state.is_final
        assert stack.upstream_ref(workspace.branch) is None
        assert container_calls.count("git_push") == 0


@pytest.mark.slow
def test_a_park_that_cannot_stage_leaves_the_push_to_the_resume_container(
    starts: list[str], container_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with job_stack() as stack:
        job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        with monkeypatch.context() as patched:
            patched.setattr(outbox_staging, "copy_commit", _full_disk)
            assert _segment(stack, job.id).state is JobState.AWAITING_APPROVAL
        decided = stack.decide(job.id, approve=True)
        assert _segment(stack, job.id, resume=True).state is JobState.SUCCEEDED
        # The resume on the same host found nothing staged and pushed from a container.
        assert starts == [job.id, job.id]
        assert container_calls.count("git_push") == 1
        assert stack.upstream_ref(f"riverbeam/{job.id}") == decided.commit_sha


def _tool_records(stack: Stack, job_id: str) -> list[ToolCallRecord]:
    events = stack.store.events.read(job_id, count=10_000)
    return [e.frame.record for e in events if isinstance(e.frame, ToolFrame)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ahead", "on_demand", "eager"])
def test_a_segment_starts_its_container_only_if_a_tool_may_need_it(
    starts: list[str], mode: str
) -> None:
    with job_stack(more_config={"jobs": {"container_start": mode}}) as stack:
        author = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        assert _segment(stack, author.id).state is JobState.AWAITING_APPROVAL
        assert starts == [author.id]
        # A summary that answers without reading: only the eager start and the start ahead
        # (which bets on a first tool call) pay for a container it never uses.
        starts.clear()
        silent = stack.submit(JobKind.SUMMARIZE, "summarize-without-reading", branch="main")
        assert _segment(stack, silent.id).state.is_final
        assert starts == ([] if mode == "on_demand" else [silent.id])
        # A refused push, whose resume only answers: only the eager start starts one.
        starts.clear()
        stack.decide(author.id, approve=False)
        _segment(stack, author.id, resume=True)
        assert starts == ([author.id] if mode == "eager" else [])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ahead", "on_demand"])
def test_a_start_that_fails_off_the_critical_path_fails_the_job_as_in_line(
    starts: list[str], mode: str
) -> None:
    # The tool server cannot be ready in a millisecond: every start fails with BEM-402.
    failing = {"sandbox": {"ready_timeout": 0.001}}
    errors = {}
    for setting in ("eager", mode):
        with job_stack(more_config={**failing, "jobs": {"container_start": setting}}) as stack:
            job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
            ended = _segment(stack, job.id)
            assert ended.state is JobState.FAILED and ended.error is not None
            errors[setting] = ended.error
            # The run stopped at the call that found the start failed: nothing after it ran.
            assert ended.result is None or ended.result.tool_calls <= 1
    assert errors[mode].code == errors["eager"].code == "BEM-402"
    # The same words, up to the tail of the server's stderr that ends them.
    reason = {setting: error.message.split(":")[0] for setting, error in errors.items()}
    assert reason[mode] == reason["eager"] == "the tool server did not become ready (timed out)"
    assert len(starts) == 2


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ahead", "eager"])
def test_a_cancel_during_the_start_ends_the_job_with_nothing_left(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    start = ContainerSandbox.start
    with job_stack(more_config={"jobs": {"container_start": mode}}) as stack:
        job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)

        def cancelled_meanwhile(self: ContainerSandbox, job_id: str, *a: Any, **k: Any) -> None:
            # Someone cancels while the engine is still creating the container.
            stack.service.cancel(Principal.operator(REQUESTER), job_id)
            start(self, job_id, *a, **k)

        monkeypatch.setattr(ContainerSandbox, "start", cancelled_meanwhile)
        ended = _segment(stack, job.id)
        assert ended.state is JobState.CANCELLED
        assert ended.error is not None and ended.error.code == "BEM-506"
        assert stack.upstream_ref(f"riverbeam/{job.id}") is None


def _approved_and_resumed_elsewhere(stack: Stack) -> tuple[JobRecord, Approval]:
    """An author job parked, approved, and resumed by a worker on another host, which
    pushed exactly the approved commit upstream."""
    job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
    assert _segment(stack, job.id).state is JobState.AWAITING_APPROVAL
    decided = stack.decide(job.id, approve=True)
    resumed = stack.worker("elsewhere").resume_job(job.id)
    assert resumed is not None and resumed.state is JobState.SUCCEEDED, stack.log_tails()
    assert stack.upstream_ref(f"riverbeam/{job.id}") == decided.commit_sha
    return job, decided
