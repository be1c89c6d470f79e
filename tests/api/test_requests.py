"""A ``JobRequest`` through to the model's user message: nothing the API accepts is lost on
the way (no server needed)."""

from __future__ import annotations

from bot.config import RepositoryConfig
from bot.jobs.kinds import request_text, tree_plan
from bot.service.schemas import JobRequest


def test_the_pages_of_a_request_reach_the_user_message() -> None:
    body = JobRequest.model_validate(
        {
            "kind": "author",
            "repo": "docs",
            "request": "Explain the new install flags",
            "pages": ["docs/install.md", "docs/cli.md"],
            "metadata": {"confirm": True, "ticket": "DOCS-12"},
        }
    )
    spec = body.to_spec(requested_by="ann")
    plan = tree_plan(spec, RepositoryConfig(upstream="/srv/docs.git"))
    assert request_text(spec, plan) == (
        "Explain the new install flags\n\nPages this concerns: docs/install.md, docs/cli.md"
    )
    assert spec.metadata == {"ticket": "DOCS-12"}
