"""Which forge client the workers use for a ``[forges.<name>]`` table: the one its
``client_factory`` names; else the built-in client of its kind when it has credentials
(GitHub: ``app_id`` + ``private_key_file``, or ``token_file``; GitLab: ``token_file``); else
none, and what needs the forge's answer starts nothing (BEM-810).

A worker process keeps one built-in client per table, so a GitHub App's installation token
serves its hour instead of being made again for each event. It sits here, not in
``bot.forge.inbound.handler``, because the clients build on the inbound events: the
worker's task hands it to the handler."""

from __future__ import annotations

import threading
from collections.abc import Callable

from bot.config import ForgeConfig, ForgeKind
from bot.forge.clients.github_api import GitHubClient, github_client
from bot.forge.clients.gitlab_api import GitLabClient, gitlab_client
from bot.forge.inbound.handler import lookup_for
from bot.forge.inbound.lookups import ForgeLookup

_Client = GitHubClient | GitLabClient
_MAKERS: dict[ForgeKind, Callable[[str, ForgeConfig], _Client]] = {
    "github": github_client,
    "gitlab": gitlab_client,
}
_clients: dict[tuple[str, str], _Client] = {}
_lock = threading.Lock()


def client_for(name: str, config: ForgeConfig) -> ForgeLookup | None:
    if config.client_factory is not None:
        return lookup_for(name, config)
    if config.app_id is None and config.token_file is None:
        return None
    make = _MAKERS[config.kind]
    # Keyed by the whole table: a changed configuration gets a client of its own.
    key = (name, config.model_dump_json())
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = make(name, config)
        return client
