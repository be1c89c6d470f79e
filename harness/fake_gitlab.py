"""A stateful fake GitLab on loopback HTTP, every exchange held to the shapes of GitLab's API
documentation (``harness.gitlab_shapes``, each endpoint citing its docs.gitlab.com page).

It holds users, projects with their members (access levels), issues and merge requests
(numbered apart: each starts at iid 1), notes, diff discussions and commit statuses, and the
access tokens it takes. Each request must be a documented endpoint, with a ``PRIVATE-TOKEN``,
its query and JSON body valid against the endpoint's schemas, strictly; each reply is valid
against the endpoint's reply schema (or GitLab's error shape). A request that is not is
answered 400 (``{"error": ...}``, as GitLab's own validation answers) and kept in
``violations``, which a test expects empty at its end::

    with FakeGitLab() as gitlab:
        project = gitlab.add_project("docs/team/handbook", members={"ada": 30})
        gitlab.tokens.add("glpat-test")
        ...
        assert gitlab.violations == []

Listings are paginated as GitLab's offset pagination is (``X-Page``, ``X-Next-Page``, ...,
and a Link header); ``link_only`` drops the ``X-`` headers, as keyset pagination does.
``fail(endpoint, status, ...)`` scripts the next replies of an endpoint (``"*"``: any): a 5xx,
a 429 with ``Retry-After`` and ``RateLimit-*``, a 401.

``validated_requests``, ``validated_replies`` and ``operations`` count what was checked.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import jsonschema

from harness.forges import diff_shows
from harness.gitlab_shapes import ENDPOINTS, ERROR, Endpoint
from harness.loopback_fake import LoopbackFake

API = "/api/v4"
BOT = "riverbeam-bot"
CREATED_AT = "2026-12-01T09:00:00.000Z"


class Violation(Exception):
    """A request or reply that GitLab's documentation does not allow."""


@dataclass
class Merge:
    iid: int
    title: str
    description: str
    author: str
    source_branch: str
    target_branch: str
    sha: str
    files: list[tuple[str, str]]
    from_fork: bool = False
    draft: bool = False
    state: str = "opened"
    diff_ready: bool = True
    id: int = 0
    # Each file's diff by its new path, as the diffs endpoint serves it; absent: one line.
    diffs: dict[str, str] = field(default_factory=dict)

    def diff(self, path: str) -> str:
        return self.diffs.get(path, "@@ -1 +1 @@\n-old\n+new\n")


@dataclass
class Note:
    id: int
    on: str
    iid: int
    author: str
    body: str
    system: bool = False
    position: dict[str, Any] | None = None
    # The thread it is in: its first note's discussion id (a diff thread's), None for a note.
    discussion: str | None = None
    resolved: bool = False


@dataclass
class Project:
    id: int
    path: str
    members: dict[str, int]
    issues: dict[int, str] = field(default_factory=dict)
    merges: dict[int, Merge] = field(default_factory=dict)
    notes: dict[int, Note] = field(default_factory=dict)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    blocked: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    endpoint: str | None
    token: str | None
    body: Any


class _Answer(Exception):
    def __init__(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, body, dict(headers or {})


def _error(status: int, message: Any) -> _Answer:
    return _Answer(status, {"message": message})


@dataclass(frozen=True)
class _Page:
    items: list[Any]
    page: int
    per_page: int
    total: int


@dataclass(frozen=True)
class _Route:
    endpoint: Endpoint
    pattern: re.Pattern[str]


def _route(endpoint: Endpoint) -> _Route:
    # A value is one path segment: an encoded project path holds %2F, never a slash.
    regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", endpoint.template)
    return _Route(endpoint, re.compile(f"^{API}{regex}$"))


_ROUTES = tuple(_route(e) for e in ENDPOINTS)
_INTEGER_VALUES = ("user_id", "merge_request_iid", "issue_iid", "note_id")


class FakeGitLab(LoopbackFake):
    DEFAULT_FAILURE = "500 Internal Server Error"

    def __init__(self) -> None:
        self.users: dict[str, int] = {}
        self.projects: dict[str, Project] = {}
        self.tokens: set[str] = set()
        self.requests: list[Seen] = []
        self.violations: list[str] = []
        self.validated_requests = 0
        self.validated_replies = 0
        self.operations: Counter[str] = Counter()
        self.link_only = False
        self.next_link_base: str | None = None
        self._ids = itertools.count(101)
        self._lock = threading.Lock()
        super().__init__()

    @property
    def url(self) -> str:
        """The instance's URL (``https://gitlab.com``); the API is under ``/api/v4``."""
        return self.origin

    # The state a test sets up

    def add_user(self, username: str) -> int:
        return self.users.setdefault(username, next(self._ids))

    def add_project(self, path: str, *, members: Mapping[str, int] | None = None) -> Project:
        project = Project(next(self._ids), path, dict(members or {}))
        for username in project.members:
            self.add_user(username)
        self.add_user(BOT)
        self.projects[path.lower()] = project
        return project

    def add_issue(self, project: Project, title: str) -> int:
        iid = 1 + max([0, *project.issues])
        project.issues[iid] = title
        return iid

    def add_merge(
        self,
        project: Project,
        *,
        source_branch: str,
        target_branch: str = "main",
        title: str = "A change",
        description: str = "",
        author: str = "ada",
        files: list[str] | list[tuple[str, str]] | None = None,
        from_fork: bool = False,
    ) -> Merge:
        self.add_user(author)
        paths = [(f, f) if isinstance(f, str) else f for f in files or []]
        merge = Merge(
            1 + max([0, *project.merges]),
            title,
            description,
            author,
            source_branch,
            target_branch,
            _sha(f"{project.path}:{source_branch}"),
            paths,
            from_fork=from_fork,
            id=next(self._ids),
        )
        project.merges[merge.iid] = merge
        return merge

    def add_note(
        self, project: Project, on: str, iid: int, author: str, body: str, *, system: bool = False
    ) -> Note:
        self.add_user(author)
        note = Note(next(self._ids), on, iid, author, body, system=system)
        project.notes[note.id] = note
        return note

    # Serving

    def serve(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            status, extra, document = self._serve(method, target, headers, body)
        payload = b"" if document is None else json.dumps(document).encode()
        return status, {"Content-Type": "application/json", **extra}, payload

    def _serve(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(target)
        token = headers.get("private-token")
        try:
            route, values = _match(method, parts.path)
        except Violation as violation:
            self.requests.append(Seen(method, parts.path, None, token, None))
            return self._violated(violation)
        endpoint = route.endpoint
        try:
            query = _query(endpoint, parts.query)
            document = _body(endpoint, headers, body)
        except Violation as violation:
            self.requests.append(Seen(method, parts.path, endpoint.id, token, None))
            return self._violated(violation)
        self.validated_requests += 1
        self.operations[endpoint.id] += 1
        self.requests.append(Seen(method, parts.path, endpoint.id, token, document))
        extra: dict[str, str] = {}
        try:
            self._scripted(endpoint.id)
            if token is None or token not in self.tokens:
                raise _error(401, "401 Unauthorized")
            status, reply = _HANDLERS[endpoint.id](self, values, query, document)
            if isinstance(reply, _Page):
                extra = self._paging(reply, headers.get("host", "127.0.0.1"), parts.path, query)
                reply = reply.items
        except _Answer as answer:
            status, reply, extra = answer.status, answer.body, answer.headers
        schema = endpoint.reply if status == endpoint.status else ERROR
        try:
            _validate(schema, reply, f"{endpoint.id} reply {status}")
        except Violation as violation:
            self.violations.append(f"reply: {violation}")
            return 500, {}, {"message": f"fake GitLab sent an invalid reply: {violation}"}
        self.validated_replies += 1
        return status, extra, reply

    def _violated(self, violation: Violation) -> tuple[int, dict[str, str], Any]:
        self.violations.append(str(violation))
        return 400, {}, {"error": f"not GitLab's documented API: {violation}"}

    def _scripted(self, endpoint: str) -> None:
        failure = self.scripted(endpoint)
        if failure is not None:
            raise _Answer(failure.status, {"message": failure.message}, failure.headers)

    def _paging(
        self, page: _Page, host: str, path: str, query: Mapping[str, str]
    ) -> dict[str, str]:
        last = max(1, -(-page.total // page.per_page))
        base = (self.next_link_base or f"http://{host}") + path

        def at(number: int) -> str:
            return f"<{base}?{urlencode({**query, 'page': number})}>"

        links = []
        if page.page < last:
            links += [f'{at(page.page + 1)}; rel="next"']
        links += [f'{at(1)}; rel="first"', f'{at(last)}; rel="last"']
        out = {"Link": ", ".join(links)}
        if not self.link_only:
            out |= {
                "X-Page": str(page.page),
                "X-Per-Page": str(page.per_page),
                "X-Next-Page": str(page.page + 1) if page.page < last else "",
                "X-Prev-Page": str(page.page - 1) if page.page > 1 else "",
                "X-Total": str(page.total),
                "X-Total-Pages": str(last),
            }
        return out

    # The documents GitLab answers with

    def project(self, values: Mapping[str, str]) -> Project:
        given = unquote(values["id"])
        for project in self.projects.values():
            if given.lower() == project.path.lower() or given == str(project.id):
                return project
        raise _error(404, "404 Project Not Found")

    def user(self, username: str) -> dict[str, Any]:
        return {
            "id": self.add_user(username),
            "username": username,
            "name": username.title(),
            "state": "active",
            "avatar_url": None,
            "web_url": f"{self.url}/{username}",
        }

    def merge_document(self, project: Project, merge: Merge, *, single: bool) -> Any:
        document: dict[str, Any] = {
            "id": merge.id,
            "iid": merge.iid,
            "project_id": project.id,
            "title": merge.title,
            "description": merge.description,
            "state": merge.state,
            "source_branch": merge.source_branch,
            "target_branch": merge.target_branch,
            "source_project_id": project.id + (1000 if merge.from_fork else 0),
            "target_project_id": project.id,
            "author": self.user(merge.author),
            "draft": merge.draft,
            "sha": merge.sha,
            "web_url": f"{self.url}/{project.path}/-/merge_requests/{merge.iid}",
        }
        if single:
            base = _sha(f"{project.path}:{merge.target_branch}")
            ready = merge.diff_ready
            refs = {"base_sha": base, "start_sha": base, "head_sha": merge.sha}
            document["diff_refs"] = refs if ready else None
        return document

    def note_document(self, project: Project, note: Note) -> Any:
        document: dict[str, Any] = {
            "id": note.id,
            "type": "DiffNote" if note.position else None,
            "body": note.body,
            "author": self.user(note.author),
            "created_at": CREATED_AT,
            "updated_at": CREATED_AT,
            "system": note.system,
            "noteable_type": "Issue" if note.on == "issue" else "MergeRequest",
            "noteable_iid": note.iid,
            "project_id": project.id,
            "resolvable": note.position is not None,
        }
        if note.position is not None:
            document["resolved"] = note.resolved
        if note.position:
            document["position"] = note.position
        return document


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _match(method: str, path: str) -> tuple[_Route, dict[str, str]]:
    for route in _ROUTES:
        found = route.pattern.match(path)
        if found and route.endpoint.method == method:
            values = found.groupdict()
            for name in _INTEGER_VALUES:
                if name in values and not values[name].isdigit():
                    raise Violation(f"{route.endpoint.id}: {name} {values[name]!r} is no integer")
            if "id" in values and not (
                values["id"].isdigit() or re.fullmatch(r"[^/]+%2F[^/]+", values["id"])
            ):
                raise Violation(f"{path}: the project is neither an id nor a URL-encoded path")
            return route, values
    raise Violation(f"{method} {path} is no endpoint of GitLab's that the fake knows")


def _query(endpoint: Endpoint, text: str) -> dict[str, str]:
    parsed = parse_qs(text, keep_blank_values=True)
    repeated = [k for k, v in parsed.items() if len(v) > 1]
    if repeated:
        raise Violation(f"{endpoint.id}: {repeated} given more than once")
    query = {k: v[0] for k, v in parsed.items()}
    _validate(endpoint.query, query, f"{endpoint.id} query")
    return query


def _body(endpoint: Endpoint, headers: Mapping[str, str], body: bytes) -> Any:
    if endpoint.body is None:
        if body:
            raise Violation(f"{endpoint.id} takes no body")
        return None
    if not headers.get("content-type", "").startswith("application/json"):
        raise Violation(f"{endpoint.id}: a body sent as {headers.get('content-type')!r}")
    try:
        document = json.loads(body)
    except ValueError:
        raise Violation(f"{endpoint.id}: a body that is not JSON") from None
    _validate(endpoint.body, document, f"{endpoint.id} body")
    return document


def _validate(schema: Any, instance: Any, what: str) -> None:
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(instance)
    )
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(root)"
        raise Violation(f"{what}: at {where}: {error.message[:300]}")


def _paged(items: list[Any], query: Mapping[str, str]) -> _Page:
    # GitLab's default page holds 20, at most 100.
    size = int(query.get("per_page", "20"))
    page = max(1, int(query.get("page", "1")))
    return _Page(items[(page - 1) * size : page * size], page, size, len(items))


Handler = Callable[[FakeGitLab, Mapping[str, str], Mapping[str, str], Any], tuple[int, Any]]


def _users(gitlab: FakeGitLab, _v: Any, query: Mapping[str, str], _b: Any) -> tuple[int, Any]:
    wanted = query.get("username")
    found = [u for u in gitlab.users if wanted is None or u.lower() == wanted.lower()]
    return 200, _paged([gitlab.user(u) for u in found], query)


def _member(gitlab: FakeGitLab, values: Mapping[str, str], _q: Any, _b: Any) -> tuple[int, Any]:
    project = gitlab.project(values)
    by_id = {i: name for name, i in gitlab.users.items()}
    username = by_id.get(int(values["user_id"]))
    if username is None or username not in project.members:
        raise _error(404, "404 Not found")
    document = gitlab.user(username)
    document["access_level"] = project.members[username]
    document["expires_at"] = None
    if username in project.blocked:
        document["state"] = "blocked"
    return 200, document


def _merge(project: Project, values: Mapping[str, str]) -> Merge:
    merge = project.merges.get(int(values["merge_request_iid"]))
    if merge is None:
        raise _error(404, "404 Not found")
    return merge


def _list_merges(
    gitlab: FakeGitLab, values: Mapping[str, str], query: Mapping[str, str], _b: Any
) -> tuple[int, Any]:
    project = gitlab.project(values)
    state = query.get("state", "all")
    found = [
        m
        for m in project.merges.values()
        if state in ("all", m.state)
        and query.get("source_branch", m.source_branch) == m.source_branch
        and query.get("target_branch", m.target_branch) == m.target_branch
    ]
    items = [gitlab.merge_document(project, m, single=False) for m in found]
    return 200, _paged(items, query)


def _get_merge(gitlab: FakeGitLab, values: Mapping[str, str], _q: Any, _b: Any) -> tuple[int, Any]:
    project = gitlab.project(values)
    return 200, gitlab.merge_document(project, _merge(project, values), single=True)


def _create_merge(
    gitlab: FakeGitLab, values: Mapping[str, str], _q: Any, body: Any
) -> tuple[int, Any]:
    project = gitlab.project(values)
    source, target = body["source_branch"], body["target_branch"]
    for merge in project.merges.values():
        mine = merge.state == "opened" and not merge.from_fork
        if mine and (merge.source_branch, merge.target_branch) == (source, target):
            message = "Another open merge request already exists for this source branch"
            raise _error(409, [f"{message}: !{merge.iid}"])
    merge = gitlab.add_merge(
        project,
        source_branch=source,
        target_branch=target,
        title=body["title"],
        description=body.get("description", ""),
        author=BOT,
    )
    return 201, gitlab.merge_document(project, merge, single=True)


def _update_merge(
    gitlab: FakeGitLab, values: Mapping[str, str], _q: Any, body: Any
) -> tuple[int, Any]:
    project = gitlab.project(values)
    merge = _merge(project, values)
    merge.title = body.get("title", merge.title)
    merge.description = body.get("description", merge.description)
    return 200, gitlab.merge_document(project, merge, single=True)


def _diffs(
    gitlab: FakeGitLab, values: Mapping[str, str], query: Mapping[str, str], _b: Any
) -> tuple[int, Any]:
    merge = _merge(gitlab.project(values), values)
    items = [
        {
            "old_path": old,
            "new_path": new,
            "a_mode": "100644",
            "b_mode": "100644",
            "new_file": False,
            "renamed_file": old != new,
            "deleted_file": False,
            "generated_file": False,
            "diff": merge.diff(new),
        }
        for old, new in merge.files
    ]
    return 200, _paged(items, query)


def _noteable(project: Project, on: str, values: Mapping[str, str]) -> int:
    if on == "issue":
        iid = int(values["issue_iid"])
        if iid not in project.issues:
            raise _error(404, "404 Issue Not Found")
        return iid
    return _merge(project, values).iid


def _notes_of(on: str) -> tuple[Handler, Handler, Handler]:
    def listing(
        gitlab: FakeGitLab, values: Mapping[str, str], query: Mapping[str, str], _b: Any
    ) -> tuple[int, Any]:
        project = gitlab.project(values)
        iid = _noteable(project, on, values)
        found = [n for n in project.notes.values() if n.on == on and n.iid == iid]
        if query.get("sort", "desc") == "desc":
            found.reverse()
        return 200, _paged([gitlab.note_document(project, n) for n in found], query)

    def create(
        gitlab: FakeGitLab, values: Mapping[str, str], _q: Any, body: Any
    ) -> tuple[int, Any]:
        project = gitlab.project(values)
        note = gitlab.add_note(project, on, _noteable(project, on, values), BOT, body["body"])
        return 201, gitlab.note_document(project, note)

    def update(
        gitlab: FakeGitLab, values: Mapping[str, str], _q: Any, body: Any
    ) -> tuple[int, Any]:
        project = gitlab.project(values)
        iid = _noteable(project, on, values)
        note = project.notes.get(int(values["note_id"]))
        if note is None or note.on != on or note.iid != iid:
            raise _error(404, "404 Note Not Found")
        note.body = body["body"]
        return 200, gitlab.note_document(project, note)

    return listing, create, update


def _discussion(
    gitlab: FakeGitLab, values: Mapping[str, str], _q: Any, body: Any
) -> tuple[int, Any]:
    project = gitlab.project(values)
    merge = _merge(project, values)
    position = body.get("position")
    if position is not None:
        refs = gitlab.merge_document(project, merge, single=True)["diff_refs"]
        shas = {k: position[k] for k in ("base_sha", "start_sha", "head_sha")}
        if refs is None or shas != refs:
            raise _Answer(400, {"message": {"base": ["position is invalid"]}})
        if (position["old_path"], position["new_path"]) not in merge.files:
            raise _Answer(400, {"message": {"line_code": ["can't be blank"]}})
        diff = merge.diff(position["new_path"])
        for key, side in (("new_line", "RIGHT"), ("old_line", "LEFT")):
            if key in position and position[key] not in diff_shows(diff, side):
                raise _Answer(400, {"message": {"line_code": ["can't be blank"]}})
    note = gitlab.add_note(project, "pull_request", merge.iid, BOT, body["body"])
    note.position, note.discussion = position, _sha(f"discussion:{note.id}")
    return 201, _discussion_document(gitlab, project, note.discussion)


def _discussion_document(gitlab: FakeGitLab, project: Project, discussion: str) -> Any:
    notes = [n for n in project.notes.values() if n.discussion == discussion]
    return {
        "id": discussion,
        "individual_note": False,
        "notes": [gitlab.note_document(project, n) for n in notes],
    }


def _discussions(
    gitlab: FakeGitLab, values: Mapping[str, str], query: Mapping[str, str], _b: Any
) -> tuple[int, Any]:
    project = gitlab.project(values)
    merge = _merge(project, values)
    threads = [n.discussion for n in project.notes.values() if n.iid == merge.iid]
    unique = list(dict.fromkeys(t for t in threads if t is not None))
    items = [_discussion_document(gitlab, project, t) for t in unique]
    return 200, _paged(items, query)


def _discussion_note(
    gitlab: FakeGitLab, values: Mapping[str, str], _q: Any, body: Any
) -> tuple[int, Any]:
    project = gitlab.project(values)
    merge = _merge(project, values)
    discussion = values["discussion_id"]
    if not any(n.discussion == discussion and n.iid == merge.iid for n in project.notes.values()):
        raise _error(404, "404 Discussion Not Found")
    note = gitlab.add_note(project, "pull_request", merge.iid, BOT, body["body"])
    note.discussion = discussion
    return 201, gitlab.note_document(project, note)


def _status(gitlab: FakeGitLab, values: Mapping[str, str], _q: Any, body: Any) -> tuple[int, Any]:
    project = gitlab.project(values)
    sha = values["sha"]
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise _error(404, "404 Commit Not Found")
    project.statuses.append({"sha": sha, **body})
    document = {
        "id": len(project.statuses),
        "sha": sha,
        "ref": None,
        "status": body["state"],
        "name": body.get("name") or body.get("context") or "default",
        "target_url": body.get("target_url"),
        "description": body.get("description"),
        "author": gitlab.user(BOT),
    }
    return 201, document


_ISSUE_NOTES = _notes_of("issue")
_MERGE_NOTES = _notes_of("pull_request")
_HANDLERS: dict[str, Handler] = {
    "users/list": _users,
    "members/get-all": _member,
    "merge_requests/list": _list_merges,
    "merge_requests/get": _get_merge,
    "merge_requests/create": _create_merge,
    "merge_requests/update": _update_merge,
    "merge_requests/diffs": _diffs,
    "notes/list-issue": _ISSUE_NOTES[0],
    "notes/create-issue": _ISSUE_NOTES[1],
    "notes/update-issue": _ISSUE_NOTES[2],
    "notes/list-merge-request": _MERGE_NOTES[0],
    "notes/create-merge-request": _MERGE_NOTES[1],
    "notes/update-merge-request": _MERGE_NOTES[2],
    "discussions/create-merge-request": _discussion,
    "discussions/list-merge-request": _discussions,
    "discussions/add-note-merge-request": _discussion_note,
    "statuses/create": _status,
}
