"""What an event asks Riverbeam to do: ``actions_for(event, forge, lookup)``, pure but for
the questions it puts to the forge through ``lookup`` (a ``ForgeLookup``: the commenter's
permission, a pull request's head and changed paths, an issue's thread).

==========================================  ============================================
event                                       action
==========================================  ============================================
``@riverbeam <request>`` on an issue or PR  an author job; the issue's text and thread in
                                            its request (``minimum.author``)
the configured label given to an issue      the same, from the issue's text
``@riverbeam address the review`` on a      an author job from the PR's head, its open
Riverbeam PR (head ``riverbeam/...``)       threads in the request (``minimum.address``)
``/riverbeam approve <id>``                 approve the push waiting under that approval
``/riverbeam refuse <id> <reason>``         refuse it (``minimum.decide``, both)
a PR opened, given commits, marked ready    a review job of its head (``review``, when a
                                            changed path matches ``review_paths``), and a
                                            commit-notes job (``commit_notes``)
==========================================  ============================================

A pull request from a fork gets the review only: no author job, no commit notes, no
"address the review" (BEM-808). A draft pull request is reviewed once it is marked ready.
A commenter below the command's minimum starts nothing and gets one short reply (BEM-807).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from bot.config import ForgeCommand, ForgeConfig, ForgeRepositoryConfig, Role
from bot.forge.inbound.forge_events import (
    CommentCreated,
    ForgeEvent,
    IssueLabeled,
    PullRequest,
    PullRequestChanged,
    Thread,
)
from bot.forge.inbound.lookups import ForgeLookup
from bot.forge.permissions import ForgePermission
from bot.store.models import MAX_REQUEST_CHARS, JobKind

ADDRESS = "address the review"
_DECISION = re.compile(r"^(approve|refuse)\s+([A-Za-z0-9._-]{1,100})(?:\s+(.*))?$", re.DOTALL)


class _ActionModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SubmitJob(_ActionModel):
    """A job for the job service to submit, as ``requester`` (``<forge>:<login>``) in the
    role the command maps to, on the one repository the event is about."""

    type: Literal["submit"] = "submit"
    kind: JobKind
    repo: str
    requester: str
    role: Role
    request: str = ""
    base: str | None = None
    branch: str | None = None
    range: str | None = None
    idempotency_key: str
    metadata: dict[str, JsonValue]


class DecideApproval(_ActionModel):
    type: Literal["decide"] = "decide"
    repo: str
    decider: str
    approve: bool
    approval_id: str
    reason: str
    comment_url: str


class Refused(_ActionModel):
    """Nothing starts, for a reason the thread may be told (``reply``, at most one)."""

    type: Literal["refused"] = "refused"
    code: str
    reason: str
    reply: str | None = None


class Nothing(_ActionModel):
    type: Literal["nothing"] = "nothing"
    reason: str


Action = Annotated[SubmitJob | DecideApproval | Refused | Nothing, Field(discriminator="type")]


def actions_for(
    event: ForgeEvent, forge: ForgeConfig, lookup: ForgeLookup | None, *, branch_prefix: str
) -> list[Action]:
    entry = forge.repository_for(event.repository)
    if entry is None:
        return [Nothing(reason=f"repository {event.repository} is not configured")]
    if isinstance(event, PullRequestChanged):
        return _pull_request(event, forge, entry, lookup)
    if isinstance(event, IssueLabeled):
        return [_labeled(event, entry, lookup)]
    return [_comment(event, entry, lookup, branch_prefix)]


# pull requests ------------------------------------------------------------------------


def _pull_request(
    event: PullRequestChanged,
    forge: ForgeConfig,
    entry: ForgeRepositoryConfig,
    lookup: ForgeLookup | None,
) -> list[Action]:
    pull = event.pull
    if pull.draft and event.action != "ready":
        return [Nothing(reason="a draft pull request: reviewed once it is marked ready")]
    actions: list[Action] = []
    if entry.review:
        actions.append(_review(event, forge, entry, lookup))
    if entry.commit_notes:
        if pull.from_fork:
            actions.append(_fork_refusal("commit notes"))
        else:
            actions.append(
                _submit(
                    event,
                    entry,
                    JobKind.COMMIT_NOTES,
                    role="ci",
                    range=f"{pull.base_ref}..{pull.head_ref}",
                    pull=pull,
                )
            )
    return actions or [Nothing(reason="neither review nor commit_notes is on")]


def _review(
    event: PullRequestChanged,
    forge: ForgeConfig,
    entry: ForgeRepositoryConfig,
    lookup: ForgeLookup | None,
) -> Action:
    pull = event.pull
    if entry.review_paths:
        if lookup is None:
            return _no_lookup("the changed paths")
        paths = lookup.changed_paths(event.repository, pull.number)
        if not any(fnmatch.fnmatchcase(p, g) for p in paths for g in entry.review_paths):
            return Nothing(reason="no changed path matches review_paths")
    # A fork's branch is not in the upstream: its head is read through the forge's own ref.
    branch = pull_ref(forge.kind, pull) if pull.from_fork else pull.head_ref
    return _submit(event, entry, JobKind.REVIEW, role="ci", branch=branch, pull=pull)


def pull_ref(kind: str, pull: PullRequest) -> str:
    if kind == "gitlab":
        return f"refs/merge-requests/{pull.number}/head"
    return f"refs/pull/{pull.number}/head"


# labels and comments ------------------------------------------------------------------


def _labeled(
    event: IssueLabeled, entry: ForgeRepositoryConfig, lookup: ForgeLookup | None
) -> Action:
    if entry.label is None or entry.label not in event.labels:
        return Nothing(reason="no label that starts work was given")
    if event.thread.kind != "issue":
        return Nothing(reason="a label on a pull request starts nothing")
    return _author(event, entry, lookup, None)


def _comment(
    event: CommentCreated, entry: ForgeRepositoryConfig, lookup: ForgeLookup | None, prefix: str
) -> Action:
    text = event.body.strip()
    word = entry.command
    slash = "/" + word.removeprefix("@")
    first = text.split(None, 1)[0].lower() if text else ""
    if first == slash.lower():
        return _decision(event, entry, lookup, text[len(slash) :].strip())
    if first != word.lower():
        return Nothing(reason=f"the comment does not start with {word} or {slash}")
    asked = text[len(word) :].strip()
    if not asked:
        return _unknown(f"{word} with nothing after it: say what to do")
    if asked.lower().startswith(ADDRESS):
        return _address(event, entry, lookup, prefix, asked)
    if event.thread.kind == "pull_request":
        pull = _pull_of(event, lookup)
        if isinstance(pull, Refused):
            return pull
        if pull.from_fork:
            return _fork_refusal("author work")
    return _author(event, entry, lookup, asked)


def _pull_of(event: CommentCreated, lookup: ForgeLookup | None) -> PullRequest | Refused:
    """The pull request a comment is on: from the delivery, else from the forge (GitHub's
    conversation comments do not say where the pull request comes from)."""
    if event.pull is not None:
        return event.pull
    if lookup is None:
        return _no_lookup("the pull request")
    return lookup.pull_request(event.repository, event.thread.number)


def _author(
    event: CommentCreated | IssueLabeled,
    entry: ForgeRepositoryConfig,
    lookup: ForgeLookup | None,
    asked: str | None,
) -> Action:
    """An author job from an issue (or a pull request's conversation), its text and thread
    in the request, for someone with ``minimum.author``."""
    refused = _permitted(event, entry, lookup, "author")
    if refused is not None:
        return refused
    request = _request(event.thread, asked, _thread_comments(event, lookup))
    return _submit(event, entry, JobKind.AUTHOR, role="submitter", request=request)


def _decision(
    event: CommentCreated, entry: ForgeRepositoryConfig, lookup: ForgeLookup | None, rest: str
) -> Action:
    found = _DECISION.match(rest)
    if found is None:
        return _unknown(f"{entry.command.replace('@', '/')} approve <id> | refuse <id> <reason>")
    verb, approval_id, reason = found.group(1), found.group(2), (found.group(3) or "").strip()
    if verb == "refuse" and not reason:
        return _unknown("a refusal needs a reason: /riverbeam refuse <id> <reason>")
    refused = _permitted(event, entry, lookup, "decide")
    if refused is not None:
        return refused
    return DecideApproval(
        repo=entry.repository,
        decider=requester(event),
        approve=verb == "approve",
        approval_id=approval_id,
        reason=reason,
        comment_url=event.url,
    )


def _address(
    event: CommentCreated,
    entry: ForgeRepositoryConfig,
    lookup: ForgeLookup | None,
    prefix: str,
    asked: str,
) -> Action:
    if event.thread.kind != "pull_request":
        return _unknown(f"'{ADDRESS}' is for a pull request Riverbeam opened")
    pull = _pull_of(event, lookup)
    if isinstance(pull, Refused):
        return pull
    if pull.from_fork:
        return _fork_refusal(f"'{ADDRESS}'")
    if not pull.head_ref.startswith(prefix):
        return _unknown(f"'{ADDRESS}' is for a pull request from a {prefix}<job-id> branch")
    refused = _permitted(event, entry, lookup, "address")
    if refused is not None:
        return refused
    threads = [] if lookup is None else list(lookup.review_threads(event.repository, pull.number))
    review = "\n".join(
        f"@{t.author} on {t.path or 'the change'}{'' if t.line is None else f':{t.line}'}: {t.body}"
        for t in threads
    )
    comments = _thread_comments(event, lookup)
    request = _request(event.thread, asked, "\n".join(filter(None, [review, comments])))
    return _submit(
        event,
        entry,
        JobKind.AUTHOR,
        role="submitter",
        request=request,
        branch=pull.head_ref,
        pull=pull,
        threads=[t.id for t in threads],
    )


# checks and building ------------------------------------------------------------------


def _permitted(
    event: CommentCreated | IssueLabeled,
    entry: ForgeRepositoryConfig,
    lookup: ForgeLookup | None,
    command: ForgeCommand,
) -> Refused | None:
    if lookup is None:
        return _no_lookup("the commenter's permission")
    need = ForgePermission.named(entry.minimum[command])
    has = lookup.permission(event.repository, event.actor)
    if has >= need:
        return None
    return Refused(
        code="BEM-807",
        reason=f"{event.actor} has {has.label} permission; {command} needs {need.label}",
        reply=f"@{event.actor}: this needs {need.label} permission on {event.repository} "
        f"(you have {has.label}), so nothing was started.",
    )


def _no_lookup(what: str) -> Refused:
    return Refused(code="BEM-810", reason=f"no forge client to ask for {what}")


def _fork_refusal(what: str) -> Refused:
    return Refused(
        code="BEM-808",
        reason=f"a pull request from a fork gets a review only, not {what}",
        reply=f"A pull request from a fork gets a review only; {what} is not run on it.",
    )


def _unknown(hint: str) -> Refused:
    return Refused(code="BEM-809", reason=hint, reply=f"Not a command Riverbeam knows: {hint}.")


def requester(event: ForgeEvent) -> str:
    """Who a job or decision from the forge is recorded as: ``<forge>:<login>``."""
    return f"{event.forge}:{event.actor}"


def _thread_comments(event: CommentCreated | IssueLabeled, lookup: ForgeLookup | None) -> str:
    if lookup is None:
        return ""
    comments = lookup.thread(event.repository, event.thread.number, event.thread.kind)
    return "\n".join(f"@{c.author}: {c.body}" for c in comments)


def _request(thread: Thread, asked: str | None, comments: str) -> str:
    parts = [asked] if asked else []
    parts.append(
        f"From {thread.kind.replace('_', ' ')} #{thread.number}, {thread.title!r} ({thread.url}):"
    )
    if thread.body:
        parts.append(thread.body)
    if comments:
        parts.extend(["The thread:", comments])
    text = "\n\n".join(parts)
    return text if len(text) <= MAX_REQUEST_CHARS else text[: MAX_REQUEST_CHARS - 1] + "…"


def thread_of(event: ForgeEvent) -> Thread:
    """The issue or pull request the event is on."""
    if isinstance(event, PullRequestChanged):
        return Thread.of_pull(event.pull)
    return event.thread


def _submit(
    event: ForgeEvent,
    entry: ForgeRepositoryConfig,
    kind: JobKind,
    *,
    role: Role,
    pull: PullRequest | None = None,
    request: str = "",
    base: str | None = None,
    branch: str | None = None,
    range: str | None = None,
    threads: list[str] | None = None,
) -> SubmitJob:
    thread = thread_of(event)
    forge: dict[str, JsonValue] = {
        "name": event.forge,
        "repository": event.repository,
        "delivery": event.delivery,
        "thread": thread.kind,
        "number": thread.number,
        "url": thread.url,
        "actor": event.actor,
    }
    if pull is not None:
        forge.update(head_sha=pull.head_sha, head_ref=pull.head_ref, base_ref=pull.base_ref)
        forge["from_fork"] = pull.from_fork
    if threads:
        # The review threads an "address the review" job answers once its push lands.
        forge["threads"] = list(threads)
    return SubmitJob(
        kind=kind,
        repo=entry.repository,
        requester=requester(event),
        role=role,
        idempotency_key=f"forge:{event.forge}:{event.delivery}:{kind.value}",
        metadata={"forge": forge},
        request=request,
        base=base,
        branch=branch,
        range=range,
    )
