"""``/v1/agents`` and ``/v1/skills``: what the service can run. A job kind's agent is its
skill (``JobKind.skill``) and the skill's allowlist is every tool the agent gets
(``bot.jobs.toolsets``), so both answers are read from the skill files."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from bot.http.deps import get_principal
from bot.http.problems import problem_responses
from bot.store.models import JobKind
from skills import Skill, builtin_skills, skill_by_name

# Any valid token may read the catalog.
router = APIRouter(prefix="/v1", tags=["catalog"], dependencies=[Depends(get_principal)])


class SkillView(BaseModel):
    name: str
    description: str
    tools: list[str] = Field(description="the allowlist: the tools an agent of it may use")
    confirm_first: bool = Field(description="every tool call waits for a person's approval")

    @classmethod
    def of(cls, skill: Skill) -> SkillView:
        return cls(
            name=skill.name,
            description=skill.description,
            tools=sorted(skill.tools),
            confirm_first=skill.confirm_first,
        )


class AgentView(BaseModel):
    name: JobKind = Field(description="the job kind this agent runs")
    skill: str
    description: str
    tools: list[str]

    @classmethod
    def of(cls, kind: JobKind) -> AgentView:
        skill = SkillView.of(skill_by_name(kind.skill))
        return cls(name=kind, skill=skill.name, description=skill.description, tools=skill.tools)


class AgentList(BaseModel):
    items: list[AgentView]


class SkillList(BaseModel):
    items: list[SkillView]


@router.get(
    "/agents",
    response_model=AgentList,
    summary="The agent of each job kind",
    responses=problem_responses(401),
)
def agents() -> AgentList:
    return AgentList(items=[AgentView.of(kind) for kind in JobKind])


@router.get(
    "/skills",
    response_model=SkillList,
    summary="The built-in skills",
    responses=problem_responses(401),
)
def skills() -> SkillList:
    return SkillList(items=[SkillView.of(skill) for skill in builtin_skills()])
