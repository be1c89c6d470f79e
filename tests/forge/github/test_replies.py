"""What the workers post back to a forge thread goes through the outbox: the forge
handler's replies (a refusal, an approval id that is not the one waiting) and a parked
job's status comment are queued in Redis and posted by the delivery task through the
built-in GitHub client, to the fake GitHub held to ``api.github.com.json``. A 5xx or a
secondary rate limit is tried again after the wait GitHub named; a refusal is given up with
the client's code. Real Redis, real HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from bot.config import ApiSettings, Settings
from bot.core.frames import ErrorInfo
from bot.forge.inbound import github
from bot.forge.inbound.deliveries import Deliveries
from bot.forge.inbound.forge_events import FORGE_EVENT
from bot.forge.inbound.handler import ForgeEventHandler
from bot.forge.permissions import ForgePermission
from bot.jobs.delivery import deliver_due
from bot.jobs.forge_posts import landed_pull_request, status_comment
from bot.service.access import TokenRegistry
from bot.service.jobs import JobService
from bot.service.queues import TaskQueues
from bot.store.models import Approval, ApprovalState, JobKind, JobRecord, JobSpec
from bot.store.store import JobStore
from harness.fake_github import FakeGitHub, Repository
from harness.forges import FakeLookup, github_example
from tests.forge.kit import GITHUB_REPO, push_approval

SECONDARY = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
)


def _handle(settings: Settings, store: JobStore, body: str, delivery: str) -> Any:
    payload = github_example("issue_comment", "created", 1)
    payload["comment"]["body"] = body
    config = settings.forges["gh"]
    event = github.normalize("issue_comment", payload, forge="gh", delivery=delivery, config=config)
    service = JobService(
        settings, store, TaskQueues(Celery(set_as_current=False)), TokenRegistry(())
    )
    lookup = FakeLookup(permissions={"Codertocat": ForgePermission.READ})
    handler = ForgeEventHandler(settings, service, Deliveries(store.gateway), lambda _n, _c: lookup)
    return handler.handle(FORGE_EVENT.dump_python(event, mode="json"))


def _make_due(store: JobStore) -> None:
    for entry_id in store.gateway.client.zrange(store.gateway.keys.outbox_due, 0, -1):
        store.gateway.client.zadd(store.gateway.keys.outbox_due, {entry_id: 0})


def test_a_commenter_below_the_minimum_gets_one_reply_posted_once(
    settings: Settings, store: JobStore, thread: Repository
) -> None:
    first = _handle(settings, store, "@riverbeam fix the install page", "d1")
    again = _handle(settings, store, "@riverbeam fix the install page", "d1")
    assert (first.replies, again.replies) == (1, 1)
    assert store.outbox.due() == 1, "the task that ran twice queued its reply once"
    [attempt] = deliver_due(store, settings)
    assert attempt.outcome == "delivered"
    [comment] = thread.comments.values()
    assert comment.number == 1 and comment.body.startswith("@Codertocat: this needs")
    assert store.outbox.due() == 0


def test_an_approval_id_that_is_not_waiting_is_answered_with_bem_604(
    settings: Settings, store: JobStore, thread: Repository
) -> None:
    # The commenter's permission is below the decide minimum too; lower it for this one.
    tables = settings.model_dump(mode="json")
    tables["forges"]["gh"]["repositories"][GITHUB_REPO]["minimum"]["decide"] = "read"
    settings = Settings.model_validate(tables)
    outcome = _handle(settings, store, "/riverbeam approve 0123456789abcdef", "d2")
    assert outcome.replies == 1
    deliver_due(store, settings)
    [comment] = thread.comments.values()
    assert "BEM-604" in comment.body and "0123456789abcdef" in comment.body


@pytest.mark.parametrize(
    ("status", "headers", "message", "code", "wait"),
    [
        (502, {}, "Server Error", "BEM-821", 5.0),
        (403, {"Retry-After": "30"}, SECONDARY, "BEM-825", 30.0),
    ],
)
def test_a_forge_that_cannot_take_it_now_gets_it_later(
    settings: Settings,
    store: JobStore,
    thread: Repository,
    github: FakeGitHub,
    status: int,
    headers: dict[str, str],
    message: str,
    code: str,
    wait: float,
) -> None:
    _handle(settings, store, "@riverbeam fix the install page", "d3")
    github.fail("issues/create-comment", status, headers=headers, message=message)
    [attempt] = deliver_due(store, settings)
    assert (attempt.outcome, attempt.retry_after) == ("retry", wait)
    assert attempt.error is not None and attempt.error.code == code
    assert thread.comments == {} and store.outbox.due() == 1
    assert deliver_due(store, settings) == [], "not due before its wait"
    _make_due(store)
    [later] = deliver_due(store, settings)
    assert later.outcome == "delivered" and later.entry.attempts == 2
    assert len(thread.comments) == 1


def test_a_thread_the_forge_does_not_have_is_given_up_with_the_clients_code(
    settings: Settings, store: JobStore, github: FakeGitHub
) -> None:
    github.add_repository(GITHUB_REPO)  # issue 1 is not there: 404
    _handle(settings, store, "@riverbeam fix the install page", "d4")
    [attempt] = deliver_due(store, settings)
    assert attempt.outcome == "given_up"
    assert attempt.error is not None and attempt.error.code == "BEM-823"
    kept = store.outbox.get(attempt.entry.id)
    assert kept is not None and kept.given_up_at is not None and store.outbox.due() == 0


def _forge_job(store: JobStore) -> JobRecord:
    origin = {"name": "gh", "repository": GITHUB_REPO, "number": 1, "thread": "issue"}
    spec = JobSpec(
        kind=JobKind.AUTHOR,
        repo="docs",
        request="Fix the install page\n@octo-team please look",
        requested_by="gh:Codertocat",
        metadata={"forge": origin},
    )
    return store.jobs.create(spec)


def _approved(record: JobRecord) -> Approval:
    return push_approval(
        record.id,
        "gh:Codertocat",
        state=ApprovalState.APPROVED,
        decided_by="gh:ada",
        diff_digest="b053e4fc" * 8,
    )


def test_a_landed_push_opens_its_pull_request_once_and_updates_it_after(
    settings: Settings, store: JobStore, thread: Repository
) -> None:
    record = _forge_job(store)
    approval = _approved(record)
    [status] = deliver_due(store, settings)
    assert status.entry.channel == "forge_status"
    for _ in range(2):
        entry = landed_pull_request(settings, record, approval, "d" * 40)
        assert entry is not None
        store.outbox.add(entry)
        [attempt] = deliver_due(store, settings)
        assert attempt.outcome == "delivered"
    [pull] = thread.pulls.values()
    assert (pull.head, pull.base, pull.title) == (
        f"riverbeam/{record.id}",
        "main",
        "Fix the install page",
    )
    assert "Closes #1" in pull.body and "Approved by gh:ada: commit `dddddddddddd`" in pull.body
    assert "diff digest `b053e4fcb053e4fc`" in pull.body
    # The thread's text is quoted, and mentions nobody.
    assert "> @\u2060octo-team please look" in pull.body and "@octo-team" not in pull.body


def test_a_push_of_a_job_from_elsewhere_opens_nothing(settings: Settings, store: JobStore) -> None:
    record = store.jobs.create(JobSpec(kind=JobKind.AUTHOR, repo="docs", request="Fix it"))
    assert landed_pull_request(settings, record, _approved(record), "d" * 40) is None


def test_the_pull_request_is_queued_with_the_landed_push_and_only_then(
    settings: Settings, store: JobStore
) -> None:
    record = _forge_job(store)
    claimed = store.jobs.claim(record.id, worker="w1", lease_seconds=60)
    assert claimed is not None
    entry = landed_pull_request(settings, record, _approved(record), "d" * 40)
    assert entry is not None
    failed = ErrorInfo(code="BEM-340", message="rejected")
    # The job's status comment is one entry, however often the job moves.
    assert store.outbox.due() == 1
    store.jobs.begin_push(record.id, worker="w1", sha="d" * 40, ref=f"riverbeam/{record.id}")
    store.jobs.end_push(record.id, worker="w1", error=failed, deliveries=[entry])
    assert store.outbox.due() == 1, "a failed push queues no pull request"
    store.jobs.begin_push(record.id, worker="w1", sha="d" * 40, ref=f"riverbeam/{record.id}")
    store.jobs.end_push(record.id, worker="w1", deliveries=[entry])
    assert store.outbox.due() == 2 and store.jobs.get(record.id).pushes[-1].state.value == "landed"


def test_posts_link_the_job_page_under_the_configured_address_and_only_there(
    settings: Settings, store: JobStore, thread: Repository
) -> None:
    record = _forge_job(store)
    approval = _approved(record)
    # Unset, nothing posted carries an address: none is guessed from a request's Host.
    assert "http" not in status_comment(settings, record, approval)
    api = ApiSettings.model_validate({"public_url": "https://rb.example.org/"})
    public = settings.model_copy(update={"api": api})
    page = f"https://rb.example.org/jobs/{record.id}"
    entry = landed_pull_request(public, record, approval, "d" * 40)
    assert entry is not None
    store.outbox.add(entry)
    assert [a.outcome for a in deliver_due(store, public)] == ["delivered"] * 2
    [comment] = thread.comments.values()
    [pull] = thread.pulls.values()
    assert f"The job: {page}" in comment.body
    assert f"The job: {page}" in pull.body
