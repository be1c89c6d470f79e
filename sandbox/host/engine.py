"""Reaching the Docker engine, and turning its failures into BEM codes.

The engine is found the way the ``docker`` CLI finds it: ``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``
and ``DOCKER_CERT_PATH`` from the worker's environment, else the local UNIX socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import docker
import requests
from docker.errors import DockerException, ImageNotFound

from bot.core.errors import BeamError

__all__ = ["connect", "engine_errors"]


def connect(*, timeout: float = 60.0) -> docker.DockerClient:
    """A client for the engine in the environment; BEM-400 when it does not answer."""
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except (DockerException, requests.RequestException) as error:
        raise BeamError("BEM-400", f"the Docker engine is unreachable: {error}") from None
    return client


@contextmanager
def engine_errors(code: str, doing: str) -> Iterator[None]:
    """Run an engine call: a lost connection is BEM-400, a missing image BEM-401, anything
    else the engine refuses is ``code``."""
    try:
        yield
    except ImageNotFound as error:
        message = (
            f"{doing}: the image is missing ({error.explanation}); run `riverbeam sandbox build`"
        )
        raise BeamError("BEM-401", message) from None
    except requests.ConnectionError as error:
        raise BeamError("BEM-400", f"{doing}: the Docker engine is unreachable: {error}") from None
    except (DockerException, requests.RequestException) as error:
        raise BeamError(code, f"{doing}: {error}") from None
