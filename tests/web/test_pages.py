"""The web pages over HTTP against a real ``riverbeam api`` process: sign-in, CSRF, role
boundaries, the New-request form's validation and double submit, escaping of hostile text,
and the headers every page carries."""

from __future__ import annotations

import re

import httpx
import pytest

from bot.core.frames import ErrorInfo
from bot.service.access import Principal
from bot.store.models import Approval, ApprovalState, JobKind, JobSpec, JobState
from harness.api_server import api_server
from harness.stack import REPO, REQUESTER, REVIEWER, wait_until
from tests.web.kit import (
    ADMIN,
    CHECKED_REPO,
    CI,
    OTHER_REPO,
    OTHER_WRITER,
    REQUEST,
    SECOND_REVIEWER,
    TOKENS,
    Web,
    browser_like,
    decision_form,
    field_error,
    hidden,
    sign_in,
)

pytestmark = pytest.mark.slow

HOSTILE = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'
HEADERS = {
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "x-content-type-options": "nosniff",
}


def _decide(client: httpx.Client, job_id: str, decision: str, csrf: str) -> httpx.Response:
    """A decision posted with the CSRF token and no binding (no form offered one)."""
    return client.post(
        f"/approvals/{job_id}", data={"csrf": csrf, "decision": decision, "comment": "ok"}
    )


def _csrf(client: httpx.Client) -> str:
    return hidden(client.get("/approvals").text, "csrf")


def _new_form_data(client: httpx.Client, **fields: str) -> dict[str, str]:
    """A fresh New-request form's fields (its CSRF and idempotency keys), with ``fields``."""
    form = client.get("/new").text
    return {
        "csrf": hidden(form, "csrf"),
        "idempotency_key": hidden(form, "idempotency_key"),
        "repo": REPO,
        "kind": "author",
        "request": "",
        "branch": "",
        "base": "",
        "pages": "",
        **fields,
    }


def _new_form(client: httpx.Client, **fields: str) -> httpx.Response:
    return client.post("/new", data=_new_form_data(client, **fields))


def _code(page: str) -> str:
    match = re.search(r"BEM-\d{3}", page)
    assert match is not None, page[:2000]
    return match.group(0)


# -- signing in ------------------------------------------------------------------------------


def test_a_page_without_a_session_sends_the_browser_to_sign_in(web: Web) -> None:
    with browser_like(web) as client:
        reply = client.get("/jobs?state=failed")
    assert reply.status_code == 303
    assert reply.headers["location"] == "/sign-in?next=/jobs%3Fstate%3Dfailed"


def test_a_wrong_token_does_not_sign_in(web: Web) -> None:
    with browser_like(web, follow_redirects=True) as client:
        form = client.get("/sign-in").text
        reply = client.post(
            "/sign-in", data={"token": "rb_not-a-real-token", "csrf": hidden(form, "csrf")}
        )
        assert reply.status_code == 401
        assert "That token is not recognised." in reply.text
        assert "riverbeam_session" not in client.cookies
        assert client.get("/mine").url.path == "/sign-in"


def test_the_sign_in_form_needs_its_csrf_token(web: Web) -> None:
    with browser_like(web) as client:
        client.get("/sign-in")
        reply = client.post(
            "/sign-in",
            data={"token": web.api.tokens[REVIEWER], "csrf": "forged"},
        )
    assert reply.status_code == 403 and _code(reply.text) == "BEM-704"
    assert "riverbeam_session" not in reply.headers.get("set-cookie", "")


def test_secure_cookies_over_plain_http_name_the_cause(web: Web) -> None:
    with (
        api_server(web.stack, TOKENS, api_table={"secure_cookies": "true"}) as secure,
        httpx.Client(base_url=secure.url, headers={"Accept": "text/html"}) as client,
    ):
        form = client.get("/sign-in")
        # A client does not send a Secure cookie back over HTTP; the page says so up front.
        assert "secure" in form.headers["set-cookie"].lower()
        assert 'id="transport-warning"' in form.text and "plain HTTP" in form.text
        reply = client.post(
            "/sign-in", data={"token": secure.tokens[REVIEWER], "csrf": hidden(form.text, "csrf")}
        )
    assert reply.status_code == 403 and _code(reply.text) == "BEM-704"
    assert "api.secure_cookies is on" in reply.text and "out of date" not in reply.text


def test_a_session_cookie_is_http_only_and_lax_and_signing_out_ends_it(web: Web) -> None:
    with sign_in(web, REQUESTER) as client:
        cookie = next(c for c in client.cookies.jar if c.name == "riverbeam_session")
        assert cookie.has_nonstandard_attr("HttpOnly")
        assert cookie.get_nonstandard_attr("SameSite", "").lower() == "lax"
        stolen = cookie.value
        reply = client.post("/sign-out", data={"csrf": hidden(client.get("/mine").text, "csrf")})
        assert reply.url.path == "/sign-in"
    with browser_like(web, cookies={"riverbeam_session": stolen}) as replay:
        assert replay.get("/mine").headers["location"].startswith("/sign-in")


# -- deciding ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parked(web: Web) -> str:
    """A writer's author job waiting for approval; the tests here must leave it pending."""
    return web.park(REQUESTER).id


@pytest.mark.parametrize("csrf", [None, "", "forged-token"])
def test_a_decision_without_the_right_csrf_token_decides_nothing(
    web: Web, parked: str, csrf: str | None
) -> None:
    with sign_in(web, REVIEWER) as client:
        data = {"decision": "approve", "comment": "ok"}
        if csrf is not None:
            data["csrf"] = csrf
        reply = client.post(f"/approvals/{parked}", data=data)
    assert reply.status_code == 403 and _code(reply.text) == "BEM-704"
    approval = web.stack.store.approvals.get(parked)
    assert approval is not None and approval.state is ApprovalState.PENDING


def test_a_submitter_sees_the_queue_read_only_and_cannot_approve(web: Web, parked: str) -> None:
    with sign_in(web, REQUESTER) as client:
        queue = client.get("/approvals").text
        assert f'id="approval-{parked}"' in queue
        assert f'action="/approvals/{parked}"' not in queue
        assert "can read this queue; a reviewer or admin decides" in queue
        reply = _decide(client, parked, "approve", _csrf(client))
    assert reply.status_code == 403 and _code(reply.text) == "BEM-702"
    approval = web.stack.store.approvals.get(parked)
    assert approval is not None and approval.state is ApprovalState.PENDING


def test_a_reviewer_cannot_approve_their_own_job(web: Web) -> None:
    own = web.park(SECOND_REVIEWER).id
    with sign_in(web, SECOND_REVIEWER) as client:
        queue = client.get("/approvals").text
        card = queue[queue.index(f'id="approval-{own}"') :]
        assert "You requested this job, so another reviewer must decide." in card[:6000]
        reply = _decide(client, own, "approve", _csrf(client))
    assert reply.status_code == 403 and _code(reply.text) == "BEM-602"
    approval = web.stack.store.approvals.get(own)
    assert approval is not None and approval.state is ApprovalState.PENDING
    # Another reviewer refuses it through the same form, and the job page says so.
    with sign_in(web, REVIEWER) as client:
        form = decision_form(client.get("/approvals").text, own)
        reply = client.post(
            f"/approvals/{own}", data={**form, "decision": "refuse", "comment": "Not this way"}
        )
        assert reply.url.path == f"/jobs/{own}"
        web.stack.wait_for(own, JobState.REFUSED, timeout=60)
        page = client.get(f"/jobs/{own}").text
    assert f"{REVIEWER} refused the change; nothing was pushed." in page
    assert "Not this way" in page


def test_a_decision_form_left_open_while_the_job_parked_again_decides_nothing(web: Web) -> None:
    """Reviewer A's queue page shows approval 1; reviewer B refuses it and the job parks again
    on another commit; A's still-open form posts approval 1: refused with BEM-604, and the
    job's page then offers the new approval, whose form does approve it."""
    job = web.park(REQUESTER, playbook="author-push-twice")
    with sign_in(web, REVIEWER) as a, sign_in(web, SECOND_REVIEWER) as b:
        stale = decision_form(a.get("/approvals").text, job.id)
        facts = a.get(f"/jobs/{job.id}").text
        assert stale["approval_id"] in facts and f"sha256:{stale['diff_digest']}" in facts
        form = decision_form(b.get("/approvals").text, job.id)
        b.post(f"/approvals/{job.id}", data={**form, "decision": "refuse", "comment": "Not yet"})
        wait_until(
            lambda: (
                web.stack.store.jobs.get(job.id).approval_id != stale["approval_id"]
                and web.stack.store.jobs.get(job.id).state is JobState.AWAITING_APPROVAL
            ),
            90,
            lambda: str(web.stack.store.jobs.get(job.id)),
        )
        for decision in ("approve", "refuse"):
            reply = a.post(f"/approvals/{job.id}", data={**stale, "decision": decision})
            assert reply.status_code == 409 and _code(reply.text) == "BEM-604"
        garbled = {**stale, "approval_id": "<not an id>", "decision": "approve"}
        assert _code(a.post(f"/approvals/{job.id}", data=garbled).text) == "BEM-604"
        assert web.stack.upstream_ref(f"riverbeam/{job.id}") is None
        waiting = web.stack.store.approvals.get(job.id)
        assert waiting is not None and waiting.state is ApprovalState.PENDING

        fresh = decision_form(a.get(f"/jobs/{job.id}").text, job.id)
        assert fresh["commit_sha"] != stale["commit_sha"]
        a.post(f"/approvals/{job.id}", data={**fresh, "decision": "approve"})
        web.stack.wait_for(job.id, JobState.SUCCEEDED, timeout=90)
    assert web.stack.upstream_ref(f"riverbeam/{job.id}") == fresh["commit_sha"]


def test_a_blocking_check_failure_is_approved_only_over_an_admins_recorded_override(
    web: Web,
) -> None:
    job = web.park(REQUESTER, playbook="author-ignore-checks", repo=CHECKED_REPO)
    with sign_in(web, REVIEWER) as reviewer, sign_in(web, ADMIN) as admin:
        page = reviewer.get(f"/jobs/{job.id}").text
        assert "(blocks the approve)" in page and 'name="override_checks"' not in page
        form = decision_form(page, job.id)
        refused = reviewer.post(f"/approvals/{job.id}", data={**form, "decision": "approve"})
        assert _code(refused.text) == "BEM-606"
        # A reviewer who adds the field by hand is refused all the same.
        forced = {**form, "decision": "approve", "override_checks": "yes"}
        assert _code(reviewer.post(f"/approvals/{job.id}", data=forced).text) == "BEM-606"
        assert web.stack.upstream_ref(f"riverbeam/{job.id}") is None

        page = admin.get(f"/jobs/{job.id}").text
        assert 'name="override_checks" value="yes"' in page
        form = decision_form(page, job.id)
        admin.post(
            f"/approvals/{job.id}", data={**form, "decision": "approve", "override_checks": "yes"}
        )
        web.stack.wait_for(job.id, JobState.SUCCEEDED, timeout=90)
    decided = web.stack.store.approvals.get(job.id)
    assert decided is not None and decided.checks_overridden_by == ADMIN
    assert web.stack.upstream_ref(f"riverbeam/{job.id}") == decided.commit_sha


def test_a_decision_made_at_the_cli_shows_the_claimed_name_and_the_os_account(web: Web) -> None:
    """The CLI takes the reviewer's name on trust and records the OS account beside it; the
    job page, the job's log and the API's documents show both."""
    job = web.park(REQUESTER)
    current = web.stack.store.approvals.get(job.id)
    assert current is not None
    web.stack.service.decide(
        Principal.operator("claimed-reviewer"),
        job.id,
        approve=False,
        comment="Not like this",
        binding=current.binding(),
        os_user="ops-account",
    )
    web.stack.wait_for(job.id, JobState.REFUSED, timeout=90)
    both = "claimed-reviewer (OS user ops-account)"
    with sign_in(web, REVIEWER) as client:
        page = client.get(f"/jobs/{job.id}").text
    assert f"Refused by {both}" in page and f"{both} refused the change" in page
    assert f"git_push refused by {both}" in page
    # A decided push waits for nothing any more.
    assert "Waiting since" not in page and "<dt>Asked at</dt>" in page
    auth = web.api.auth(REVIEWER)
    job_view = httpx.get(f"{web.url}/v1/jobs/{job.id}", headers=auth).json()
    detail = httpx.get(f"{web.url}/v1/approvals/{job.id}", headers=auth).json()
    for shown in (job_view["approval"], detail["current"], detail["history"][0]):
        assert (shown["decided_by"], shown["decided_by_os_user"]) == (
            "claimed-reviewer",
            "ops-account",
        )


# -- the New-request form --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "fields", "field", "message"),
    [
        (REQUESTER, {"request": "   "}, "request", "An author job needs request."),
        (REQUESTER, {"repo": "nowhere", "request": REQUEST}, "repo", "No repository named"),
        (OTHER_WRITER, {"repo": REPO, "request": REQUEST}, "repo", "may not use repository"),
        (CI, {"kind": "author", "request": REQUEST}, "kind", "may not ask for 'author' jobs"),
        (CI, {"kind": "review", "request": "Check it"}, "branch", "A review job needs branch."),
        (REQUESTER, {"kind": "publish", "request": REQUEST}, "kind", "may not ask for"),
    ],
)
def test_a_bad_request_is_shown_next_to_its_field_and_queues_nothing(
    web: Web, who: str, fields: dict[str, str], field: str, message: str
) -> None:
    before = web.job_count()
    with sign_in(web, who) as client:
        reply = _new_form(client, **fields)
    assert reply.status_code == 422
    error = field_error(reply.text, field)
    assert error is not None and message in error
    assert web.job_count() == before


def test_the_form_offers_only_the_repositories_and_kinds_the_token_may_use(web: Web) -> None:
    with sign_in(web, OTHER_WRITER) as client:
        form = client.get("/new").text
    assert re.findall(r'<option value="([^"]+)"', form) == [
        OTHER_REPO,
        "author",
        "review",
        "summarize",
        "commit-notes",
    ]
    with sign_in(web, CI) as client:
        kinds = re.findall(r'<option value="([^"]+)"', client.get("/new").text)
    assert kinds == [CHECKED_REPO, REPO, OTHER_REPO, "review", "summarize", "commit-notes"]


def test_a_double_submit_makes_one_job(web: Web) -> None:
    request = "Summarize what changed on main this week."
    with sign_in(web, REQUESTER) as client:
        data = _new_form_data(client, kind="summarize", request=request, branch="main")
        first = client.post("/new", data=data)
        second = client.post("/new", data=data)
    assert first.url == second.url and first.url.path.startswith("/jobs/")
    mine = [job for job in web.jobs_of(REQUESTER, JobKind.SUMMARIZE) if job.spec.request == request]
    assert [job.id for job in mine] == [first.url.path.rsplit("/", 1)[-1]]
    web.stack.wait_for(mine[0].id, JobState.SUCCEEDED, timeout=90)


# -- lists, hostile text and headers ------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile(web: Web) -> str:
    """A job whose request and pending diff are hostile HTML. It is stored, never queued."""
    store = web.stack.store
    record = store.jobs.create(
        JobSpec(kind=JobKind.AUTHOR, repo=REPO, request=HOSTILE, requested_by=REQUESTER)
    )
    diff = f"diff --git a/x.md b/x.md\n--- a/x.md\n+++ b/x.md\n@@ -1 +1 @@\n-old\n+{HOSTILE}\n"
    store.approvals.open(
        Approval(
            id=f"{record.id}-approval",
            job_id=record.id,
            repo=REPO,
            requested_by=REQUESTER,
            call_id="call-1",
            tool="git_push",
            arguments={"ref": HOSTILE},
            target_ref=f"riverbeam/{record.id}",
            diff_stat=f" {HOSTILE} | 2 +-",
            diff=diff,
        )
    )
    return record.id


def test_hostile_text_in_requests_and_diffs_renders_as_text(web: Web, hostile: str) -> None:
    with sign_in(web, REVIEWER) as client:
        pages = [
            client.get("/approvals").text,
            client.get(f"/jobs/{hostile}").text,
            client.get("/jobs").text,
        ]
    for page in pages:
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;" in page
    # "-old" and the hostile line are a changed pair: every word of it is marked.
    assert '<span class="d-add d-words">+<mark class="w-add">&lt;script&gt;' in pages[0]
    assert '<span class="d-del d-words">-<mark class="w-del">old</mark></span>' in pages[0]
    assert '<span class="d-file">+++ b/x.md</span>' in pages[0]


def test_the_jobs_list_filters_and_pages(web: Web, parked: str, hostile: str) -> None:
    with sign_in(web, REVIEWER) as client:
        waiting = client.get("/jobs", params={"state": "awaiting_approval"}).text
        assert f'href="/jobs/{parked}"' in waiting and f'href="/jobs/{hostile}"' not in waiting
        queued = client.get("/jobs", params={"state": "queued", "kind": "author"}).text
        assert f'href="/jobs/{hostile}"' in queued and f'href="/jobs/{parked}"' not in queued
        assert client.get("/jobs", params={"repo": OTHER_REPO}).text.count('href="/jobs/j') == 0
        first = client.get("/jobs", params={"limit": 1}).text
        older = re.search(r'href="\?([^"]+)" rel="next"', first)
        assert older is not None
        second = client.get("/jobs?" + older.group(1).replace("&amp;", "&")).text
        ids = [re.findall(r'href="/jobs/([^"/]+)"', page)[0] for page in (first, second)]
        assert ids[0] != ids[1]
        bad = client.get("/jobs", params={"state": "sleeping"})
        assert bad.status_code == 422 and _code(bad.text) == "BEM-705"


def test_my_requests_lists_only_the_visitors_jobs(web: Web, parked: str) -> None:
    own = web.park(SECOND_REVIEWER).id
    with sign_in(web, REQUESTER) as client:
        mine = client.get("/mine").text
    assert f'href="/jobs/{parked}"' in mine and f'href="/jobs/{own}"' not in mine


def test_an_unknown_job_and_an_out_of_scope_one_are_error_pages(web: Web, parked: str) -> None:
    with sign_in(web, OTHER_WRITER) as client:
        unknown = client.get("/jobs/j-nope")
        hidden_job = client.get(f"/jobs/{parked}")
    assert unknown.status_code == 404 and _code(unknown.text) == "BEM-500"
    assert hidden_job.status_code == 403 and _code(hidden_job.text) == "BEM-703"


@pytest.mark.parametrize("path", ["/sign-in", "/mine", "/approvals", "/new", "/static/site.css"])
def test_every_page_carries_the_security_headers(web: Web, path: str) -> None:
    with sign_in(web, REVIEWER) as client:
        reply = client.get(path)
    assert reply.status_code == 200
    for name, value in HEADERS.items():
        assert reply.headers[name] == value
    policy = reply.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy


def test_every_page_links_an_icon_that_is_served(web: Web) -> None:
    with sign_in(web, REVIEWER) as client:
        page = client.get("/approvals").text
        icon = re.search(r'<link rel="icon" href="([^"]+)"', page)
        assert icon is not None
        linked = client.get(icon.group(1))
        fallback = client.get("/favicon.ico")
    for reply in (linked, fallback):
        assert reply.status_code == 200
        assert reply.headers["content-type"] == "image/svg+xml"
        assert reply.content.startswith(b"<svg ")


def test_a_refused_last_event_id_is_quoted_as_sent(web: Web) -> None:
    with sign_in(web, REVIEWER) as client:
        # UTF-8 header bytes, which ASGI hands over decoded as latin-1.
        reply = client.get("/jobs/j-any/events", headers={"Last-Event-ID": "１".encode()})
    assert reply.status_code == 422 and _code(reply.text) == "BEM-705"
    assert "１" in reply.text and "is not an event id" in reply.text, reply.text


def test_error_pages_carry_the_security_headers_too(web: Web) -> None:
    with sign_in(web, REVIEWER) as client:
        reply = client.get("/no-such-page")
    assert reply.status_code == 404 and _code(reply.text) == "BEM-706"
    assert reply.headers["x-frame-options"] == "DENY"


def test_the_live_feed_is_the_event_stream_behind_the_session_cookie(web: Web) -> None:
    job = web.park(REQUESTER)
    with sign_in(web, REVIEWER) as client:
        form = decision_form(client.get("/approvals").text, job.id)
        client.post(f"/approvals/{job.id}", data={**form, "decision": "approve"})
        web.stack.wait_for(job.id, JobState.SUCCEEDED, timeout=90)
        stream = client.get(f"/jobs/{job.id}/events", headers={"Accept": "text/event-stream"})
        log = client.get(f"/jobs/{job.id}/log", params={"after": "0"})
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert stream.text.count("event: frame") >= 5
    assert stream.text.split("\n\n")[-2].startswith('event: end\ndata: {"state": "succeeded"}')
    assert 'data-state="succeeded"' in log.text and "git_push ran" in log.text
    with httpx.Client(base_url=web.url) as anonymous:
        refused = anonymous.get(f"/jobs/{job.id}/events")
    assert refused.status_code == 401 and refused.json()["code"] == "BEM-708"


def test_a_post_given_up_for_a_job_is_shown_on_its_page_as_text(web: Web, parked: str) -> None:
    error = ErrorInfo(code="BEM-823", message="gh: <b>docs</b>#1: Not Found; given up")
    web.stack.store.jobs.record_given_up_post(parked, error)
    with sign_in(web, REVIEWER) as client:
        page = client.get(f"/jobs/{parked}").text
    assert "Posts given up" in page and "<code>BEM-823</code>" in page
    assert "&lt;b&gt;docs&lt;/b&gt;#1: Not Found; given up" in page
