"""The known_hosts reader and writer, without a server: which URLs are SSH, and the file."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from bot.core.errors import BeamError
from sandbox.host.upstream.known_hosts import (
    HostKey,
    SshEndpoint,
    Verdict,
    lookup,
    pin,
    ssh_endpoint,
)


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("ssh://git@git.example.com/docs.git", SshEndpoint("git.example.com")),
        ("ssh://git@git.example.com:2222/docs.git", SshEndpoint("git.example.com", 2222)),
        ("git+ssh://Git.Example.com/docs.git", SshEndpoint("git.example.com")),
        ("ssh+git://[::1]:2200/docs.git", SshEndpoint("::1", 2200)),
        ("git@github.com:org/docs.git", SshEndpoint("github.com")),
        ("github.com:docs.git", SshEndpoint("github.com")),
        ("git@[fe80::1]:docs.git", SshEndpoint("fe80::1")),
        ("https://git.example.com/docs.git", None),
        ("http://127.0.0.1:8080/docs.git", None),
        ("file:///srv/docs.git", None),
        ("/srv/git/docs.git", None),
        ("ssh://:22/docs.git", None),
    ],
)
def test_which_upstreams_are_ssh_and_where(url: str, endpoint: SshEndpoint | None) -> None:
    assert ssh_endpoint(url) == endpoint


def test_a_local_directory_with_a_colon_is_a_path(tmp_path: Path) -> None:
    odd = tmp_path / "a:b"
    odd.mkdir()
    assert ssh_endpoint(str(odd)) is None


def test_the_name_is_openssh_s() -> None:
    assert SshEndpoint("Git.Example.com").name == "git.example.com"
    assert SshEndpoint("git.example.com", 2222).name == "[git.example.com]:2222"


def _key(tmp_path: Path, kind: str = "ed25519") -> tuple[HostKey, str]:
    path = tmp_path / f"key-{kind}"
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)
    key_type, encoded = path.with_suffix(".pub").read_text().split()[:2]
    key = HostKey.from_base64(encoded)
    assert key.key_type == key_type
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(path.with_suffix(".pub"))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return key, listed.stdout.split()[1]


def test_the_fingerprint_is_the_one_ssh_keygen_prints(tmp_path: Path) -> None:
    for kind in ("ed25519", "ecdsa"):
        key, fingerprint = _key(tmp_path, kind)
        assert key.fingerprint == fingerprint


def test_pin_appends_a_line_ssh_keygen_finds(tmp_path: Path) -> None:
    key, _ = _key(tmp_path)
    known_hosts = tmp_path / "etc" / "known_hosts"
    endpoint = SshEndpoint("git.example.com", 2222)
    pin(known_hosts, endpoint, key)
    known_hosts.write_text(known_hosts.read_text() + "# no newline at the end")

    pin(known_hosts, SshEndpoint("other.example.com"), key)

    lines = known_hosts.read_text().splitlines()
    assert lines[-1].startswith("other.example.com ssh-ed25519 ")
    assert lookup(known_hosts, endpoint, key).verdict is Verdict.TRUSTED
    found = subprocess.run(
        ["ssh-keygen", "-F", "[git.example.com]:2222", "-f", str(known_hosts)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert base64.b64encode(key.blob).decode() in found.stdout


@pytest.mark.parametrize("blob", [b"", b"\x00\x00\x00\x40short", b"\x00\x00\x00\x03Bad!"])
def test_a_blob_that_is_not_a_public_key_is_refused(blob: bytes) -> None:
    with pytest.raises(ValueError):
        HostKey(blob)


def test_a_known_hosts_that_is_a_directory_is_bem_346(tmp_path: Path) -> None:
    key, _ = _key(tmp_path)
    with pytest.raises(BeamError) as caught:
        lookup(tmp_path, SshEndpoint("git.example.com"), key)
    assert caught.value.code == "BEM-346"
