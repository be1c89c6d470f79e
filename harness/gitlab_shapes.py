"""The endpoints of GitLab's REST API v4 that Riverbeam calls, as JSON Schemas taken from
GitLab's API documentation, for ``harness.fake_gitlab`` to hold requests and replies to.

GitLab publishes no machine-readable description of these endpoints (its OpenAPI file
covers a few others), so each endpoint here is written from its documentation page, cited in
``docs`` (the page on docs.gitlab.com; its source is ``doc/api/<page>.md`` in
gitlab-org/gitlab). What is strict, and why:

- the path: the project is one segment, its id or its URL-encoded path (``group%2Fname``),
  as the pages' "namespaced paths" ask; an iid or user id is an integer;
- the query and the body: only attributes the endpoint's table lists, of their type
  (``additionalProperties: false``): GitLab ignores an unknown attribute, so a misspelt one
  would otherwise pass unnoticed. The fake knows the attributes its client may send, a
  subset of each table; one it does not know is refused, documented or not;
- a reply: the attributes the page's example response shows that a client reads, of their
  type; more are allowed, as GitLab sends more than any example.

Errors have GitLab's two shapes: ``{"message": ...}`` (a string, or a list or an object of
field errors) and, for a request its validation refuses, ``{"error": "..."}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DOCS = "https://docs.gitlab.com/api"
# A page, and where it is known the anchor of the section: "Get a member of a group or
# project, including inherited and invited members" (members), "List users" (users), "Set
# the pipeline status of a commit" (commits).
MEMBERS = f"{DOCS}/members/"
USERS = f"{DOCS}/users/"
MERGE_REQUESTS = f"{DOCS}/merge_requests/"
NOTES = f"{DOCS}/notes/"
DISCUSSIONS = f"{DOCS}/discussions/#create-a-new-thread-in-the-merge-request-diff"
DISCUSSION_ITEMS = f"{DOCS}/discussions/#list-project-merge-request-discussion-items"
DISCUSSION_NOTE = f"{DOCS}/discussions/#add-note-to-existing-merge-request-thread"
STATUSES = f"{DOCS}/commits/"
PAGINATION = f"{DOCS}/rest/#pagination"
RATE_LIMITS = "https://docs.gitlab.com/security/rate_limits/"

_INT = {"type": "string", "pattern": "^[0-9]+$"}
_PAGED = {"page": _INT, "per_page": {"type": "string", "pattern": "^([1-9][0-9]?|100)$"}}
_SHA = {"type": "string", "pattern": "^[0-9a-f]{40}$"}
_TEXT = {"type": "string"}
_BODY_ONLY = {
    "type": "object",
    "properties": {"body": {"type": "string", "minLength": 1}},
    "required": ["body"],
    "additionalProperties": False,
}

_USER_FIELDS: dict[str, Any] = {
    "id": {"type": "integer"},
    "username": {"type": "string"},
    "name": {"type": "string"},
    "state": {"type": "string"},
    "web_url": {"type": "string"},
    "avatar_url": {"type": ["string", "null"]},
}
USER = {
    "type": "object",
    "required": ["id", "username", "name", "state", "web_url"],
    "properties": _USER_FIELDS,
}
MEMBER = {
    "type": "object",
    "required": ["id", "username", "state", "access_level"],
    "properties": {
        **_USER_FIELDS,
        "access_level": {"type": "integer", "enum": [0, 5, 10, 15, 20, 30, 40, 50]},
        "expires_at": {"type": ["string", "null"]},
    },
}
_DIFF_REFS = {
    "type": ["object", "null"],
    "required": ["base_sha", "head_sha", "start_sha"],
    "properties": {"base_sha": _SHA, "head_sha": _SHA, "start_sha": _SHA},
}
MERGE_REQUEST = {
    "type": "object",
    "required": [
        "id",
        "iid",
        "project_id",
        "title",
        "description",
        "state",
        "source_branch",
        "target_branch",
        "source_project_id",
        "target_project_id",
        "author",
        "draft",
        "sha",
        "web_url",
    ],
    "properties": {
        "id": {"type": "integer"},
        "iid": {"type": "integer", "minimum": 1},
        "project_id": {"type": "integer"},
        "title": {"type": "string"},
        "description": {"type": ["string", "null"]},
        "state": {"enum": ["opened", "closed", "locked", "merged"]},
        "source_branch": {"type": "string"},
        "target_branch": {"type": "string"},
        "source_project_id": {"type": "integer"},
        "target_project_id": {"type": "integer"},
        "author": USER,
        "draft": {"type": "boolean"},
        "sha": {"type": ["string", "null"]},
        "web_url": {"type": "string"},
        "diff_refs": _DIFF_REFS,
    },
}
DIFF = {
    "type": "object",
    "required": ["old_path", "new_path", "new_file", "renamed_file", "deleted_file", "diff"],
    "properties": {
        "old_path": {"type": "string"},
        "new_path": {"type": "string"},
        "a_mode": {"type": "string"},
        "b_mode": {"type": "string"},
        "new_file": {"type": "boolean"},
        "renamed_file": {"type": "boolean"},
        "deleted_file": {"type": "boolean"},
        "generated_file": {"type": ["boolean", "null"]},
        "diff": {"type": "string"},
    },
}
NOTE = {
    "type": "object",
    "required": ["id", "body", "author", "created_at", "system", "noteable_type"],
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "type": {"type": ["string", "null"]},
        "body": {"type": "string"},
        "author": USER,
        "created_at": {"type": "string"},
        "updated_at": {"type": "string"},
        "system": {"type": "boolean"},
        "noteable_id": {"type": "integer"},
        "noteable_type": {"enum": ["Issue", "MergeRequest", "Snippet", "Commit"]},
        "noteable_iid": {"type": ["integer", "null"]},
        "project_id": {"type": "integer"},
        "resolvable": {"type": "boolean"},
        "resolved": {"type": "boolean"},
        "position": {"type": "object"},
    },
}
DISCUSSION = {
    "type": "object",
    "required": ["id", "individual_note", "notes"],
    "properties": {
        "id": {"type": "string"},
        "individual_note": {"type": "boolean"},
        "notes": {"type": "array", "items": NOTE, "minItems": 1},
    },
}
COMMIT_STATUS = {
    "type": "object",
    "required": ["id", "sha", "status", "name", "target_url", "description", "author"],
    "properties": {
        "id": {"type": "integer"},
        "sha": _SHA,
        "ref": {"type": ["string", "null"]},
        "status": {"enum": ["pending", "running", "success", "failed", "canceled"]},
        "name": {"type": "string"},
        "target_url": {"type": ["string", "null"]},
        "description": {"type": ["string", "null"]},
        "author": USER,
    },
}
ERROR = {
    "type": "object",
    "anyOf": [{"required": ["message"]}, {"required": ["error"]}],
    "properties": {
        "message": {"type": ["string", "array", "object"]},
        "error": {"type": "string"},
    },
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Endpoint:
    """One documented endpoint: its method and path (``{name}`` a value, ``{id}`` the
    project), what its query and body may hold, what its success reply is, and its page."""

    id: str
    method: str
    template: str
    docs: str
    query: dict[str, Any]
    body: dict[str, Any] | None
    status: int
    reply: dict[str, Any]


def _query(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


def _list(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


_NOTE_QUERY = _query(
    sort={"enum": ["asc", "desc"]},
    order_by={"enum": ["created_at", "updated_at"]},
    activity_filter={"enum": ["all_notes", "only_comments", "only_activity"]},
    **_PAGED,
)
_MR_FIELDS = {
    "title": {"type": "string", "minLength": 1},
    "description": {"type": "string"},
    "assignee_id": {"type": "integer"},
    "labels": {"type": "string"},
    "remove_source_branch": {"type": "boolean"},
    "squash": {"type": "boolean"},
}
_POSITION = {
    "type": "object",
    "required": ["base_sha", "start_sha", "head_sha", "position_type", "old_path", "new_path"],
    "properties": {
        "base_sha": _SHA,
        "start_sha": _SHA,
        "head_sha": _SHA,
        "position_type": {"enum": ["text", "image", "file"]},
        "old_path": {"type": "string", "minLength": 1},
        "new_path": {"type": "string", "minLength": 1},
        "new_line": {"type": "integer", "minimum": 1},
        "old_line": {"type": "integer", "minimum": 1},
    },
    # A text note is on a line: the page asks for new_line, old_line or both.
    "anyOf": [{"required": ["new_line"]}, {"required": ["old_line"]}],
    "additionalProperties": False,
}

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "users/list",
        "GET",
        "/users",
        USERS,
        _query(username={"type": "string", "minLength": 1}, **_PAGED),
        None,
        200,
        _list(USER),
    ),
    Endpoint(
        "members/get-all",
        "GET",
        "/projects/{id}/members/all/{user_id}",
        MEMBERS,
        _query(),
        None,
        200,
        MEMBER,
    ),
    Endpoint(
        "merge_requests/list",
        "GET",
        "/projects/{id}/merge_requests",
        MERGE_REQUESTS,
        _query(
            state={"enum": ["opened", "closed", "locked", "merged", "all"]},
            source_branch=_TEXT,
            target_branch=_TEXT,
            order_by={"enum": ["created_at", "updated_at", "title"]},
            sort={"enum": ["asc", "desc"]},
            **_PAGED,
        ),
        None,
        200,
        _list(MERGE_REQUEST),
    ),
    Endpoint(
        "merge_requests/get",
        "GET",
        "/projects/{id}/merge_requests/{merge_request_iid}",
        MERGE_REQUESTS,
        _query(include_diverged_commits_count={"enum": ["true", "false"]}),
        None,
        200,
        MERGE_REQUEST,
    ),
    Endpoint(
        "merge_requests/create",
        "POST",
        "/projects/{id}/merge_requests",
        f"{MERGE_REQUESTS}#create-mr",
        _query(),
        {
            "type": "object",
            "required": ["source_branch", "target_branch", "title"],
            "properties": {
                "source_branch": {"type": "string", "minLength": 1},
                "target_branch": {"type": "string", "minLength": 1},
                "target_project_id": {"type": "integer"},
                **_MR_FIELDS,
            },
            "additionalProperties": False,
        },
        201,
        MERGE_REQUEST,
    ),
    Endpoint(
        "merge_requests/update",
        "PUT",
        "/projects/{id}/merge_requests/{merge_request_iid}",
        MERGE_REQUESTS,
        _query(),
        {
            "type": "object",
            "minProperties": 1,
            "properties": {
                "target_branch": {"type": "string", "minLength": 1},
                "state_event": {"enum": ["close", "reopen"]},
                **_MR_FIELDS,
            },
            "additionalProperties": False,
        },
        200,
        MERGE_REQUEST,
    ),
    Endpoint(
        "merge_requests/diffs",
        "GET",
        "/projects/{id}/merge_requests/{merge_request_iid}/diffs",
        f"{MERGE_REQUESTS}#list-merge-request-diffs",
        _query(unidiff={"enum": ["true", "false"]}, **_PAGED),
        None,
        200,
        _list(DIFF),
    ),
    Endpoint(
        "notes/list-issue",
        "GET",
        "/projects/{id}/issues/{issue_iid}/notes",
        f"{NOTES}#list-project-issue-notes",
        _NOTE_QUERY,
        None,
        200,
        _list(NOTE),
    ),
    Endpoint(
        "notes/list-merge-request",
        "GET",
        "/projects/{id}/merge_requests/{merge_request_iid}/notes",
        f"{NOTES}#list-all-merge-request-notes",
        _NOTE_QUERY,
        None,
        200,
        _list(NOTE),
    ),
    Endpoint(
        "notes/create-issue",
        "POST",
        "/projects/{id}/issues/{issue_iid}/notes",
        f"{NOTES}#create-new-issue-note",
        _query(),
        _BODY_ONLY,
        201,
        NOTE,
    ),
    Endpoint(
        "notes/create-merge-request",
        "POST",
        "/projects/{id}/merge_requests/{merge_request_iid}/notes",
        f"{NOTES}#create-new-merge-request-note",
        _query(),
        _BODY_ONLY,
        201,
        NOTE,
    ),
    Endpoint(
        "notes/update-issue",
        "PUT",
        "/projects/{id}/issues/{issue_iid}/notes/{note_id}",
        f"{NOTES}#modify-existing-issue-note",
        _query(),
        _BODY_ONLY,
        200,
        NOTE,
    ),
    Endpoint(
        "notes/update-merge-request",
        "PUT",
        "/projects/{id}/merge_requests/{merge_request_iid}/notes/{note_id}",
        f"{NOTES}#modify-existing-merge-request-note",
        _query(),
        _BODY_ONLY,
        200,
        NOTE,
    ),
    Endpoint(
        "discussions/create-merge-request",
        "POST",
        "/projects/{id}/merge_requests/{merge_request_iid}/discussions",
        DISCUSSIONS,
        _query(),
        {
            "type": "object",
            "required": ["body"],
            "properties": {
                "body": {"type": "string", "minLength": 1},
                "commit_id": _SHA,
                "position": _POSITION,
            },
            "additionalProperties": False,
        },
        201,
        DISCUSSION,
    ),
    Endpoint(
        "discussions/list-merge-request",
        "GET",
        "/projects/{id}/merge_requests/{merge_request_iid}/discussions",
        DISCUSSION_ITEMS,
        _query(**_PAGED),
        None,
        200,
        _list(DISCUSSION),
    ),
    Endpoint(
        "discussions/add-note-merge-request",
        "POST",
        "/projects/{id}/merge_requests/{merge_request_iid}/discussions/{discussion_id}/notes",
        DISCUSSION_NOTE,
        _query(),
        _BODY_ONLY,
        201,
        NOTE,
    ),
    Endpoint(
        "statuses/create",
        "POST",
        "/projects/{id}/statuses/{sha}",
        STATUSES,
        _query(),
        {
            "type": "object",
            "required": ["state"],
            "properties": {
                "state": {"enum": ["pending", "running", "success", "failed", "canceled"]},
                "ref": {"type": "string"},
                "name": {"type": "string", "minLength": 1},
                "context": {"type": "string", "minLength": 1},
                "target_url": {"type": "string"},
                "description": {"type": "string"},
                "coverage": {"type": "number"},
                "pipeline_id": {"type": "integer"},
            },
            # "name or context": one label, not two.
            "not": {"required": ["name", "context"]},
            "additionalProperties": False,
        },
        201,
        COMMIT_STATUS,
    ),
)
