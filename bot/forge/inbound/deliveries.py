"""Webhook deliveries in Redis: each delivery id is claimed once (``SET NX`` with the forge's
``delivery_ttl_hours``), so a redelivery within that time starts nothing; the worker then
writes over the claim what the event came to (keeping its time to live)."""

from __future__ import annotations

from bot.store.gateway import RedisGateway, text

QUEUED = "queued"


class Deliveries:
    def __init__(self, gateway: RedisGateway) -> None:
        self._gateway = gateway

    def claim(self, forge: str, delivery: str, *, ttl_seconds: int) -> bool:
        """True for the first claim of ``delivery``; False when it was seen before."""
        with self._gateway.reachable():
            key = self._gateway.keys.forge_delivery(forge, delivery)
            return bool(self._gateway.client.set(key, QUEUED, nx=True, ex=ttl_seconds))

    def forget(self, forge: str, delivery: str) -> None:
        """Undo a claim whose event could not be queued: the forge's retry must get through."""
        with self._gateway.reachable():
            self._gateway.client.delete(self._gateway.keys.forge_delivery(forge, delivery))

    def record(self, forge: str, delivery: str, outcome: str) -> None:
        """What the delivery's event came to, over its claim; nothing when the claim expired."""
        with self._gateway.reachable():
            key = self._gateway.keys.forge_delivery(forge, delivery)
            self._gateway.client.set(key, outcome, xx=True, keepttl=True)

    def outcome(self, forge: str, delivery: str) -> str | None:
        """``queued``, the outcome recorded, or None for a delivery never claimed (or expired)."""
        with self._gateway.reachable():
            raw = self._gateway.client.get(self._gateway.keys.forge_delivery(forge, delivery))
        return None if raw is None else text(raw)
