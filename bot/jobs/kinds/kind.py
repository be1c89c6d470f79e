"""What a job kind says about itself, in one place: ``Kind``.

A kind names its tree (``plan``: where the workspace starts and what it is compared with, or
no tree), the request a job without one is given, the host tools its agent gets beside the
container's, its prompt values, its outcome (read from the run and the tree when the run
ends), and how that outcome is judged (``judge``: why the job may not be ``succeeded``).
The segment (``bot.jobs.executor``) asks the job's kind and never names one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from bot.agents.memory import MemoryStore
from bot.config import RepositoryConfig
from bot.core.errors import JobError
from bot.core.tools import Tool
from bot.jobs.parking import PublishTarget
from bot.jobs.plans import Tree, TreePlan
from bot.review.check_report import ChecksReport
from bot.review.docs_checks import DocsChecks
from bot.runner.state import RunState
from bot.store.models import ForgeThreadRef, JobKind, JobSpec, Outcome
from sandbox.inside.jail import SandboxRoot


@dataclass(frozen=True)
class ToolKit:
    """What a kind's host tools are made from: the job's notes (``memory`` under ``scope``),
    its tree as the host reads it, a publish job's ``publish_docset``, and the docs checks."""

    memory: MemoryStore
    scope: str
    tree: SandboxRoot | None = None
    publish: Tool | None = None
    # The repository's docs checks in the job's container (None: none declared, or no tree).
    checks: DocsChecks | None = None


@dataclass(frozen=True)
class Ended:
    """A run that ended, as its kind reads its outcome from it."""

    spec: JobSpec
    state: RunState
    tree: Tree | None
    publish: PublishTarget | None
    tools: Sequence[Tool]
    diff_max_chars: int
    # The docs checks the worker ran on the tree as the run ended (a kind with
    # ``checks_at_end``, in a repository that declares checks).
    checks: ChecksReport | None = None


class Kind(ABC):
    """One job kind. ``publishes``: the segment prepares a publish target on the host (the
    publish tool, its plan and the mirror); ``owns_branch``: the job's tree is on a branch of
    its own, recorded on the job."""

    job_kind: ClassVar[JobKind]
    default_request: ClassVar[str] = ""
    stand_in_fields: ClassVar[dict[str, str]] = {"branch": "main"}
    """The fields a stand-in job of the kind needs (``riverbeam model check`` builds one for
    each kind's client; it is never stored or run)."""
    publishes: ClassVar[bool] = False
    owns_branch: ClassVar[bool] = False
    checks_at_end: ClassVar[bool] = False
    """The worker runs the repository's docs checks on the tree's commit, against the compare
    point, once the run ends (``Ended.checks``)."""

    @abstractmethod
    def plan(self, spec: JobSpec, repo: RepositoryConfig) -> TreePlan | None:
        """The tree a job of ``spec`` works in, or None for a kind that needs none."""

    def tools(self, kit: ToolKit) -> list[Tool]:
        """The host tools the kind adds to the container's (its skill's allowlist decides)."""
        return []

    def prompt_values(self, tree: Tree | None, publish: PublishTarget | None) -> dict[str, Any]:
        """The kind's prompt values beside the repository's."""
        if tree is None:
            return {}
        return {"branch": tree.plan.branch, "base": tree.plan.base}

    @abstractmethod
    def outcome(self, ended: Ended) -> Outcome | None:
        """The structured result, from what the host can check; None when there is none."""

    def judge(self, ended: Ended, outcome: Outcome | None) -> JobError | None:
        """Why the run may not be ``succeeded`` (its required result is missing), or None."""
        return None if outcome is None else outcome.missing()

    # On the forge (``bot.jobs.forge_posts``), for a job that came from a forge thread.

    posts_review: ClassVar[bool] = False
    """The job's verdict goes on its pull request as a review and a commit status."""

    def status_slot(self, job_id: str, target: ForgeThreadRef) -> str:
        """Which comment the job's status is kept in: its own, by default."""
        return f"job:{job_id}"

    def forge_result(self, outcome: Outcome | None) -> list[str]:
        """Markdown lines that show what a succeeded job produced, in its status comment.
        Text the model wrote is hostile: a kind shows it through ``quoted``."""
        return []


def quoted(text: str, *, max_chars: int = 6000) -> list[str]:
    """``text`` (the model's or the repository's) as a fenced block nothing in it can
    close, and no @ in it mentions anyone."""
    cut = text if len(text) <= max_chars else text[:max_chars] + "\n[... cut]"
    inert = cut.replace("`", "'").replace("@", "@\u2060")
    return ["```text", inert, "```"]
