"""Helpers for the web tests: a shared service with an API server, signing in as a person
with a real form post, and reading the values a page's forms carry."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from bot.store.models import JobKind, JobRecord, JobState
from harness.api_server import ApiServer, api_server
from harness.stack import REPO, REQUESTER, REVIEWER, Stack, job_stack

OTHER_REPO = "other"
SECOND_REVIEWER = "second-reviewer@example.com"
CI = "ci-bot"
OTHER_WRITER = "other-writer@example.com"
ADMIN = "admin@example.com"
# A repository whose docs checks block an approve on a new failure (docs/checks.md).
CHECKED_REPO = "checked"
# Who may sign in: the stack's requester writes, its reviewer reviews.
TOKENS = {
    REQUESTER: ("submitter", None),
    REVIEWER: ("reviewer", None),
    SECOND_REVIEWER: ("reviewer", None),
    CI: ("ci", None),
    OTHER_WRITER: ("submitter", [OTHER_REPO]),
    ADMIN: ("admin", None),
}
REQUEST = "Fix the typos and the broken link on the install page."


@dataclass
class Web:
    stack: Stack
    api: ApiServer

    @property
    def url(self) -> str:
        return self.api.url

    def park(
        self, who: str = REQUESTER, playbook: str = "author-fix-install", repo: str = REPO
    ) -> JobRecord:
        """An author job submitted through the API by ``who``, once it waits for approval."""
        body = {
            "kind": "author",
            "repo": repo,
            "request": REQUEST,
            "metadata": {"playbook": playbook},
        }
        reply = httpx.post(f"{self.url}/v1/jobs", headers=self.api.auth(who), json=body)
        assert reply.status_code in (200, 201, 202), reply.text
        return self.stack.wait_for(reply.json()["id"], JobState.AWAITING_APPROVAL, timeout=90)

    def job_count(self) -> int:
        return len(self.stack.store.listing.list(limit=1000)[0])

    def jobs_of(self, who: str, kind: JobKind | None = None) -> list[JobRecord]:
        return self.stack.store.listing.list(requested_by=who, kind=kind, limit=1000)[0]


_REPOSITORIES = {
    OTHER_REPO: {},
    CHECKED_REPO: {"checks": {"run": ["codespell", "links"], "block": True}},
}


@contextmanager
def web_service() -> Iterator[Web]:
    """One stack (with a second repository), one API server and one worker."""
    with (
        job_stack(repositories=_REPOSITORIES, model_factory="tests.web.model:for_job") as stack,
        api_server(stack, TOKENS) as api,
    ):
        stack.start_worker("a")
        yield Web(stack, api)


def browser_like(web: Web, **kw: object) -> httpx.Client:
    """An HTTP client that asks for pages as a browser does (errors come back as pages)."""
    headers = {"Accept": "text/html,application/xhtml+xml"}
    return httpx.Client(base_url=web.url, headers=headers, timeout=30.0, **kw)  # type: ignore[arg-type]


def hidden(page: str, name: str) -> str:
    """The value of the first hidden field ``name`` on ``page``."""
    match = re.search(rf'name="{re.escape(name)}" value="([^"]*)"', page)
    assert match is not None, f"no field {name} on the page:\n{page[:2000]}"
    return html.unescape(match.group(1))


@contextmanager
def sign_in(web: Web, who: str) -> Iterator[httpx.Client]:
    """A client signed in as ``who`` through the sign-in form, following redirects."""
    with browser_like(web, follow_redirects=True) as client:
        form = client.get("/sign-in")
        reply = client.post(
            "/sign-in",
            data={"token": web.api.tokens[who], "csrf": hidden(form.text, "csrf"), "next": "/"},
        )
        assert reply.status_code == 200 and "Sign out" in reply.text, reply.text
        yield client


def field_error(page: str, field: str) -> str | None:
    """The error shown next to form field ``field``, if any."""
    match = re.search(
        rf'<div class="field" id="field-{field}">.*?(?:<p class="field-error" '
        rf'id="error-{field}">(.*?)</p>)?\s*</div>',
        page,
        re.S,
    )
    assert match is not None, f"no field {field} on the page"
    return None if match.group(1) is None else html.unescape(match.group(1))


def decision_form(page: str, job_id: str) -> dict[str, str]:
    """The hidden fields of the decision form for ``job_id`` on ``page`` (CSRF and what the
    form decides: the approval's id, commit and diff digest), as a browser would post them."""
    start = page.index(f'action="/approvals/{job_id}"')
    form = page[start : page.index("</form>", start)]
    return {
        name: html.unescape(value)
        for name, value in re.findall(r'type="hidden" name="([^"]+)" value="([^"]*)"', form)
    }
