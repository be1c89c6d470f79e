"""Server-sent events, decoded incrementally from the bytes of an HTTP response body.

The decoder follows the WHATWG event-stream rules: lines end in CR, LF or CRLF (a CRLF may
be split across two network reads), a leading byte-order mark is dropped, ``:`` starts a
comment, one space after a field's colon is dropped, several ``data`` lines join with a
newline, ``id`` sets the last event id that each later event carries (an id holding NUL is
ignored), a blank line dispatches the event, and an event still open when the body ends was
never finished and is dropped.

It is stricter than the standard in two ways, because its readers (a chat-completions stream,
``riverbeam ci`` following a job) know what their server sends: a line naming a field other
than ``data``, ``event``, ``id`` or ``retry`` raises ``SseError`` instead of being ignored (a
server that is not speaking SSE would otherwise look like a stream that silently ended
early), and an event larger than ``max_event_chars`` raises ``SseError`` so a server that
never ends a line cannot exhaust memory.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass

MAX_EVENT_CHARS = 8 * 1024 * 1024
"""Far above any chat-completions chunk, including a whole tool call sent in one event."""

_LINE_END = re.compile(r"\r\n|\r|\n")
_IGNORED_FIELDS = frozenset({"retry"})


class SseError(ValueError):
    """The body is not a well-formed event stream. ``line`` is the offending line, whole, so
    the reader decides how much of it to quote (it may hold anything the server sent)."""

    def __init__(self, reason: str, line: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


@dataclass(frozen=True)
class SseEvent:
    data: str
    event: str = "message"
    # The stream's last event id when the event was dispatched ("" until one is set): what
    # a reader reconnecting sends as Last-Event-ID.
    id: str = ""


class SseDecoder:
    """Feed it the body's bytes as they arrive; it returns each event once it is complete."""

    def __init__(self, *, max_event_chars: int = MAX_EVENT_CHARS) -> None:
        # utf-8-sig drops a byte-order mark at the very start of the stream and nowhere else.
        self._text = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._max = max_event_chars
        self._partial: list[str] = []
        self._partial_chars = 0
        self._data: list[str] = []
        self._data_chars = 0
        self._event = ""
        self._id = ""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        return self._take(self._text.decode(chunk), final=False)

    def close(self) -> list[SseEvent]:
        """End of body: finish a last line ended by a lone CR, drop whatever is unfinished."""
        events = self._take(self._text.decode(b"", final=True), final=True)
        self._partial, self._partial_chars = [], 0
        self._data, self._data_chars, self._event = [], 0, ""
        return events

    def _take(self, text: str, *, final: bool) -> list[SseEvent]:
        if "\n" not in text and "\r" not in text and not final:
            # Most reads end mid-line; joining only when a line ends keeps a long line linear.
            self._keep(text)
            return []
        buffer = "".join(self._partial) + text
        events: list[SseEvent] = []
        start = 0
        for match in _LINE_END.finditer(buffer):
            if match.group() == "\r" and match.end() == len(buffer) and not final:
                break  # the LF of this CRLF may arrive with the next read
            event = self._line(buffer[start : match.start()])
            if event is not None:
                events.append(event)
            start = match.end()
        self._partial, self._partial_chars = [], 0
        self._keep(buffer[start:])
        return events

    def _keep(self, text: str) -> None:
        if text:
            self._partial.append(text)
            self._partial_chars += len(text)
        if self._partial_chars + self._data_chars > self._max:
            raise SseError(f"an event is longer than {self._max} characters")

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
            self._data_chars += len(value) + 1
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name not in _IGNORED_FIELDS:
            raise SseError("not an event-stream line", line)
        return None

    def _dispatch(self) -> SseEvent | None:
        event = SseEvent(data="\n".join(self._data), event=self._event or "message", id=self._id)
        has_data = bool(self._data)
        self._data, self._data_chars, self._event = [], 0, ""
        return event if has_data else None


async def aiter_events(
    chunks: AsyncIterable[bytes], *, max_event_chars: int = MAX_EVENT_CHARS
) -> AsyncGenerator[SseEvent, None]:
    """The events of a body that arrives as ``chunks``; raises ``SseError`` on bad framing."""
    decoder = SseDecoder(max_event_chars=max_event_chars)
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.close():
        yield event
