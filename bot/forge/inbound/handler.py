"""The workers' side of a forge event (the ``riverbeam.handle_forge_event`` task): the
actions ``actions_for`` names are carried out through the job service, as the forge user,
and what came of them is written over the delivery's claim in Redis.

- a job: ``JobService.submit`` as ``<forge>:<login>`` in the command's role, limited to the
  event's repository, with an idempotency key made of the delivery id and the kind, so a
  task that runs twice (a redelivered message) makes one job;
- an outage of the store (BEM-504) is not an outcome: it propagates, and the task is
  retried;
- a decision: the pending approval of that repository with that id is looked up (none is
  BEM-604, the approval id must be the one waiting), then ``JobService.decide`` as a
  reviewer, bound to that approval; the store holds the self-approval rule (BEM-602), and
  the decision's comment carries the reason and the comment's URL.

Posting replies and status comments back to the forge is the forge clients' part: the
outcome keeps each ``reply`` for them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from bot.config import ForgeConfig, Settings
from bot.core.errors import BeamError
from bot.core.factories import load_factory
from bot.forge.inbound.actions import (
    Action,
    DecideApproval,
    Refused,
    SubmitJob,
    actions_for,
    thread_of,
)
from bot.forge.inbound.deliveries import Deliveries
from bot.forge.inbound.forge_events import FORGE_EVENT, ForgeEvent
from bot.forge.inbound.lookups import ForgeLookup
from bot.service.access import Principal
from bot.service.jobs import JobService
from bot.store.keys import digest
from bot.store.models import DecisionBinding, ForgeThreadRef, JobSpec, OutboxEntry

log = logging.getLogger(__name__)

LookupFactory = Callable[[str, ForgeConfig], ForgeLookup]


class ActionResult(BaseModel):
    """One action and what came of it: the job made or decided, or the error."""

    model_config = ConfigDict(frozen=True)

    action: dict[str, JsonValue]
    job_id: str | None = None
    error: dict[str, str] | None = None


class EventOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    forge: str
    delivery: str
    event: str
    results: list[ActionResult]
    replies: int = Field(default=0, description="comments queued for the thread (the outbox)")


def lookup_for(name: str, config: ForgeConfig) -> ForgeLookup | None:
    """The forge lookups ``client_factory`` names, or None when it names none (the worker's
    task falls back to the built-in clients, ``bot.forge.clients.choice``)."""
    if config.client_factory is None:
        return None
    setting = f"forges.{name}.client_factory"
    made = load_factory(config.client_factory, setting=setting, code="BEM-810")
    return cast(LookupFactory, made)(name, config)


def _replies(
    event: ForgeEvent, config: ForgeConfig, actions: list[Action], results: list[ActionResult]
) -> list[OutboxEntry]:
    """A comment on the event's thread for each action that has something to tell it: a
    refusal's reply, or the error an action met (BEM-604 for an approval id that is not
    the one waiting, BEM-602 for the requester's own approve). Each one's id comes from the
    delivery and the action, so a task that runs twice queues it once."""
    thread = thread_of(event)
    entry = config.repository_for(event.repository)
    target = ForgeThreadRef(
        forge=event.forge, repository=event.repository, number=thread.number, thread=thread.kind
    )
    replies = []
    for index, (action, result) in enumerate(zip(actions, results, strict=True)):
        body = action.reply if isinstance(action, Refused) else None
        if result.error is not None:
            body = f"@{event.actor}: {result.error['code']}: {result.error['message']}"
        if body is None:
            continue
        replies.append(
            OutboxEntry(
                id=digest(f"{event.forge}:{event.delivery}:{index}")[:32],
                channel="forge_comment",
                repo="" if entry is None else entry.repository,
                job_id=result.job_id,
                event="forge.reply",
                forge=target,
                payload={"body": body},
                created_at=datetime.now(UTC),
            )
        )
    return replies


class ForgeEventHandler:
    def __init__(
        self,
        settings: Settings,
        service: JobService,
        deliveries: Deliveries,
        lookups: Callable[[str, ForgeConfig], ForgeLookup | None] = lookup_for,
    ) -> None:
        self.settings = settings
        self.service = service
        self.deliveries = deliveries
        self.lookups = lookups

    def handle(self, document: dict[str, Any]) -> EventOutcome:
        event = FORGE_EVENT.validate_python(document)
        config = self.settings.forges.get(event.forge)
        if config is None:
            results = [
                ActionResult(action={"type": "nothing", "reason": "the forge is not configured"})
            ]
        else:
            actions = actions_for(
                event,
                config,
                self.lookups(event.forge, config),
                branch_prefix=self.settings.workspaces.branch_prefix,
            )
            results = [self._apply(action) for action in actions]
            replies = _replies(event, config, actions, results)
            for reply in replies:
                self.service.store.outbox.add(reply)
        outcome = EventOutcome(
            forge=event.forge,
            delivery=event.delivery,
            event=event.type,
            results=results,
            replies=len(replies) if config is not None else 0,
        )
        self.deliveries.record(event.forge, event.delivery, outcome.model_dump_json())
        # What started, or why not; never the request text (issue bodies, comments).
        summary = [r.job_id or (r.error or {}).get("code") or r.action.get("code") for r in results]
        log.info("forge %s delivery %s (%s): %s", event.forge, event.delivery, event.type, summary)
        return outcome

    def _apply(self, action: Action) -> ActionResult:
        shown = cast(dict[str, JsonValue], action.model_dump(mode="json"))
        try:
            if isinstance(action, SubmitJob):
                return ActionResult(action=shown, job_id=self._submit(action))
            if isinstance(action, DecideApproval):
                return ActionResult(action=shown, job_id=self._decide(action))
        except BeamError as error:
            if error.code == "BEM-504":
                # The store is unreachable: the task is retried, and the idempotency key
                # of each job makes the retry submit nothing twice.
                raise
            return ActionResult(action=shown, error=error.to_dict())
        return ActionResult(action=shown)

    def _submit(self, action: SubmitJob) -> str:
        who = Principal(name=action.requester, role=action.role, repos=frozenset({action.repo}))
        spec = JobSpec(
            kind=action.kind,
            repo=action.repo,
            request=action.request,
            base=action.base,
            branch=action.branch,
            range=action.range,
            requested_by=action.requester,
            metadata=action.metadata,
        )
        return self.service.submit(who, spec, idempotency_key=action.idempotency_key).id

    def _decide(self, action: DecideApproval) -> str:
        waiting = [
            approval
            for approval in self.service.store.approvals.pending(repo=action.repo)
            if approval.id == action.approval_id
        ]
        if not waiting:
            raise BeamError(
                "BEM-604",
                f"no push waits under approval {action.approval_id} on {action.repo}: "
                "decide the approval the status comment shows now",
            )
        approval = waiting[0]
        who = Principal(name=action.decider, role="reviewer", repos=frozenset({action.repo}))
        comment = f"{action.reason} ({action.comment_url})".strip()
        self.service.decide(
            who,
            approval.job_id,
            approve=action.approve,
            comment=comment,
            binding=DecisionBinding(
                approval_id=approval.id,
                commit_sha=approval.commit_sha,
                diff_digest=approval.diff_digest,
            ),
        )
        return approval.job_id
