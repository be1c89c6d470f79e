"""A stateful fake GitHub on loopback HTTP, every exchange held to GitHub's own description.

It holds repositories with their collaborators, issues, pull requests (head, base, changed
files), comments, reviews and commit statuses, GitHub Apps (their public keys) and their
installations, and the tokens it takes. Each request it receives must be an operation of
``api.github.com.json`` with the headers GitHub asks for, its parameters and body valid
against the operation, strictly (``harness.github_openapi``); each reply it sends is valid
against the operation's response schema for its status. A request that is not is answered
400 and kept in ``violations``, which a test expects empty at its end::

    with FakeGitHub() as github:
        repo = github.add_repository("octo/docs", collaborators={"ada": "write"})
        github.tokens.add("github_pat_test")
        ...
        assert github.violations == []

App auth is GitHub's: ``POST /app/installations/{id}/access_tokens`` and
``GET /repos/{owner}/{repo}/installation`` take an RS256 JWT signed with the App's key
(checked with its public key: issuer, issued-at, expiry at most ten minutes later); the
installation tokens it mints expire after ``token_ttl`` seconds of ``clock``.

``fail(operation, status, ...)`` scripts the next replies of an operation (``"*"``: any):
a 5xx, a 429, a secondary rate limit (403 with ``Retry-After``), the primary limit used up
(``X-RateLimit-Remaining: 0``). Replies it lists nowhere are held to ``basic-error``.

``validated_requests``, ``validated_replies`` and ``operations`` count what was checked.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt

from harness.forges import diff_shows
from harness.github_openapi import Description, Operation, Violation, description
from harness.loopback_fake import LoopbackFake

API_VERSION = "2022-11-28"
DOCS = "https://docs.github.com/rest"
SECONDARY_LIMIT_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
)
_LEGACY = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
}


DEFAULT_PATCH = "@@ -1 +1 @@\n-old\n+new"


@dataclass
class Pull:
    number: int
    title: str
    body: str
    author: str
    head: str
    base: str
    head_sha: str
    files: list[str]
    from_fork: bool = False
    draft: bool = False
    state: str = "open"
    # Each file's diff as the files endpoint serves it (``patch``); absent: a one-line change.
    patches: dict[str, str] = field(default_factory=dict)

    def patch(self, path: str) -> str:
        return self.patches.get(path, DEFAULT_PATCH)


@dataclass
class Comment:
    id: int
    number: int
    author: str
    body: str


@dataclass
class ReviewComment:
    id: int
    pull: int
    author: str
    path: str
    line: int | None
    body: str
    in_reply_to: int | None = None


@dataclass
class Repository:
    full_name: str
    id: int
    collaborators: dict[str, str]
    installation: int | None
    issues: dict[int, str] = field(default_factory=dict)
    pulls: dict[int, Pull] = field(default_factory=dict)
    comments: dict[int, Comment] = field(default_factory=dict)
    reviews: list[dict[str, Any]] = field(default_factory=list)
    # Line comments of reviews and their replies, by id (``in_reply_to`` None: a thread).
    review_comments: dict[int, ReviewComment] = field(default_factory=dict)
    statuses: list[dict[str, Any]] = field(default_factory=list)

    @property
    def owner(self) -> str:
        return self.full_name.split("/")[0]


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    operation: str | None
    authorization: str | None
    body: Any


@dataclass(frozen=True)
class Minted:
    installation: int
    token: str
    expires_at: float


class _Answer(Exception):
    def __init__(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, body, dict(headers or {})


def _error(status: int, message: str) -> _Answer:
    return _Answer(status, {"message": message, "documentation_url": DOCS, "status": str(status)})


class FakeGitHub(LoopbackFake):
    def __init__(
        self,
        *,
        prefix: str = "",
        clock: Callable[[], float] = time.time,
        token_ttl: float = 3600.0,
        judge: Description | None = None,
    ) -> None:
        self.prefix = prefix.rstrip("/")
        self.clock = clock
        self.token_ttl = token_ttl
        self.judge = judge or description()
        self.repositories: dict[str, Repository] = {}
        self.tokens: set[str] = set()
        self.apps: dict[int, bytes] = {}
        self.minted: list[Minted] = []
        self.requests: list[Seen] = []
        self.violations: list[str] = []
        self.validated_requests = 0
        self.validated_replies = 0
        self.operations: Counter[str] = Counter()
        self.next_link_base: str | None = None
        self._ids = itertools.count(1001)
        self._lock = threading.Lock()
        super().__init__()

    @property
    def url(self) -> str:
        """The API's base URL (``https://api.github.com``, or ``https://HOST/api/v3``)."""
        return self.origin + self.prefix

    # The state a test sets up

    def add_repository(
        self,
        full_name: str,
        *,
        collaborators: Mapping[str, str] | None = None,
        installation: int | None = None,
    ) -> Repository:
        repository = Repository(full_name, next(self._ids), dict(collaborators or {}), installation)
        self.repositories[full_name] = repository
        return repository

    def add_app(self, app_id: int, public_key_pem: bytes) -> None:
        self.apps[app_id] = public_key_pem

    def add_issue(self, repository: Repository, title: str) -> int:
        number = self._number(repository)
        repository.issues[number] = title
        return number

    def add_pull(
        self,
        repository: Repository,
        *,
        head: str,
        base: str = "main",
        title: str = "A change",
        body: str = "",
        author: str = "ada",
        files: list[str] | None = None,
        from_fork: bool = False,
        patches: dict[str, str] | None = None,
    ) -> Pull:
        pull = Pull(
            self._number(repository),
            title,
            body,
            author,
            head,
            base,
            hashlib.sha1(f"{repository.full_name}:{head}".encode()).hexdigest(),
            list(files or []),
            from_fork=from_fork,
            patches=dict(patches or {}),
        )
        repository.pulls[pull.number] = pull
        return pull

    def add_comment(self, repository: Repository, number: int, author: str, body: str) -> Comment:
        comment = Comment(next(self._ids), number, author, body)
        repository.comments[comment.id] = comment
        return comment

    # Serving

    def serve(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            status, extra, document = self._serve(method, target, headers, body)
        payload = b"" if document is None else json.dumps(document).encode()
        out = {"Content-Type": "application/json; charset=utf-8", **extra}
        out["X-GitHub-Api-Version-Selected"] = API_VERSION
        return status, out, payload

    def _serve(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(target)
        authorization = headers.get("authorization")
        try:
            if not parts.path.startswith(self.prefix + "/"):
                raise Violation(f"{parts.path} is not under the API's base {self.prefix or '/'}")
            operation = self.judge.operation(method, parts.path.removeprefix(self.prefix))
        except Violation as violation:
            self.requests.append(Seen(method, parts.path, None, authorization, None))
            return self._violated(violation)
        try:
            _check_headers(headers, body)
            query = parse_qs(parts.query, keep_blank_values=True)
            document = self.judge.check_request(operation, query, body)
        except Violation as violation:
            self.requests.append(Seen(method, parts.path, operation.id, authorization, None))
            return self._violated(violation)
        self.validated_requests += 1
        self.operations[operation.id] += 1
        self.requests.append(Seen(method, parts.path, operation.id, authorization, document))
        try:
            self._scripted(operation.id)
            status, reply = self._handle(operation, query, document, authorization)
            extra: dict[str, str] = {}
            if isinstance(reply, _Page):
                extra["Link"] = reply.link(self._link_base(headers) + parts.path, query)
                reply = reply.items
        except _Answer as answer:
            status, reply, extra = answer.status, answer.body, answer.headers
        try:
            self.judge.check_reply(operation, status, reply)
        except Violation as violation:
            self.violations.append(f"reply: {violation}")
            return 500, {}, {"message": f"fake GitHub sent an invalid reply: {violation}"}
        self.validated_replies += 1
        return status, extra, reply

    def _violated(self, violation: Violation) -> tuple[int, dict[str, str], Any]:
        self.violations.append(str(violation))
        return 400, {}, {"message": f"not api.github.com.json: {violation}", "status": "400"}

    def _link_base(self, headers: Mapping[str, str]) -> str:
        return self.next_link_base or f"http://{headers.get('host', '127.0.0.1')}"

    def _scripted(self, operation: str) -> None:
        failure = self.scripted(operation)
        if failure is not None:
            answer = _error(failure.status, failure.message)
            answer.headers.update(failure.headers)
            raise answer

    def _number(self, repository: Repository) -> int:
        return 1 + max([0, *repository.issues, *repository.pulls])

    # The operations

    def _handle(
        self,
        operation: Operation,
        query: Mapping[str, list[str]],
        body: Any,
        authorization: str | None,
    ) -> tuple[int, Any]:
        values = operation.path_values
        if operation.id == "apps/create-installation-access-token":
            return 201, self._mint(int(values["installation_id"]), authorization)
        repository = self.repositories.get(f"{values.get('owner')}/{values.get('repo')}")
        if operation.id == "apps/get-repo-installation":
            self._app(authorization)
            if repository is None or repository.installation is None:
                raise _error(404, "Not Found")
            return 200, self._installation(repository)
        self._authorized(repository, authorization)
        assert repository is not None
        handler = _OPERATIONS.get(operation.id)
        if handler is None:
            raise _error(404, f"the fake does not serve {operation.id}")
        return handler(self, repository, values, query, body)

    def _app(self, authorization: str | None) -> int:
        """The id of the App whose JWT this is, once its signature and times are GitHub's."""
        token = _bearer(authorization)
        try:
            claimed = jwt.decode(token, options={"verify_signature": False})
            app_id = int(claimed["iss"])
            key = self.apps[app_id]
            claims = jwt.decode(
                token,
                key,
                algorithms=["RS256"],
                options={"verify_exp": False, "verify_iat": False, "require": ["iat", "exp"]},
            )
        except (jwt.PyJWTError, KeyError, ValueError, TypeError):
            raise _error(401, "A JSON web token could not be decoded") from None
        now = self.clock()
        if not claims["iat"] <= now < claims["exp"] or claims["exp"] - claims["iat"] > 600:
            raise _error(401, "'Expiration time' claim ('exp') is too far in the future")
        return app_id

    def _mint(self, installation: int, authorization: str | None) -> dict[str, Any]:
        self._app(authorization)
        if not any(r.installation == installation for r in self.repositories.values()):
            raise _error(404, "Not Found")
        token = "ghs_" + secrets.token_hex(18)
        expires_at = self.clock() + self.token_ttl
        self.minted.append(Minted(installation, token, expires_at))
        reply = self.judge.example("#/components/examples/installation-token")
        reply["token"] = token
        reply["expires_at"] = _iso(expires_at)
        reply.pop("repositories", None)
        return dict(reply)

    def _authorized(self, repository: Repository | None, authorization: str | None) -> None:
        token = _bearer(authorization)
        if token in self.tokens:
            if repository is None:
                raise _error(404, "Not Found")
            return
        live = [m for m in self.minted if m.token == token and m.expires_at > self.clock()]
        if not live:
            raise _error(401, "Bad credentials")
        if repository is None or repository.installation != live[0].installation:
            raise _error(404, "Not Found")

    def _installation(self, repository: Repository) -> dict[str, Any]:
        reply = self.judge.example("#/components/examples/installation")
        reply["id"] = repository.installation
        return dict(reply)

    def user(self, login: str) -> dict[str, Any]:
        user = self.judge.example("#/components/examples/pull-request")["user"]
        user["login"] = login
        user["id"] = int(hashlib.sha1(login.encode()).hexdigest()[:6], 16)
        return dict(user)

    def pull_document(self, repository: Repository, pull: Pull, *, simple: bool = False) -> Any:
        ref = "pull-request-simple-items" if simple else "pull-request"
        document = self.judge.example(f"#/components/examples/{ref}")
        document = document[0] if simple else document
        html = f"https://github.com/{repository.full_name}/pull/{pull.number}"
        document.update(
            number=pull.number,
            title=pull.title,
            body=pull.body or None,
            state=pull.state,
            draft=pull.draft,
            html_url=html,
            user=self.user(pull.author),
            requested_teams=[],
        )
        document["head"].update(ref=pull.head, sha=pull.head_sha, label=f"x:{pull.head}")
        document["base"].update(ref=pull.base, label=f"{repository.owner}:{pull.base}")
        document["base"]["repo"]["full_name"] = repository.full_name
        head_repo = document["head"]["repo"]
        head_repo["full_name"] = (
            f"fork/{repository.full_name}" if pull.from_fork else repository.full_name
        )
        return document

    def comment_document(self, repository: Repository, comment: Comment) -> Any:
        document = self.judge.example("#/components/examples/issue-comment")
        document.update(
            id=comment.id,
            body=comment.body,
            user=self.user(comment.author),
            html_url=f"https://github.com/{repository.full_name}/issues/{comment.number}#issuecomment-{comment.id}",
        )
        return document


@dataclass(frozen=True)
class _Page:
    items: list[Any]
    page: int
    last: int

    def link(self, url: str, query: Mapping[str, list[str]]) -> str:
        def at(page: int) -> str:
            given = {k: v[0] for k, v in query.items() if k != "page"}
            return f"<{url}?{urlencode({**given, 'page': page})}>"

        links = []
        if self.page < self.last:
            links += [f'{at(self.page + 1)}; rel="next"', f'{at(self.last)}; rel="last"']
        if self.page > 1:
            links += [f'{at(1)}; rel="first"', f'{at(self.page - 1)}; rel="prev"']
        return ", ".join(links)


def _paged(items: list[Any], query: Mapping[str, list[str]]) -> _Page:
    size = min(100, int(query.get("per_page", ["30"])[0]))
    page = max(1, int(query.get("page", ["1"])[0]))
    last = max(1, -(-len(items) // size))
    return _Page(items[(page - 1) * size : page * size], page, last)


Handler = Callable[
    [FakeGitHub, Repository, Mapping[str, str], Mapping[str, list[str]], Any], tuple[int, Any]
]


def _permission(
    github: FakeGitHub, repository: Repository, values: Mapping[str, str], _q: Any, _b: Any
) -> tuple[int, Any]:
    login = values["username"]
    role = repository.collaborators.get(login)
    if role is None:
        raise _error(404, f"{login} is not a user")
    user = github.user(login)
    user["role_name"] = role
    user["permissions"] = {
        "pull": True,
        "triage": role != "read",
        "push": role in ("write", "maintain", "admin"),
        "maintain": role in ("maintain", "admin"),
        "admin": role == "admin",
    }
    return 200, {"permission": _LEGACY.get(role, "read"), "role_name": role, "user": user}


def _pull(repository: Repository, values: Mapping[str, str]) -> Pull:
    pull = repository.pulls.get(int(values["pull_number"]))
    if pull is None:
        raise _error(404, "Not Found")
    return pull


def _get_pull(
    github: FakeGitHub, repository: Repository, values: Mapping[str, str], _q: Any, _b: Any
) -> tuple[int, Any]:
    return 200, github.pull_document(repository, _pull(repository, values))


def _update_pull(
    github: FakeGitHub, repository: Repository, values: Mapping[str, str], _q: Any, body: Any
) -> tuple[int, Any]:
    pull = _pull(repository, values)
    pull.title = body.get("title", pull.title)
    pull.body = body.get("body", pull.body)
    return 200, github.pull_document(repository, pull)


def _files(
    github: FakeGitHub, repository: Repository, values: Mapping[str, str], query: Any, _b: Any
) -> tuple[int, Any]:
    template = github.judge.example("#/components/examples/diff-entry-items")[0]
    pull = _pull(repository, values)
    entries = [{**template, "filename": name, "patch": pull.patch(name)} for name in pull.files]
    return 200, _paged(entries, query)


def _issue_number(repository: Repository, values: Mapping[str, str]) -> int:
    number = int(values["issue_number"])
    if number not in repository.issues and number not in repository.pulls:
        raise _error(404, "Not Found")
    return number


def _list_comments(
    github: FakeGitHub, repository: Repository, values: Mapping[str, str], query: Any, _b: Any
) -> tuple[int, Any]:
    number = _issue_number(repository, values)
    found = [c for c in repository.comments.values() if c.number == number]
    return 200, _paged([github.comment_document(repository, c) for c in found], query)


def _create_comment(
    github: FakeGitHub, repository: Repository, values: Mapping[str, str], _q: Any, body: Any
) -> tuple[int, Any]:
    number = _issue_number(repository, values)
    comment = github.add_comment(repository, number, "riverbeam[bot]", body["body"])
    return 201, github.comment_document(repository, comment)


def _update_comment(
    github: FakeGitHub, repository: Repository, values: Mapping[str, str], _q: Any, body: Any
) -> tuple[int, Any]:
    comment = repository.comments.get(int(values["comment_id"]))
    if comment is None:
        raise _error(404, "Not Found")
    comment.body = body["body"]
    return 200, github.comment_document(repository, comment)


def _list_pulls(
    github: FakeGitHub, repository: Repository, _v: Any, query: Mapping[str, list[str]], _b: Any
) -> tuple[int, Any]:
    state = query.get("state", ["open"])[0]
    head = query.get("head", [None])[0]
    base = query.get("base", [None])[0]
    found = [
        p
        for p in repository.pulls.values()
        if state in ("all", p.state)
        and (head is None or (not p.from_fork and head == f"{repository.owner}:{p.head}"))
        and (base is None or base == p.base)
    ]
    items = [github.pull_document(repository, p, simple=True) for p in found]
    return 200, _paged(items, query)


def _create_pull(
    github: FakeGitHub, repository: Repository, _v: Any, _q: Any, body: Any
) -> tuple[int, Any]:
    open_ = [p for p in repository.pulls.values() if p.state == "open" and not p.from_fork]
    if any(p.head == body["head"] and p.base == body["base"] for p in open_):
        message = f"A pull request already exists for {repository.owner}:{body['head']}."
        raise _Answer(
            422,
            {
                "message": "Validation Failed",
                "documentation_url": DOCS,
                "errors": [{"resource": "PullRequest", "code": "custom", "message": message}],
            },
        )
    pull = github.add_pull(
        repository,
        head=body["head"],
        base=body["base"],
        title=body["title"],
        body=body.get("body", ""),
        author="riverbeam[bot]",
    )
    return 201, github.pull_document(repository, pull)


def _create_review(
    github: FakeGitHub, repository: Repository, values: Mapping[str, str], _q: Any, body: Any
) -> tuple[int, Any]:
    pull = _pull(repository, values)
    for comment in body.get("comments", []):
        if comment["path"] not in pull.files:
            raise _Answer(
                422,
                {
                    "message": "Unprocessable Entity",
                    "documentation_url": DOCS,
                    "errors": ["Pull request review thread path is invalid"],
                },
            )
        shown = diff_shows(pull.patch(comment["path"]), comment.get("side", "RIGHT"))
        if comment.get("line") not in shown:
            raise _Answer(
                422,
                {
                    "message": "Unprocessable Entity",
                    "documentation_url": DOCS,
                    "errors": ["Pull request review thread line must be part of the diff"],
                },
            )
    repository.reviews.append({"pull": pull.number, **body})
    for comment in body.get("comments", []):
        made = ReviewComment(
            next(github._ids),
            pull.number,
            "riverbeam[bot]",
            comment["path"],
            comment.get("line"),
            comment["body"],
        )
        repository.review_comments[made.id] = made
    document = github.judge.example("#/components/examples/pull-request-review")
    document.update(
        id=next(github._ids),
        body=body.get("body", ""),
        commit_id=body.get("commit_id", pull.head_sha),
        state="APPROVED" if body.get("event") == "APPROVE" else "COMMENTED",
        user=github.user("riverbeam[bot]"),
    )
    return 200, document


def _review_comment_document(
    github: FakeGitHub, repository: Repository, comment: ReviewComment
) -> Any:
    document = github.judge.example("#/components/examples/review-comment-items")[0]
    document.update(
        id=comment.id,
        body=comment.body,
        path=comment.path,
        line=comment.line,
        user=github.user(comment.author),
        pull_request_url=f"{github.url}/repos/{repository.full_name}/pulls/{comment.pull}",
    )
    if comment.in_reply_to is None:
        document.pop("in_reply_to_id", None)
    else:
        document["in_reply_to_id"] = comment.in_reply_to
    return document


def _list_review_comments(
    github: FakeGitHub, repository: Repository, values: Mapping[str, str], query: Any, _b: Any
) -> tuple[int, Any]:
    pull = _pull(repository, values)
    found = [c for c in repository.review_comments.values() if c.pull == pull.number]
    return 200, _paged([_review_comment_document(github, repository, c) for c in found], query)


def _reply_to_review_comment(
    github: FakeGitHub, repository: Repository, values: Mapping[str, str], _q: Any, body: Any
) -> tuple[int, Any]:
    pull = _pull(repository, values)
    root = repository.review_comments.get(int(values["comment_id"]))
    if root is None or root.pull != pull.number:
        raise _error(404, "Not Found")
    reply = ReviewComment(
        next(github._ids),
        pull.number,
        "riverbeam[bot]",
        root.path,
        root.line,
        body["body"],
        in_reply_to=root.id,
    )
    repository.review_comments[reply.id] = reply
    return 201, _review_comment_document(github, repository, reply)


def _create_status(
    github: FakeGitHub, repository: Repository, values: Mapping[str, str], _q: Any, body: Any
) -> tuple[int, Any]:
    repository.statuses.append({"sha": values["sha"], **body})
    document = github.judge.example("#/components/examples/status")
    document.update(
        state=body["state"],
        context=body.get("context", "default"),
        description=body.get("description"),
        target_url=body.get("target_url"),
        creator=github.user("riverbeam[bot]"),
    )
    return 201, document


_OPERATIONS: dict[str, Handler] = {
    "repos/get-collaborator-permission-level": _permission,
    "pulls/get": _get_pull,
    "pulls/update": _update_pull,
    "pulls/list-files": _files,
    "pulls/list-review-comments": _list_review_comments,
    "pulls/create-reply-for-review-comment": _reply_to_review_comment,
    "issues/list-comments": _list_comments,
    "issues/create-comment": _create_comment,
    "issues/update-comment": _update_comment,
    "pulls/list": _list_pulls,
    "pulls/create": _create_pull,
    "pulls/create-review": _create_review,
    "repos/create-commit-status": _create_status,
}


def _check_headers(headers: Mapping[str, str], body: bytes) -> None:
    """What GitHub asks of every client: its media type, an API version, a User-Agent."""
    if headers.get("accept") != "application/vnd.github+json":
        raise Violation(f"Accept is {headers.get('accept')!r}, not application/vnd.github+json")
    if headers.get("x-github-api-version") != API_VERSION:
        raise Violation(f"X-GitHub-Api-Version is {headers.get('x-github-api-version')!r}")
    if not headers.get("user-agent"):
        raise Violation("no User-Agent: GitHub refuses such requests")
    if body and not headers.get("content-type", "").startswith("application/json"):
        raise Violation(f"a body sent as {headers.get('content-type')!r}, not JSON")


def _bearer(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() not in ("bearer", "token") or not token:
        raise _error(401, "Requires authentication")
    return token


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
