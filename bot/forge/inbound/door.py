"""What ``POST /webhooks/<forge>`` does, without the web framework: the route reads the body
(under ``api.max_body_bytes``) and calls ``verify`` on it, then ``accept`` in a thread.

1. ``forge``: the forge is configured (BEM-801); ``verify``: its secret file is readable
   (BEM-803) and the signature or token matches the raw body (BEM-800), before a byte of it
   is parsed.
2. ``accept``: the body is a JSON object (BEM-804) with a delivery id (BEM-805); it is
   normalized (``github`` / ``gitlab``), which refuses an unknown installation or project
   (BEM-802) or says why it is ignored; the delivery id is claimed in Redis (a redelivery is
   a ``duplicate``), and the event is queued for the workers (``riverbeam.handle_forge_event``
   on the ``forge`` queue). The forge is never called here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from bot.config import ForgeConfig, Settings
from bot.core.errors import BeamError
from bot.forge.inbound import github, gitlab
from bot.forge.inbound.deliveries import Deliveries
from bot.forge.inbound.forge_events import FORGE_EVENT, Ignored
from bot.forge.inbound.signatures import check_github, check_gitlab, read_secret
from bot.service.queues import TaskQueues

MAX_DELIVERY_ID_CHARS = 200
# Per kind: the normalizer, and the header naming the event.
_NORMALIZERS = {
    "github": (github.normalize, "x-github-event"),
    "gitlab": (gitlab.normalize, "x-gitlab-event"),
}


class DoorAnswer(BaseModel):
    """What the forge is told about a delivery it sent."""

    outcome: Literal["queued", "duplicate", "ignored"]
    delivery: str | None = Field(default=None, description="the delivery id, as sent")
    event: str | None = Field(default=None, description="the event queued: comment, label, ...")
    reason: str | None = Field(default=None, description="why it was ignored")


class WebhookDoor:
    def __init__(self, settings: Settings, deliveries: Deliveries, queues: TaskQueues) -> None:
        self.settings = settings
        self.deliveries = deliveries
        self.queues = queues

    def forge(self, name: str) -> ForgeConfig:
        config = self.settings.forges.get(name)
        if config is None:
            raise BeamError("BEM-801", f"no forge is configured as {name!r} ([forges.<name>])")
        return config

    def verify(self, config: ForgeConfig, headers: Mapping[str, str], body: bytes) -> None:
        secret = read_secret(config.webhook_secret_file)
        if config.kind == "github":
            check_github(secret, body, headers.get("x-hub-signature-256"))
        else:
            check_gitlab(secret, headers.get("x-gitlab-token"))

    def accept(
        self, name: str, config: ForgeConfig, headers: Mapping[str, str], body: bytes
    ) -> DoorAnswer:
        payload = _json_object(body)
        delivery = _delivery_id(config, headers)
        normalize, header = _NORMALIZERS[config.kind]
        event = normalize(
            headers.get(header, ""), payload, forge=name, delivery=delivery, config=config
        )
        if isinstance(event, Ignored):
            return DoorAnswer(outcome="ignored", delivery=delivery, reason=event.reason)
        ttl = max(1, round(config.delivery_ttl_hours * 3600))
        if not self.deliveries.claim(name, delivery, ttl_seconds=ttl):
            return DoorAnswer(outcome="duplicate", delivery=delivery, event=event.type)
        try:
            self.queues.send_forge_event(FORGE_EVENT.dump_python(event, mode="json"))
        except BeamError:
            self.deliveries.forget(name, delivery)
            raise
        return DoorAnswer(outcome="queued", delivery=delivery, event=event.type)


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise BeamError("BEM-804", f"the body is not JSON: {error}") from None
    if not isinstance(payload, dict):
        raise BeamError("BEM-804", "the body is JSON but not an object")
    return payload


def _delivery_id(config: ForgeConfig, headers: Mapping[str, str]) -> str:
    names = (
        ("x-github-delivery",)
        if config.kind == "github"
        else ("idempotency-key", "x-gitlab-event-uuid")
    )
    for header in names:
        value = (headers.get(header) or "").strip()
        if value:
            if len(value) > MAX_DELIVERY_ID_CHARS or not value.isprintable():
                raise BeamError("BEM-805", f"{header} is over {MAX_DELIVERY_ID_CHARS} characters")
            return value
    raise BeamError("BEM-805", f"the delivery has no {' or '.join(names)} header")
