"""The built-in GitHub client: ``ForgeClient`` on httpx, for github.com and GitHub Enterprise
Server (``base_url`` ``https://HOST/api/v3``), held in the tests to GitHub's own OpenAPI
description (``harness.fake_github`` validates every request and reply against it).

GitHubCredentials, read from files on the worker's host (BEM-824 when they cannot be):

- a fine-grained token (``token_file``), read on each call, so a rotated file takes effect;
- a GitHub App (``app_id`` + ``private_key_file``): an RS256 JWT (issued 60 s in the past
  against clock drift, valid 9 minutes, under GitHub's 10) asks for the repository's
  installation (cached) and then an installation token, cached and renewed
  ``RENEW_MARGIN_SECONDS`` before it expires.

Every call has a total deadline (``bot.forge.clients.http``). Failures are GitHub's own first
(rate limits BEM-825/826, 401 BEM-827, no installation BEM-828, a reply that is not its API
BEM-829), then any forge's (BEM-820..823). Nothing here retries: the caller's outbox does,
after ``ForgeRetryLater.retry_after_seconds``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import jwt

from bot.clients.retry import parse_retry_after
from bot.config import ForgeConfig
from bot.core.errors import ForgeCredentialsError, ForgeRefused, ForgeRetryLater
from bot.forge.clients import http
from bot.forge.clients.contract import CommentRef, CommitState, LineComment, PullRequestRef
from bot.forge.clients.http import read_secret
from bot.forge.clients.hunks import new_side_lines
from bot.forge.inbound.forge_events import PullRequest, ReviewThread, ThreadComment, ThreadKind
from bot.forge.permissions import ForgePermission

GITHUB_API = "https://api.github.com"
API_VERSION = "2022-11-28"
USER_AGENT = "riverbeam"
JWT_BACKDATE_SECONDS = 60
JWT_LIFETIME_SECONDS = 9 * 60
RENEW_MARGIN_SECONDS = 5 * 60
SECONDARY_LIMIT_WAIT_SECONDS = 60.0
"""GitHub's documented wait when a secondary limit names none: at least a minute."""
PAGE_SIZE = 100
MAX_PAGES = 30
"""3000 files or comments: GitHub lists at most 3000 files of a pull request anyway."""
STATUS_DESCRIPTION_CHARS = 140


class GitHubCredentials(Protocol):
    """Where the Authorization header comes from; ``repr`` names the kind, never a secret."""

    def authorization(self, client: GitHubClient, repository: str) -> str: ...

    def refused(self, repository: str) -> None:
        """GitHub answered 401 to what ``authorization`` gave: nothing cached is reused."""


@dataclass(frozen=True, repr=False)
class TokenFile:
    path: Path

    def authorization(self, client: GitHubClient, repository: str) -> str:
        return f"Bearer {read_secret(self.path, 'token_file')}"

    def refused(self, repository: str) -> None:
        """The file is read on each call: nothing to forget."""

    def __repr__(self) -> str:
        return f"TokenFile({str(self.path)!r})"


@dataclass(frozen=True, repr=False)
class InstallationToken:
    value: str
    expires_at: float

    def __repr__(self) -> str:
        return f"InstallationToken(expires_at={self.expires_at})"


class GitHubApp:
    """A GitHub App: its id and private key, the installations it found and their tokens."""

    def __init__(self, app_id: int, private_key_file: Path) -> None:
        self.app_id = app_id
        self.private_key_file = private_key_file
        self._installations: dict[str, int] = {}
        self._tokens: dict[int, InstallationToken] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"GitHubApp(app_id={self.app_id}, private_key_file={str(self.private_key_file)!r})"

    def app_jwt(self, now: float) -> str:
        key = read_secret(self.private_key_file, "private_key_file")
        issued = int(now) - JWT_BACKDATE_SECONDS
        claims = {"iat": issued, "exp": issued + JWT_LIFETIME_SECONDS, "iss": str(self.app_id)}
        try:
            return jwt.encode(claims, key, algorithm="RS256")
        except (ValueError, TypeError, jwt.PyJWTError):
            # The library's message may quote the key's text: name the file only.
            raise ForgeCredentialsError(
                "BEM-824",
                f"private_key_file {self.private_key_file} does not hold a PEM RSA private key",
            ) from None

    def authorization(self, client: GitHubClient, repository: str) -> str:
        with self._lock:
            installation = self._installations.get(repository)
            if installation is None:
                installation = client.installation_id(repository, self.app_jwt(client.now()))
                self._installations[repository] = installation
            token = self._tokens.get(installation)
            if token is None or token.expires_at - client.now() <= RENEW_MARGIN_SECONDS:
                token = client.installation_token(installation, self.app_jwt(client.now()))
                self._tokens[installation] = token
            return f"Bearer {token.value}"

    def refused(self, repository: str) -> None:
        with self._lock:
            installation = self._installations.pop(repository, None)
            if installation is not None:
                self._tokens.pop(installation, None)


class GitHubClient:
    """GitHub's REST API for the workers (``ForgeClient``). ``deadline`` bounds each request
    whole; ``clock`` is wall-clock seconds (the JWT's times, a token's expiry)."""

    def __init__(
        self,
        credentials: GitHubCredentials,
        *,
        base_url: str = GITHUB_API,
        deadline: float = http.DEFAULT_DEADLINE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.credentials = credentials
        self.deadline = deadline
        self.now = clock

    def __repr__(self) -> str:
        return f"GitHubClient({self.base_url!r}, {self.credentials!r})"

    # ForgeLookup

    def permission(self, repository: str, login: str) -> ForgePermission:
        path = f"{_repo(repository)}/collaborators/{_segment(login)}/permission"
        reply = self._send("GET", path, repository, allow=(404,))
        if reply.status == 404:
            return ForgePermission.NONE
        document = _object(reply)
        role = document.get("role_name") or document.get("permission")
        if not isinstance(role, str):
            raise _malformed(reply, "no role_name")
        return ForgePermission.from_github(role)

    def pull_request(self, repository: str, number: int) -> PullRequest:
        document = _object(self._send("GET", f"{_repo(repository)}/pulls/{number}", repository))
        try:
            head, base = document["head"], document["base"]
            head_repo, base_repo = head.get("repo"), base.get("repo")
            return PullRequest(
                number=document["number"],
                title=document["title"],
                body=document.get("body") or "",
                url=document["html_url"],
                author=(document.get("user") or {}).get("login"),
                head_sha=head["sha"],
                head_ref=head["ref"],
                base_ref=base["ref"],
                from_fork=head_repo is None
                or base_repo is None
                or head_repo["full_name"] != base_repo["full_name"],
                draft=bool(document.get("draft")),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise ForgeRefused(
                "BEM-829", f"GitHub's pull request {repository}#{number} lacks {error}"
            ) from None

    def changed_paths(self, repository: str, number: int) -> Sequence[str]:
        paths: list[str] = []
        for item in self._pages(f"{_repo(repository)}/pulls/{number}/files", repository):
            # A file renamed out of a folder changes that folder too.
            for key in ("previous_filename", "filename"):
                if isinstance(item.get(key), str) and item[key] not in paths:
                    paths.append(item[key])
        return paths

    def commentable_lines(self, repository: str, number: int) -> Mapping[str, frozenset[int]]:
        lines: dict[str, frozenset[int]] = {}
        for item in self._pages(f"{_repo(repository)}/pulls/{number}/files", repository):
            # No ``patch`` for a binary file or one whose diff is too large to show.
            if isinstance(item.get("filename"), str) and isinstance(item.get("patch"), str):
                lines[item["filename"]] = new_side_lines(item["patch"])
        return lines

    def review_threads(self, repository: str, number: int) -> Sequence[ReviewThread]:
        # A thread is a review comment that replies to none; REST says nothing of whether
        # it was resolved (only GraphQL does), so every thread counts as open.
        threads = []
        for item in self._pages(f"{_repo(repository)}/pulls/{number}/comments", repository):
            if item.get("in_reply_to_id") is None and isinstance(item.get("id"), int):
                threads.append(
                    ReviewThread(
                        id=str(item["id"]),
                        author=(item.get("user") or {}).get("login") or "ghost",
                        body=item.get("body") or "",
                        path=item.get("path"),
                        line=item.get("line"),
                    )
                )
        return threads

    def thread(
        self, repository: str, number: int, on: ThreadKind = "issue"
    ) -> Sequence[ThreadComment]:
        # A pull request's conversation is its issue's: ``on`` changes nothing on GitHub.
        comments = []
        for item in self._pages(f"{_repo(repository)}/issues/{number}/comments", repository):
            # A deleted account's comments have no user: GitHub shows them as "ghost".
            author = (item.get("user") or {}).get("login") or "ghost"
            comments.append(ThreadComment(author=author, body=item.get("body") or ""))
        return comments

    # ForgeClient

    def post_comment(
        self, repository: str, number: int, body: str, on: ThreadKind = "issue"
    ) -> CommentRef:
        path = f"{_repo(repository)}/issues/{number}/comments"
        document = _object(self._send("POST", path, repository, json={"body": body}))
        return _comment_ref(document, number, on)

    def edit_comment(self, repository: str, ref: CommentRef, body: str) -> None:
        path = f"{_repo(repository)}/issues/comments/{ref.id}"
        self._send("PATCH", path, repository, json={"body": body})

    def reply_to_thread(self, repository: str, number: int, thread_id: str, body: str) -> None:
        path = f"{_repo(repository)}/pulls/{number}/comments/{_segment(thread_id)}/replies"
        self._send("POST", path, repository, json={"body": body})

    def find_pull_request(
        self, repository: str, head_branch: str, base: str
    ) -> PullRequestRef | None:
        owner = repository.partition("/")[0]
        # ``head`` as owner:branch keeps a fork's branch of the same name out.
        params = {"state": "open", "head": f"{owner}:{head_branch}", "base": base}
        reply = self._send("GET", f"{_repo(repository)}/pulls", repository, params=params)
        found = _list(reply)
        return _pull_ref(found[0], reply) if found else None

    def open_pull_request(
        self, repository: str, head: str, base: str, title: str, body: str
    ) -> PullRequestRef:
        fields = {"title": title, "head": head, "base": base, "body": body}
        reply = self._send("POST", f"{_repo(repository)}/pulls", repository, json=fields)
        return _pull_ref(_object(reply), reply)

    def update_pull_request(self, repository: str, number: int, title: str, body: str) -> None:
        path = f"{_repo(repository)}/pulls/{number}"
        self._send("PATCH", path, repository, json={"title": title, "body": body})

    def post_review(
        self,
        repository: str,
        number: int,
        commit_sha: str,
        body: str,
        line_comments: tuple[LineComment, ...],
    ) -> None:
        review = {
            "commit_id": commit_sha,
            "body": body,
            # Never APPROVE: a bot's approval could satisfy branch protection meant for people.
            "event": "COMMENT",
            "comments": [
                {"path": c.path, "line": c.line, "side": c.side, "body": c.body}
                for c in line_comments
            ],
        }
        self._send("POST", f"{_repo(repository)}/pulls/{number}/reviews", repository, json=review)

    def set_status(
        self,
        repository: str,
        sha: str,
        context: str,
        state: CommitState,
        description: str,
        target_url: str | None,
    ) -> None:
        status: dict[str, str] = {
            "state": state,
            "context": context,
            # GitHub refuses a longer description (422).
            "description": description[:STATUS_DESCRIPTION_CHARS],
        }
        if target_url is not None:
            status["target_url"] = target_url
        path = f"{_repo(repository)}/statuses/{_segment(sha)}"
        self._send("POST", path, repository, json=status)

    # GitHub App

    def installation_id(self, repository: str, app_jwt: str) -> int:
        """The id of the App's installation on ``repository`` (BEM-828 when none)."""
        path = f"{_repo(repository)}/installation"
        reply = self._exchange("GET", path, f"Bearer {app_jwt}", allow=(404,))
        if reply.status == 404:
            raise ForgeRefused(
                "BEM-828", f"the GitHub App is not installed on {repository} (or cannot see it)"
            )
        found = _object(reply).get("id")
        if not isinstance(found, int):
            raise _malformed(reply, "no installation id")
        return found

    def installation_token(self, installation: int, app_jwt: str) -> InstallationToken:
        path = f"/app/installations/{installation}/access_tokens"
        reply = self._exchange("POST", path, f"Bearer {app_jwt}")
        document = _object(reply)
        value, expires = document.get("token"), document.get("expires_at")
        if not isinstance(value, str) or not isinstance(expires, str):
            raise _malformed(reply, "no token or expires_at")
        try:
            expires_at = datetime.fromisoformat(expires).timestamp()
        except ValueError:
            raise _malformed(reply, "an expires_at that is not a time") from None
        return InstallationToken(value, expires_at)

    # The requests

    def _send(
        self,
        method: str,
        path: str,
        repository: str,
        *,
        params: Mapping[str, str | int] | None = None,
        json: Any = None,
        allow: tuple[int, ...] = (),
    ) -> http.Reply:
        authorization = self.credentials.authorization(self, repository)
        try:
            return self._exchange(
                method, path, authorization, params=params, json=json, allow=allow
            )
        except ForgeRefused as error:
            if error.code == "BEM-827":
                self.credentials.refused(repository)
            raise

    def _exchange(
        self,
        method: str,
        path_or_url: str,
        authorization: str,
        *,
        params: Mapping[str, str | int] | None = None,
        json: Any = None,
        allow: tuple[int, ...] = (),
    ) -> http.Reply:
        url = path_or_url if "://" in path_or_url else self.base_url + path_or_url
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": USER_AGENT,
            "Authorization": authorization,
        }
        return http.answered(
            method,
            url,
            headers=headers,
            params=params,
            json=json,
            deadline=self.deadline,
            forge="GitHub",
            allow=allow,
            failure=self._failure,
        )

    def _failure(self, what: str, reply: http.Reply) -> ForgeRetryLater | ForgeRefused:
        said = http.message_of(reply)
        shown = f"GitHub answered {what} with {reply.status}" + (f": {said}" if said else "")
        if reply.status == 401:
            return ForgeRefused("BEM-827", shown)
        if reply.status in (403, 429):
            headers = reply.headers
            wait = parse_retry_after(headers.get("retry-after"))
            if headers.get("x-ratelimit-remaining") == "0":
                reset = http.number(headers.get("x-ratelimit-reset"))
                until = max(0.0, reset - self.now()) if reset is not None else None
                return ForgeRetryLater(
                    "BEM-826", shown, retry_after_seconds=until if wait is None else wait
                )
            if wait is not None or "secondary rate limit" in said.lower() or reply.status == 429:
                seconds = wait if wait is not None else SECONDARY_LIMIT_WAIT_SECONDS
                return ForgeRetryLater("BEM-825", shown, retry_after_seconds=seconds)
        return http.generic_failure("GitHub", what, reply)

    def _pages(self, path: str, repository: str) -> Iterator[dict[str, Any]]:
        """Every item of a listing, page after page by the Link header's ``next``."""
        url: str | None = self.base_url + path
        params: Mapping[str, str | int] | None = {"per_page": PAGE_SIZE}
        for _ in range(MAX_PAGES):
            if url is None:
                return
            reply = self._send("GET", url, repository, params=params)
            for item in _list(reply):
                if isinstance(item, dict):
                    yield item
            url, params = http.next_link(reply, self.base_url, "GitHub", "BEM-829"), None


def github_client(name: str, config: ForgeConfig) -> GitHubClient:
    """The client of the ``[forges.<name>]`` table of kind github: its App or its token."""
    credentials: GitHubCredentials
    if config.app_id is not None and config.private_key_file is not None:
        credentials = GitHubApp(config.app_id, config.private_key_file)
    elif config.token_file is not None:
        credentials = TokenFile(config.token_file)
    else:
        raise ForgeCredentialsError(
            "BEM-824", f"[forges.{name}] has neither app_id and private_key_file nor token_file"
        )
    base_url = str(config.base_url).rstrip("/") if config.base_url else GITHUB_API
    return GitHubClient(credentials, base_url=base_url)


def _repo(repository: str) -> str:
    owner, slash, name = repository.partition("/")
    if not slash or not owner or not name or "/" in name:
        raise ForgeRefused("BEM-823", f"{repository!r} is not a GitHub owner/name")
    return f"/repos/{_segment(owner)}/{_segment(name)}"


def _segment(text: str) -> str:
    # Quoted whole, so a login or sha cannot step into another path.
    return quote(text, safe="")


def _object(reply: http.Reply) -> dict[str, Any]:
    return http.reply_object(reply, "GitHub", "BEM-829")


def _list(reply: http.Reply) -> list[Any]:
    return http.reply_list(reply, "GitHub", "BEM-829")


def _malformed(reply: http.Reply, what: str) -> ForgeRefused:
    return http.malformed(reply, "GitHub", "BEM-829", what)


def _comment_ref(document: Mapping[str, Any], number: int, on: ThreadKind) -> CommentRef:
    try:
        return CommentRef(id=document["id"], number=number, url=document["html_url"], on=on)
    except (KeyError, ValueError) as error:
        raise ForgeRefused("BEM-829", f"GitHub's comment lacks {error}") from None


def _pull_ref(document: Mapping[str, Any], reply: http.Reply) -> PullRequestRef:
    try:
        return PullRequestRef(
            number=document["number"],
            url=document["html_url"],
            head=document["head"]["ref"],
            base=document["base"]["ref"],
            head_sha=document["head"]["sha"],
        )
    except (KeyError, TypeError, ValueError):
        raise _malformed(reply, "a pull request without number, html_url, head or base") from None
