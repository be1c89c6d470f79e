"""Author jobs end to end: real Redis, real Celery worker processes, real containers, a real
bare upstream. Only the model is scripted (``harness.playbooks``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from bot.core.errors import BeamError
from bot.service.queues import REAP_SANDBOXES, RESUME_JOB, RUN_JOB, queue_for, send_chore
from bot.store.models import (
    Approval,
    ApprovalState,
    AuthorOutcome,
    CommitInfo,
    JobKind,
    JobRecord,
    JobState,
)
from harness.gitkit import git
from harness.playbooks import AUTHOR_REQUEST, COMMIT_SUBJECT, DONE_TEXT, SLOW_SECONDS
from harness.stack import REQUESTER, REVIEWER, Stack, job_stack, wait_until
from sandbox.host.container.hardening import (
    DEADLINE_LABEL,
    DEPLOYMENT_LABEL,
    JOB_LABEL,
    ROLE_LABEL,
    ROLE_SANDBOX,
)
from sandbox.host.engine import connect
from sandbox.host.image.build import check_image
from sandbox.host.relay import relay_push
from sandbox.host.upstream.credentials import upstream_callbacks
from sandbox.host.workspace.prepare import open_workspace
from tests.store.kit import cancel_as_the_previous_release

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack(lease_seconds=2.0) as running:
        running.start_worker("a")
        yield running


def _park(stack: Stack, playbook: str = "author-fix-install") -> tuple[JobRecord, Approval]:
    job = stack.submit(JobKind.AUTHOR, playbook, request=AUTHOR_REQUEST)
    parked = stack.wait_for(job.id, JobState.AWAITING_APPROVAL)
    approval = stack.store.approvals.get(job.id)
    assert approval is not None and parked.approval_id == approval.id
    return parked, approval


def test_an_author_job_parks_its_push_and_lands_it_after_approval(stack: Stack) -> None:
    main = stack.upstream_ref("main")
    job, approval = _park(stack)
    branch = f"riverbeam/{job.id}"

    # Parked: the approval shows exactly what would land, and no container waits for it.
    assert approval.state is ApprovalState.PENDING
    assert (approval.tool, approval.target_ref, approval.base_sha) == ("git_push", branch, main)
    assert approval.requested_by == REQUESTER and len(approval.commit_sha or "") == 40
    assert "-Instal the tool with pip:" in approval.diff
    assert "+Install the tool with pip:" in approval.diff
    assert "+Then read the [configuration guide](configuration.md)" in approval.diff
    assert "docs/install.md" in approval.diff_stat and len(approval.diff_digest) == 64
    assert [a.job_id for a in stack.store.approvals.pending()] == [job.id]
    assert stack.sandbox_containers(job.id) == []
    assert stack.upstream_ref(branch) is None

    stack.decide(job.id, approve=True, comment="Looks right")
    done = stack.wait_for(job.id, JobState.SUCCEEDED)

    assert stack.upstream_ref(branch) == approval.commit_sha
    assert stack.upstream_ref("main") == main
    assert len(stack.upstream_updates(branch)) == 1
    # The pushed commit credits the person who asked (docs/configuration.md, identity).
    pushed = git("-C", str(stack.upstream), "log", "-1", "--format=%an <%ae>%n%B", branch)
    assert (
        pushed == f"Riverbeam <riverbeam@localhost>\n{COMMIT_SUBJECT}\n\nRequested-by: {REQUESTER}"
    )
    trailers = git("-C", str(stack.upstream), "log", "-1", "--format=%(trailers)", branch)
    assert trailers == f"Requested-by: {REQUESTER}"
    assert done.result is not None and done.result.text == DONE_TEXT
    assert done.result.model_used == "playbook"
    outcome = done.result.outcome
    assert isinstance(outcome, AuthorOutcome)
    assert outcome.branch == branch and outcome.pushed_sha == approval.commit_sha
    assert outcome.commits == [CommitInfo(sha=approval.commit_sha or "", subject=COMMIT_SUBJECT)]
    assert "docs/install.md" in outcome.diff_stat
    decided = stack.store.approvals.get(job.id)
    assert decided is not None and decided.applied and decided.decided_by == REVIEWER
    pushes = [call.result for call in stack.tool_calls(job.id, "git_push")]
    assert pushes[-1]["upstream"] == {  # type: ignore[index]
        "branch": branch,
        "sha": approval.commit_sha,
        "pushed": True,
        "already_there": False,
    }
    events = stack.store.events.read(job.id, count=10_000)
    assert events[-1].end is JobState.SUCCEEDED
    assert stack.sandbox_containers(job.id) == []

    # The same messages again, and the task bodies called again: nothing moves twice.
    stack.app.send_task(RUN_JOB, args=[job.id], queue=queue_for(JobKind.AUTHOR))
    stack.app.send_task(RESUME_JOB, args=[job.id], queue=queue_for(JobKind.AUTHOR))
    in_process = stack.worker("again")
    assert in_process.run_job(job.id) is None
    assert in_process.resume_job(job.id) is None
    time.sleep(1.0)
    assert stack.store.jobs.get(job.id).version == done.version
    assert len(stack.upstream_updates(branch)) == 1


def test_a_job_s_segments_store_no_celery_result(stack: Stack) -> None:
    # The job record says how each segment ended; a Celery result per segment is read by
    # nobody, so none is written (a key and a publish on Redis per segment).
    results = "celery-task-meta-*"
    before = set(stack.store.gateway.client.keys(results))
    job, _ = _park(stack)
    stack.decide(job.id, approve=True)
    stack.wait_for(job.id, JobState.SUCCEEDED)
    assert set(stack.store.gateway.client.keys(results)) == before


def test_a_refused_push_is_an_answer_the_model_reads(stack: Stack) -> None:
    main = stack.upstream_ref("main")
    job, approval = _park(stack)
    stack.decide(job.id, approve=False, comment="Keep the old link for now")
    done = stack.wait_for(job.id, JobState.REFUSED)
    assert done.result is not None
    assert done.result.text == (f"The push was refused by {REVIEWER}: Keep the old link for now")
    assert stack.upstream_ref(f"riverbeam/{job.id}") is None
    assert stack.upstream_ref("main") == main
    outcome = done.result.outcome
    assert isinstance(outcome, AuthorOutcome) and outcome.pushed_sha is None
    assert [commit.sha for commit in outcome.commits] == [approval.commit_sha]
    history = stack.store.approvals.history(job.id)
    assert [(a.state, a.comment) for a in history] == [
        (ApprovalState.REFUSED, "Keep the old link for now")
    ]
    assert stack.sandbox_containers(job.id) == []


def test_a_push_to_a_protected_ref_is_refused_by_policy_without_a_person(stack: Stack) -> None:
    main = stack.upstream_ref("main")
    job = stack.submit(JobKind.AUTHOR, "author-push-main", request=AUTHOR_REQUEST)
    done = stack.wait_for(job.id, JobState.REFUSED)
    assert stack.store.approvals.get(job.id) is None
    assert stack.store.approvals.history(job.id) == []
    assert done.result is not None
    assert done.result.text.startswith("The push was refused by policy: BEM-328: ")
    assert stack.upstream_ref("main") == main
    assert stack.upstream_ref(f"riverbeam/{job.id}") is None


def test_a_resume_redelivered_after_its_worker_died_pushes_once(stack: Stack) -> None:
    """A worker claimed the resume, applied the decision, relayed the push, and died before
    recording anything. The redelivered resume takes the job over once the lease ran out; the
    relay finds the commit already upstream."""
    job, approval = _park(stack)
    branch, sha = f"riverbeam/{job.id}", approval.commit_sha or ""
    stack.store.approvals.decide(job.id, approve=True, by=REVIEWER, binding=approval.binding())
    claimed = stack.store.jobs.claim_resume(job.id, worker="ghost", lease_seconds=1.0)
    assert claimed is not None
    ghost = claimed[0]
    # What the ghost did before it died: the container's push into the outbox, the relay.
    workspace = open_workspace(job.id, stack.worker_settings("a").workspaces)
    outbox = str(workspace.outbox)
    git("-C", str(workspace.tree), "push", "-q", outbox, f"{branch}:{branch}", sandbox=True)
    repo = stack.settings.repository("docs")
    relay_push(
        workspace,
        sha,
        branch,
        repo,
        callbacks=upstream_callbacks("docs", repo, stack.settings.workspaces),
    )
    assert stack.upstream_ref(branch) == sha

    time.sleep(1.2)  # the ghost's lease runs out
    stack.app.send_task(RESUME_JOB, args=[job.id], queue=queue_for(JobKind.AUTHOR))
    done = stack.wait_for(job.id, JobState.SUCCEEDED)
    assert done.attempt == ghost.attempt + 1
    assert done.worker is not None and done.worker.startswith("a@")
    upstream = stack.tool_calls(job.id, "git_push")[-1].result["upstream"]  # type: ignore[index]
    assert upstream == {"branch": branch, "sha": sha, "pushed": False, "already_there": True}
    assert len(stack.upstream_updates(branch)) == 1
    outcome = done.result.outcome if done.result else None
    assert isinstance(outcome, AuthorOutcome) and outcome.pushed_sha == sha


def test_a_job_parked_on_a_killed_worker_resumes_on_another_host() -> None:
    with job_stack() as stack:
        stack.start_worker("a")
        job, approval = _park(stack)
        stack.kill_worker("a")
        stack.start_worker("b")
        host_b = stack.worker_settings("b").workspaces.root
        assert not (host_b / job.id).exists()

        stack.decide(job.id, approve=True)
        done = stack.wait_for(job.id, JobState.SUCCEEDED, timeout=60)

        branch = f"riverbeam/{job.id}"
        assert stack.upstream_ref(branch) == approval.commit_sha
        assert done.result is not None and isinstance(done.result.outcome, AuthorOutcome)
        assert done.result.outcome.pushed_sha == approval.commit_sha
        # Host B rebuilt the tree from the parked snapshot: the exact commit, on its branch.
        assert open_workspace(job.id, stack.worker_settings("b").workspaces).branch == branch
        assert stack.sandbox_containers(job.id) == []


def test_a_running_job_is_cancelled_between_calls_and_leaves_no_container(stack: Stack) -> None:
    job = stack.submit(JobKind.AUTHOR, "author-slow", request=AUTHOR_REQUEST)
    stack.wait_for(job.id, JobState.RUNNING)
    _wait_for_tool(stack, job.id, "list_tree")
    asked = stack.cancel(job.id)
    assert asked.state is JobState.RUNNING and asked.cancel_requested
    done = stack.wait_for(job.id, JobState.CANCELLED, timeout=SLOW_SECONDS + 20)
    assert done.error is not None and done.error.code == "BEM-506"
    assert [call.result for call in stack.tool_calls(job.id, "read_file")] == [
        None
    ]  # refused, never run
    assert stack.sandbox_containers(job.id) == []


def test_a_cancel_the_previous_release_asked_for_stops_a_running_job(stack: Stack) -> None:
    """The previous release's cancel set ``cancel_requested`` in the record and no cancel
    flag; the worker's lease renewal reads it, and the job stops between calls all the same."""
    stack.store.gateway.client.set(
        stack.store.gateway.keys.cancel_backfill, "done"
    )  # only the renewal tells
    job = stack.submit(JobKind.AUTHOR, "author-slow", request=AUTHOR_REQUEST)
    stack.wait_for(job.id, JobState.RUNNING)
    _wait_for_tool(stack, job.id, "list_tree")
    cancel_as_the_previous_release(stack.store, job.id)
    done = stack.wait_for(job.id, JobState.CANCELLED, timeout=SLOW_SECONDS + 20)
    assert done.error is not None and done.error.code == "BEM-506"
    assert [call.result for call in stack.tool_calls(job.id, "read_file")] == [None]
    assert not stack.store.jobs.cancel_requested(job.id)
    assert stack.sandbox_containers(job.id) == []


def test_a_sigterm_lets_the_running_segment_finish(stack: Stack) -> None:
    job = stack.submit(JobKind.AUTHOR, "author-slow", request=AUTHOR_REQUEST)
    _wait_for_tool(stack, job.id, "list_tree")
    try:
        assert stack.stop_worker("a") == 0  # warm shutdown: returns once the task is done
        done = stack.store.jobs.get(job.id)
        assert done.state is JobState.SUCCEEDED and done.result is not None
        assert done.result.text == "Read the page."
        assert stack.sandbox_containers(job.id) == []
    finally:
        stack.start_worker("a")


def test_a_parked_job_is_cancelled_at_once_and_its_approval_withdrawn(stack: Stack) -> None:
    job, _ = _park(stack)
    done = stack.cancel(job.id)
    assert done.state is JobState.CANCELLED and done.error is not None
    assert done.error.code == "BEM-506"
    withdrawn = stack.store.approvals.get(job.id)
    assert withdrawn is not None and withdrawn.state is ApprovalState.WITHDRAWN
    assert stack.store.approvals.pending() == []
    with pytest.raises(BeamError) as caught:
        stack.decide(job.id, approve=True)
    assert caught.value.code == "BEM-600"
    assert stack.upstream_ref(f"riverbeam/{job.id}") is None


def test_chores_reach_every_worker_host(stack: Stack) -> None:
    """A sandbox container whose job is unknown is removed by the reaper chore, which every
    worker runs on its own host."""
    stack.start_worker("b")
    try:
        client = connect()
        deadline = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        labels = {ROLE_LABEL: ROLE_SANDBOX, JOB_LABEL: "ghost-job", DEADLINE_LABEL: deadline}
        labels[DEPLOYMENT_LABEL] = stack.store.gateway.deployment()  # ours: judged by its job
        image = check_image(client, stack.settings).ref
        orphan = client.api.create_container(image, labels=labels)["Id"]
        send_chore(stack.app, REAP_SANDBOXES)
        wait_until(lambda: stack.sandbox_containers("ghost-job") == [], 10, lambda: orphan)
        for name in ("a", "b"):
            wait_until(
                lambda name=name: "reap_sandboxes" in stack.workers[name].log.read_text(),
                10,
                lambda name=name: stack.workers[name].log_tail(),
            )
    finally:
        stack.stop_worker("b")


def _wait_for_tool(stack: Stack, job_id: str, name: str) -> None:
    wait_until(lambda: bool(stack.tool_calls(job_id, name)), 10, lambda: f"no {name} call")
