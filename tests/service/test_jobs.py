"""The job service's rules, the same for every surface: who may submit, decide and cancel
what, self-approval, idempotency, and the one repository lookup of a request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import pytest

from bot.config import Role
from bot.core.errors import BeamError
from bot.service.access import Principal
from bot.service.jobs import JobService
from bot.service.queues import RESUME_JOB, RUN_JOB, queue_for
from bot.service.schemas import JobRequest
from bot.store.models import Approval, ApprovalState, JobKind, JobSpec, JobState
from harness.broker import queued_tasks
from harness.parking import park
from harness.stack import REPO, Stack
from tests.cli.kit import cli
from tests.service.conftest import SELF_REPO


def who(name: str, role: Role = "submitter", repos: tuple[str, ...] | None = None) -> Principal:
    return Principal(name=name, role=role, repos=None if repos is None else frozenset(repos))


def code(call: Callable[[], object]) -> str:
    with pytest.raises(BeamError) as caught:
        call()
    return caught.value.code


def sent(stack: Stack, task: str, job_id: str, kind: JobKind = JobKind.AUTHOR) -> int:
    """How many ``task`` messages for the job wait in the broker."""
    waiting = queued_tasks(stack.store.gateway.client, queue_for(kind))
    return sum(1 for queued in waiting if queued.task == task and queued.args == [job_id])


def parked(stack: Stack, requester: str = "writer", repo: str = REPO) -> str:
    spec = JobSpec(kind=JobKind.AUTHOR, repo=repo, request="fix it", requested_by=requester)
    return park(stack.store, spec).job_id


def request(repo: str = REPO, **fields: object) -> JobRequest:
    return JobRequest.model_validate({"kind": "author", "repo": repo, "request": "x", **fields})


# submit ---------------------------------------------------------------------------------


def test_a_submit_stores_the_job_for_its_caller_and_queues_it_once(stack: Stack) -> None:
    record = stack.service.submit(who("writer"), request())
    assert record.spec.requested_by == "writer" and record.state is JobState.QUEUED
    assert sent(stack, RUN_JOB, record.id) == 1


def test_a_role_may_submit_only_its_kinds(stack: Stack) -> None:
    before = len(stack.store.listing.list(limit=1000)[0])
    assert code(lambda: stack.service.submit(who("ci", "ci"), request())) == "BEM-702"
    assert len(stack.store.listing.list(limit=1000)[0]) == before


def test_scope_is_checked_before_the_repository_is_looked_up(stack: Stack) -> None:
    """Out of scope is BEM-703 even for a repository that does not exist (a scoped token
    learns nothing of the configuration); in scope, an unknown one is BEM-501, once."""
    scoped = who("scoped", repos=(REPO,))
    assert code(lambda: stack.service.submit(scoped, request("nowhere"))) == "BEM-703"
    with pytest.raises(BeamError) as caught:
        stack.service.submit(who("writer"), request("nowhere"))
    assert caught.value.code == "BEM-501"
    assert caught.value.message.startswith("invalid job request: no repository named 'nowhere'")


def test_the_same_idempotency_key_makes_one_job_per_caller(stack: Stack) -> None:
    first = stack.service.submit(who("writer"), request(), idempotency_key="k1")
    again = stack.service.submit(who("writer"), request(), idempotency_key="k1")
    other = stack.service.submit(who("writer2"), request(), idempotency_key="k1")
    assert again.id == first.id and other.id != first.id
    assert code(lambda: stack.service.submit(who("w"), request(), idempotency_key="")) == (
        "BEM-705"
    )


def test_a_scheduler_spec_must_name_its_caller(stack: Stack) -> None:
    spec = JobSpec(kind=JobKind.SUMMARIZE, repo=REPO, branch="main", requested_by="schedule")
    with pytest.raises(ValueError):
        stack.service.submit(Principal.operator("someone-else"), spec)
    assert stack.service.submit(Principal.operator("schedule"), spec).spec == spec


@pytest.mark.usefixtures("configured")
def test_the_cli_submits_the_api_request(stack: Stack) -> None:
    """``riverbeam submit`` is validated as the API's ``JobRequest``: ``confirm`` in the
    metadata is dropped (only a decision releases a push), an unknown field of the kind is
    BEM-501, and the job is queued."""
    ran = cli("submit", "author", "--repo", REPO, "--request", "x", "--meta", "confirm=yes",
              "--meta", "team=docs", "--as", "cli-writer")  # fmt: skip
    assert ran.code == 0, ran.err
    record = stack.store.jobs.get(ran.out.strip())
    assert record.spec.metadata == {"team": "docs"}
    assert record.spec.requested_by == "cli-writer"
    assert sent(stack, RUN_JOB, record.id) == 1
    bad = cli("submit", "author", "--repo", "nowhere", "--request", "x")
    assert bad.code != 0 and "BEM-501" in bad.err


# decide ---------------------------------------------------------------------------------


def test_only_reviewers_and_admins_decide(stack: Stack) -> None:
    job_id = parked(stack, requester="someone")
    approval = stack.store.approvals.get(job_id)
    assert approval is not None

    def decide(caller: Principal) -> Approval:
        return stack.service.decide(
            caller, job_id, approve=True, comment="", binding=approval.binding()
        )

    assert code(lambda: decide(who("writer"))) == "BEM-702"
    assert stack.service.approval(who("x"), job_id).state is ApprovalState.PENDING
    assert sent(stack, RESUME_JOB, job_id) == 0
    done = decide(who("r", "reviewer"))
    assert done.state is ApprovalState.APPROVED and done.decided_by == "r"
    assert sent(stack, RESUME_JOB, job_id) == 1


def test_a_reviewer_decides_only_in_scope(stack: Stack) -> None:
    job_id = parked(stack)
    approval = stack.store.approvals.get(job_id)
    assert approval is not None
    scoped = who("hr", "reviewer", (SELF_REPO,))
    assert (
        code(
            lambda: stack.service.decide(
                scoped, job_id, approve=False, comment="", binding=approval.binding()
            )
        )
        == "BEM-703"
    )
    assert stack.store.approvals.get(job_id) == approval
    assert sent(stack, RESUME_JOB, job_id) == 0


@pytest.mark.parametrize(("repo", "allowed"), [(REPO, False), (SELF_REPO, True)])
def test_self_approval_follows_the_repository(stack: Stack, repo: str, allowed: bool) -> None:
    """A reviewer approves their own job only where the repository allows it; the same for
    the OS account behind a CLI decision. Refusing one's own job is always allowed."""
    for as_who, os_user in ((who("rev", "reviewer"), None), (who("other", "admin"), "rev")):
        job_id = parked(stack, requester="rev", repo=repo)
        approval = stack.store.approvals.get(job_id)
        assert approval is not None
        approve = partial(
            stack.service.decide,
            as_who,
            job_id,
            approve=True,
            comment="",
            binding=approval.binding(),
            os_user=os_user,
        )
        if allowed:
            assert approve().state is ApprovalState.APPROVED
            continue
        assert code(approve) == "BEM-602"
        refused = stack.service.decide(
            as_who, job_id, approve=False, comment="mine", binding=None, os_user=os_user
        )
        assert refused.state is ApprovalState.REFUSED


def test_a_page_is_told_whether_its_visitor_may_decide(stack: Stack) -> None:
    job_id = parked(stack, requester="rev")
    approval = stack.service.approval(who("rev"), job_id)
    assert stack.service.may_decide(who("rev"), approval) == "role"
    assert stack.service.may_decide(who("rev", "reviewer"), approval) == "own"
    assert stack.service.may_decide(who("bob", "reviewer"), approval) == "yes"


# cancel ---------------------------------------------------------------------------------


def test_only_the_requester_or_an_admin_cancels(stack: Stack) -> None:
    cancelled: list[str] = []
    service: JobService = replace(stack.service, after_cancel=cancelled.append)
    job_id = parked(stack)
    assert code(lambda: service.cancel(who("writer2"), job_id)) == "BEM-702"
    assert code(lambda: service.cancel(who("admin", "admin", (SELF_REPO,)), job_id)) == "BEM-703"
    assert stack.store.jobs.get(job_id).state is JobState.AWAITING_APPROVAL and cancelled == []
    assert service.cancel(who("writer"), job_id).state is JobState.CANCELLED
    assert cancelled == [job_id]
    other = parked(stack)
    assert service.cancel(who("boss", "admin"), other).state is JobState.CANCELLED
