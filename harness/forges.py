"""Forge webhooks for the tests and the benchmarks: GitHub's published examples and schemas,
real signatures, and a forge's table of ``riverbeam.toml``.

- ``github_example(event, action)``: a payload from ``@octokit/webhooks-examples`` (a deep
  copy: a test changes the fields its scenario needs), and ``check_github(event, action,
  payload)`` holds it to its schema in ``@octokit/openapi-webhooks``, strictly, so a changed
  example is still one GitHub could send;
- ``github_headers`` / ``gitlab_headers``: the headers of a delivery, signed with the secret
  (HMAC-SHA256 over the exact bytes sent);
- ``forge_toml``: a ``[forges.<name>]`` table with its repositories;
- ``FakeLookup``: the forge's answers (permissions, pull requests, threads) a test scripts.
"""

from __future__ import annotations

import copy
import functools
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from bot.config import ForgeConfig
from bot.forge.inbound.forge_events import PullRequest, ReviewThread, ThreadComment, ThreadKind
from bot.forge.inbound.signatures import github_signature
from bot.forge.permissions import ForgePermission

OCTOKIT = Path("/opt/riverbeam-node/node_modules/@octokit")
EXAMPLES = OCTOKIT / "webhooks-examples" / "api.github.com" / "index.json"
SCHEMAS = OCTOKIT / "openapi-webhooks" / "generated" / "api.github.com.json"


@functools.cache
def _examples() -> dict[str, list[dict[str, Any]]]:
    return {entry["name"]: entry["examples"] for entry in json.loads(EXAMPLES.read_text())}


@functools.cache
def _schemas() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(SCHEMAS.read_text())
    return document


def github_example(event: str, action: str | None, index: int = 0) -> dict[str, Any]:
    """The ``index``-th published example of ``event`` with ``action``, as a fresh copy."""
    found = [e for e in _examples()[event] if e.get("action") == action]
    return copy.deepcopy(found[index])


def check_github(event: str, action: str, payload: Mapping[str, Any]) -> None:
    """Raise unless ``payload`` is valid against GitHub's schema of ``event`` ``action``."""
    document = _schemas()
    name = f"{event}-{action}".replace("_", "-")
    body = document["webhooks"][name]["post"]["requestBody"]["content"]["application/json"]
    schema = {"$ref": body["schema"]["$ref"], "components": document["components"]}
    jsonschema.Draft202012Validator(schema).validate(payload)


def encoded(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload).encode()


def github_headers(
    secret: str, body: bytes, event: str, *, delivery: str | None = None
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/test",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": github_signature(secret.encode(), body),
    }


def gitlab_headers(secret: str, event: str, *, delivery: str | None = None) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "GitLab/17.6.0",
        "X-Gitlab-Event": event,
        "X-Gitlab-Event-UUID": delivery or str(uuid.uuid4()),
        "X-Gitlab-Token": secret,
    }


def forge_toml(
    name: str,
    *,
    kind: str,
    secret_file: Path,
    bot_login: str,
    repositories: Mapping[str, Mapping[str, object]],
    **keys: object,
) -> str:
    """A ``[forges.<name>]`` table and its repositories (JSON values are valid TOML)."""
    head = {"kind": kind, "webhook_secret_file": str(secret_file), "bot_login": bot_login, **keys}
    text = f"\n[forges.{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in head.items())
    for path, entry in repositories.items():
        text += f"\n[forges.{name}.repositories.{json.dumps(path)}]\n"
        for key, value in entry.items():
            if isinstance(value, Mapping):
                inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items())
                text += f"{key} = {{ {inline} }}\n"
            else:
                text += f"{key} = {json.dumps(value)}\n"
    return text


@dataclass
class FakeLookup:
    """A forge's answers as a test scripts them; every question asked is kept in ``asked``."""

    permissions: dict[str, ForgePermission] = field(default_factory=dict)
    pulls: dict[int, PullRequest] = field(default_factory=dict)
    paths: dict[int, Sequence[str]] = field(default_factory=dict)
    threads: dict[int, Sequence[ThreadComment]] = field(default_factory=dict)
    reviews: dict[int, Sequence[ReviewThread]] = field(default_factory=dict)
    asked: list[tuple[str, str, object]] = field(default_factory=list)

    def permission(self, repository: str, login: str) -> ForgePermission:
        self.asked.append(("permission", repository, login))
        return self.permissions.get(login, ForgePermission.NONE)

    def pull_request(self, repository: str, number: int) -> PullRequest:
        self.asked.append(("pull_request", repository, number))
        return self.pulls[number]

    def changed_paths(self, repository: str, number: int) -> Sequence[str]:
        self.asked.append(("changed_paths", repository, number))
        return self.paths.get(number, ())

    def thread(
        self, repository: str, number: int, on: ThreadKind = "issue"
    ) -> Sequence[ThreadComment]:
        self.asked.append(("thread", repository, number))
        return self.threads.get(number, ())

    def review_threads(self, repository: str, number: int) -> Sequence[ReviewThread]:
        self.asked.append(("review_threads", repository, number))
        return self.reviews.get(number, ())


def no_one_may(_name: str, _config: ForgeConfig) -> FakeLookup:
    """A ``client_factory`` for the workers: a forge on which nobody has any permission."""
    return FakeLookup()


def diff_shows(patch: str, side: str = "RIGHT") -> set[int]:
    """The line numbers a unified diff shows on one side: the new file's (``RIGHT``: added
    and context lines) or the old one's (``LEFT``: removed and context lines), the lines a
    forge takes a review comment on, GitHub and GitLab alike."""
    kept, field = (("+", " "), 2) if side == "RIGHT" else (("-", " "), 1)
    shown: set[int] = set()
    number = 0
    for text in patch.split("\n"):
        if text.startswith("@@"):
            # "@@ -old[,n] +new[,n] @@": the side's start, without its sign.
            number = int(text.split(" ")[field][1:].split(",")[0])
        elif text[:1] in kept:
            shown.add(number)
            number += 1
    return shown
