"""``riverbeam repos trust NAME`` against a real sshd: it shows the key, pins it only once
confirmed, and the workers then reach the upstream through it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import load_settings
from harness.gitkit import make_upstream, traversable_dir
from harness.ssh_server import SshServer, ssh_server
from sandbox.host.upstream.mirror import sync_mirror
from tests.cli.kit import Ran, cli

OTHER = "SHA256:" + "A" * 43


@pytest.fixture
def base() -> Iterator[Path]:
    with traversable_dir("riverbeam-trust-test-") as path:
        yield path


@pytest.fixture
def server(base: Path) -> Iterator[SshServer]:
    with ssh_server() as running:
        running.serve(make_upstream(base / "upstream.git"))
        yield running


@pytest.fixture
def known_hosts(base: Path, server: SshServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A riverbeam.toml registering the SSH upstream as ``docs`` (and a local one)."""
    path = base / "known_hosts"
    config = base / "riverbeam.toml"
    config.write_text(
        "[repositories.docs]\n"
        f"upstream = {json.dumps(server.url('upstream.git'))}\n"
        f"credentials.ssh_key = {json.dumps(str(server.client_key))}\n\n"
        "[repositories.local]\n"
        f"upstream = {json.dumps(str(base / 'upstream.git'))}\n\n"
        "[workspaces]\n"
        f"root = {json.dumps(str(base / 'workspaces'))}\n"
        f"mirrors = {json.dumps(str(base / 'mirrors'))}\n"
        f"known_hosts = {json.dumps(str(path))}\n"
    )
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(config))
    return path


def trust(*argv: str, stdin: str = "") -> Ran:
    return cli("repos", "trust", "docs", *argv, stdin=stdin)


def fetch() -> Path:
    settings = load_settings()
    return sync_mirror("docs", settings.repository("docs"), settings.workspaces)


def test_a_confirmed_key_is_pinned_and_the_fetch_then_works(
    server: SshServer, known_hosts: Path
) -> None:
    [fingerprint] = server.fingerprints()

    ran = trust(stdin="y\n")

    assert ran.code == 0, ran.err
    assert f"fingerprint: {fingerprint}" in ran.out
    assert "Trust this key" in ran.out
    [key] = server.host_public_keys()
    assert known_hosts.read_text() == f"[127.0.0.1]:{server.port} {key}\n"
    assert (fetch() / "refs" / "heads" / "main").exists()


@pytest.mark.parametrize("answer", ["n\n", "", "maybe\n"])
def test_without_a_yes_nothing_is_written(
    answer: str, server: SshServer, known_hosts: Path
) -> None:
    ran = trust(stdin=answer)

    assert ran.code == 1
    assert server.fingerprints()[0] in ran.out
    assert "nothing was written" in ran.out
    assert not known_hosts.exists()


def test_a_fingerprint_verified_out_of_band_pins_without_a_question(
    server: SshServer, known_hosts: Path
) -> None:
    ran = trust("--fingerprint", server.fingerprints()[0])

    assert ran.code == 0, ran.err
    assert "Trust this key" not in ran.out
    assert (fetch() / "refs" / "heads" / "main").exists()


@pytest.mark.parametrize("given", [OTHER, "MD5:aa:bb", "SHA256:short"])
def test_a_fingerprint_that_is_not_the_servers_pins_nothing(
    given: str, server: SshServer, known_hosts: Path
) -> None:
    ran = trust("--fingerprint", given, "--yes")

    assert ran.code == 2
    assert "BEM-348" in ran.err
    assert not known_hosts.exists()


def test_yes_pins_and_a_second_run_finds_it_already_trusted(
    server: SshServer, known_hosts: Path
) -> None:
    assert trust("--yes").code == 0
    pinned = known_hosts.read_text()

    again = trust("--yes")

    assert again.code == 0
    assert "already trusted" in again.out
    assert known_hosts.read_text() == pinned


def test_a_changed_key_is_never_repinned(server: SshServer, known_hosts: Path) -> None:
    server.pin_keys(known_hosts)
    pinned = known_hosts.read_text()
    server.regenerate_host_keys()

    ran = trust("--yes")

    assert ran.code == 2
    assert "BEM-345" in ran.err and server.fingerprints()[0] in ran.err
    assert "ssh-keygen -f" in ran.err
    assert known_hosts.read_text() == pinned


def test_an_upstream_that_is_not_ssh_has_no_key_to_trust(known_hosts: Path) -> None:
    ran = cli("repos", "trust", "local", "--yes")

    assert ran.code == 2
    assert "BEM-348" in ran.err and "not an SSH URL" in ran.err
    assert not known_hosts.exists()


def test_an_unreachable_host_pins_nothing(server: SshServer, known_hosts: Path, base: Path) -> None:
    server.stop()

    ran = trust("--yes")

    assert ran.code == 2
    assert "BEM-348" in ran.err
    assert not known_hosts.exists()
