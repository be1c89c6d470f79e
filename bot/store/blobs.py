"""``ParkedBlobs``: what a parked job needs to resume, beside its record: the runner's
``RunState`` (JSON) and the workspace snapshot (bytes, capped by ``snapshot_max_bytes``).
Both are dropped when the job ends; a park writes them with its record in one transaction
(``JobRecords.park``)."""

from __future__ import annotations

from bot.core.errors import JobError
from bot.store.gateway import RedisGateway, as_bytes, text
from bot.store.records import check_snapshot


class ParkedBlobs:
    def __init__(self, gateway: RedisGateway) -> None:
        self._gateway = gateway
        self._keys = gateway.keys

    def save_run_state(self, job_id: str, state_json: str) -> None:
        with self._gateway.reachable():
            self._gateway.client.set(self._keys.run(job_id), state_json)

    def load_run_state(self, job_id: str) -> str:
        with self._gateway.reachable():
            raw = self._gateway.client.get(self._keys.run(job_id))
        if raw is None:
            raise JobError(
                "BEM-502", f"job {job_id} has no saved run state; it cannot resume (run it again)"
            )
        return text(raw)

    def save_snapshot(self, job_id: str, data: bytes) -> None:
        check_snapshot(job_id, data, self._gateway.snapshot_max_bytes)
        with self._gateway.reachable():
            self._gateway.client.set(self._keys.snapshot(job_id), data)

    def load_snapshot(self, job_id: str) -> bytes | None:
        with self._gateway.reachable():
            raw = self._gateway.client.get(self._keys.snapshot(job_id))
        return None if raw is None else as_bytes(raw)

    def drop_parked(self, job_id: str) -> None:
        with self._gateway.reachable():
            self._gateway.client.delete(self._keys.run(job_id), self._keys.snapshot(job_id))
