"""What a test process has of its own when the suite runs in several (pytest-xdist workers,
``tests/run``'s parallel pass), beside other test runs on the same machine and engine.

``own(name)`` makes a fixed name (a job id, and so a container's name) this process's:
``name-gw1-4711``. ``free_port()`` hands out loopback ports from a block of the worker's
own, below the kernel's ephemeral range, each once per process: so no two workers, and no
connection's ephemeral source port, can take the port a server is about to bind between
the probe and the bind. ``one_at_a_time(name)`` is a lock the test processes of this
machine take turns on (the sandbox image's build: two workers would both build it).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Below the ephemeral range (32768-60999 on Linux), which bind(0) and connect() draw from.
_FIRST_PORT = 20000
_BLOCK = 400
_BLOCKS = 30

IMAGE_BUILD = "sandbox-image-build"
"""The lock ``build_image`` is called under: one build of the image at a time."""


def worker() -> str:
    """This process's xdist worker id (``gw0``, ``gw1``, ...), or ``main`` outside xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def own(name: str) -> str:
    """``name`` made this test process's own (``job-1`` -> ``job-1-gw0-4711``); still a
    valid job id for a valid ``name`` (letters, digits, '-')."""
    return f"{name}-{worker()}-{os.getpid()}"


def _block() -> range:
    """This worker's ports: ``gwN`` has block N + 1 (wrapping), a run outside xdist block 0."""
    name = worker()
    index = int(name[2:]) % (_BLOCKS - 1) + 1 if name.startswith("gw") else 0
    start = _FIRST_PORT + index * _BLOCK
    return range(start, start + _BLOCK)


def _rotated() -> list[int]:
    """The block, starting at a place of this process's own: two runs outside xdist (both
    in block 0) rarely probe the same port at the same time."""
    ports = list(_block())
    start = os.getpid() % len(ports)
    return ports[start:] + ports[:start]


_candidates = itertools.cycle(_rotated())


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nothing is bound to, the next of this worker's block; after the
    whole block, ports come round again (a server that still holds one is skipped)."""
    for _ in range(_BLOCK):
        port = next(_candidates)
        if _free(port):
            return port
    raise RuntimeError(f"no free loopback port in {_block()} (worker {worker()})")


@contextmanager
def one_at_a_time(name: str) -> Iterator[None]:
    """Hold the ``flock`` on ``<tmp>/riverbeam-<name>.lock`` for the block: every test
    process on this machine that asks for ``name`` waits its turn."""
    path = Path(tempfile.gettempdir()) / f"riverbeam-{name}.lock"
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
