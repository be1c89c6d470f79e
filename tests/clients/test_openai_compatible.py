"""OpenAiCompatible against the stub server: request shape, configuration, reply parsing,
refusals, and the two safety properties (no key in any message, no remote requests in tests).
Retries and streaming have their own files."""

from __future__ import annotations

import json
import logging
import traceback
from typing import Any

import httpx
import openai
import pytest

from bot.clients import (
    Completion,
    CompletionClient,
    OpenAiCompatible,
    StreamingCompletionClient,
    ToolCall,
    openai_compatible,
)
from bot.core.errors import BeamError, ConfigError, ModelError
from bot.core.frames import Usage
from harness.stub_model import (
    Reply,
    StubModel,
    completion,
    error,
    tool_call,
)
from tests.clients.helpers import (
    CONFIGURED_MODEL,
    KEY,
    MESSAGES,
    READ_FILE,
    Sleeps,
    collect,
    make_client,
)

# -- request shape -------------------------------------------------------------------------


async def test_posts_the_documented_body_with_bearer_auth(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    stub_model.enqueue(completion("Hello"))

    assert (await client.complete(MESSAGES, [])).text == "Hello"

    [request] = stub_model.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["user-agent"] == f"AsyncOpenAI/Python {openai.__version__}"
    # Nothing the caller did not set: no sampling, no vendor extras.
    assert request.json == {
        "model": CONFIGURED_MODEL,
        "messages": MESSAGES,
        "max_tokens": 4096,
        "stream": False,
    }


@pytest.mark.parametrize(
    ("suffix", "path"),
    [
        ("/v1", "/v1/chat/completions"),
        ("/v1/", "/v1/chat/completions"),
        ("/v1//", "/v1/chat/completions"),
        ("", "/chat/completions"),
        ("/", "/chat/completions"),
        ("/openai/v1/?api-version=2024-06", "/openai/v1/chat/completions?api-version=2024-06"),
    ],
)
async def test_joins_the_base_url_and_the_endpoint_path(
    stub_model: StubModel, sleeps: Sleeps, suffix: str, path: str
) -> None:
    client = OpenAiCompatible(stub_model.origin + suffix, KEY, "m", sleep=sleeps)
    stub_model.enqueue(completion("ok"))

    await client.complete(MESSAGES, [])

    assert stub_model.requests[0].path == path


async def test_sends_tools_and_tool_settings_only_when_there_are_tools(
    stub_model: StubModel, sleeps: Sleeps
) -> None:
    client = make_client(stub_model, sleeps, tool_choice="required", parallel_tool_calls=False)
    stub_model.enqueue(completion("a"), completion("b"), completion("c"))

    await client.complete(MESSAGES, [READ_FILE])
    await client.complete(MESSAGES, [])
    await make_client(stub_model, sleeps).complete(MESSAGES, [READ_FILE])

    with_tools, without, unset = (request.json for request in stub_model.requests)
    assert with_tools["tools"] == [READ_FILE.openai_format()]
    assert (with_tools["tool_choice"], with_tools["parallel_tool_calls"]) == ("required", False)
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(without)
    assert not {"tool_choice", "parallel_tool_calls"} & set(unset)


@pytest.mark.parametrize(
    ("options", "sent"),
    [
        ({}, {"max_tokens": 4096}),
        (
            {"token_parameter": "max_completion_tokens", "max_tokens": 900},
            {"max_completion_tokens": 900},
        ),
        (
            {"temperature": 0.0, "top_p": 0.5, "seed": 7, "reasoning_effort": "low"},
            {"max_tokens": 4096, "temperature": 0.0, "top_p": 0.5, "seed": 7}
            | {"reasoning_effort": "low"},
        ),
    ],
)
async def test_only_the_parameters_that_are_set_are_sent(
    stub_model: StubModel, sleeps: Sleeps, options: dict[str, Any], sent: dict[str, Any]
) -> None:
    stub_model.enqueue(completion("a"))

    await make_client(stub_model, sleeps, **options).complete(MESSAGES, [])

    body = stub_model.requests[0].json
    assert {key: body[key] for key in set(body) - {"model", "messages", "stream"}} == sent


async def test_with_max_tokens_returns_a_changed_copy(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    smaller = client.with_max_tokens(256)
    stub_model.enqueue(completion("a"), completion("b"))

    await smaller.complete(MESSAGES, [])
    await client.complete(MESSAGES, [])

    assert (smaller.max_tokens, client.max_tokens) == (256, 4096)
    assert [request.json["max_tokens"] for request in stub_model.requests] == [256, 4096]


async def test_with_extra_body_replaces_the_extra_body(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    stub_model.enqueue(completion("a"), completion("b"), completion("c"))

    await client.with_extra_body({"top_k": 40}).complete(MESSAGES, [])
    await client.with_extra_body({}).complete(MESSAGES, [])
    await client.complete(MESSAGES, [])

    bodies = [request.json for request in stub_model.requests]
    assert bodies[0]["top_k"] == 40
    assert "top_k" not in bodies[1]
    assert not {"top_k", "chat_template_kwargs"} & set(bodies[2])


async def test_extra_body_overrides_sampling_but_not_streaming(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    extra = {"temperature": 0.2, "stream": True, "stream_options": {"include_usage": False}}
    stub_model.enqueue(completion("a"))

    await client.with_extra_body(extra).complete(MESSAGES, [])

    body = stub_model.requests[0].json
    assert body["temperature"] == 0.2
    assert body["stream"] is False
    assert "stream_options" not in body


def test_extra_body_is_copied_in_and_out() -> None:
    extra: dict[str, Any] = {"chat_template_kwargs": {"thinking": True}}
    client = OpenAiCompatible("http://127.0.0.1:1/v1", KEY, "m", extra_body=extra)

    extra["chat_template_kwargs"]["thinking"] = False
    client.extra_body["chat_template_kwargs"]["thinking"] = False

    assert client.extra_body == {"chat_template_kwargs": {"thinking": True}}


async def test_an_empty_key_sends_no_authorization(stub_model: StubModel) -> None:
    stub_model.enqueue(completion("ok"))

    await OpenAiCompatible(stub_model.base_url, "", "m").complete(MESSAGES, [])

    assert "authorization" not in stub_model.requests[0].headers


async def test_the_sdk_adds_no_setting_from_the_environment(
    stub_model: StubModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK falls back to these variables for what it is not given; Riverbeam gives it
    # everything, so only the settings decide (its own fallbacks read OPENAI_* itself).
    for variable, value in {
        "OPENAI_ORG_ID": "org-ambient",
        "OPENAI_PROJECT_ID": "proj-ambient",
        "OPENAI_BASE_URL": "http://10.9.9.9/v1",
        "OPENAI_API_KEY": "sk-ambient-key-0000",
    }.items():
        monkeypatch.setenv(variable, value)
    stub_model.enqueue(completion("ok"))

    await OpenAiCompatible(stub_model.base_url, "", "m").complete(MESSAGES, [])

    headers = stub_model.requests[0].headers
    assert not {"openai-organization", "openai-project", "authorization"} & set(headers)


@pytest.mark.parametrize(
    "base_url", ["localhost:8000/v1", "ftp://models.example/v1", "http://", "/v1", "http://a:b:c"]
)
def test_a_base_url_that_is_not_http_is_a_configuration_error(base_url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        OpenAiCompatible(base_url, KEY, "m")

    assert caught.value.code == "BEM-900"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"read_timeout": 0}, "timeout"),
        ({"connect_timeout": -1.0}, "timeout"),
        ({"max_retries": -1}, "max_retries"),
        ({"temperature": float("nan")}, "finite"),
        ({"extra_body": {"tag": object()}}, "extra body"),
    ],
)
def test_bad_settings_are_configuration_errors(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        OpenAiCompatible("http://127.0.0.1:1/v1", KEY, "m", **options)

    assert caught.value.code == "BEM-900"


def test_an_empty_model_and_zero_max_tokens_are_refused() -> None:
    client = OpenAiCompatible("http://127.0.0.1:1/v1", KEY, "m")

    with pytest.raises(ConfigError, match="model must not be empty"):
        OpenAiCompatible("http://127.0.0.1:1/v1", KEY, "  ")
    with pytest.raises(ConfigError, match="max_tokens"):
        client.with_max_tokens(0)


def test_satisfies_both_client_protocols() -> None:
    client = OpenAiCompatible("http://127.0.0.1:1/v1", KEY, "m")

    assert isinstance(client, CompletionClient)
    assert isinstance(client, StreamingCompletionClient)


# -- from_env ------------------------------------------------------------------------------


def test_from_env_without_a_key_is_none() -> None:
    assert OpenAiCompatible.from_env({}) is None
    assert OpenAiCompatible.from_env({"BEAM_API_KEY": "  ", "BEAM_MODEL": "m"}) is None


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (
            {"BEAM_API_KEY": "k-beam", "GFS_BEAM_API_KEY": "k-gfs", "NVIDIA_API_KEY": "k-nv"},
            "k-beam",
        ),
        ({"GFS_BEAM_API_KEY": "k-gfs", "NVIDIA_API_KEY": "k-nv"}, "k-gfs"),
        ({"NVIDIA_API_KEY": "k-nv"}, "k-nv"),
        ({"BEAM_API_KEY": "", "GFS_BEAM_API_KEY": "", "NVIDIA_API_KEY": "k-nv"}, "k-nv"),
    ],
)
async def test_from_env_key_precedence(
    stub_model: StubModel, keys: dict[str, str], expected: str
) -> None:
    base = {"BEAM_API_BASE_URL": stub_model.base_url, "BEAM_MODEL": "m"}
    client = OpenAiCompatible.from_env({**keys, **base})
    stub_model.enqueue(completion("ok"))

    assert client is not None
    await client.complete(MESSAGES, [])

    assert stub_model.requests[0].headers["authorization"] == f"Bearer {expected}"


@pytest.mark.parametrize(
    ("urls", "expected"),
    [
        ({}, "https://integrate.api.nvidia.com/v1"),
        ({"GFS_BEAM_BASE_URL": "http://gfs.local/v1"}, "http://gfs.local/v1"),
        (
            {"BEAM_API_BASE_URL": "http://beam.local/v1/", "GFS_BEAM_BASE_URL": "http://gfs.local"},
            "http://beam.local/v1",
        ),
    ],
)
def test_from_env_base_url_precedence_and_default(urls: dict[str, str], expected: str) -> None:
    client = OpenAiCompatible.from_env({"BEAM_API_KEY": KEY, "BEAM_MODEL": "m", **urls})

    assert client is not None
    assert client.base_url == expected


@pytest.mark.parametrize(
    ("models", "expected"),
    [
        ({}, "deepseek-ai/deepseek-v4-pro-0813"),
        ({"GFS_BEAM_MODEL": "gfs/model"}, "gfs/model"),
        ({"BEAM_MODEL": "beam/model", "GFS_BEAM_MODEL": "gfs/model"}, "beam/model"),
    ],
)
def test_from_env_model_precedence_and_default(models: dict[str, str], expected: str) -> None:
    client = OpenAiCompatible.from_env({"BEAM_API_KEY": KEY, **models})

    assert client is not None
    assert client.model == expected


def test_from_env_reads_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert OpenAiCompatible.from_env() is None
    monkeypatch.setenv("NVIDIA_API_KEY", KEY)
    monkeypatch.setenv("GFS_BEAM_MODEL", "env/model")

    client = OpenAiCompatible.from_env()

    assert client is not None
    assert (client.model, client.max_tokens) == ("env/model", 4096)
    assert client.extra_body == {"chat_template_kwargs": {"thinking": False}}


# -- replies -------------------------------------------------------------------------------


async def test_reports_usage_and_the_model_that_answered(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    usage = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    stub_model.enqueue(completion("Done.", usage=usage, model="served/model-v2"))

    result = await client.complete(MESSAGES, [])

    assert result == Completion(
        text="Done.",
        usage=Usage(prompt_tokens=120, completion_tokens=30, total_tokens=150),
        model="served/model-v2",
        finish_reason="stop",
    )


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (None, None),
        (
            {"prompt_tokens": 5, "completion_tokens": 2},
            Usage(prompt_tokens=5, completion_tokens=2, total_tokens=7),
        ),
        ({"prompt_tokens": "many"}, None),
    ],
)
async def test_missing_usage_is_none_and_missing_model_is_the_configured_one(
    client: OpenAiCompatible,
    stub_model: StubModel,
    usage: dict[str, Any] | None,
    expected: Usage | None,
) -> None:
    stub_model.enqueue(completion("ok", usage=usage, model=None))

    result = await client.complete(MESSAGES, [])

    assert (result.usage, result.model) == (expected, CONFIGURED_MODEL)


async def test_parses_tool_calls_keeping_the_argument_text(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    raw = '{ "path" :"docs/install.md" }'
    calls = [
        tool_call("read_file", raw, "call_read"),
        tool_call("write_file", {"path": "a.md", "body": "x"}, "call_write"),
        {"type": "function", "function": {"name": "git_status", "arguments": ""}},
    ]
    stub_model.enqueue(completion(None, tool_calls=calls))

    result = await client.complete(MESSAGES, [READ_FILE])

    assert result.text is None
    first, second, third = result.tool_calls
    assert first == ToolCall(id="call_read", name="read_file", arguments=raw)
    assert second == ToolCall(
        id="call_write", name="write_file", arguments='{"path": "a.md", "body": "x"}'
    )
    assert (third.name, third.arguments) == ("git_status", "{}")
    assert third.id == ""  # the tool loop gives it a unique id and records that it did


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (
            Reply("<html><body>Sign in</body></html>", content_type="text/html"),
            "not JSON (content-type 'text/html'",
        ),
        (Reply(b"\xff\xfe garbage \x00"), "not JSON"),
        (Reply([1, 2, 3]), "JSON list, not an object"),
        (Reply({"id": "chatcmpl-1", "object": "chat.completion"}), "no 'choices' list"),
        (Reply({"error": {"message": "model is overloaded"}}), "it says: model is overloaded"),
        (Reply({"choices": []}), "'choices' is empty"),
        (Reply({"choices": [{"index": 0, "finish_reason": "stop"}]}), "no 'message' object"),
        (
            Reply({"choices": [{"message": {"content": [{"type": "text"}]}}]}),
            "content is a JSON list, not a string",
        ),
        (
            Reply({"choices": [{"message": {"content": None, "tool_calls": {}}}]}),
            "'tool_calls' is not a list",
        ),
        (
            completion(None, tool_calls=[{"id": "c1", "function": {"arguments": "{}"}}]),
            "tool call 0 has no function name",
        ),
        (
            completion(None, tool_calls=[{"id": "c1", "type": "function"}]),
            "tool call 0 has no 'function' object",
        ),
    ],
)
async def test_malformed_replies_are_bem_063_without_retry(
    client: OpenAiCompatible, stub_model: StubModel, sleeps: Sleeps, reply: Reply, problem: str
) -> None:
    stub_model.enqueue(reply)

    with pytest.raises(ModelError) as caught:
        await client.complete(MESSAGES, [])

    assert caught.value.code == "BEM-063"
    assert problem in caught.value.message
    assert (len(stub_model.requests), sleeps.calls) == (1, [])


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_bem_061_at_once(
    client: OpenAiCompatible, stub_model: StubModel, sleeps: Sleeps, status: int
) -> None:
    stub_model.enqueue(error(status, "the provider explains here"))

    with pytest.raises(ModelError) as caught:
        await client.complete(MESSAGES, [])

    assert caught.value.code == "BEM-061"
    assert f"HTTP {status}: the provider explains here" in caught.value.message
    assert (len(stub_model.requests), sleeps.calls) == (1, [])


async def test_a_refusal_quotes_a_short_snippet_of_the_body(
    client: OpenAiCompatible, stub_model: StubModel
) -> None:
    stub_model.enqueue(
        Reply("<html>" + "no such page " * 500 + "</html>", 404, content_type="text/html")
    )

    with pytest.raises(ModelError) as caught:
        await client.complete(MESSAGES, [])

    assert "HTTP 404: <html>no such page" in caught.value.message
    assert "…" in caught.value.message
    assert len(caught.value.message) < 500


# -- the API key never leaks -----------------------------------------------------------------


def test_repr_and_str_hide_the_key() -> None:
    client = OpenAiCompatible("https://user:pw@models.example/v1?key=q", KEY, "m")

    for text in (repr(client), str(client)):
        assert KEY not in text
        assert "pw" not in text
        assert "key=q" not in text
    assert repr(client) == (
        "OpenAiCompatible(base_url='https://models.example/v1', model='m', api_key=<hidden>)"
    )


@pytest.mark.parametrize(
    "replies",
    [
        [error(401, f"Incorrect API key provided: {KEY}.")],
        [error(503, f"backend rejected {KEY}")] * 2,
        [Reply(f"<html>Bearer {KEY}</html>", content_type="text/html")],
        [Reply({"error": {"message": f"{KEY} has no quota"}})],
    ],
)
async def test_the_key_is_in_no_error_traceback_or_log_line(
    stub_model: StubModel,
    sleeps: Sleeps,
    caplog: pytest.LogCaptureFixture,
    replies: list[Reply],
) -> None:
    caplog.set_level(logging.DEBUG)
    client = make_client(stub_model, sleeps, max_retries=1)
    stub_model.enqueue(*replies)

    with pytest.raises(BeamError) as caught:
        await client.complete(MESSAGES, [])

    assert "[redacted]" in caught.value.message
    leaks = [
        str(caught.value),
        repr(caught.value),
        "".join(traceback.format_exception(caught.value)),
    ]
    leaks.append(caplog.text)
    assert [KEY in text for text in leaks] == [False] * len(leaks)


async def test_the_key_is_not_in_transport_errors(
    sleeps: Sleeps, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = OpenAiCompatible("http://127.0.0.1:9/v1", KEY, "m", sleep=sleeps, max_retries=1)

    with pytest.raises(BeamError) as caught:
        await client.complete(MESSAGES, [])

    assert caught.value.code == "BEM-060"
    assert KEY not in "".join(traceback.format_exception(caught.value)) + caplog.text


# -- no remote requests from tests ---------------------------------------------------------


class ForbiddenTransport(httpx.AsyncBaseTransport):
    """Fails the test if the client gets as far as the network."""

    def __init__(self) -> None:
        self.calls = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        raise AssertionError(f"network I/O attempted: {request.url}")


def answering_transport(seen: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = {"choices": [{"message": {"content": "from the transport"}}]}
        return httpx.Response(200, json=body)

    return httpx.MockTransport(answer)


def test_remote_model_requests_are_off_for_the_whole_test_run() -> None:
    assert openai_compatible.ALLOW_REMOTE_MODEL_REQUESTS is False


@pytest.mark.parametrize(
    "base_url",
    [
        "https://integrate.api.nvidia.com/v1",
        "http://10.0.0.7:8000/v1",
        "http://128.0.0.1/v1",
        "http://[::2]/v1",
        "http://[::ffff:10.0.0.1]/v1",
        "http://localhost.example.com/v1",
    ],
)
async def test_a_remote_endpoint_is_refused_before_any_network_io(base_url: str) -> None:
    transport = ForbiddenTransport()
    client = OpenAiCompatible(base_url, KEY, "m", transport=transport)

    with pytest.raises(ModelError) as completing:
        await client.complete(MESSAGES, [])
    with pytest.raises(ModelError) as streaming:
        await collect(client.stream(MESSAGES, []))

    assert completing.value.code == streaming.value.code == "BEM-065"
    assert "ALLOW_REMOTE_MODEL_REQUESTS" in completing.value.message
    assert transport.calls == 0


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1/v1",
        "http://127.8.9.10:8000/v1",
        "http://localhost:11434/v1",
        "http://LOCALHOST./v1",
        "http://[::1]:8000/v1",
        "http://[::ffff:127.0.0.1]/v1",
    ],
)
async def test_loopback_endpoints_stay_allowed(base_url: str) -> None:
    seen: list[httpx.Request] = []
    client = OpenAiCompatible(base_url, KEY, "m", transport=answering_transport(seen))

    assert (await client.complete(MESSAGES, [])).text == "from the transport"
    assert len(seen) == 1


async def test_the_switch_is_what_refuses_remote_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_compatible, "ALLOW_REMOTE_MODEL_REQUESTS", True)
    seen: list[httpx.Request] = []
    client = OpenAiCompatible(
        "https://integrate.api.nvidia.com/v1", KEY, "m", transport=answering_transport(seen)
    )

    assert (await client.complete(MESSAGES, [])).text == "from the transport"
    assert str(seen[0].url) == "https://integrate.api.nvidia.com/v1/chat/completions"
    assert seen[0].headers["authorization"] == f"Bearer {KEY}"


async def test_an_injected_transport_is_left_open_for_its_owner() -> None:
    class Counting(httpx.MockTransport):
        closed = 0

        async def aclose(self) -> None:
            Counting.closed += 1

    seen: list[httpx.Request] = []
    transport = Counting(answering_transport(seen).handler)
    client = OpenAiCompatible("http://127.0.0.1/v1", KEY, "m", transport=transport)

    await client.complete(MESSAGES, [])
    await client.complete(MESSAGES, [])

    assert (len(seen), Counting.closed) == (2, 0)
    assert json.loads(seen[1].content)["model"] == "m"
