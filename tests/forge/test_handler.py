"""The worker's handler, where it meets an unreachable job store: an outage is no outcome to
record (the event would be lost with it), it propagates so that the task is retried. The
deliveries are on a Redis that answers, so only the job store's outage is in play."""

from __future__ import annotations

from pathlib import Path

import pytest
from celery import Celery

from bot.config import Settings
from bot.core.errors import BeamError
from bot.forge.inbound import github
from bot.forge.inbound.deliveries import Deliveries
from bot.forge.inbound.forge_events import FORGE_EVENT, CommentCreated
from bot.forge.inbound.handler import ForgeEventHandler
from bot.forge.permissions import ForgePermission
from bot.service.access import TokenRegistry
from bot.service.jobs import JobService
from bot.service.queues import TaskQueues
from bot.store.store import JobStore
from harness.forges import FakeLookup, github_example
from harness.redis_server import redis_server
from tests.forge.kit import github_config

UNREACHABLE = "redis://127.0.0.1:1/0"


def test_an_unreachable_store_propagates_for_the_task_to_retry(tmp_path: Path) -> None:
    config = github_config()
    settings = Settings.model_validate(
        {
            "redis_url": UNREACHABLE,
            "repositories": {"docs": {"upstream": "/nonexistent"}},
            "forges": {"gh": config.model_dump()},
        }
    )
    queues = TaskQueues(Celery(set_as_current=False))
    jobs = JobStore.from_url(UNREACHABLE, prefix="rbtest-handler")
    service = JobService(settings, jobs, queues, TokenRegistry(()))
    lookup = FakeLookup(permissions={"Codertocat": ForgePermission.WRITE})
    payload = github_example("issue_comment", "created", 1)
    payload["comment"]["body"] = "@riverbeam fix the install page"
    event = github.normalize("issue_comment", payload, forge="gh", delivery="d", config=config)
    assert isinstance(event, CommentCreated)
    with redis_server(tmp_path) as url:
        deliveries = Deliveries(JobStore.from_url(url, prefix="rbtest-handler").gateway)
        assert deliveries.claim("gh", "d", ttl_seconds=60)
        handler = ForgeEventHandler(settings, service, deliveries, lambda _n, _c: lookup)
        with pytest.raises(BeamError) as raised:
            handler.handle(FORGE_EVENT.dump_python(event, mode="json"))
        assert raised.value.code == "BEM-504"
        assert deliveries.outcome("gh", "d") == "queued", "no outcome was recorded"
