"""Helpers the API tests share: job bodies, problem-document checks, reading event streams."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

PROBLEM_TYPE = "application/problem+json"
REQUEST = "Fix the broken links and typos on the install page"

# An author job that edits the install page and parks on its push.
AUTHOR: dict[str, Any] = {
    "kind": "author",
    "repo": "docs",
    "request": REQUEST,
    "metadata": {"playbook": "author-fix-install"},
}
# A summarize job of main that runs to the end.
SUMMARIZE: dict[str, Any] = {
    "kind": "summarize",
    "repo": "docs",
    "branch": "main",
    "metadata": {"playbook": "summarize"},
}
# A job that fails as soon as a worker takes it (no such playbook): cheap to make many of.
FAILS_AT_ONCE: dict[str, Any] = {
    "kind": "summarize",
    "repo": "docs",
    "branch": "main",
    "metadata": {"playbook": "no-such-playbook"},
}


def problem(reply: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The reply's problem document, checked: status, media type, BEM code, RFC 9457 shape."""
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"] == PROBLEM_TYPE, reply.headers
    body: dict[str, Any] = reply.json()
    assert body["code"] == code, body
    assert body["status"] == status and body["type"] == f"urn:riverbeam:error:{code}"
    assert body["title"] and body["detail"]
    return body


@dataclass(frozen=True)
class Event:
    """One server-sent event as the wire carried it."""

    event: str
    id: str | None
    data: Any


class EventParser:
    """Server-sent events from the lines of a stream, one line at a time."""

    def __init__(self) -> None:
        self.comments = 0
        self._fields: dict[str, str] = {}

    def feed(self, line: str) -> Event | None:
        """The event this line completes, if it does."""
        if line.startswith(":"):
            self.comments += 1
        elif line:
            name, _, value = line.partition(": ")
            self._fields[name] = value
        elif self._fields:
            fields, self._fields = self._fields, {}
            return Event(
                fields.get("event", "message"), fields.get("id"), json.loads(fields["data"])
            )
        return None


def read_events(lines: Iterator[str], *, limit: int | None = None) -> tuple[list[Event], int]:
    """Parse SSE lines until the ``end`` event (or ``limit`` events); returns the events and
    how many keep-alive comments came between them."""
    parser = EventParser()
    events: list[Event] = []
    for line in lines:
        event = parser.feed(line)
        if event is None:
            continue
        events.append(event)
        if event.event == "end" or len(events) == limit:
            break
    return events, parser.comments


def shown(client: httpx.Client, job_id: str) -> dict[str, Any]:
    """What a reviewer who looked at the job's approval now names in a decision on it."""
    reply = client.get(f"/v1/approvals/{job_id}")
    assert reply.status_code == 200, reply.text
    current = reply.json()["current"]
    return {
        "approval_id": current["id"],
        "commit_sha": current["commit_sha"],
        "diff_digest": current["diff_digest"],
    }
