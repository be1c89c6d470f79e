"""A real OpenSSH server on loopback serving bare repositories through ``git-shell``.

``SshServer`` runs a second ``sshd`` (Debian's ``openssh-server``) on a free loopback port with
its own configuration and host keys, in a directory of its own under ``/tmp``: public-key
authentication only, ``UsePAM no``, one user (``SSH_USER``, whose login shell is
``git-shell``, so a session can run ``git-upload-pack`` and ``git-receive-pack`` and nothing
else). It starts and stops only its own ``sshd``; the user is created on first use and reused
(one fixed name, so nothing piles up)::

    with ssh_server() as server:
        url = server.serve(bare_upstream)      # ssh://riverbeam-sshtest@127.0.0.1:<port>/…
        credentials = Credentials(ssh_key=server.client_key)
        server.pin_keys(known_hosts)           # as an operator copying the .pub files
        server.regenerate_host_keys()          # the same address now answers with new keys

The served copies belong to ``SSH_USER``; ``tip`` reads a branch there (as that user).
Without ``sshd`` the test fails: integration tests never skip (``docker/provision --dev``
installs it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.workers import free_port

SSH_USER = "riverbeam-sshtest"
SSHD = "/usr/sbin/sshd"
START_SECONDS = 10.0


class SshServer:
    def __init__(self, key_types: tuple[str, ...] = ("ed25519",)) -> None:
        if not os.access(SSHD, os.X_OK) or shutil.which("git-shell") is None:
            pytest.fail("sshd or git-shell is missing; run docker/provision --dev")
        if os.geteuid() != 0:
            pytest.fail("the SSH upstream tests run a second sshd, which needs root")
        self.user = _ensure_user()
        self.key_types = key_types
        self.port = free_port()
        # Under /tmp, not pytest's 0700 tree: the git-shell user must reach its repositories.
        self.base = Path(tempfile.mkdtemp(prefix="riverbeam-sshd-"))
        self.base.chmod(0o711)
        self.root = self.base / "srv"
        self.root.mkdir(mode=0o700)
        os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self.client_key = self.base / "client"
        _keygen("ed25519", self.client_key)
        self._authorized = self.base / "authorized_keys"
        self._authorized.touch(mode=0o644)
        self.authorize(self.client_key)
        self._config = self.base / "sshd_config"
        self._log = self.base / "sshd.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._make_host_keys()

    def url(self, name: str) -> str:
        return f"ssh://{SSH_USER}@127.0.0.1:{self.port}{self.root / name}"

    def serve(self, bare: Path, name: str = "upstream.git") -> str:
        """Serve a copy of the bare repository ``bare`` as ``name``; its ``ssh://`` URL."""
        target = self.root / name
        shutil.copytree(bare, target, symlinks=True)
        for path in [target, *target.rglob("*")]:
            os.chown(path, self.user.pw_uid, self.user.pw_gid, follow_symlinks=False)
        return self.url(name)

    def authorize(self, private_key: Path) -> None:
        """Let the holder of ``private_key`` (its ``.pub`` beside it) log in."""
        public = private_key.with_name(private_key.name + ".pub").read_text()
        with self._authorized.open("a") as handle:
            handle.write(public)

    def tip(self, name: str, branch: str) -> str | None:
        """The commit ``branch`` is at in the served ``name``, read as the user owning it."""
        result = subprocess.run(
            ["git", "--git-dir", str(self.root / name), "rev-parse", "--verify", "--quiet",
             f"refs/heads/{branch}^{{commit}}"],
            capture_output=True, text=True, check=False, user=self.user.pw_uid,
            group=self.user.pw_gid, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )  # fmt: skip
        return result.stdout.strip() or None

    def host_public_keys(self) -> list[str]:
        """The ``<type> <base64>`` of each host key the server presents."""
        return [
            " ".join(self._host_key(kind).with_suffix(".pub").read_text().split()[:2])
            for kind in self.key_types
        ]

    def fingerprints(self) -> list[str]:
        """The host keys' fingerprints, as ``ssh-keygen -l`` prints them."""
        return [
            subprocess.run(
                ["ssh-keygen", "-l", "-f", "-"],
                input=line, capture_output=True, text=True, check=True,
            ).stdout.split()[1]
            for line in self.host_public_keys()
        ]  # fmt: skip

    def pin_keys(self, known_hosts: Path, name: str | None = None) -> None:
        """What an operator who copied the server's ``.pub`` files into ``known_hosts``
        would write (``name``: the host field; default ``[127.0.0.1]:<port>``)."""
        host = name or f"[127.0.0.1]:{self.port}"
        with known_hosts.open("a") as handle:
            handle.writelines(f"{host} {key}\n" for key in self.host_public_keys())

    def start(self) -> None:
        if self._process is not None:
            raise RuntimeError("this sshd is already running")
        self._config.write_text(self._configuration())
        # sshd wants its privilege-separation directory; Debian makes it only at boot.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        with self._log.open("ab") as log:
            process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self._config)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self._process = process
        deadline = time.monotonic() + START_SECONDS
        while not _answers_ssh(self.port):
            if process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"sshd did not start on port {self.port}: {self._log.read_text()}")
            time.sleep(0.02)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            process.wait(timeout=10)

    def regenerate_host_keys(self) -> None:
        """New host keys on the same address, as after a reinstall or an impostor's takeover."""
        self.stop()
        for kind in self.key_types:
            self._host_key(kind).unlink()
            self._host_key(kind).with_suffix(".pub").unlink()
        self._make_host_keys()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def _host_key(self, kind: str) -> Path:
        return self.base / f"host_{kind}"

    def _make_host_keys(self) -> None:
        for kind in self.key_types:
            _keygen(kind, self._host_key(kind))

    def _configuration(self) -> str:
        host_keys = "".join(f"HostKey {self._host_key(kind)}\n" for kind in self.key_types)
        return (
            f"Port {self.port}\nListenAddress 127.0.0.1\n{host_keys}"
            f"PidFile none\nAuthorizedKeysFile {self._authorized}\n"
            f"AllowUsers {SSH_USER}\nPubkeyAuthentication yes\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin no\n"
            "AllowTcpForwarding no\nAllowAgentForwarding no\nX11Forwarding no\nPermitTTY no\n"
            # Its files live under /tmp (1777), which StrictModes would refuse as a parent.
            "PrintMotd no\nLogLevel VERBOSE\nStrictModes no\n"
        )


@contextmanager
def ssh_server(key_types: tuple[str, ...] = ("ed25519",)) -> Iterator[SshServer]:
    server = SshServer(key_types)
    try:
        server.start()
        yield server
    finally:
        server.close()


def _ensure_user() -> pwd.struct_passwd:
    """The git-shell user, created once and reused; unlocked (``*``: no password, but sshd
    lets a locked ``!`` account in by no method at all)."""
    try:
        pwd.getpwnam(SSH_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", shutil.which("git-shell") or "/usr/bin/git-shell", SSH_USER],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(["usermod", "-p", "*", SSH_USER], check=True, capture_output=True)
    return pwd.getpwnam(SSH_USER)


def _keygen(kind: str, path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "riverbeam-test", "-f", str(path)],
        check=True, capture_output=True,
    )  # fmt: skip


def _answers_ssh(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
            return conn.recv(8).startswith(b"SSH-2.0")
    except OSError:
        return False
