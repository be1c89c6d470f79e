"""What the forge tests share: the forges' configuration, GitLab's documented payloads, and
GitHub's published examples made whole where the schema now asks more than they hold."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bot.config import ForgeConfig
from bot.store.models import Approval, JobKind, JobRecord, JobState
from bot.store.store import JobStore
from harness.api_server import ApiServer, api_server
from harness.stack import Stack, job_stack, wait_until
from tests.api.conftest import TOKENS

GITLAB_DOCS = "https://docs.gitlab.com/user/project/integrations/webhook_events/"
GITLAB_PAYLOADS = Path(__file__).parent / "gitlab"
GITHUB_REPO = "Codertocat/Hello-World"
GITLAB_ISSUE_PROJECT = "gitlab-org/gitlab-test"
GITLAB_MR_PROJECT = "gitlabhq/gitlab-test"
BOT = "riverbeam[bot]"
APPROVAL_ID = "9f1c2b3a4d5e6f708192a3b4c5d6e7f8"


def push_approval(job_id: str, requested_by: str, **fields: Any) -> Approval:
    """A pending approval of job ``job_id``'s push of commit ``d...d`` to its own branch,
    with ``fields`` changed."""
    approval = Approval(
        id=APPROVAL_ID,
        job_id=job_id,
        repo="docs",
        requested_by=requested_by,
        call_id="call_1",
        tool="git_push",
        arguments={},
        commit_sha="d" * 40,
        target_ref=f"riverbeam/{job_id}",
        diff_stat=" docs/install.md | 2 +-\n",
    )
    return approval.model_copy(update=fields)


@functools.cache
def _gitlab(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((GITLAB_PAYLOADS / f"{name}.json").read_text())
    return loaded


def gitlab_payload(name: str) -> dict[str, Any]:
    """A payload of GitLab's "Webhook events" page (``GITLAB_DOCS``), as a fresh copy."""
    return copy.deepcopy(_gitlab(name))


def with_has_discussions(payload: dict[str, Any]) -> dict[str, Any]:
    """GitHub's example of some events predates ``repository.has_discussions``, which the
    current schema requires of the pull request's repositories: fill it in."""
    pull = payload["pull_request"]
    for side in ("head", "base"):
        if pull[side].get("repo") is not None:
            pull[side]["repo"].setdefault("has_discussions", False)
    return payload


def github_config(**keys: Any) -> ForgeConfig:
    entry = {"repository": "docs", "label": "riverbeam", "commit_notes": True}
    entry.update(keys.pop("entry", {}))
    return ForgeConfig.model_validate(
        {
            "kind": "github",
            "webhook_secret_file": "/nonexistent",
            "bot_login": BOT,
            "repositories": {GITHUB_REPO: entry},
            **keys,
        }
    )


def gitlab_config(**keys: Any) -> ForgeConfig:
    entry = {"repository": "docs", "label": "Platform"}
    entry.update(keys.pop("entry", {}))
    return ForgeConfig.model_validate(
        {
            "kind": "gitlab",
            "webhook_secret_file": "/nonexistent",
            "bot_login": "riverbeam-bot",
            "repositories": {GITLAB_ISSUE_PROJECT: entry, GITLAB_MR_PROJECT: entry},
            **keys,
        }
    )


def job_ids(store: JobStore) -> set[str]:
    return {job.id for job in store.listing.list()[0]}


def wait_for_new_job(
    store: JobStore, before: set[str], kind: JobKind, state: JobState, *, timeout: float = 90
) -> JobRecord:
    """The first job not in ``before`` of ``kind`` that reached ``state`` (a forge event's
    job: its id is the worker's to make)."""
    found: list[JobRecord] = []

    def there() -> bool:
        found[:] = [
            job
            for job in store.listing.list()[0]
            if job.id not in before and job.spec.kind is kind and job.state is state
        ]
        return bool(found)

    def explain() -> str:
        seen = [(job.id, job.spec.kind.value, job.state.value) for job in store.listing.list()[0]]
        return f"no new {kind.value} job reached {state.value}: {seen}"

    wait_until(there, timeout, explain)
    return found[0]


def wait_for_text(bodies: Callable[[], list[str]], needle: str, *, timeout: float = 60) -> str:
    """The first of ``bodies()`` (a thread's comments) that holds ``needle``, once one does."""
    wait_until(
        lambda: any(needle in body for body in bodies()),
        timeout,
        lambda: f"no comment holds {needle!r}: {bodies()}",
    )
    return next(body for body in bodies() if needle in body)


@contextmanager
def forge_stack(forge_table: Callable[[Path], str]) -> Iterator[tuple[Stack, ApiServer]]:
    """A job stack with one worker and a live ``riverbeam api``, the forge table
    ``forge_table(secrets)`` written into its configuration (``secrets``: a 0700 directory
    for the files it names)."""
    with job_stack(lease_seconds=5.0) as stack:
        secrets = stack.base / "secrets"
        secrets.mkdir(mode=0o700)
        stack.config.write_text(stack.config.read_text() + forge_table(secrets))
        stack.start_worker("a")
        with api_server(stack, TOKENS) as api:
            yield stack, api
