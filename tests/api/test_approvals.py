"""``/v1/approvals`` against a real server, Redis and worker: author jobs park on their push,
and only the right people release them through the API."""

from __future__ import annotations

from typing import Any

import pytest

from bot.store.models import JobState
from harness.api_server import ApiServer
from harness.stack import Stack, wait_until
from tests.api.conftest import SECOND_REPO
from tests.api.kit import AUTHOR, SUMMARIZE, problem, shown

pytestmark = pytest.mark.slow


def _park(api: ApiServer, stack: Stack, who: str, body: dict[str, Any]) -> str:
    with api.client(who) as client:
        reply = client.post("/v1/jobs", json=body)
    assert reply.status_code == 201, reply.text
    job_id: str = reply.json()["id"]
    stack.wait_for(job_id, JobState.AWAITING_APPROVAL, timeout=60)
    return job_id


@pytest.fixture(scope="module")
def confirmed(api: ApiServer, stack: Stack) -> str:
    """A writer's author job that asked for ``metadata.confirm``: parked all the same."""
    return _park(
        api, stack, "writer", {**AUTHOR, "metadata": {**AUTHOR["metadata"], "confirm": True}}
    )


@pytest.fixture(scope="module")
def reviewers_own(api: ApiServer, stack: Stack) -> str:
    return _park(api, stack, "reviewer", AUTHOR)


@pytest.fixture(scope="module")
def in_handbook(api: ApiServer, stack: Stack) -> str:
    return _park(api, stack, "writer", {**AUTHOR, "repo": SECOND_REPO})


def test_confirm_never_reaches_the_runner(api: ApiServer, stack: Stack, confirmed: str) -> None:
    # The job parked on its push (a confirm that got through would have pushed at once).
    stored = stack.store.jobs.get(confirmed)
    assert stored.state is JobState.AWAITING_APPROVAL
    assert stored.spec.metadata == {"playbook": "author-fix-install"}
    assert stack.upstream_ref(f"riverbeam/{confirmed}") is None
    with api.client("writer") as client:
        view = client.get(f"/v1/jobs/{confirmed}")
    assert "confirm" not in view.text
    # The job's own branch is known from its first segment on, before anything is pushed.
    assert view.json()["job_branch"] == f"riverbeam/{confirmed}"


def test_the_queue_shows_what_waits_in_the_callers_scope(
    api: ApiServer, confirmed: str, reviewers_own: str, in_handbook: str
) -> None:
    with api.client("reviewer") as client:
        queue = client.get("/v1/approvals").json()["items"]
        handbook_only = client.get("/v1/approvals", params={"repo": SECOND_REPO}).json()["items"]
    assert [item["job_id"] for item in queue] == [confirmed, reviewers_own, in_handbook]
    assert [item["job_id"] for item in handbook_only] == [in_handbook]
    first = queue[0]
    assert (first["requested_by"], first["repo"], first["state"]) == ("writer", "docs", "pending")
    assert first["target_ref"] == f"riverbeam/{confirmed}" and len(first["commit_sha"]) == 40
    assert "+Install the tool with pip:" in first["diff"]
    assert "call_id" not in first and "applied" not in first

    with api.client("scoped") as client:
        scoped = client.get("/v1/approvals").json()["items"]
        assert [item["job_id"] for item in scoped] == [confirmed, reviewers_own]
        problem(client.get(f"/v1/approvals/{in_handbook}"), 403, "BEM-703")


def test_only_reviewers_and_admins_decide(api: ApiServer, confirmed: str, in_handbook: str) -> None:
    for who in ("writer", "writer2", "ci"):
        with api.client(who) as client:
            refused = client.post(f"/v1/approvals/{confirmed}/approve", json={"comment": "ok"})
            assert "may not decide approvals" in problem(refused, 403, "BEM-702")["detail"]
            problem(client.post(f"/v1/approvals/{confirmed}/refuse"), 403, "BEM-702")
    with api.client("scoped") as client:
        problem(client.post(f"/v1/approvals/{in_handbook}/approve"), 403, "BEM-703")
        problem(client.post(f"/v1/approvals/{in_handbook}/refuse"), 403, "BEM-703")
    with api.client("reviewer") as client:
        assert client.get(f"/v1/approvals/{confirmed}").json()["current"]["state"] == "pending"


def test_a_reviewer_cannot_approve_their_own_job_but_may_refuse_it(
    api: ApiServer, stack: Stack, reviewers_own: str
) -> None:
    with api.client("reviewer") as client:
        mine = {**shown(client, reviewers_own), "comment": "mine"}
        own = client.post(f"/v1/approvals/{reviewers_own}/approve", json=mine)
        assert "another reviewer" in problem(own, 403, "BEM-602")["detail"]
        refused = client.post(f"/v1/approvals/{reviewers_own}/refuse", json={"comment": "no"})
    assert refused.status_code == 200, refused.text
    assert (refused.json()["state"], refused.json()["decided_by"]) == ("refused", "reviewer")
    done = stack.wait_for(reviewers_own, JobState.REFUSED, JobState.SUCCEEDED, timeout=60)
    assert stack.upstream_ref(f"riverbeam/{reviewers_own}") is None
    assert done.state is JobState.REFUSED


def test_an_approval_lands_the_push_and_is_recorded(
    api: ApiServer, stack: Stack, confirmed: str
) -> None:
    with api.client("reviewer2") as client:
        seen = shown(client, confirmed)
        reply = client.post(
            f"/v1/approvals/{confirmed}/approve", json={**seen, "comment": "Looks right"}
        )
        assert reply.status_code == 200, reply.text
        decided = reply.json()
        assert (decided["state"], decided["decided_by"]) == ("approved", "reviewer2")
        assert decided["comment"] == "Looks right" and decided["decided_by_os_user"] is None
        # Decided once: a second decision, either way, is refused.
        problem(client.post(f"/v1/approvals/{confirmed}/approve", json=seen), 409, "BEM-601")
        problem(client.post(f"/v1/approvals/{confirmed}/refuse"), 409, "BEM-601")

        done = stack.wait_for(confirmed, JobState.SUCCEEDED, timeout=60)
        assert done.result is not None and done.result.outcome is not None
        pushed = stack.upstream_ref(f"riverbeam/{confirmed}")
        assert pushed is not None and pushed == decided["commit_sha"]

        detail = client.get(f"/v1/approvals/{confirmed}").json()
        queue = client.get("/v1/approvals").json()["items"]
        job = client.get(f"/v1/jobs/{confirmed}").json()
    assert detail["current"]["state"] == "approved"
    assert [(h["state"], h["decided_by"]) for h in detail["history"]] == [("approved", "reviewer2")]
    assert confirmed not in [item["job_id"] for item in queue]
    assert job["job_branch"] == f"riverbeam/{confirmed}"


def test_deciding_what_does_not_wait_is_refused(api: ApiServer, stack: Stack) -> None:
    with api.client("writer") as client:
        job_id = client.post("/v1/jobs", json=SUMMARIZE).json()["id"]
    stack.wait_for(job_id, JobState.SUCCEEDED)
    with api.client("admin") as client:
        problem(client.get(f"/v1/approvals/{job_id}"), 409, "BEM-600")
        problem(client.post(f"/v1/approvals/{job_id}/approve"), 409, "BEM-600")
        problem(client.post("/v1/approvals/no-such-job/approve"), 404, "BEM-500")
        problem(client.get("/v1/approvals/no-such-job"), 404, "BEM-500")
        long_comment = {"comment": "x" * 4001}
        problem(client.post(f"/v1/approvals/{job_id}/refuse", json=long_comment), 422, "BEM-705")


def test_an_admin_decides_in_any_repository(api: ApiServer, stack: Stack, in_handbook: str) -> None:
    with api.client("admin") as client:
        reply = client.post(f"/v1/approvals/{in_handbook}/refuse", json={"comment": "not now"})
    assert reply.status_code == 200 and reply.json()["decided_by"] == "admin"
    stack.wait_for(in_handbook, JobState.REFUSED, timeout=60)


def test_an_approve_names_what_was_shown_and_a_stale_one_lands_nowhere(
    api: ApiServer, stack: Stack
) -> None:
    """Reviewer A looks at approval 1; reviewer B refuses it; the agent commits something
    else and parks approval 2. A's approve, naming approval 1, is refused with BEM-604 and
    nothing is pushed; approval 2 lands only once someone approves what it shows."""
    job_id = _park(api, stack, "writer", {**AUTHOR, "metadata": {"playbook": "author-push-twice"}})
    branch = f"riverbeam/{job_id}"
    with api.client("reviewer") as a, api.client("reviewer2") as b:
        seen_by_a = shown(a, job_id)
        refused = b.post(f"/v1/approvals/{job_id}/refuse", json={"comment": "not yet"})
        assert refused.status_code == 200, refused.text

        def parked_again() -> bool:
            record = stack.store.jobs.get(job_id)
            return record.state is JobState.AWAITING_APPROVAL and (
                record.approval_id != seen_by_a["approval_id"]
            )

        wait_until(parked_again, 60, lambda: str(stack.store.jobs.get(job_id)))
        for verb in ("approve", "refuse"):
            stale = a.post(f"/v1/approvals/{job_id}/{verb}", json={**seen_by_a, "comment": "ok"})
            assert "look at the job's approval again" in problem(stale, 409, "BEM-604")["detail"]
        blind = a.post(f"/v1/approvals/{job_id}/approve", json={"comment": "ok"})
        problem(blind, 422, "BEM-605")
        partial = {"commit_sha": seen_by_a["commit_sha"]}
        problem(a.post(f"/v1/approvals/{job_id}/approve", json=partial), 409, "BEM-604")
        assert stack.upstream_ref(branch) is None

        # The approval document and the job document both show what a decision names.
        now = shown(a, job_id)
        job = a.get(f"/v1/jobs/{job_id}").json()
        assert now["approval_id"] != seen_by_a["approval_id"]
        assert now["commit_sha"] != seen_by_a["commit_sha"] and len(now["diff_digest"]) == 64
        summary = job["approval"]
        assert (summary["id"], summary["commit_sha"], summary["diff_digest"]) == tuple(now.values())
        assert summary["state"] == "pending" and job["approval_id"] == now["approval_id"]
        approved = a.post(f"/v1/approvals/{job_id}/approve", json={**now, "comment": "yes"})
        assert approved.status_code == 200, approved.text
    done = stack.wait_for(job_id, JobState.SUCCEEDED, timeout=60)
    assert stack.upstream_ref(branch) == now["commit_sha"]
    assert [(p.sha, p.state.value) for p in done.pushes] == [(now["commit_sha"], "landed")]
