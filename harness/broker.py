"""What waits in the broker: the task messages queued on a Redis-backed Celery queue, read
without consuming them."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import redis


@dataclass(frozen=True)
class Queued:
    """One waiting message: its Redis list, task name, positional arguments, raw bytes."""

    key: str
    task: str
    args: list[object]
    raw: bytes


def queued_tasks(client: redis.Redis, queue: str) -> list[Queued]:
    """Each message waiting on ``queue``. Kombu keeps one Redis list per queue and priority
    step: the queue's name, then ``<name>\\x06\\x16<priority>``."""
    found = []
    for key in client.scan_iter(match=f"{queue}*"):
        if client.type(key) != b"list":
            continue
        raw: bytes
        for raw in client.lrange(key, 0, -1):  # type: ignore[assignment]  # bytes: no decoding
            message = json.loads(raw)
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            found.append(Queued(key.decode(), message["headers"]["task"], args, raw))
    return found
