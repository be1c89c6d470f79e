"""Where the deployment tests serve the upstream: the host's address on the default bridge,
read from the bridge's interface. An engine started moments before reports the default
bridge's IPAM config without a ``Gateway`` (it fills it in minutes later), so nothing may
depend on that field."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import threading
from typing import Any

import docker
import pytest

from bot.config import Settings
from harness.docker_bridge import bridge_address, bridge_interface, host_address
from sandbox.host.image import build_image


@pytest.fixture
def bridge() -> dict[str, Any]:
    client = docker.from_env()
    try:
        return dict(client.networks.get("bridge").attrs)
    finally:
        client.close()


def _ip_addr(interface: str) -> str:
    done = subprocess.run(
        ["ip", "-j", "-4", "addr", "show", interface], capture_output=True, text=True, check=True
    )
    (link,) = json.loads(done.stdout)
    return str(link["addr_info"][0]["local"])


def test_a_just_started_engines_bridge_without_a_gateway_still_gives_the_hosts_address(
    bridge: dict[str, Any],
) -> None:
    fresh = copy.deepcopy(bridge)
    for config in fresh["IPAM"]["Config"]:
        config.pop("Gateway", None)
    assert bridge_interface(fresh) == "docker0"
    assert host_address(fresh) == _ip_addr("docker0")
    # Nor is a stale Gateway read: the interface is the only source.
    fresh["IPAM"]["Config"] = [{"Subnet": "10.254.0.0/24", "Gateway": "10.254.0.1"}]
    assert host_address(fresh) == _ip_addr("docker0")


def test_a_network_without_a_bridge_name_is_the_engines_br_interface() -> None:
    named = {"Id": "0123456789abcdef", "Options": {}}
    assert bridge_interface(named) == "br-0123456789ab"
    with pytest.raises(OSError):
        host_address(named)  # no such interface here


def test_a_container_on_the_default_bridge_reaches_that_address_as_host_gateway() -> None:
    image = build_image(Settings())
    address = bridge_address()
    with socket.socket() as server:
        server.bind((address, 0))
        server.listen()
        port = server.getsockname()[1]

        def answer() -> None:
            connection, _ = server.accept()
            with connection:
                connection.sendall(b"host")

        answering = threading.Thread(target=answer, daemon=True)
        answering.start()
        probe = (
            "import socket; print(socket.gethostbyname('probe')); "
            f"print(socket.create_connection(('probe', {port}), timeout=10).recv(4).decode())"
        )
        done = subprocess.run(
            ["docker", "run", "--rm", "--network", "bridge", "--add-host", "probe:host-gateway",
             "--entrypoint", "python3", image.ref, "-c", probe],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        answering.join(timeout=10)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [address, "host"]
