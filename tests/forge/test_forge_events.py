"""The workers' side: a queued forge event carried out through the job service, on the real
stack (Redis, a Celery worker consuming the ``forge`` queue, the sandbox). The forge's
answers (permissions) are scripted (``FakeLookup``) where the in-process handler runs; the
Celery path needs none (a pull request's review asks the forge nothing)."""

from __future__ import annotations

import json
import time
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from pydantic import JsonValue

from bot.config import Settings
from bot.core.errors import ForgeInboundError
from bot.forge.inbound import github
from bot.forge.inbound.deliveries import Deliveries
from bot.forge.inbound.forge_events import FORGE_EVENT, CommentCreated, Ignored
from bot.forge.inbound.handler import EventOutcome, ForgeEventHandler, lookup_for
from bot.forge.permissions import ForgePermission
from bot.service.access import Principal, TokenRegistry
from bot.service.jobs import JobService
from bot.service.queues import FORGE_QUEUE, HANDLE_FORGE_EVENT, TaskQueues
from bot.store.models import JobKind, JobRecord, JobSpec, JobState
from harness.api_server import ApiServer, api_server
from harness.forges import (
    FakeLookup,
    encoded,
    github_example,
    github_headers,
    gitlab_headers,
)
from harness.stack import Stack, job_stack
from tests.api.conftest import TOKENS
from tests.forge.conftest import GH_SECRET, GL_SECRET, forges_toml
from tests.forge.kit import github_config, gitlab_payload

AUTHOR_PLAYBOOK: dict[str, JsonValue] = {"playbook": "author-fix-install"}


@dataclass
class Forged:
    stack: Stack
    api: ApiServer
    settings: Settings

    def handler(self, lookup: FakeLookup | None) -> ForgeEventHandler:
        service = JobService(
            self.settings, self.stack.store, TaskQueues(self.stack.app), TokenRegistry(())
        )
        return ForgeEventHandler(
            self.settings, service, Deliveries(self.stack.store.gateway), lambda _n, _c: lookup
        )

    def forge_jobs(self, delivery: str) -> list[JobRecord]:
        found = self.stack.store.listing.page(limit=100).records
        return [
            job
            for job in found
            if isinstance(forge := job.spec.metadata.get("forge"), dict)
            and forge.get("delivery") == delivery
        ]


@pytest.fixture(scope="module")
def forged() -> Iterator[Forged]:
    with job_stack() as stack:
        stack.config.write_text(stack.config.read_text() + forges_toml(stack))
        settings = Settings(**tomllib.loads(stack.config.read_text()))
        stack.start_worker("a")
        with api_server(stack, TOKENS) as api:
            yield Forged(stack, api, settings)


def _outcome(
    forged: Forged, delivery: str, timeout: float = 30.0, forge: str = "gh"
) -> dict[str, Any]:
    deliveries = Deliveries(forged.stack.store.gateway)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = deliveries.outcome(forge, delivery)
        if found not in (None, "queued"):
            outcome: dict[str, Any] = json.loads(found)
            return outcome
        time.sleep(0.1)
    raise AssertionError(f"delivery {delivery} has no outcome: {forged.stack.log_tails()}")


def _comment(body: str, login: str = "Codertocat") -> CommentCreated:
    payload = github_example("issue_comment", "created", 3)
    payload["comment"]["body"] = body
    payload["sender"]["login"] = login
    config = github_config(installations=[1])
    event = github.normalize(
        "issue_comment", payload, forge="gh", delivery=str(uuid.uuid4()), config=config
    )
    assert isinstance(event, CommentCreated)
    return event


def test_a_pull_request_webhook_becomes_one_review_job_however_often_it_comes(
    forged: Forged,
) -> None:
    payload = github_example("pull_request", "opened", 1)
    body = encoded(payload)
    delivery = str(uuid.uuid4())
    headers = github_headers(GH_SECRET, body, "pull_request", delivery=delivery)
    url = f"{forged.api.url}/webhooks/gh"
    assert httpx.post(url, content=body, headers=headers).status_code == 202
    outcome = _outcome(forged, delivery)
    (result,) = outcome["results"]
    assert result["action"]["kind"] == "review" and result["job_id"], outcome
    job = forged.stack.store.jobs.get(result["job_id"])
    assert job.spec.kind is JobKind.REVIEW
    assert job.spec.branch == payload["pull_request"]["head"]["ref"]
    assert job.spec.requested_by == "gh:Codertocat"
    # The forge redelivers it: the door knows the delivery id.
    again = httpx.post(url, content=body, headers=headers)
    assert again.status_code == 200 and again.json()["outcome"] == "duplicate"
    # The broker delivers the task again (a worker died before acknowledging it).
    config = forged.settings.forges["gh"]
    normalized = github.normalize(
        "pull_request", payload, forge="gh", delivery=delivery, config=config
    )
    assert not isinstance(normalized, Ignored)
    event = FORGE_EVENT.dump_python(normalized, mode="json")
    forged.stack.app.send_task(HANDLE_FORGE_EVENT, args=[event], queue=FORGE_QUEUE)
    _handled_twice(forged, delivery)
    assert [job.id for job in forged.forge_jobs(delivery)] == [result["job_id"]]


def _handled_twice(forged: Forged, delivery: str, timeout: float = 30.0) -> None:
    """Wait until the worker's log shows the delivery's event carried out a second time."""
    log = forged.stack.workers["a"].log
    deadline = time.monotonic() + timeout
    while log.read_text(errors="replace").count(f"delivery {delivery} ") < 2:
        if time.monotonic() > deadline:
            raise AssertionError(f"the event was not handled again: {forged.stack.log_tails()}")
        time.sleep(0.1)


def test_a_command_from_a_writer_submits_an_author_job_and_a_reader_starts_nothing(
    forged: Forged,
) -> None:
    event = _comment("@riverbeam fix the typos on the install page")
    writer = FakeLookup(permissions={"Codertocat": ForgePermission.WRITE})
    outcome = forged.handler(writer).handle(FORGE_EVENT.dump_python(event, mode="json"))
    (result,) = outcome.results
    assert result.job_id is not None, outcome
    job = forged.stack.store.jobs.get(result.job_id)
    assert job.spec.kind is JobKind.AUTHOR and job.spec.requested_by == "gh:Codertocat"
    assert job.spec.request.startswith("fix the typos on the install page")
    assert event.thread.url in job.spec.request

    reader = FakeLookup(permissions={"Codertocat": ForgePermission.READ})
    before = len(forged.stack.store.listing.page(limit=100).records)
    refused = forged.handler(reader).handle(
        FORGE_EVENT.dump_python(_comment("@riverbeam fix it"), mode="json")
    )
    (nothing,) = refused.results
    assert nothing.job_id is None and nothing.action["code"] == "BEM-807"
    assert len(forged.stack.store.listing.page(limit=100).records) == before


def _decide(forged: Forged, body: str, login: str, permission: ForgePermission) -> EventOutcome:
    lookup = FakeLookup(permissions={login: permission})
    event = _comment(body, login=login)
    return forged.handler(lookup).handle(FORGE_EVENT.dump_python(event, mode="json"))


def test_decisions_from_the_forge(forged: Forged) -> None:
    requester = "gh:Codertocat"
    spec = JobSpec(
        kind=JobKind.AUTHOR,
        repo="docs",
        request="Fix the broken links and typos on the install page",
        requested_by=requester,
        metadata=AUTHOR_PLAYBOOK,
    )
    job = forged.stack.service.submit(Principal.operator(requester), spec)
    parked = forged.stack.wait_for(job.id, JobState.AWAITING_APPROVAL, timeout=90)
    assert parked.approval_id is not None
    # The requester may not approve their own push (the store's rule, BEM-602).
    approve = f"/riverbeam approve {parked.approval_id}"
    own = _decide(forged, approve, "Codertocat", ForgePermission.ADMIN)
    assert own.results[0].error is not None and own.results[0].error["code"] == "BEM-602"
    # An approval id that is not the one waiting is BEM-604.
    old = _decide(forged, "/riverbeam approve ap-old", "octocat", ForgePermission.MAINTAIN)
    assert old.results[0].error is not None and old.results[0].error["code"] == "BEM-604"
    # A maintainer's approve, from a comment: recorded as the forge user, with its URL.
    approved = _decide(forged, approve, "octocat", ForgePermission.MAINTAIN)
    assert approved.results[0].job_id == job.id, approved
    done = forged.stack.wait_for(job.id, JobState.SUCCEEDED, timeout=90)
    approval = forged.stack.store.approvals.get(done.id)
    assert approval is not None and approval.decided_by == "gh:octocat"
    assert "https://github.com/" in approval.comment


def test_the_client_factory_names_the_workers_lookups(forged: Forged) -> None:
    config = forged.settings.forges["gh"]
    assert config.client_factory is None and lookup_for("gh", config) is None
    named = config.model_copy(update={"client_factory": "harness.forges:no_one_may"})
    lookup = lookup_for("gh", named)
    assert isinstance(lookup, FakeLookup)
    assert lookup.permission("Codertocat/Hello-World", "octocat") is ForgePermission.NONE
    # A name that loads nothing fails the task with the setting named, not an ImportError.
    missing = config.model_copy(update={"client_factory": "harness.forges:no_such_lookup"})
    with pytest.raises(ForgeInboundError) as caught:
        lookup_for("gh", missing)
    assert caught.value.code == "BEM-810"
    assert "forges.gh.client_factory" in caught.value.message


def test_gitlab_through_the_worker_a_merge_request_is_reviewed_and_a_command_needs_a_permission(
    forged: Forged,
) -> None:
    url = f"{forged.api.url}/webhooks/gl"
    opened = gitlab_headers(GL_SECRET, "Merge Request Hook")
    body = encoded(gitlab_payload("merge-request"))
    assert httpx.post(url, content=body, headers=opened).status_code == 202
    outcome = _outcome(forged, opened["X-Gitlab-Event-UUID"], forge="gl")
    (review,) = outcome["results"]
    job = forged.stack.store.jobs.get(review["job_id"])
    assert job.spec.kind is JobKind.REVIEW and job.spec.branch == "ms-viewport"
    assert job.spec.requested_by == "gl:root"
    # A command: the worker asks the forge (client_factory: nobody may), and nothing starts.
    note = gitlab_payload("note-issue")
    note["object_attributes"]["note"] = "@riverbeam fix the install page"
    commented = gitlab_headers(GL_SECRET, "Note Hook")
    before = len(forged.stack.store.listing.page(limit=100).records)
    assert httpx.post(url, content=encoded(note), headers=commented).status_code == 202
    outcome = _outcome(forged, commented["X-Gitlab-Event-UUID"], forge="gl")
    (refused,) = outcome["results"]
    assert refused["job_id"] is None and refused["action"]["code"] == "BEM-807"
    assert "@root" in refused["action"]["reply"]
    assert len(forged.stack.store.listing.page(limit=100).records) == before
