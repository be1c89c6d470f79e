"""The job kinds, one module each, and their registry.

Each module says, in one place, a kind's plan (its tree), its tools, its prompt values, its
outcome and how that is judged (``bot.jobs.kinds.kind.Kind``). A new kind is one module and
one line in ``REGISTRY`` (and its ``JobKind`` value and skill); nothing else names a kind.
"""

from __future__ import annotations

from bot.config import RepositoryConfig
from bot.jobs.kinds.author_job import AuthorJob
from bot.jobs.kinds.commit_notes_job import CommitNotesJob
from bot.jobs.kinds.kind import Kind
from bot.jobs.kinds.publish_job import PublishJob
from bot.jobs.kinds.review_job import ReviewJob
from bot.jobs.kinds.summarize_job import SummarizeJob
from bot.jobs.plans import TreePlan
from bot.store.models import JobKind, JobSpec

REGISTRY: dict[JobKind, Kind] = {
    kind.job_kind: kind
    for kind in (AuthorJob(), ReviewJob(), SummarizeJob(), CommitNotesJob(), PublishJob())
}


def kind_of(spec: JobSpec) -> Kind:
    """The kind a job of ``spec`` runs as."""
    return REGISTRY[spec.kind]


def tree_plan(spec: JobSpec, repo: RepositoryConfig) -> TreePlan | None:
    """The tree a job of ``spec`` works in, or None for a job that needs none."""
    return kind_of(spec).plan(spec, repo)


def request_text(spec: JobSpec, plan: TreePlan | None) -> str:
    """The user message: the job's request, or its kind's plain one when it has none, and
    the pages it concerns."""
    text = spec.request if spec.request.strip() else kind_of(spec).default_request
    if not spec.request.strip() and plan is not None:
        text = text.format(branch=plan.branch, base=plan.base)
    if spec.pages:
        text += "\n\nPages this concerns: " + ", ".join(spec.pages)
    return text
