"""What the MCP tools act on: the job service in the API process (``ServiceBackend``, for
``/mcp``), or the HTTP API with a token (``ApiBackend``, for ``riverbeam mcp``). Both answer
with the API's JSON views, and fail with the API's ``BeamError``: a tool reads the same
whichever transport carries it.

Neither has a decision: approving or refusing a push is for a person, through the API's
approval endpoints, the web pages or the CLI (docs/mcp.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import anyio
import httpx
from pydantic import ValidationError

from bot.core import jsonlimits
from bot.core.errors import CODES, BeamError
from bot.core.frames import frame_adapter
from bot.service.access import Principal
from bot.service.jobs import JobService
from bot.service.schemas import ApprovalView, JobRequest, JobView
from bot.store.models import JobEvent, JobKind, JobState, invalid_request
from skills import builtin_skills

Json = dict[str, Any]
T = TypeVar("T")


class Backend(Protocol):
    async def submit(self, body: Json, idempotency_key: str | None) -> Json: ...
    async def job(self, job_id: str) -> Json: ...
    async def jobs(self, filters: Json) -> Json: ...
    async def approvals(self, repo: str | None) -> Json: ...
    async def cancel(self, job_id: str) -> Json: ...
    async def log(self, job_id: str, after: str = "0") -> Json: ...


def job_request(body: Json) -> JobRequest:
    """The API's request model, so a tool's arguments are checked as a POST body is, with
    the API's codes: BEM-710 for JSON over a limit, else BEM-705, naming each field."""
    try:
        return JobRequest.model_validate(body)
    except ValidationError as error:
        over = any(item["type"] == jsonlimits.ERROR_TYPE for item in error.errors())
        raise BeamError("BEM-710" if over else "BEM-705", invalid_request(error).message) from None


def _entry(event: JobEvent) -> Json:
    if event.frame is not None:
        return {"id": event.id, "frame": frame_adapter.dump_python(event.frame, mode="json")}
    return {"id": event.id, "end": event.end.value if event.end else None}


@dataclass
class ServiceBackend:
    """The job service as ``who``: each call runs in a worker thread (the store is
    synchronous), with the role and scope checks of the service."""

    service: JobService
    who: Principal

    async def _run(self, call: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(call)

    async def submit(self, body: Json, idempotency_key: str | None) -> Json:
        request = job_request(body)
        record = await self._run(
            lambda: self.service.submit(self.who, request, idempotency_key=idempotency_key)
        )
        return JobView.of(record).model_dump(mode="json")

    async def job(self, job_id: str) -> Json:
        def read() -> Json:
            record = self.service.job(self.who, job_id)
            approval = self.service.store.approvals.get(record.id)
            return {
                "job": JobView.of(record, approval).model_dump(mode="json"),
                "approval": None
                if approval is None
                else ApprovalView.of(approval).model_dump(mode="json"),
            }

        return await self._run(read)

    async def jobs(self, filters: Json) -> Json:
        def read() -> Json:
            requested_by = filters.get("requested_by")
            if filters.get("mine"):
                if requested_by not in (None, self.who.name):
                    raise BeamError("BEM-705", "mine=true and requested_by name different people")
                requested_by = self.who.name
            state, kind = filters.get("state"), filters.get("kind")
            found = self.service.jobs(
                self.who,
                state=None if state is None else JobState(state),
                kind=None if kind is None else JobKind(kind),
                repo=filters.get("repo"),
                requested_by=requested_by,
                cursor=filters.get("cursor"),
                limit=filters.get("limit", 50),
            )
            return {
                "items": [JobView.of(r).model_dump(mode="json") for r in found.records],
                "next_cursor": found.next_cursor,
                "unreadable": found.unreadable,
            }

        return await self._run(read)

    async def approvals(self, repo: str | None) -> Json:
        found = await self._run(lambda: self.service.approvals(self.who, repo=repo))
        return {"items": [ApprovalView.of(a).model_dump(mode="json") for a in found]}

    async def cancel(self, job_id: str) -> Json:
        def cancel() -> Json:
            record = self.service.cancel(self.who, job_id)
            approval = self.service.store.approvals.get(record.id)
            return JobView.of(record, approval).model_dump(mode="json")

        return await self._run(cancel)

    async def log(self, job_id: str, after: str = "0") -> Json:
        record, events = await self._run(lambda: self.service.log(self.who, job_id, after=after))
        return {
            "job_id": record.id,
            "state": record.state.value,
            "events": [_entry(event) for event in events],
        }


async def skills_catalogue() -> Json:
    """The built-in skills as ``GET /v1/skills`` lists them (name, description, allowlist)."""
    return {
        "items": [
            {
                "name": skill.name,
                "description": skill.description,
                "tools": sorted(skill.tools),
                "confirm_first": skill.confirm_first,
            }
            for skill in builtin_skills()
        ]
    }


@dataclass
class ApiBackend:
    """The HTTP API at ``client.base_url``, as the holder of the client's bearer token."""

    client: httpx.AsyncClient

    async def _call(self, method: str, path: str, **kw: Any) -> Json:
        try:
            reply = await self.client.request(method, path, **kw)
        except httpx.HTTPError as error:
            raise BeamError("BEM-720", f"the Riverbeam API did not answer: {error}") from None
        _raise_problem(reply)
        answer: Json = reply.json()
        return answer

    async def submit(self, body: Json, idempotency_key: str | None) -> Json:
        headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        return await self._call("POST", "/v1/jobs", json=body, headers=headers)

    async def job(self, job_id: str) -> Json:
        job = await self._call("GET", f"/v1/jobs/{_segment(job_id)}")
        approval = None
        if job.get("approval") is not None:
            detail = await self._call("GET", f"/v1/approvals/{_segment(job_id)}")
            approval = detail["current"]
        return {"job": job, "approval": approval}

    async def jobs(self, filters: Json) -> Json:
        params = {key: value for key, value in filters.items() if value is not None}
        return await self._call("GET", "/v1/jobs", params=params)

    async def approvals(self, repo: str | None) -> Json:
        return await self._call("GET", "/v1/approvals", params={"repo": repo} if repo else {})

    async def cancel(self, job_id: str) -> Json:
        return await self._call("POST", f"/v1/jobs/{_segment(job_id)}/cancel")

    async def log(self, job_id: str, after: str = "0") -> Json:
        """The event stream after entry ``after``, read up to its end or its first
        keep-alive: the server sends one only once it delivered every event stored so far."""
        events: list[Json] = []
        state = None
        try:
            path = f"/v1/jobs/{_segment(job_id)}/events"
            async with self.client.stream("GET", path, params={"after": after}) as reply:
                if reply.status_code != 200:
                    await reply.aread()
                    _raise_problem(reply)
                async for kind, entry, data in _sse_until_caught_up(reply.aiter_lines()):
                    if kind == "frame":
                        events.append({"id": entry, "frame": json.loads(data)})
                    elif kind == "end":
                        state = json.loads(data)["state"]
                        events.append({"id": entry, "end": state})
                    elif kind == "error":
                        problem = json.loads(data)
                        raise BeamError(problem["code"], problem["message"])
        except httpx.HTTPError as error:
            raise BeamError("BEM-720", f"the Riverbeam API did not answer: {error}") from None
        if state is None:
            state = (await self._call("GET", f"/v1/jobs/{_segment(job_id)}"))["state"]
        return {"job_id": job_id, "state": state, "events": events}

    async def skills(self) -> Json:
        return await self._call("GET", "/v1/skills")


async def _sse_until_caught_up(
    lines: AsyncIterator[str],
) -> AsyncIterator[tuple[str, str | None, str]]:
    """(event, id, data) of each server-sent event, until the stream ends or its first
    comment line (a keep-alive)."""
    kind, entry, data = "", None, ""
    async for line in lines:
        if line.startswith(":"):
            return
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            kind = value
        elif field == "id":
            entry = value
        elif field == "data":
            data = value
        elif line == "" and kind:
            yield kind, entry, data
            kind, entry, data = "", None, ""


def _segment(job_id: str) -> str:
    # A job id is one path segment: an id with a slash is nobody's job, not another route.
    return quote(job_id, safe="")


def _raise_problem(reply: httpx.Response) -> None:
    """The API's problem document as the ``BeamError`` it carried (BEM-720 when the answer
    is not one: a proxy's page, say)."""
    if reply.is_success:
        return
    try:
        problem = reply.json()
        code, detail = problem["code"], problem["detail"]
    except (ValueError, KeyError, TypeError):
        raise BeamError(
            "BEM-720", f"the Riverbeam API answered {reply.status_code} without a problem document"
        ) from None
    if code not in CODES:
        raise BeamError("BEM-720", f"the Riverbeam API answered an unknown code {code!r}")
    raise BeamError(code, detail)
