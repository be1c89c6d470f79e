"""The test's bare repositories served over smart HTTP on loopback (``git http-backend``).

libgit2 pushes to a local path in process, so server-side hooks never run; over HTTP the
push reaches ``git receive-pack``, which runs them. That lets a test make the upstream slow
(a ``pre-receive`` hook that sleeps) and hit the moment a relay push is in flight::

    with GitHttpServer(base) as server:
        url = server.url_for(base / "upstream.git")   # http://127.0.0.1:<port>/upstream.git

Every repository under ``root`` is served, pushes included (``http.receivepack``).

With ``authorization`` (e.g. ``basic(user, token)``) the server stands in for a hosted,
token-protected upstream (GitHub, GitLab): a request without exactly that ``Authorization``
header gets 401, like a real forge, and every header it was sent is kept in
``seen_authorizations`` so a test can watch the worker's credentials travel.

With ``tls=self_signed(directory)`` it serves HTTPS with a certificate no CA signed, to show
that the worker verifies the server's certificate.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import ssl
import subprocess
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

BACKEND_SECONDS = 120.0  # a hook that sleeps longer than this is a broken test
REMOTE_USER = "tester"  # who git http-backend is told made an authenticated request
_HEADER_END = re.compile(rb"\r?\n\r?\n")


def basic(username: str, token: str) -> str:
    """The ``Authorization`` header value of HTTP Basic auth for ``username:token``."""
    return "Basic " + base64.b64encode(f"{username}:{token}".encode()).decode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, authorization: str | None, host: str) -> None:
        super().__init__((host, 0), _Handler)
        self.root = root
        self.authorization = authorization
        self.seen_authorizations: list[str] = []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the repositories' reflogs and ``seen_authorizations`` say what happened."""

    def _serve(self) -> None:
        self.close_connection = True
        # Read before answering, 401 included: a client still writing gets its answer.
        body = self._body()
        given = self.headers.get("Authorization")
        if given:
            self.server.seen_authorizations.append(given)
        required = self.server.authorization
        if required is not None and given != required:
            self._respond(401, [("WWW-Authenticate", 'Basic realm="riverbeam-test"')], b"")
            return
        url = urlsplit(self.path)
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(self.server.root),
            "REQUEST_METHOD": self.command,
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "REMOTE_ADDR": self.client_address[0],
        }
        if required is not None:
            environment["REMOTE_USER"] = REMOTE_USER
        if "Content-Encoding" in self.headers:
            environment["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        # The backend finishes the push even when the client went away meanwhile (a killed
        # worker): the ref moves, as it would on a real server.
        done = subprocess.run(
            ["git", "http-backend"],
            input=body,
            capture_output=True,
            env=environment,
            timeout=BACKEND_SECONDS,
            check=False,
        )
        head, payload = [*_HEADER_END.split(done.stdout, maxsplit=1), b""][:2]
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self._respond(status, headers, payload)

    def _respond(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
        with contextlib.suppress(ConnectionError):
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        chunks: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                self.rfile.readline()
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()


@dataclass(frozen=True)
class TlsFiles:
    certificate: Path
    key: Path


def self_signed(directory: Path) -> TlsFiles:
    """A fresh self-signed certificate for 127.0.0.1 (no CA a client trusts signed it)."""
    files = TlsFiles(directory / "server.crt", directory / "server.key")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(files.key), "-out", str(files.certificate)],
        check=True, capture_output=True,
    )  # fmt: skip
    return files


class GitHttpServer:
    """Serves the repositories under ``root``; use as a context manager.

    ``authorization``: the exact ``Authorization`` header every request must carry (see
    ``basic``); ``None`` serves everyone. ``tls``: serve HTTPS with this certificate.
    ``host``: the address to listen on (a Docker bridge's gateway lets containers reach it)."""

    def __init__(
        self,
        root: Path,
        *,
        authorization: str | None = None,
        tls: TlsFiles | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self._server = _Server(root, authorization, host)
        self._scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls.certificate, tls.key)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def seen_authorizations(self) -> list[str]:
        """Every ``Authorization`` header received so far, right or wrong, in order."""
        return list(self._server.seen_authorizations)

    def url_for(self, repository: Path) -> str:
        """The URL of ``repository`` (under ``root``); pushes to it are allowed."""
        subprocess.run(
            ["git", "-C", str(repository), "config", "http.receivepack", "true"], check=True
        )
        host, port = self._server.server_address[:2]
        relative = repository.relative_to(self._server.root)
        return f"{self._scheme}://{host!s}:{port}/{relative}"

    def __enter__(self) -> GitHttpServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
