"""Servers that answer too slowly for any read timeout to notice, for the forge clients'
total deadline: one that drips its status line a byte a second, and a stub reply whose
body drips."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from harness.stub_model import Exchange


@dataclass
class Dripping:
    """A server that answers each connection one byte a second, forever."""

    port: int
    stop: threading.Event


@contextlib.contextmanager
def dripping_server() -> Iterator[Dripping]:
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip(connection: socket.socket) -> None:
        with connection:
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" * 100:
                if stop.wait(1.0):
                    return
                try:
                    connection.sendall(bytes([byte]))
                except OSError:
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=drip, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield Dripping(listener.getsockname()[1], stop)
    finally:
        stop.set()
        listener.close()


@dataclass(frozen=True)
class DripBody:
    def respond(self, exchange: Exchange) -> None:
        exchange.start_chunked(200, {"Content-Type": "application/json"})
        for _ in range(30):
            exchange.chunk(b" ")
            exchange.wait(1.0)
