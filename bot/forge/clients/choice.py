"""Which forge client the workers use for a ``[forges.<name>]`` table: the one its
``client_factory`` names; else the built-in client of its kind when it has credentials
(GitHub: ``app_id`` + ``private_key_file``, or ``token_file``); else none, and what needs
the forge's answer starts nothing (BEM-810).

It sits here, not in ``bot.forge.inbound.handler``, because the clients build on the
inbound events: the worker's task hands it to the handler."""

from __future__ import annotations

from bot.config import ForgeConfig
from bot.forge.clients.github_api import github_client
from bot.forge.inbound.handler import lookup_for
from bot.forge.inbound.lookups import ForgeLookup


def client_for(name: str, config: ForgeConfig) -> ForgeLookup | None:
    if config.client_factory is not None:
        return lookup_for(name, config)
    if config.kind == "github" and (config.app_id is not None or config.token_file is not None):
        return github_client(name, config)
    return None
