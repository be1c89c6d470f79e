"""Docker's stdout/stderr framing, undone by ``AttachedStream``, over a local socket pair."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest

from sandbox.host.container.attach import AttachedStream, LineTooLong, StreamClosed, StreamTimeout


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", kind, len(payload)) + payload


@pytest.fixture
def pair() -> Iterator[tuple[AttachedStream, socket.socket]]:
    ours, engine = socket.socketpair()
    stream = AttachedStream(ours)
    yield stream, engine
    stream.close()
    engine.close()


def soon() -> float:
    return time.monotonic() + 2


def test_lines_are_reassembled_across_frames_and_reads(
    pair: tuple[AttachedStream, socket.socket],
) -> None:
    stream, engine = pair
    data = frame(1, b'{"a": ') + frame(2, b"warning\n") + frame(1, b'1}\n{"b": 2}\n')
    for index in range(len(data)):  # one byte at a time: headers split anywhere
        engine.send(data[index : index + 1])
    assert stream.read_line(deadline=soon(), limit=100) == b'{"a": 1}'
    assert stream.read_line(deadline=soon(), limit=100) == b'{"b": 2}'
    assert stream.stderr_tail() == "warning"


def test_stdin_goes_out_unframed(pair: tuple[AttachedStream, socket.socket]) -> None:
    stream, engine = pair
    stream.send(b'{"id": "1"}\n', deadline=soon())
    assert engine.recv(100) == b'{"id": "1"}\n'
    stream.close_stdin()
    assert engine.recv(100) == b""


def test_eof_timeout_and_overlong_lines_are_told_apart(
    pair: tuple[AttachedStream, socket.socket],
) -> None:
    stream, engine = pair
    with pytest.raises(StreamTimeout):
        stream.read_line(deadline=time.monotonic() + 0.05, limit=100)
    engine.sendall(frame(1, b"x" * 200))
    with pytest.raises(LineTooLong):
        stream.read_line(deadline=soon(), limit=100)
    engine.sendall(frame(2, b"last words"))
    engine.close()
    with pytest.raises(StreamClosed):
        stream.read_line(deadline=soon(), limit=1000)
    assert stream.stderr_tail() == "last words"


def test_only_the_tail_of_stderr_is_kept() -> None:
    ours, engine = socket.socketpair()
    stream = AttachedStream(ours, stderr_tail_bytes=10)
    engine.sendall(frame(2, b"0123456789abcdef") + frame(1, b"done\n"))
    assert stream.read_line(deadline=soon(), limit=100) == b"done"
    assert stream.stderr_tail() == "6789abcdef"
    stream.close()
    engine.close()
