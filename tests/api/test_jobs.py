"""``/v1/jobs`` and the catalog against a real ``riverbeam api`` process, real Redis and a
real worker: submitting, reading, listing, paginating, cancelling; who may do which; the
idempotency key; and every refusal as a problem document."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from bot.store.models import JobState
from harness.api_server import ApiServer
from harness.stack import Stack
from skills import builtin_skills, skill_by_name
from tests.api.conftest import SECOND_REPO
from tests.api.kit import AUTHOR, FAILS_AT_ONCE, SUMMARIZE, problem

pytestmark = pytest.mark.slow

ENDPOINTS = [
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/abc"),
    ("POST", "/v1/jobs/abc/cancel"),
    ("GET", "/v1/jobs/abc/events"),
    ("GET", "/v1/approvals"),
    ("GET", "/v1/approvals/abc"),
    ("POST", "/v1/approvals/abc/approve"),
    ("POST", "/v1/approvals/abc/refuse"),
    ("GET", "/v1/agents"),
    ("GET", "/v1/skills"),
]


def _submit(api: ApiServer, who: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
    with api.client(who) as client:
        return client.post("/v1/jobs", json=body, **kw)


def _ids(reply: httpx.Response) -> list[str]:
    assert reply.status_code == 200, reply.text
    return [item["id"] for item in reply.json()["items"]]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_every_endpoint_refuses_a_missing_or_unknown_token(
    api: ApiServer, method: str, path: str
) -> None:
    with httpx.Client(base_url=api.url) as client:
        problem(client.request(method, path), 401, "BEM-700")
        basic = {"Authorization": "Basic d3JpdGVyOnNlY3JldA=="}
        problem(client.request(method, path, headers=basic), 401, "BEM-700")
        unknown = {"Authorization": "Bearer rb_not-a-token-anyone-holds"}
        problem(client.request(method, path, headers=unknown), 401, "BEM-701")


def test_a_submitted_job_answers_201_with_its_location(api: ApiServer, stack: Stack) -> None:
    reply = _submit(api, "writer", SUMMARIZE)
    assert reply.status_code == 201, reply.text
    job = reply.json()
    assert reply.headers["location"] == f"/v1/jobs/{job['id']}"
    assert (job["kind"], job["repo"], job["requested_by"]) == ("summarize", "docs", "writer")
    # Who asked comes from the token, never from the body.
    assert _submit(api, "writer", {**SUMMARIZE, "requested_by": "mallory"}).status_code == 422

    stack.wait_for(job["id"], JobState.SUCCEEDED)
    with api.client("reviewer") as client:
        done = client.get(reply.headers["location"]).json()
    assert done["state"] == "succeeded" and done["result"]["outcome"]["kind"] == "summarize"
    assert done["attempt"] == 1


def test_one_idempotency_key_makes_one_job_and_one_run(api: ApiServer, stack: Stack) -> None:
    key = {"Idempotency-Key": "ci-pipeline-4711-notes"}
    first = _submit(api, "ci", SUMMARIZE, headers=key)
    again = _submit(api, "ci", SUMMARIZE, headers=key)
    assert first.status_code == again.status_code == 201
    job_id = first.json()["id"]
    assert again.json()["id"] == job_id

    with api.client("ci") as client:
        assert _ids(client.get("/v1/jobs", params={"mine": "true"})) == [job_id]
    # The same key with another body is a mistake, not a retry; nothing new is made.
    changed = _submit(api, "ci", {**SUMMARIZE, "request": "Something else"}, headers=key)
    assert "different request" in problem(changed, 422, "BEM-501")["detail"]
    # Keys are per token holder: another holder's same key is their own job.
    other = _submit(api, "writer2", SUMMARIZE, headers=key)
    assert other.status_code == 201 and other.json()["id"] != job_id

    done = stack.wait_for(job_id, JobState.SUCCEEDED)
    # One claim: the retry never ran the job a second time.
    assert done.attempt == 1
    with api.client("ci") as client:
        assert _ids(client.get("/v1/jobs", params={"mine": "true"})) == [job_id]
        long_key = {"Idempotency-Key": "k" * 201}
        problem(client.post("/v1/jobs", json=SUMMARIZE, headers=long_key), 422, "BEM-705")
    stack.wait_for(other.json()["id"], JobState.SUCCEEDED)


@pytest.mark.parametrize(
    ("who", "kind"), [("ci", "author"), ("writer", "publish"), ("scoped", "publish")]
)
def test_a_role_submits_only_its_kinds(api: ApiServer, who: str, kind: str) -> None:
    body = {**AUTHOR, "kind": kind, "review_job": "abc123"}
    detail = problem(_submit(api, who, body), 403, "BEM-702")["detail"]
    assert f"may not submit {kind} jobs" in detail


def test_a_scoped_token_touches_only_its_repository(api: ApiServer, stack: Stack) -> None:
    handbook = _submit(api, "writer", {**FAILS_AT_ONCE, "repo": SECOND_REPO})
    docs = _submit(api, "scoped", FAILS_AT_ONCE)
    assert handbook.status_code == docs.status_code == 201
    handbook_id, docs_id = handbook.json()["id"], docs.json()["id"]

    with api.client("scoped") as client:
        refused = client.post("/v1/jobs", json={**FAILS_AT_ONCE, "repo": SECOND_REPO})
        assert SECOND_REPO in problem(refused, 403, "BEM-703")["detail"]
        problem(client.get(f"/v1/jobs/{handbook_id}"), 403, "BEM-703")
        problem(client.get(f"/v1/jobs/{handbook_id}/events"), 403, "BEM-703")
        problem(client.post(f"/v1/jobs/{handbook_id}/cancel"), 403, "BEM-703")
        problem(client.get("/v1/jobs", params={"repo": SECOND_REPO}), 403, "BEM-703")
        problem(client.get("/v1/approvals", params={"repo": SECOND_REPO}), 403, "BEM-703")
        seen = _ids(client.get("/v1/jobs", params={"limit": 100}))
        assert client.get(f"/v1/jobs/{docs_id}").status_code == 200
    assert docs_id in seen and handbook_id not in seen
    with api.client("admin") as client:
        assert handbook_id in _ids(client.get("/v1/jobs", params={"repo": SECOND_REPO}))
    for job_id in (handbook_id, docs_id):
        stack.wait_for(job_id, JobState.FAILED)


def test_pages_follow_each_other_without_gaps_or_repeats(api: ApiServer, stack: Stack) -> None:
    made = []
    for _ in range(5):
        reply = _submit(api, "writer2", {**FAILS_AT_ONCE, "request": "page filler"})
        made.append(reply.json()["id"])
    filters = {"requested_by": "writer2", "kind": "summarize", "limit": 2}
    pages: list[list[str]] = []
    cursor = None
    with api.client("reviewer") as client:
        while True:
            params = {**filters, **({"cursor": cursor} if cursor else {})}
            reply = client.get("/v1/jobs", params=params)
            pages.append(_ids(reply))
            cursor = reply.json()["next_cursor"]
            if cursor is None:
                break
        everything = _ids(client.get("/v1/jobs", params={**filters, "limit": 100}))
    seen = [job_id for page in pages for job_id in page]
    assert [len(page) for page in pages[:-1]] == [2] * (len(pages) - 1)
    assert seen == everything and len(set(seen)) == len(seen)
    # Newest first: the five just made lead, most recent at the top.
    assert seen[:5] == made[::-1]

    for job_id in made:
        stack.wait_for(job_id, JobState.FAILED)
    with api.client("writer2") as client:
        failed = _ids(client.get("/v1/jobs", params={"mine": "true", "state": "failed"}))
        assert set(made) <= set(failed)
        assert _ids(client.get("/v1/jobs", params={"mine": "true", "kind": "author"})) == []


def test_mine_lists_only_the_holders_jobs(api: ApiServer) -> None:
    mine = _submit(api, "writer", FAILS_AT_ONCE).json()["id"]
    theirs = _submit(api, "writer2", FAILS_AT_ONCE).json()["id"]
    with api.client("writer") as client:
        listed = _ids(client.get("/v1/jobs", params={"mine": "true", "limit": 100}))
        assert mine in listed and theirs not in listed
        both = client.get("/v1/jobs", params={"mine": "true", "requested_by": "writer2"})
        problem(both, 422, "BEM-705")


def test_cancelling_is_for_the_requester_or_an_admin(api: ApiServer, stack: Stack) -> None:
    slow = {**SUMMARIZE, "branch": "main", "metadata": {"playbook": "summarize-slow"}}
    job_id = _submit(api, "writer", slow).json()["id"]
    for outsider in ("writer2", "reviewer", "ci"):
        with api.client(outsider) as client:
            problem(client.post(f"/v1/jobs/{job_id}/cancel"), 403, "BEM-702")
    with api.client("writer") as client:
        reply = client.post(f"/v1/jobs/{job_id}/cancel")
    assert reply.status_code == 200, reply.text
    assert reply.json()["cancel_requested"] is True
    cancelled = stack.wait_for(job_id, JobState.CANCELLED)
    assert cancelled.error is not None and cancelled.error.code == "BEM-506"

    other = _submit(api, "writer2", slow).json()["id"]
    with api.client("admin") as client:
        assert client.post(f"/v1/jobs/{other}/cancel").status_code == 200
        stack.wait_for(other, JobState.CANCELLED)
        # A finished job comes back as it is.
        again = client.post(f"/v1/jobs/{other}/cancel")
    assert again.status_code == 200 and again.json()["state"] == "cancelled"


@pytest.mark.parametrize(
    ("body", "code", "fragment"),
    [
        ({**SUMMARIZE, "repo": "nowhere"}, "BEM-501", "no repository named 'nowhere'"),
        ({**AUTHOR, "request": ""}, "BEM-501", "needs request"),
        ({**SUMMARIZE, "branch": None}, "BEM-501", "needs branch"),
        ({**SUMMARIZE, "repo": "../etc"}, "BEM-501", "repo"),
        ({**SUMMARIZE, "kind": "deploy"}, "BEM-705", "kind"),
        ({**SUMMARIZE, "colour": "blue"}, "BEM-705", "colour"),
        ({**SUMMARIZE, "pages": ["a\nb"]}, "BEM-705", "pages"),
    ],
)
def test_an_invalid_request_queues_nothing(
    api: ApiServer, body: dict[str, Any], code: str, fragment: str
) -> None:
    with api.client("admin") as client:
        before = _ids(client.get("/v1/jobs", params={"limit": 100}))
        found = problem(client.post("/v1/jobs", json=body), 422, code)
        assert fragment in found["detail"]
        if code == "BEM-705":
            assert found["errors"] and all(error["loc"] for error in found["errors"])
        assert _ids(client.get("/v1/jobs", params={"limit": 100})) == before


def test_other_refusals_are_problem_documents(api: ApiServer) -> None:
    with api.client("reviewer") as client:
        problem(client.get("/v1/jobs/no-such-job"), 404, "BEM-500")
        problem(client.post("/v1/jobs/no-such-job/cancel"), 404, "BEM-500")
        problem(client.get("/v1/jobs", params={"limit": 0}), 422, "BEM-705")
        problem(client.get("/v1/jobs", params={"limit": 101}), 422, "BEM-705")
        problem(client.get("/v1/jobs", params={"state": "lost"}), 422, "BEM-705")
        problem(client.get("/v1/jobs", params={"cursor": "not-a-cursor"}), 422, "BEM-501")
        not_json = client.post(
            "/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        problem(not_json, 422, "BEM-705")
        problem(client.get("/v1/nothing-here"), 404, "BEM-706")
        # No page that loads scripts from a CDN: the OpenAPI document is the reference.
        problem(client.get("/docs"), 404, "BEM-706")
        problem(client.get("/redoc"), 404, "BEM-706")
        assert client.get("/openapi.json").status_code == 200
        wrong = client.delete("/v1/jobs")
        problem(wrong, 405, "BEM-707")
        # Every method the path answers, not only those of its first route.
        assert wrong.headers["allow"] == "GET, POST"
        wrong = client.put(f"/v1/approvals/{'0' * 12}/approve")
        problem(wrong, 405, "BEM-707")
        assert wrong.headers["allow"] == "POST"


def test_the_catalog_is_read_from_the_skill_files(api: ApiServer) -> None:
    with api.client("ci") as client:
        agents = client.get("/v1/agents").json()["items"]
        skills = client.get("/v1/skills").json()["items"]
    assert [agent["name"] for agent in agents] == [
        "author",
        "review",
        "summarize",
        "commit-notes",
        "publish",
    ]
    for agent in agents:
        skill = skill_by_name(agent["skill"])
        assert agent["description"] == skill.description
        assert agent["tools"] == sorted(skill.tools)
    assert {agent["name"]: agent["skill"] for agent in agents}["publish"] == "gfs-publish"
    assert [skill["name"] for skill in skills] == [skill.name for skill in builtin_skills()]
    publish = next(skill for skill in skills if skill["name"] == "gfs-publish")
    assert publish == {
        "name": "gfs-publish",
        "description": skill_by_name("gfs-publish").description,
        "tools": ["publish_docset"],
        "confirm_first": True,
    }
