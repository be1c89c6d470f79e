"""The host's end of a container's attached stdin/stdout/stderr, framing undone by hand.

Without a TTY, Docker multiplexes stdout and stderr on one connection: each chunk is an
8-byte header (stream type, three zero bytes, big-endian payload length) and its payload.
Stdin goes the other way unframed. We read the socket directly, rather than through the SDK's
generators, so one tool call costs one ``sendall`` and as few ``recv`` calls as the reply
needs, with a deadline on each.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from typing import Any

__all__ = ["AttachedStream", "LineTooLong", "StreamClosed", "StreamTimeout"]

_HEADER = struct.Struct(">BxxxL")
_STDOUT, _STDERR = 1, 2
_RECV_BYTES = 1 << 16


class StreamClosed(Exception):
    """The container closed its end: the process exited or the container died."""


class StreamTimeout(Exception):
    """The deadline passed before a whole line arrived."""


class LineTooLong(Exception):
    """A line on stdout grew past the cap before its newline arrived."""


class AttachedStream:
    """Send bytes to the container's stdin; read its stdout line by line; keep stderr's tail."""

    def __init__(self, handle: Any, *, stderr_tail_bytes: int = 8192) -> None:
        # ``attach_socket`` returns a socket, or (for a UNIX socket) a SocketIO around one.
        # Keep the handle referenced: collecting it can close the connection underneath.
        self._handle = handle
        raw = getattr(handle, "_sock", handle)
        if not isinstance(raw, socket.socket):
            raise TypeError(f"cannot use an attach connection of type {type(raw).__name__}")
        self._sock: socket.socket = raw
        self._frames = bytearray()
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._stderr_cap = stderr_tail_bytes
        self._eof = False

    def send(self, data: bytes, *, deadline: float) -> None:
        self._sock.settimeout(_remaining(deadline))
        try:
            self._sock.sendall(data)
        except TimeoutError:
            raise StreamTimeout("the container did not take the request in time") from None
        except OSError as error:
            raise StreamClosed(f"the container's stdin is closed ({error})") from None

    def read_line(self, *, deadline: float, limit: int) -> bytes:
        """The next stdout line without its newline. Raises StreamTimeout, StreamClosed
        (with the stream drained, so ``stderr_tail`` is complete) or LineTooLong."""
        scanned = 0
        while True:
            end = self._stdout.find(b"\n", scanned)
            if end >= 0:
                line = bytes(self._stdout[:end])
                del self._stdout[: end + 1]
                return line
            if len(self._stdout) > limit:
                raise LineTooLong(f"a line from the container is over {limit} bytes")
            scanned = len(self._stdout)
            if self._eof:
                raise StreamClosed("the container closed its output")
            self._receive(deadline)

    def close_stdin(self) -> None:
        """Half-close: the container reads EOF on stdin, and can still write its last words."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)

    def drain(self, *, deadline: float) -> None:
        """Read until the container closes the stream or the deadline passes (for stderr)."""
        try:
            while not self._eof:
                self._receive(deadline)
        except StreamTimeout:
            pass

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace").strip()

    def close(self) -> None:
        self._sock.close()
        close = getattr(self._handle, "close", None)
        if close is not None:
            close()

    def _receive(self, deadline: float) -> None:
        self._sock.settimeout(_remaining(deadline))
        try:
            chunk = self._sock.recv(_RECV_BYTES)
        except TimeoutError:
            raise StreamTimeout("no reply from the container before the deadline") from None
        except OSError:
            chunk = b""
        if not chunk:
            self._eof = True
            return
        self._frames += chunk
        self._split_frames()

    def _split_frames(self) -> None:
        frames = self._frames
        offset = 0
        while len(frames) - offset >= _HEADER.size:
            kind, size = _HEADER.unpack_from(frames, offset)
            end = offset + _HEADER.size + size
            if len(frames) < end:
                break
            payload = frames[offset + _HEADER.size : end]
            if kind == _STDOUT:
                self._stdout += payload
            elif kind == _STDERR:
                self._stderr += payload
                del self._stderr[: -self._stderr_cap]
            offset = end
        del frames[:offset]


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise StreamTimeout("the deadline passed")
    return left
