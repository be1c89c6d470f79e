"""What the job commands share: the console, the job service of the settings (its store and
Celery app), who is acting, and how an invalid request is reported."""

from __future__ import annotations

import getpass
import os
import pwd
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from bot.config import Settings, load_settings

if TYPE_CHECKING:
    # Celery and redis load only when a command talks to the service.
    from celery import Celery

    from bot.service.access import Principal
    from bot.service.jobs import JobService
    from bot.store.store import JobStore

# Long lines (diffs, paths) stay whole when the output is a pipe or a file; a terminal
# gets its own width.
PIPE_WIDTH = 160


def console() -> Console:
    """A console on stdout; plain text without colour when it is not a terminal, so scripts
    and tests read exactly what a person sees. Markup is off: paths, requests and pages
    print as they are, and styles come only from ``Text``."""
    out = Console(highlight=False, markup=False)
    if not out.is_terminal and not os.environ.get("COLUMNS"):
        out.width = PIPE_WIDTH
    return out


Item = TypeVar("Item", bound=BaseModel)


def print_listing(
    items: Sequence[Item], *, as_json: bool, empty: str, table: Callable[[list[Item]], Table]
) -> Console | None:
    """A listing as JSON lines (one document each), or as a table, or ``empty`` when there is
    nothing; the console when it printed a table, for what the caller adds under it."""
    if as_json:
        for item in items:
            print(item.model_dump_json())
        return None
    out = console()
    if not items:
        out.print(empty)
        return None
    out.print(table(list(items)))
    return out


def acting_as(name: str | None) -> str:
    """Who submits or decides: ``--as``, else the login name. The API adds tokens; the CLI
    talks to the store directly and takes the name it is given, so a decision also records
    ``os_account()`` beside it."""
    if name:
        return name
    try:
        return os.environ.get("USER") or getpass.getuser()
    except OSError:  # no login name and no passwd entry (a bare container)
        return "anonymous"


def operator(name: str | None) -> Principal:
    """The CLI's caller to the job service: ``acting_as(name)``, an admin on every
    repository (whoever reaches the store's Redis could do as much), held to the same
    rules as an API caller otherwise (self-approval, job states)."""
    from bot.service.access import Principal

    return Principal.operator(acting_as(name))


def os_account() -> str:
    """The operating-system account running this process, from its real uid (not from the
    environment, which the caller controls): what the CLI records beside a claimed name."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid with no passwd entry (a bare container)
        return f"uid {uid}"


@dataclass
class Services:
    """The job service, its store and Celery app, of one set of settings, for one command."""

    settings: Settings
    store: JobStore
    app: Celery
    service: JobService


@contextmanager
def services(settings: Settings | None = None) -> Iterator[Services]:
    """A store and an app for ``settings`` (default: the process's configuration). The app
    is made per command, not cached, so a process that runs commands for several
    configurations (the tests, the demo) never sends to the wrong broker."""
    from bot.jobs.celery_app import create_app
    from bot.service.access import TokenRegistry
    from bot.service.jobs import JobService
    from bot.service.queues import TaskQueues
    from bot.store.store import JobStore
    from sandbox.host.container.reaper import reap_after_cancel

    settings = settings or load_settings()
    store = JobStore.for_settings(settings)
    app = create_app(settings)
    service = JobService(
        settings,
        store,
        TaskQueues(app),
        TokenRegistry(settings.api.tokens),
        after_cancel=reap_after_cancel(store.gateway.deployment),
    )
    try:
        yield Services(settings, store, app, service)
    finally:
        app.close()


def scripted_model_note(settings: Settings) -> str | None:
    """What to say when this configuration's jobs run on the scripted demo model, so nobody
    mistakes its answers for a language model's; None for any other model."""
    from bot.demo import DEMO_MODEL_FACTORY, SCRIPTED_LABEL

    if settings.model.factory != DEMO_MODEL_FACTORY:
        return None
    return (
        f"model: {SCRIPTED_LABEL} (model.factory = {DEMO_MODEL_FACTORY!r}; "
        "remove it and set BEAM_API_KEY for a live model)"
    )
