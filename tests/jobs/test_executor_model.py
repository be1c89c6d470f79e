"""The executor's model, queue and push plumbing: PlaybookClient, model_client_for, the
Celery settings and the relayed git_push, each against its real collaborators."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import JsonValue

from bot.clients.base import Completion, Message, ToolCall
from bot.clients.openai_compatible import OpenAiCompatible
from bot.clients.playbook import PlaybookClient, last_tool_result
from bot.config import ModelSettings, Settings
from bot.core.errors import BeamError
from bot.core.input import AgentInput
from bot.core.tools import ToolSpec
from bot.jobs.broker import BroadcastReadingPoller
from bot.jobs.broker import Transport as BrokerTransport
from bot.jobs.celery_app import celery_config, create_app
from bot.jobs.model_client import model_client_for
from bot.jobs.relayed_push import Relay, RelayedPush
from bot.service.queues import (
    COLLECT_WORKSPACES,
    HOSTS_EXCHANGE,
    HOSTS_QUEUE,
    REAP_SANDBOXES,
    RECOVER_JOBS,
    RESUME_DECIDED,
    queue_for,
    worker_queues,
)
from bot.store.models import JobKind, JobRecord, JobSpec
from sandbox.host.relay import RelayResult
from sandbox.host.workspace.outbox import ApprovedCommit
from sandbox.inside.tool_specs import TOOL_SPECS

SHA = "a" * 40


def _job(**metadata: JsonValue) -> JobRecord:
    spec = JobSpec(kind=JobKind.AUTHOR, repo="docs", request="Fix it", metadata=metadata)
    return JobRecord(id="job1", spec=spec)


def _turns(count: int) -> list[Message]:
    messages: list[Message] = [{"role": "user", "content": "go"}]
    for index in range(count):
        messages.append({"role": "assistant", "content": f"turn {index}"})
        messages.append({"role": "tool", "tool_call_id": "c", "content": json.dumps(index)})
    return messages


# -- PlaybookClient --------------------------------------------------------------------------


async def test_playbook_picks_the_step_by_the_turns_already_taken() -> None:
    steps = ["zero", "one", "two"]
    # A fresh client per request, as when each request is made by another worker process.
    answers = [(await PlaybookClient(steps).complete(_turns(n), [])).text for n in range(3)]
    assert answers == ["zero", "one", "two"]


async def test_playbook_steps_can_read_the_last_tool_result() -> None:
    client = PlaybookClient(["first", lambda messages: f"saw {last_tool_result(messages)}"])
    completion = await client.complete(_turns(1), [])
    assert completion == Completion(text="saw 0", model="playbook")
    assert client.requests == [_turns(1)]


async def test_playbook_keeps_a_step_model_and_fails_past_the_end() -> None:
    call = ToolCall.of("list_tree", {})
    client = PlaybookClient([Completion.of_calls(call, model="m1")])
    assert (await client.complete(_turns(0), [])).model == "m1"
    with pytest.raises(BeamError) as caught:
        await client.complete(_turns(1), [])
    assert caught.value.code == "BEM-081"


def test_last_tool_result_parses_json_and_handles_none() -> None:
    assert last_tool_result([{"role": "user", "content": "x"}]) is None
    assert last_tool_result([{"role": "tool", "content": '{"a": 1}'}]) == {"a": 1}
    assert last_tool_result([{"role": "tool", "content": "plain"}]) == "plain"


def test_last_tool_result_of_a_named_tool_skips_other_tools() -> None:
    def call(call_id: str, name: str) -> dict[str, JsonValue]:
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}

    messages: list[Message] = [
        {"role": "assistant", "content": None, "tool_calls": [call("1", "read_file")]},
        {"role": "tool", "tool_call_id": "1", "content": '{"page": 1}'},
        {"role": "assistant", "content": None, "tool_calls": [call("2", "list_tree")]},
        {"role": "tool", "tool_call_id": "2", "content": '{"tree": 2}'},
    ]
    assert last_tool_result(messages, "read_file") == {"page": 1}
    assert last_tool_result(messages) == {"tree": 2}
    assert last_tool_result(messages, "git_push") is None


# -- model_client_for ------------------------------------------------------------------------


def scripted_factory(job: JobRecord) -> PlaybookClient:
    return PlaybookClient([f"hello {job.id}"])


def not_a_client(job: JobRecord) -> object:
    return object()


def _settings(factory: str | None) -> Settings:
    # Unvalidated: the configuration refuses a factory without a colon as it is read; the
    # worker checks again what it is given.
    return Settings(model=ModelSettings.model_construct(factory=factory))


async def test_model_factory_gets_the_job() -> None:
    client = model_client_for(_settings(f"{__name__}:scripted_factory"), _job())
    assert (await client.complete(_turns(0), [])).text == "hello job1"


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("no-colon", "must look like"),
        ("tests.jobs.no_such_module:f", "cannot import"),
        (f"{__name__}:missing", "has no function"),
        (f"{__name__}:not_a_client", "not a CompletionClient"),
    ],
)
def test_a_bad_model_factory_is_bem_508(factory: str, said: str) -> None:
    with pytest.raises(BeamError) as caught:
        model_client_for(_settings(factory), _job())
    assert caught.value.code == "BEM-508"
    assert said in caught.value.message


def test_without_factory_or_key_there_is_no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BeamError) as caught:
        model_client_for(_settings(None), _job())
    assert caught.value.code == "BEM-508"
    monkeypatch.setenv("BEAM_API_KEY", "key-for-the-test")
    assert isinstance(model_client_for(_settings(None), _job()), OpenAiCompatible)


# -- Celery settings -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "tls"),
    [
        ("redis://127.0.0.1:1/3", None),
        ("rediss://127.0.0.1:1/3", {"ssl_cert_reqs": "required"}),
        ("rediss://127.0.0.1:1/3?ssl_ca_certs=/etc/ca.pem", {"ssl_ca_certs": "/etc/ca.pem"}),
    ],
)
def test_the_broker_is_our_redis_transport_with_tls_as_the_url_says(
    url: str, tls: dict[str, str] | None
) -> None:
    connection = create_app(Settings(redis_url=url)).connection_for_write()
    assert isinstance(connection.transport, BrokerTransport)
    assert isinstance(connection.transport.cycle, BroadcastReadingPoller)
    assert connection.ssl == tls


def test_celery_settings_make_a_lost_worker_cost_a_retry_not_a_job() -> None:
    settings = Settings(redis_url="redis://127.0.0.1:1/3")
    config = celery_config(settings)
    assert config["broker_url"] == config["result_backend"] == "redis://127.0.0.1:1/3"
    assert config["task_acks_late"] and config["task_reject_on_worker_lost"]
    assert config["worker_prefetch_multiplier"] == 1
    assert config["worker_cancel_long_running_tasks_on_connection_loss"]
    timeout = config["broker_transport_options"]["visibility_timeout"]
    assert timeout > settings.jobs.time_limit_seconds
    assert config["task_soft_time_limit"] == settings.jobs.soft_time_limit_seconds
    assert config["task_time_limit"] == settings.jobs.time_limit_seconds
    assert config["accept_content"] == config["result_accept_content"] == ["json"]
    assert config["task_serializer"] == config["result_serializer"] == "json"
    # The broadcast queue is known by its alias: each worker binds a queue of its own to it.
    names = [queue.alias or queue.name for queue in config["task_queues"]]
    assert names == [*(kind.value for kind in JobKind), "default", "forge", HOSTS_QUEUE]
    assert worker_queues() == names
    assert queue_for(JobKind.COMMIT_NOTES) == "commit-notes"
    # A job queue has an exchange and key of its own: nothing is copied to another queue.
    bindings = {(q.exchange.name, q.routing_key) for q in config["task_queues"] if not q.alias}
    assert bindings == {(name, name) for name in names if name != HOSTS_QUEUE}
    # The per-host chores fan out to every worker, also when beat sends them.
    for task in (REAP_SANDBOXES, COLLECT_WORKSPACES):
        assert config["task_routes"][task]["exchange_type"] == "fanout"
    beat = config["beat_schedule"]
    for name in ("reap-sandboxes", "collect-workspaces"):
        assert beat[name]["options"]["declare"] == [HOSTS_EXCHANGE]
    # A job whose worker died is queued again by one sweep a minute, on any one worker.
    # So is a decision whose resume message was lost.
    for name, task in (("recover-jobs", RECOVER_JOBS), ("resume-decided", RESUME_DECIDED)):
        assert beat[name]["task"] == task
        assert beat[name]["options"] == {"queue": "default"}
        assert beat[name]["schedule"] < timeout


# -- the relayed git_push --------------------------------------------------------------------


class FakeContainerPush:
    """The container's git_push, answering what a push into the outbox answers."""

    def __init__(self, sha: str, ref: str) -> None:
        self.result = {"remote": "origin", "ref": ref, "sha": sha}
        self.calls: list[dict[str, JsonValue]] = []

    def spec(self) -> ToolSpec:
        return TOOL_SPECS["git_push"]

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        self.calls.append(args)
        return dict(self.result)


def _relay(log: list[tuple[str, str]], *, already: bool = False) -> Relay:
    def relay(sha: str, branch: str) -> RelayResult:
        log.append((sha, branch))
        return RelayResult(branch=branch, sha=sha, pushed=not already, already_there=already)

    return relay


async def test_relayed_push_relays_exactly_the_approved_commit() -> None:
    inner, relayed = FakeContainerPush(SHA, "refs/heads/riverbeam/job1"), []
    push = RelayedPush(inner, _relay(relayed))
    assert push.spec() == TOOL_SPECS["git_push"]
    push.arm(ApprovedCommit(sha=SHA, branch="riverbeam/job1"))
    result = await push.invoke({}, AgentInput.of_text("x"))
    assert relayed == [(SHA, "riverbeam/job1")]
    assert result == {
        **inner.result,
        "upstream": {
            "branch": "riverbeam/job1",
            "sha": SHA,
            "pushed": True,
            "already_there": False,
        },
    }
    # Armed once, used once: a second push without a new approval goes nowhere.
    with pytest.raises(BeamError) as caught:
        await push.invoke({}, AgentInput.of_text("x"))
    assert caught.value.code == "BEM-603"
    assert len(inner.calls) == 1


@pytest.mark.parametrize("outbox_at", [SHA, "b" * 40, None])
async def test_a_push_staged_in_the_outbox_is_relayed_without_the_container(
    tmp_path: Path, outbox_at: str | None
) -> None:
    # The outbox as the parking segment's container left it: the job branch at some commit.
    outbox = tmp_path / "outbox.git"
    (outbox / "refs" / "heads" / "riverbeam").mkdir(parents=True)
    if outbox_at is not None:
        (outbox / "refs" / "heads" / "riverbeam" / "job1").write_text(outbox_at + "\n")
    inner, relayed = FakeContainerPush(SHA, "refs/heads/riverbeam/job1"), []
    push = RelayedPush(inner, _relay(relayed), outbox=outbox)
    push.arm(ApprovedCommit(sha=SHA, branch="riverbeam/job1"))
    result = await push.invoke({}, AgentInput.of_text("x"))
    # Exactly the approved commit goes, and the model reads the same answer either way.
    assert relayed == [(SHA, "riverbeam/job1")]
    assert isinstance(result, dict) and {k: result[k] for k in inner.result} == inner.result
    # Only an outbox at the approved commit saves the container's push.
    assert len(inner.calls) == (0 if outbox_at == SHA else 1)


async def test_relayed_push_refuses_what_was_not_approved() -> None:
    inner, relayed = FakeContainerPush("b" * 40, "refs/heads/riverbeam/job1"), []
    push = RelayedPush(inner, _relay(relayed))
    push.arm(ApprovedCommit(sha=SHA, branch="riverbeam/job1"))
    with pytest.raises(BeamError) as caught:
        await push.invoke({}, AgentInput.of_text("x"))
    assert caught.value.code == "BEM-603"
    assert "nothing was sent upstream" in caught.value.message
    assert relayed == []
