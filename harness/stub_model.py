"""A real OpenAI-compatible HTTP server on loopback, scripted request by request.

Tests queue one behaviour per expected request (a JSON reply, an event stream, an error
status, a hang, a broken body) and read back every request the server received::

    with StubModel() as stub:
        stub.enqueue(error(429, "slow down", retry_after="1"), completion("hi"))
        client = OpenAiCompatible(stub.base_url, "key", "stub-model")
        ...
        assert stub.requests[0].json["model"] == "stub-model"

A request with nothing queued gets HTTP 501 naming the problem, so a client under test fails
with BEM-061 instead of waiting. Hanging behaviours wait on an event that ``stop`` sets, so a
hang never holds up shutdown.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Protocol

STUB_MODEL = "stub-model"
DEFAULT_USAGE: Mapping[str, int] = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
Json = Mapping[str, Any] | Sequence[Any]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # names lower-cased
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Exchange:
    """What a behaviour can do with the one request it answers."""

    def __init__(self, handler: BaseHTTPRequestHandler, stopping: threading.Event) -> None:
        self._handler = handler
        self._stopping = stopping

    def send(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        self._head(status, {**headers, "Content-Length": str(len(body))})
        self._handler.wfile.write(body)

    def start_chunked(self, status: int, headers: Mapping[str, str]) -> None:
        self._head(status, {**headers, "Transfer-Encoding": "chunked"})

    def chunk(self, data: bytes) -> None:
        self._handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self._handler.wfile.flush()

    def end_chunked(self) -> None:
        self._handler.wfile.write(b"0\r\n\r\n")

    def wait(self, seconds: float) -> None:
        """Sleep, but wake at once when the server stops."""
        self._stopping.wait(seconds)

    def _head(self, status: int, headers: Mapping[str, str]) -> None:
        self._handler.send_response(status)
        for name, value in {**headers, "Connection": "close"}.items():
            self._handler.send_header(name, value)
        self._handler.end_headers()


class Behaviour(Protocol):
    def respond(self, exchange: Exchange) -> None: ...


@dataclass(frozen=True)
class Reply:
    """A complete response. A ``str`` or ``bytes`` body is sent as is, anything else as JSON."""

    body: Json | str | bytes
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def respond(self, exchange: Exchange) -> None:
        body = self.body
        if isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, bytes):
            body = json.dumps(body).encode()
        exchange.send(self.status, body, {"Content-Type": self.content_type, **self.headers})


@dataclass(frozen=True)
class Hang:
    """Accept the request and answer nothing for ``seconds`` (or until the server stops)."""

    seconds: float = 30.0

    def respond(self, exchange: Exchange) -> None:
        exchange.wait(self.seconds)


@dataclass(frozen=True)
class Stream:
    """Server-sent events, one HTTP chunk per event. A mapping event goes out as
    ``data: <json>``; a ``str`` event is written verbatim (for framing faults).

    ``ending``: ``clean`` finishes the body; ``cut`` closes the connection mid-body (the
    client sees an incomplete chunked read); ``hang`` stops sending and waits.
    """

    events: Sequence[Mapping[str, Any] | str]
    done: bool = True
    ending: Literal["clean", "cut", "hang"] = "clean"
    content_type: str = "text/event-stream"
    line_end: str = "\n"
    hang_seconds: float = 30.0

    def respond(self, exchange: Exchange) -> None:
        exchange.start_chunked(200, {"Content-Type": self.content_type})
        for event in self.events:
            exchange.chunk(self._frame(event).encode())
        if self.done:
            exchange.chunk(self._frame("data: [DONE]" + self.line_end * 2).encode())
        if self.ending == "hang":
            exchange.wait(self.hang_seconds)
        if self.ending != "cut":
            exchange.end_chunked()

    def _frame(self, event: Mapping[str, Any] | str) -> str:
        if isinstance(event, str):
            return event
        return f"data: {json.dumps(event)}{self.line_end}{self.line_end}"


# -- builders for the usual replies --------------------------------------------------------


def completion(
    text: str | None = "",
    *,
    tool_calls: Sequence[Mapping[str, Any]] = (),
    usage: Mapping[str, Any] | None = DEFAULT_USAGE,
    model: str | None = STUB_MODEL,
    finish_reason: str | None = None,
    refusal: str | None = None,
) -> Reply:
    """A chat completion reply (its document is ``.body``); ``usage`` or ``model`` None
    leaves the field out. The finish reason defaults to what a provider sends:
    ``tool_calls`` with calls, else ``stop``."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    if refusal is not None:
        message["refusal"] = refusal
    reason = finish_reason or ("tool_calls" if tool_calls else "stop")
    body: dict[str, Any] = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "choices": [{"index": 0, "message": message, "finish_reason": reason}],
    }
    if usage is not None:
        body["usage"] = dict(usage)
    if model is not None:
        body["model"] = model
    return Reply(body)


def streamed(body: Mapping[str, Any], *, pieces: int = 3) -> Stream:
    """The event stream a provider sends for the completion ``body``: the text, refusal and
    each call's arguments split into ``pieces`` deltas, calls interleaved by ``index``, the
    finish reason in its own chunk, then a usage-only chunk when ``body`` has usage."""
    choice = body["choices"][0]
    message = choice["message"]
    model = body.get("model", STUB_MODEL)
    events: list[Mapping[str, Any] | str] = [_delta({"role": "assistant"}, model)]
    for field_name in ("content", "refusal"):
        for part in _split(message.get(field_name) or "", pieces):
            events.append(_delta({field_name: part}, model))
    calls = list(message.get("tool_calls") or ())
    for index, call in enumerate(calls):
        head = {"index": index, "id": call["id"], "type": "function"}
        head["function"] = {"name": call["function"]["name"], "arguments": ""}
        events.append(_delta({"tool_calls": [head]}, model))
    split_arguments = [_split(call["function"]["arguments"], pieces) for call in calls]
    for round_ in range(max((len(parts) for parts in split_arguments), default=0)):
        for index, parts in enumerate(split_arguments):
            if round_ < len(parts):
                piece = {"index": index, "function": {"arguments": parts[round_]}}
                events.append(_delta({"tool_calls": [piece]}, model))
    ending = chunk(finish_reason=choice["finish_reason"], model=model)
    ending["choices"][0]["delta"] = {}
    events.append(ending)
    if "usage" in body:
        events.append(chunk(usage=body["usage"], model=model))
    return Stream(events)


def _delta(delta: Mapping[str, Any], model: str) -> dict[str, Any]:
    body = chunk(model=model)
    body["choices"][0]["delta"] = dict(delta)
    return body


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // pieces))
    return [text[start : start + size] for start in range(0, len(text), size)]


def tool_call(
    name: str, arguments: str | Mapping[str, Any], call_id: str = "call_1"
) -> dict[str, Any]:
    """One entry of a reply message's ``tool_calls``."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def error(status: int, message: str, *, retry_after: str | None = None) -> Reply:
    """An error status with an OpenAI-style error document."""
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    body = {"error": {"message": message, "type": "stub_error", "code": status}}
    return Reply(body, status=status, headers=headers)


def chunk(
    content: str | None = None,
    *,
    tool_calls: Sequence[Mapping[str, Any]] | None = None,
    finish_reason: str | None = None,
    usage: Mapping[str, Any] | None = None,
    model: str = STUB_MODEL,
) -> dict[str, Any]:
    """One chat.completion.chunk; with ``usage`` it is the final, choice-less usage chunk."""
    body: dict[str, Any] = {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 0,
    }
    body["model"] = model
    if usage is not None:
        return {**body, "choices": [], "usage": dict(usage)}
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = list(tool_calls)
    return {**body, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def text_stream(*pieces: str, usage: Mapping[str, int] | None = DEFAULT_USAGE) -> Stream:
    """An answer streamed piece by piece, a stop chunk, then the usage chunk."""
    events: list[Mapping[str, Any] | str] = [chunk(piece) for piece in pieces]
    events.append(chunk(finish_reason="stop"))
    if usage is not None:
        events.append(chunk(usage=usage))
    return Stream(events)


# -- the server ----------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    stub: StubModel

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (its timeout) closes the socket under a behaviour that is
        # still writing; that is the scenario under test, not a server fault.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # a connection that never sends its request cannot hold shutdown forever
    server: _Server

    def do_POST(self) -> None:
        self._answer()

    def do_GET(self) -> None:
        self._answer()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``StubModel.requests`` instead."""

    def _answer(self) -> None:
        self.close_connection = True
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = RecordedRequest(self.command, self.path, headers, body)
        behaviour = self.server.stub._next(request)
        # The client may hang up first (see _Server.handle_error).
        with contextlib.suppress(ConnectionError):
            behaviour.respond(Exchange(self, self.server.stub._stopping))


class StubModel:
    """The stub server; use as a context manager (or the ``stub_model`` fixture)."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    @property
    def origin(self) -> str:
        if self._server is None:
            raise RuntimeError("the stub model server is not running; use it in a with block")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def enqueue(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    def start(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.stub = self
        # A short poll interval keeps shutdown, and so every test's teardown, fast.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Wake every hanging behaviour, stop serving, and wait for the handler threads."""
        if self._server is None or self._thread is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> StubModel:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _next(self, request: RecordedRequest) -> Behaviour:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.popleft()
            number = len(self.requests)
        return error(501, f"stub_model: no behaviour queued for request #{number}")
