"""The built-in GitLab client: ``ForgeClient`` on GitLab's REST API v4 (``<base_url>/api/v4``),
for gitlab.com and self-managed GitLab, held in the tests to the shapes of GitLab's API
documentation (``harness.fake_gitlab`` checks every request and reply against them).

The credential is a project or group access token (``token_file``), sent as
``PRIVATE-TOKEN`` and read from its file on each call, so a rotated file takes effect. A
project is addressed by its numeric id when ``[forges.<name>.repositories]`` names one, else
by its URL-encoded path (``group%2Fsub%2Fname``).

GitLab numbers issues and merge requests apart (each has an iid 1), so a thread or a comment
names which it is on (``on``). GitLab has no review object: ``post_review`` posts each line
comment as a diff discussion positioned on the merge request's ``diff_refs``, then the
summary as a note; it never approves.

Failures are GitLab's own first (401 BEM-830, rate limit BEM-831, a reply that is not its API
BEM-832, a merge request's diff not yet worked out BEM-833 or moved past the reviewed commit
BEM-834), then any forge's (BEM-820..823: a 404, "Project Not Found" among them, is
BEM-823). Nothing here retries: the caller's outbox does, after
``ForgeRetryLater.retry_after_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from bot.clients.retry import parse_retry_after
from bot.config import ForgeConfig
from bot.core.errors import ForgeCredentialsError, ForgeRefused, ForgeRetryLater
from bot.forge.clients import http
from bot.forge.clients.contract import CommentRef, CommitState, LineComment, PullRequestRef
from bot.forge.clients.hunks import new_side_lines
from bot.forge.inbound.forge_events import PullRequest, ReviewThread, ThreadComment, ThreadKind
from bot.forge.permissions import ForgePermission

GITLAB_URL = "https://gitlab.com"
PAGE_SIZE = 100
MAX_PAGES = 30
RATE_LIMIT_WAIT_SECONDS = 60.0
"""The wait when a 429 names none (GitLab's limits count by the minute)."""
_STATES: Mapping[CommitState, str] = {
    "pending": "pending",
    "success": "success",
    "failure": "failed",
    # GitLab has no "error": ``canceled`` would say a person stopped it.
    "error": "failed",
}
_NOTEABLE: Mapping[ThreadKind, str] = {"issue": "issues", "pull_request": "merge_requests"}


class GitLabClient:
    """GitLab's REST API v4 for the workers (``ForgeClient``). ``base_url`` is the instance
    (``https://gitlab.com``); ``project_ids`` the numeric ids of configured projects by path;
    ``deadline`` bounds each request whole; ``clock`` is wall-clock seconds (rate limit
    resets)."""

    def __init__(
        self,
        token_file: Path,
        *,
        base_url: str = GITLAB_URL,
        project_ids: Mapping[str, int] | None = None,
        deadline: float = http.DEFAULT_DEADLINE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api = self.base_url + "/api/v4"
        self.token_file = token_file
        self.project_ids = dict(project_ids or {})
        self.deadline = deadline
        self.now = clock

    def __repr__(self) -> str:
        return f"GitLabClient({self.base_url!r}, token_file={str(self.token_file)!r})"

    # ForgeLookup

    def permission(self, repository: str, login: str) -> ForgePermission:
        users = _list(self._send("GET", "/users", params={"username": login}))
        found = next((u for u in users if isinstance(u, dict) and _is(u, "username", login)), None)
        if found is None or not isinstance(found.get("id"), int):
            return ForgePermission.NONE
        path = f"{self._project(repository)}/members/all/{found['id']}"
        reply = self._send("GET", path, allow=(404,))
        if reply.status == 404:
            # Not a member; but a project it cannot see is a setting to fix, not "nobody".
            if "project not found" in http.message_of(reply).lower():
                raise self._failure(f"GET {httpx.URL(reply.url).path}", reply)
            return ForgePermission.NONE
        member = _object(reply)
        level = member.get("access_level")
        if not isinstance(level, int):
            raise _malformed(reply, "no access_level")
        # A blocked or banned member keeps a level but may not act.
        if member.get("state", "active") != "active":
            return ForgePermission.NONE
        return ForgePermission.from_gitlab(level)

    def pull_request(self, repository: str, number: int) -> PullRequest:
        reply = self._send("GET", f"{self._project(repository)}/merge_requests/{number}")
        document = _object(reply)
        try:
            return PullRequest(
                number=document["iid"],
                title=document["title"],
                body=document.get("description") or "",
                url=document["web_url"],
                author=(document.get("author") or {}).get("username"),
                head_sha=document["sha"],
                head_ref=document["source_branch"],
                base_ref=document["target_branch"],
                from_fork=document["source_project_id"] != document["target_project_id"],
                draft=bool(document.get("draft")),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise _malformed(reply, f"a merge request without {error}") from None

    def changed_paths(self, repository: str, number: int) -> Sequence[str]:
        paths: list[str] = []
        for item in self._pages(f"{self._project(repository)}/merge_requests/{number}/diffs"):
            # A file moved out of a folder changes that folder too.
            for key in ("old_path", "new_path"):
                if isinstance(item.get(key), str) and item[key] not in paths:
                    paths.append(item[key])
        return paths

    def commentable_lines(self, repository: str, number: int) -> Mapping[str, frozenset[int]]:
        lines: dict[str, frozenset[int]] = {}
        for item in self._pages(f"{self._project(repository)}/merge_requests/{number}/diffs"):
            # A deleted file has no new side; a collapsed or too large one, an empty diff.
            if item.get("deleted_file") or not isinstance(item.get("new_path"), str):
                continue
            if isinstance(item.get("diff"), str):
                lines[item["new_path"]] = new_side_lines(item["diff"])
        return lines

    def review_threads(self, repository: str, number: int) -> Sequence[ReviewThread]:
        threads = []
        path = f"{self._project(repository)}/merge_requests/{number}/discussions"
        for item in self._pages(path):
            notes = item.get("notes") or []
            first = notes[0] if notes and isinstance(notes[0], dict) else None
            # A thread to answer: resolvable (a diff or review thread) and not yet resolved.
            if first is None or not first.get("resolvable") or first.get("resolved"):
                continue
            position = first.get("position") or {}
            threads.append(
                ReviewThread(
                    id=str(item["id"]),
                    author=(first.get("author") or {}).get("username") or "ghost",
                    body=first.get("body") or "",
                    path=position.get("new_path"),
                    line=position.get("new_line"),
                )
            )
        return threads

    def thread(
        self, repository: str, number: int, on: ThreadKind = "issue"
    ) -> Sequence[ThreadComment]:
        path = f"{self._project(repository)}/{_NOTEABLE[on]}/{number}/notes"
        params = {"sort": "asc", "order_by": "created_at"}
        return [
            ThreadComment(author=(item.get("author") or {}).get("username") or "ghost", body=body)
            for item in self._pages(path, params)
            # System notes ("added 1 commit", "changed the description") are GitLab's own.
            if not item.get("system") and isinstance(body := item.get("body"), str)
        ]

    # ForgeClient

    def post_comment(
        self, repository: str, number: int, body: str, on: ThreadKind = "issue"
    ) -> CommentRef:
        path = f"{self._project(repository)}/{_NOTEABLE[on]}/{number}/notes"
        reply = self._send("POST", path, json={"body": body})
        found = _object(reply).get("id")
        if not isinstance(found, int) or found < 1:
            raise _malformed(reply, "a note without id")
        # A note's reply names no URL: it is the thread's, anchored at the note.
        url = f"{self.base_url}/{repository}/-/{_NOTEABLE[on]}/{number}#note_{found}"
        return CommentRef(id=found, number=number, url=url, on=on)

    def edit_comment(self, repository: str, ref: CommentRef, body: str) -> None:
        path = f"{self._project(repository)}/{_NOTEABLE[ref.on]}/{ref.number}/notes/{ref.id}"
        self._send("PUT", path, json={"body": body})

    def reply_to_thread(self, repository: str, number: int, thread_id: str, body: str) -> None:
        merge = f"{self._project(repository)}/merge_requests/{number}"
        self._send("POST", f"{merge}/discussions/{_segment(thread_id)}/notes", json={"body": body})

    def find_pull_request(
        self, repository: str, head_branch: str, base: str
    ) -> PullRequestRef | None:
        params = {"source_branch": head_branch, "target_branch": base, "state": "opened"}
        reply = self._send("GET", f"{self._project(repository)}/merge_requests", params=params)
        for item in _list(reply):
            # A fork's merge request from a branch of the same name is not Riverbeam's.
            if isinstance(item, dict) and item.get("source_project_id") == item.get(
                "target_project_id"
            ):
                return _merge_ref(item, reply)
        return None

    def open_pull_request(
        self, repository: str, head: str, base: str, title: str, body: str
    ) -> PullRequestRef:
        fields = {"source_branch": head, "target_branch": base, "title": title, "description": body}
        reply = self._send("POST", f"{self._project(repository)}/merge_requests", json=fields)
        return _merge_ref(_object(reply), reply)

    def update_pull_request(self, repository: str, number: int, title: str, body: str) -> None:
        path = f"{self._project(repository)}/merge_requests/{number}"
        self._send("PUT", path, json={"title": title, "description": body})

    def post_review(
        self,
        repository: str,
        number: int,
        commit_sha: str,
        body: str,
        line_comments: tuple[LineComment, ...],
    ) -> None:
        # Never approve: a bot's approval could satisfy an approval rule meant for people.
        merge = f"{self._project(repository)}/merge_requests/{number}"
        if line_comments:
            base = self._diff_refs(merge, commit_sha)
            for comment in line_comments:
                position: dict[str, str | int] = {**base, "position_type": "text"}
                # Both paths: GitLab finds the diff file by them, for a new file too.
                position |= {"old_path": comment.path, "new_path": comment.path}
                position["new_line" if comment.side == "RIGHT" else "old_line"] = comment.line
                fields = {"body": comment.body, "position": position}
                self._send("POST", f"{merge}/discussions", json=fields)
        self._send("POST", f"{merge}/notes", json={"body": body})

    def set_status(
        self,
        repository: str,
        sha: str,
        context: str,
        state: CommitState,
        description: str,
        target_url: str | None,
    ) -> None:
        status = {"state": _STATES[state], "name": context, "description": description}
        if target_url is not None:
            status["target_url"] = target_url
        self._send("POST", f"{self._project(repository)}/statuses/{_segment(sha)}", json=status)

    # The requests

    def _project(self, repository: str) -> str:
        known = self.project_ids.get(repository)
        if known is not None:
            return f"/projects/{known}"
        if not repository or repository.startswith("/") or "/" not in repository:
            raise ForgeRefused("BEM-823", f"{repository!r} is not a GitLab project path")
        return f"/projects/{_segment(repository)}"

    def _diff_refs(self, merge: str, commit_sha: str) -> dict[str, str]:
        """The shas a diff discussion is positioned on, from the merge request's head diff."""
        reply = self._send("GET", merge)
        refs = _object(reply).get("diff_refs")
        if not isinstance(refs, dict) or not all(
            isinstance(refs.get(k), str) for k in ("base_sha", "start_sha", "head_sha")
        ):
            # GitLab works out a new merge request's diff after answering its creation.
            raise ForgeRetryLater(
                "BEM-833", f"GitLab has no diff of {httpx.URL(reply.url).path} yet"
            )
        if refs["head_sha"] != commit_sha:
            raise ForgeRefused(
                "BEM-834",
                f"{httpx.URL(reply.url).path} is at {refs['head_sha'][:12]}, "
                f"not the reviewed {commit_sha[:12]}: the newer head gets its own review",
            )
        return {k: refs[k] for k in ("base_sha", "start_sha", "head_sha")}

    def _send(
        self,
        method: str,
        path_or_url: str,
        *,
        params: Mapping[str, str | int] | None = None,
        json: Any = None,
        allow: tuple[int, ...] = (),
    ) -> http.Reply:
        url = path_or_url if "://" in path_or_url else self.api + path_or_url
        headers = {
            "Accept": "application/json",
            "PRIVATE-TOKEN": http.read_secret(self.token_file, "token_file"),
        }
        return http.answered(
            method,
            url,
            headers=headers,
            params=params,
            json=json,
            deadline=self.deadline,
            forge="GitLab",
            allow=allow,
            failure=self._failure,
        )

    def _failure(self, what: str, reply: http.Reply) -> ForgeRetryLater | ForgeRefused:
        said = http.message_of(reply)
        shown = f"GitLab answered {what} with {reply.status}" + (f": {said}" if said else "")
        if reply.status == 401:
            return ForgeRefused("BEM-830", shown)
        if reply.status == 429:
            wait = parse_retry_after(reply.headers.get("retry-after"))
            if wait is None:
                reset = http.number(reply.headers.get("ratelimit-reset"))
                wait = max(0.0, reset - self.now()) if reset is not None else None
            seconds = RATE_LIMIT_WAIT_SECONDS if wait is None else wait
            return ForgeRetryLater("BEM-831", shown, retry_after_seconds=seconds)
        return http.generic_failure("GitLab", what, reply)

    def _pages(
        self, path: str, params: Mapping[str, str | int] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every item of a listing, page after page: ``X-Next-Page``, else Link's ``next``."""
        url: str | None = self.api + path
        query: dict[str, str | int] | None = {**(params or {}), "per_page": PAGE_SIZE}
        for _ in range(MAX_PAGES):
            if url is None:
                return
            reply = self._send("GET", url, params=query)
            for item in _list(reply):
                if isinstance(item, dict):
                    yield item
            following = (reply.headers.get("x-next-page") or "").strip()
            if following.isdigit() and query is not None:
                query = {**query, "page": int(following)}
            elif "x-next-page" in reply.headers:
                url = None
            else:
                # The link holds the whole query.
                url, query = http.next_link(reply, self.base_url, "GitLab", "BEM-832"), None


def gitlab_client(name: str, config: ForgeConfig) -> GitLabClient:
    """The client of the ``[forges.<name>]`` table of kind gitlab: its access token."""
    if config.token_file is None:
        raise ForgeCredentialsError("BEM-824", f"[forges.{name}] has no token_file")
    base_url = str(config.base_url).rstrip("/") if config.base_url else GITLAB_URL
    ids = {
        path: entry.project_id
        for path, entry in config.repositories.items()
        if entry.project_id is not None
    }
    return GitLabClient(config.token_file, base_url=base_url, project_ids=ids)


def _segment(text: str) -> str:
    # Quoted whole (slashes too), so a path or sha is one segment and steps nowhere else.
    return quote(text, safe="")


def _is(document: Mapping[str, Any], key: str, value: str) -> bool:
    found = document.get(key)
    return isinstance(found, str) and found.lower() == value.lower()


def _object(reply: http.Reply) -> dict[str, Any]:
    return http.reply_object(reply, "GitLab", "BEM-832")


def _list(reply: http.Reply) -> list[Any]:
    return http.reply_list(reply, "GitLab", "BEM-832")


def _malformed(reply: http.Reply, what: str) -> ForgeRefused:
    return http.malformed(reply, "GitLab", "BEM-832", what)


def _merge_ref(document: Mapping[str, Any], reply: http.Reply) -> PullRequestRef:
    try:
        return PullRequestRef(
            number=document["iid"],
            url=document["web_url"],
            head=document["source_branch"],
            base=document["target_branch"],
            # Null for a moment after creation, while GitLab reads the branch.
            head_sha=document.get("sha") or "",
        )
    except (KeyError, TypeError, ValueError):
        raise _malformed(
            reply, "a merge request without iid, web_url, source_branch or target_branch"
        ) from None
