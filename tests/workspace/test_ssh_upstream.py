"""Against a real OpenSSH server: an SSH upstream is reached only through its pinned host key.

The server is a second ``sshd`` on loopback (``harness.ssh_server``) with a git-shell
user and key authentication. The expected fingerprints come from ``ssh-keygen -l`` and the
pinned lines from the server's own ``.pub`` files (or ``ssh-keygen -H``), not from the code
under test.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pygit2
import pytest

from bot.config import Credentials, RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from harness.gitkit import sandbox_push
from harness.ssh_server import SshServer, ssh_server
from sandbox.host.relay import RelayResult, relay_push
from sandbox.host.upstream.credentials import upstream_callbacks
from sandbox.host.upstream.mirror import mirror_path, sync_mirror
from sandbox.host.workspace.prepare import Workspace, prepare_workspace

SERVED = "upstream.git"


@pytest.fixture
def server() -> Iterator[SshServer]:
    with ssh_server() as running:
        yield running


@pytest.fixture
def known_hosts(base_dir: Path) -> Path:
    return base_dir / "known_hosts"


@pytest.fixture
def ssh_settings(base_dir: Path, known_hosts: Path) -> WorkspaceSettings:
    return WorkspaceSettings(
        root=base_dir / "workspaces", mirrors=base_dir / "mirrors", known_hosts=known_hosts
    )


@pytest.fixture
def ssh_config(server: SshServer, upstream: Path) -> RepositoryConfig:
    return RepositoryConfig(
        upstream=server.serve(upstream, SERVED), credentials=Credentials(ssh_key=server.client_key)
    )


def _sync(config: RepositoryConfig, settings: WorkspaceSettings) -> Path:
    return sync_mirror("docs", config, settings)


def _relay(
    workspace: Workspace, sha: str, config: RepositoryConfig, settings: WorkspaceSettings
) -> RelayResult:
    callbacks = upstream_callbacks("docs", config, settings)
    return relay_push(workspace, sha, workspace.branch, config, callbacks=callbacks)


def _mirror_refs(settings: WorkspaceSettings) -> list[str]:
    mirror = mirror_path(settings, "docs")
    if not mirror.exists():
        return []
    return sorted(pygit2.Repository(str(mirror)).references)


def _refused(code: str, action: Callable[[], object]) -> BeamError:
    """``action`` fails with ``code``."""
    with pytest.raises(BeamError) as caught:
        action()
    assert caught.value.code == code, caught.value
    return caught.value


# -- trusted ----------------------------------------------------------------------------


def test_a_pinned_key_lets_the_mirror_fetch_and_the_relay_push(
    server: SshServer,
    ssh_config: RepositoryConfig,
    ssh_settings: WorkspaceSettings,
    known_hosts: Path,
) -> None:
    workspace, sha = _trusted_push(server, ssh_config, ssh_settings, known_hosts, "ssh-1")
    result = _relay(workspace, sha, ssh_config, ssh_settings)

    assert result.pushed
    assert server.tip(SERVED, workspace.branch) == sha
    assert "refs/heads/main" in _mirror_refs(ssh_settings)


def test_hashed_and_wildcard_entries_are_understood(
    server: SshServer,
    ssh_config: RepositoryConfig,
    ssh_settings: WorkspaceSettings,
    known_hosts: Path,
) -> None:
    server.pin_keys(known_hosts)
    # ssh-keygen -H replaces every name by its |1|salt|hash form.
    subprocess.run(["ssh-keygen", "-H", "-f", str(known_hosts)], check=True, capture_output=True)
    assert "127.0.0.1" not in known_hosts.read_text()

    assert "refs/heads/main" in _mirror_refs_after_sync(ssh_config, ssh_settings)

    known_hosts.write_text("")
    server.pin_keys(known_hosts, name=f"git.example.com,[127.0.0.?]:{server.port}")
    assert "refs/heads/main" in _mirror_refs_after_sync(ssh_config, ssh_settings)


def _mirror_refs_after_sync(config: RepositoryConfig, settings: WorkspaceSettings) -> list[str]:
    _sync(config, settings)
    return _mirror_refs(settings)


def test_a_repository_known_hosts_file_wins_over_the_service_one(
    server: SshServer,
    ssh_config: RepositoryConfig,
    ssh_settings: WorkspaceSettings,
    base_dir: Path,
) -> None:
    own = base_dir / "docs_known_hosts"
    server.pin_keys(own)
    config = ssh_config.model_copy(update={"known_hosts": own})

    _sync(config, ssh_settings)

    assert "refs/heads/main" in _mirror_refs(ssh_settings)
    assert not ssh_settings.known_hosts.exists()


# -- never trusted ----------------------------------------------------------------------


def test_without_known_hosts_the_fetch_is_refused_with_the_fingerprint(
    server: SshServer,
    ssh_config: RepositoryConfig,
    ssh_settings: WorkspaceSettings,
    known_hosts: Path,
) -> None:
    error = _refused("BEM-344", lambda: _sync(ssh_config, ssh_settings))

    [fingerprint] = server.fingerprints()
    assert fingerprint in error.message
    assert f"riverbeam repos trust docs --fingerprint {fingerprint}" in error.message
    assert str(known_hosts) in error.message
    assert _mirror_refs(ssh_settings) == []


@pytest.mark.parametrize(
    "entry",
    [
        "[127.0.0.1]:{port} {other}",  # another key
        "127.0.0.1 {key}",  # this key, but for port 22
        "[127.0.0.2]:{port} {key}",  # this key, for another host
        "[127.0.0.*]:{port},![127.0.0.1]:{port} {key}",  # a negated name rules the line out
        "@cert-authority [127.0.0.1]:{port} {key}",  # no certificates here
        "[127.0.0.1]:{port} ssh-rsa {key_base64}",  # the type field must match the key
    ],
)
def test_a_key_not_pinned_for_this_host_and_port_is_refused(
    entry: str,
    server: SshServer,
    ssh_config: RepositoryConfig,
    ssh_settings: WorkspaceSettings,
    known_hosts: Path,
    base_dir: Path,
) -> None:
    other = base_dir / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(other)], check=True)
    [key] = server.host_public_keys()
    line = entry.format(
        port=server.port,
        key=key,
        key_base64=key.split()[1],
        other=" ".join(other.with_suffix(".pub").read_text().split()[:2]),
    )
    known_hosts.write_text(f"# pinned by hand\n{line}\n")

    error = _refused("BEM-344", lambda: _sync(ssh_config, ssh_settings))

    assert server.fingerprints()[0] in error.message
    assert _mirror_refs(ssh_settings) == []


def test_a_relay_without_a_pinned_key_pushes_nothing(
    server: SshServer,
    ssh_config: RepositoryConfig,
    ssh_settings: WorkspaceSettings,
    known_hosts: Path,
) -> None:
    workspace, sha = _trusted_push(server, ssh_config, ssh_settings, known_hosts, "ssh-2")
    known_hosts.unlink()

    error = _refused("BEM-354", lambda: _relay(workspace, sha, ssh_config, ssh_settings))

    assert "BEM-344" in error.message
    assert server.fingerprints()[0] in error.message
    assert server.tip(SERVED, workspace.branch) is None


# -- changed ----------------------------------------------------------------------------


def test_a_changed_host_key_is_refused_for_the_fetch_and_the_push(
    server: SshServer,
    ssh_config: RepositoryConfig,
    ssh_settings: WorkspaceSettings,
    known_hosts: Path,
) -> None:
    workspace, sha = _trusted_push(server, ssh_config, ssh_settings, known_hosts, "ssh-3")
    [old] = server.fingerprints()
    refs_before = _mirror_refs(ssh_settings)

    server.regenerate_host_keys()
    [new] = server.fingerprints()
    fetch = _refused("BEM-345", lambda: _sync(ssh_config, ssh_settings))
    push = _refused("BEM-354", lambda: _relay(workspace, sha, ssh_config, ssh_settings))

    assert new != old
    assert old in fetch.message and new in fetch.message
    assert "line 1" in fetch.message
    assert "BEM-345" in push.message and new in push.message
    assert server.tip(SERVED, workspace.branch) is None
    assert _mirror_refs(ssh_settings) == refs_before


def test_a_revoked_key_is_refused_even_when_also_pinned(
    server: SshServer,
    ssh_config: RepositoryConfig,
    ssh_settings: WorkspaceSettings,
    known_hosts: Path,
) -> None:
    server.pin_keys(known_hosts)
    [key] = server.host_public_keys()
    with known_hosts.open("a") as handle:
        handle.write(f"@revoked * {key}\n")

    error = _refused("BEM-345", lambda: _sync(ssh_config, ssh_settings))

    assert "line 2" in error.message and "revokes" in error.message


# -- every connection is checked ----------------------------------------------------------


class _Interceptor:
    """A loopback TCP relay that sends its first ``honest`` connections to one server and
    every later one to another: someone who takes over the path mid-way."""

    def __init__(self, honest_port: int, impostor_port: int, honest: int) -> None:
        self._targets = [honest_port] * honest
        self._impostor = impostor_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            port = self._targets.pop(0) if self._targets else self._impostor
            upstream = socket.create_connection(("127.0.0.1", port))
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                pump = threading.Thread(target=_pump, args=(source, sink), daemon=True)
                self._threads.append(pump)
                pump.start()

    def close(self) -> None:
        # shutdown, not close, wakes the thread blocked in accept().
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for end in self._sockets:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(10)
        for end in self._sockets:
            end.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def test_the_push_connection_is_checked_too_not_only_the_first_one(
    server: SshServer,
    upstream: Path,
    ssh_config: RepositoryConfig,
    ssh_settings: WorkspaceSettings,
    known_hosts: Path,
) -> None:
    """The relay reads the branch, then pushes: two connections. An impostor that answers only
    the second (with the same repository and the same authorized key) gets nothing."""
    workspace, sha = _trusted_push(server, ssh_config, ssh_settings, known_hosts, "ssh-4")
    with ssh_server() as impostor:
        impostor.serve(upstream, SERVED)
        impostor.authorize(server.client_key)
        relay = _Interceptor(server.port, impostor.port, honest=1)
        try:
            path = ssh_config.upstream.split(f":{server.port}", 1)[1]
            via = f"ssh://{server.user.pw_name}@127.0.0.1:{relay.port}{path}"
            routed = ssh_config.model_copy(update={"upstream": via})
            server.pin_keys(known_hosts, name=f"[127.0.0.1]:{relay.port}")

            error = _refused("BEM-354", lambda: _relay(workspace, sha, routed, ssh_settings))
        finally:
            relay.close()
        assert "BEM-345" in error.message
        assert impostor.fingerprints()[0] in error.message
        assert impostor.tip(SERVED, workspace.branch) is None
    assert server.tip(SERVED, workspace.branch) is None


def _trusted_push(
    server: SshServer,
    config: RepositoryConfig,
    settings: WorkspaceSettings,
    known_hosts: Path,
    job_id: str,
) -> tuple[Workspace, str]:
    """With the server's keys pinned, the job's workspace, and a commit the sandbox pushed
    to its outbox (the relay's to send)."""
    server.pin_keys(known_hosts)
    workspace = prepare_workspace(job_id, "docs", config, None, settings)
    return workspace, sandbox_push(workspace, {"docs/ssh.md": "Over SSH.\n"})
