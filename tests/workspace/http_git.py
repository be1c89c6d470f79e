"""A token-protected git server on loopback: ``git http-backend`` behind HTTP Basic auth.

It stands in for a hosted upstream (GitHub, GitLab) so the tests can watch the worker's
credentials travel: a request without the right ``Authorization`` header gets 401, exactly
like a real forge, and the server's hooks run on push (libgit2's local transport runs none).
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BACKEND = "/usr/lib/git-core/git-http-backend"
_HEADER_END = re.compile(rb"\r?\n\r?\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, authorization: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.authorization = authorization
        self.seen_authorizations: list[str] = []


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the tests read the server's state, not its log."""

    def _serve(self) -> None:
        given = self.headers.get("Authorization")
        if given:
            self.server.seen_authorizations.append(given)
        if given != self.server.authorization:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="riverbeam-test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self._body()
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(self.server.root),
            "REMOTE_USER": "tester",
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
        }
        for header in ("Content-Encoding", "Git-Protocol"):
            if header in self.headers:
                env["HTTP_" + header.upper().replace("-", "_")] = self.headers[header]
        result = subprocess.run([BACKEND], input=body, env=env, capture_output=True, check=False)
        self._relay_cgi(result.stdout)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def _relay_cgi(self, output: bytes) -> None:
        head, payload = _HEADER_END.split(output, maxsplit=1)
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            else:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def basic(username: str, token: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{token}".encode()).decode()


@contextmanager
def serve_git(root: Path, username: str, token: str) -> Iterator[_Server]:
    """Serve the bare repositories under ``root`` at ``http://127.0.0.1:<port>/<name>``."""
    server = _Server(root, basic(username, token))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def url(server: _Server, name: str) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}/{name}"
