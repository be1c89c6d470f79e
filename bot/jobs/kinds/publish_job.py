"""publish: moves the publish branch to a reviewed commit, after a person approves.

- plan: no tree at all; its one tool works on the host, on the repository's mirror (the
  segment prepares the publish target: the tool, its plan checked before the model runs,
  and the mirror);
- tools: ``publish_docset``;
- prompt values: ``target_ref`` (the reviewed branch at its commit) and ``publish_ref``;
- outcome: what ``publish_docset`` published, else the publish branch with nothing on it;
- judged: something was published (``PublishOutcome.missing``, BEM-525).
"""

from __future__ import annotations

from typing import Any, ClassVar

from bot.config import RepositoryConfig
from bot.core.tools import Tool
from bot.jobs.kinds.kind import Ended, Kind, ToolKit
from bot.jobs.parking import PublishTarget
from bot.jobs.plans import Tree, TreePlan
from bot.store.models import JobKind, JobSpec, Outcome, PublishOutcome


class PublishJob(Kind):
    job_kind = JobKind.PUBLISH
    default_request = "Publish the reviewed docs."
    publishes = True
    stand_in_fields: ClassVar[dict[str, str]] = {"review_job": "model-check-review"}

    def plan(self, spec: JobSpec, repo: RepositoryConfig) -> TreePlan | None:
        return None

    def tools(self, kit: ToolKit) -> list[Tool]:
        return [] if kit.publish is None else [kit.publish]

    def prompt_values(self, tree: Tree | None, publish: PublishTarget | None) -> dict[str, Any]:
        if publish is None:
            return {}
        plan = publish.plan
        return {
            "target_ref": f"{plan.reviewed_branch} at {plan.sha}",
            "publish_ref": plan.publish_ref,
        }

    def outcome(self, ended: Ended) -> Outcome | None:
        publish = ended.publish
        if publish is None:
            return None
        return publish.tool.outcome or PublishOutcome(publish_ref=publish.plan.publish_ref)
