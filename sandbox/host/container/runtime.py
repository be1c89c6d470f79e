"""Which OCI runtime the engine runs a sandbox with (the ``sandbox.runtime`` setting).

``auto`` picks crun when the engine has it registered (``docker/engine-runtimes`` registers it
on provisioned machines): it starts a container in about half the time runc takes, with the
same hardening, which the container tests read back on both. Without crun, ``auto`` is the
engine's default runtime (runc). A runtime named explicitly must be registered with the
engine: BEM-411 otherwise, before anything is created.

The engine's runtimes are looked up once per engine and process; a name missing from that
list is looked up again before it is refused (the engine may have reloaded its settings).
"""

from __future__ import annotations

import threading

from docker.api import APIClient

from bot.core.errors import BeamError
from sandbox.host.engine import engine_errors

__all__ = ["AUTO", "PREFERRED_RUNTIME", "engine_runtimes", "resolve_runtime"]

AUTO = "auto"
PREFERRED_RUNTIME = "crun"

_lock = threading.Lock()
# Per engine address: the registered runtimes and the default one.
_known: dict[str, tuple[frozenset[str], str]] = {}


def engine_runtimes(api: APIClient, *, refresh: bool = False) -> tuple[frozenset[str], str]:
    """The runtimes the engine has registered, and its default."""
    key = str(api.base_url)
    with _lock:
        if not refresh and key in _known:
            return _known[key]
    with engine_errors("BEM-402", "asking the engine for its runtimes"):
        info = api.info()
    known = frozenset(info.get("Runtimes") or {}), str(info.get("DefaultRuntime") or "runc")
    with _lock:
        _known[key] = known
    return known


def resolve_runtime(api: APIClient, wanted: str) -> str:
    """The runtime to create a sandbox with, for the setting ``wanted``."""
    registered, default = engine_runtimes(api)
    if wanted == AUTO:
        return PREFERRED_RUNTIME if PREFERRED_RUNTIME in registered else default
    if wanted not in registered:
        registered, default = engine_runtimes(api, refresh=True)
    if wanted not in registered:
        names = ", ".join(sorted(registered)) or "none"
        raise BeamError(
            "BEM-411",
            f"sandbox.runtime is {wanted!r}, which the Docker engine has not registered (it has: "
            f"{names}); install it and register it (docker/engine-runtimes does this for crun), "
            "or set sandbox.runtime to 'auto'",
        )
    return wanted
