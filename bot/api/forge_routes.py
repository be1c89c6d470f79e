"""``POST /webhooks/{forge}``: a forge's webhook deliveries (``bot.forge.inbound.door``).

The order is what makes it safe and cheap: the forge must be configured; a client address
that sent too many bad signatures is refused before its body is read (``AuthThrottle``,
BEM-712); the signature or token is checked on the raw body (BEM-800, counted against the
address); a signed delivery takes a token of its forge's bucket (BEM-806); only then is the
body parsed, its delivery id claimed and its event queued, in a worker thread, since Redis
answers there. Queued: 202; a duplicate or an event that asks nothing: 200.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from bot.core.errors import BeamError
from bot.forge.inbound.door import DoorAnswer, WebhookDoor
from bot.http.limits import AuthThrottle, DeliveryThrottle, client_address
from bot.http.problems import problem_response, problem_responses

router = APIRouter(prefix="/webhooks", tags=["forges"])


@router.post(
    "/{forge}",
    status_code=202,
    response_model=DoorAnswer,
    summary="Receive a forge's webhook delivery",
    responses={
        200: {"model": DoorAnswer, "description": "a duplicate, or an event that asks nothing"},
        **problem_responses(400, 401, 403, 404, 413, 422, 429, 503),
    },
)
async def webhook(
    forge: Annotated[str, Path(max_length=100, description="the [forges.<name>] table")],
    request: Request,
) -> JSONResponse:
    """Signed by the forge (GitHub ``X-Hub-Signature-256``, GitLab ``X-Gitlab-Token``); no
    bearer token. Answers at once: the work is done by a worker."""
    door: WebhookDoor = request.app.state.webhook_door
    config = door.forge(forge)
    throttle: AuthThrottle = request.app.state.auth_throttle
    client = client_address(request)
    throttle.check(client)
    body = await request.body()
    try:
        door.verify(config, request.headers, body)
    except BeamError as error:
        if error.code == "BEM-800":
            throttle.failed(client)
        raise
    deliveries: DeliveryThrottle = request.app.state.delivery_throttle
    wait = deliveries.take(forge, config.deliveries_per_minute)
    if wait:
        flood = BeamError(
            "BEM-806",
            f"more than {config.deliveries_per_minute} deliveries a minute for forge "
            f"{forge!r}; try again in {wait} s",
        )
        return problem_response(request, flood, headers={"Retry-After": str(wait)})
    answer = await run_in_threadpool(door.accept, forge, config, request.headers, body)
    status = 202 if answer.outcome == "queued" else 200
    return JSONResponse(answer.model_dump(exclude_none=True), status_code=status)
