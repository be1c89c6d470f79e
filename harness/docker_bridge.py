"""The host's address on a Docker bridge network: where that network's containers reach the
host, and where a test serves what they must reach (``host-gateway`` means the same address).

Read from the bridge's own interface, not from the network's IPAM config: an engine started
moments before reports the default bridge's subnet without a ``Gateway`` (it fills it in
later), so the config cannot be relied on.
"""

from __future__ import annotations

import fcntl
import socket
import struct
from collections.abc import Mapping

import docker

_SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's IPv4 address


def bridge_interface(network: Mapping[str, object]) -> str:
    """The Linux interface of a bridge network, from its inspect document: the name the
    engine was told (``com.docker.network.bridge.name``, docker0 for the default bridge),
    else the engine's own ``br-`` and the id's first twelve characters."""
    options = network.get("Options") or {}
    assert isinstance(options, Mapping)
    named = options.get("com.docker.network.bridge.name")
    if isinstance(named, str) and named:
        return named
    return f"br-{str(network['Id'])[:12]}"


def interface_address(interface: str) -> str:
    """The IPv4 address of a local interface; ``OSError`` when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("256s", interface.encode()[:15])
        return socket.inet_ntoa(fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)[20:24])


def host_address(network: Mapping[str, object]) -> str:
    """The host's address on a bridge network, from its inspect document and the interface."""
    return interface_address(bridge_interface(network))


def bridge_address(network: str = "bridge") -> str:
    """The host's address on the engine's network ``network`` (the default bridge unless
    named)."""
    client = docker.from_env()
    try:
        return host_address(client.networks.get(network).attrs)
    finally:
        client.close()
