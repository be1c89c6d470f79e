"""``/v1/approvals``: the pushes waiting for a person, and their decisions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, Field

from bot.api.job_routes import JobId
from bot.http.deps import PrincipalDep, ServiceDep
from bot.http.problems import problem_responses
from bot.service.access import Principal
from bot.service.jobs import JobService
from bot.service.schemas import ApprovalList, ApprovalView, Decision

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])

DECISION_PROBLEMS = problem_responses(401, 403, 404, 409, 422, 503)


class ApprovalDetail(BaseModel):
    current: ApprovalView = Field(description="the job's latest approval, whatever its state")
    history: list[ApprovalView] = Field(
        description="every decided or withdrawn approval of the job, oldest first"
    )


@router.get(
    "",
    response_model=ApprovalList,
    summary="Pushes waiting for a decision, oldest first",
    responses=problem_responses(401, 403, 422, 503),
)
def pending(
    service: ServiceDep,
    who: PrincipalDep,
    repo: Annotated[str | None, Query(max_length=100)] = None,
) -> ApprovalList:
    """Only the repositories the token may use."""
    return ApprovalList(items=[ApprovalView.of(a) for a in service.approvals(who, repo=repo)])


@router.get(
    "/{job_id}",
    response_model=ApprovalDetail,
    summary="A job's approval and its history",
    responses=problem_responses(401, 403, 404, 409, 422, 503),
)
def detail(job_id: JobId, service: ServiceDep, who: PrincipalDep) -> ApprovalDetail:
    current = service.approval(who, job_id)
    history = service.store.approvals.history(job_id)
    return ApprovalDetail(
        current=ApprovalView.of(current), history=[ApprovalView.of(a) for a in history]
    )


@router.post(
    "/{job_id}/approve",
    response_model=ApprovalView,
    summary="Approve a parked push",
    responses=DECISION_PROBLEMS,
)
def approve(
    job_id: JobId,
    service: ServiceDep,
    who: PrincipalDep,
    decision: Annotated[Decision | None, Body()] = None,
) -> ApprovalView:
    """Reviewers and admins; never one's own job unless the repository allows it. The body
    names the approval looked at (``approval_id``, ``commit_sha``, ``diff_digest`` copied
    from it): without them BEM-605, and BEM-604 when the job's approval is another one now
    (decided, or the job parked again on a new change). The job resumes on a worker and
    pushes exactly what was shown."""
    return _decide(service, who, job_id, decision, approve=True)


@router.post(
    "/{job_id}/refuse",
    response_model=ApprovalView,
    summary="Refuse a parked push",
    responses=DECISION_PROBLEMS,
)
def refuse(
    job_id: JobId,
    service: ServiceDep,
    who: PrincipalDep,
    decision: Annotated[Decision | None, Body()] = None,
) -> ApprovalView:
    """Reviewers and admins, one's own job included. The job resumes and the agent is
    told the push was refused. The binding fields are optional here (refusing releases
    nothing); when sent, a refuse of another approval than the one waiting is BEM-604."""
    return _decide(service, who, job_id, decision, approve=False)


def _decide(
    service: JobService, who: Principal, job_id: str, decision: Decision | None, *, approve: bool
) -> ApprovalView:
    decision = decision or Decision()
    decided = service.decide(
        who,
        job_id,
        approve=approve,
        comment=decision.comment,
        binding=decision.binding(),
        override_checks=decision.override_checks,
    )
    return ApprovalView.of(decided)
