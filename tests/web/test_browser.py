"""The pages in a real Chromium (Debian's, driven by Playwright; no browser download).

Issue 6: a reviewer signs in, finds the parked push with its diff in the queue, approves it
and watches the job finish with the pushed commit. Issue 8: a writer submits an edit request
through the form, watches it run live until it waits for a reviewer, a reviewer approves it
in another browser context, and the writer's page shows the pushed commit.

Screenshots go to the test's ``tmp_path`` (``pytest --basetemp=out/pytest`` keeps them under
the git-ignored ``out/``; docs/web.md describes each). Every wait is Playwright's own
``expect``/``wait_for`` with a generous timeout: nothing here sleeps.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect, sync_playwright

from bot.store.models import JobState
from harness.stack import REPO, REQUESTER, REVIEWER
from tests.web.kit import Web

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
DESKTOP = ViewportSize(width=1280, height=900)
PHONE = ViewportSize(width=390, height=844)
# A job runs in a real container on a busy machine: be patient, but never sleep.
JOB_MS = 120_000
EDIT_REQUEST = "Fix the two typos and the broken configuration link on the install page."


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Chromium's own sandbox refuses to start as root; the tests only visit loopback.
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield launched
        launched.close()


def _signed_in(browser: Browser, web: Web, who: str) -> Page:
    """A new browser context (its own cookies) signed in as ``who`` through the form."""
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{web.url}/sign-in")
    page.get_by_label("Your Riverbeam token").fill(web.api.tokens[who])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    return page


def _shoot(page: Page, folder: Path, name: str, *, phone_too: bool = False) -> None:
    """Full-page screenshots at desktop width and, when asked, at phone width, where the
    page must not scroll sideways."""
    page.screenshot(path=folder / f"{name}-desktop.png", full_page=True)
    if phone_too:
        page.set_viewport_size(PHONE)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name} scrolls sideways by {overflow} px at phone width"
        page.screenshot(path=folder / f"{name}-phone.png", full_page=True)
        page.set_viewport_size(DESKTOP)


def test_a_reviewer_approves_the_parked_push_and_sees_it_land(
    web: Web, browser: Browser, tmp_path: Path
) -> None:
    job = web.park(REQUESTER)
    approval = web.stack.store.approvals.get(job.id)
    assert approval is not None and approval.commit_sha is not None
    branch = f"riverbeam/{job.id}"

    page = _signed_in(browser, web, REVIEWER)
    expect(page).to_have_url(re.compile(r"/approvals$"))
    card = page.locator(f"#approval-{job.id}")
    expect(card).to_contain_text(REQUESTER)
    expect(card).to_contain_text(branch)
    expect(card).to_contain_text(approval.commit_sha)
    expect(card.locator(".diff-stat")).to_contain_text("docs/install.md")
    expect(card.locator(".d-file").filter(has_text="+++ b/docs/install.md")).to_be_visible()
    expect(card.locator(".d-del").filter(has_text="-Instal the tool with pip:")).to_be_visible()
    expect(card.locator(".d-add").filter(has_text="+Install the tool with pip:")).to_be_visible()
    _shoot(page, tmp_path, "queue", phone_too=True)

    card.get_by_label(re.compile("Comment")).fill("Looks right")
    card.get_by_role("button", name="Approve and push").click()

    expect(page).to_have_url(re.compile(f"/jobs/{job.id}$"))
    outcome = page.locator("#outcome")
    expect(outcome).to_contain_text(
        f"Pushed to branch {branch} at commit {approval.commit_sha}.", timeout=JOB_MS
    )
    expect(page.locator("#job-state")).to_have_text("succeeded")
    expect(page.locator("#approval")).to_contain_text(f"Approved by {REVIEWER}")
    expect(page.locator("#approval")).to_contain_text("Looks right")
    _shoot(page, tmp_path, "job")
    assert web.stack.upstream_ref(branch) == approval.commit_sha
    assert list(tmp_path.glob("*.png"))
    page.context.close()


def test_a_writer_submits_a_request_and_follows_it_until_it_lands(
    web: Web, browser: Browser, tmp_path: Path
) -> None:
    writer = _signed_in(browser, web, REQUESTER)
    expect(writer).to_have_url(re.compile(r"/mine$"))
    writer.get_by_role("link", name="New request").click()
    writer.get_by_label("Repository", exact=True).select_option(REPO)
    writer.get_by_label("What should Riverbeam do?").select_option("author")
    writer.get_by_label("Your request, in plain words").fill(EDIT_REQUEST)
    writer.get_by_label(re.compile("^Pages it concerns")).fill("docs/install.md")
    _shoot(writer, tmp_path, "form", phone_too=True)
    writer.get_by_role("button", name="Submit the request").click()

    expect(writer).to_have_url(re.compile(r"/jobs/[^/]+$"))
    job_id = writer.url.rsplit("/", 1)[-1]
    expect(writer.locator("blockquote.request")).to_have_text(EDIT_REQUEST)
    # Live: once the page shows the job running, new log lines arrive without a reload.
    expect(writer.locator("#job-state")).to_have_text("running", timeout=JOB_MS)
    writer.evaluate("window.stillTheSamePage = true")
    expect(writer.locator(".frame").filter(has_text="read_file ran")).to_be_visible(timeout=JOB_MS)
    assert writer.evaluate("window.stillTheSamePage === true")
    _shoot(writer, tmp_path, "running", phone_too=True)

    expect(writer.locator("#outcome")).to_contain_text("Waiting for a reviewer.", timeout=JOB_MS)
    expect(writer.locator("#approval .d-add").first).to_be_visible()
    _shoot(writer, tmp_path, "waiting", phone_too=True)

    reviewer = _signed_in(browser, web, REVIEWER)
    card = reviewer.locator(f"#approval-{job_id}")
    expect(card).to_contain_text(REQUESTER)
    card.get_by_role("button", name="Approve and push").click()
    expect(reviewer).to_have_url(re.compile(f"/jobs/{job_id}$"))

    done = web.stack.wait_for(job_id, JobState.SUCCEEDED, timeout=JOB_MS / 1000)
    approval = web.stack.store.approvals.get(job_id)
    assert approval is not None and approval.commit_sha is not None
    branch = f"riverbeam/{job_id}"
    expect(writer.locator("#outcome")).to_contain_text(
        f"Pushed to branch {branch} at commit {approval.commit_sha}.", timeout=JOB_MS
    )
    expect(writer.locator("#job-state")).to_have_text("succeeded")
    _shoot(writer, tmp_path, "finished", phone_too=True)

    writer.get_by_role("link", name="My requests").click()
    row = writer.locator("table.jobs tr").filter(has_text=job_id)
    expect(row).to_contain_text("succeeded")
    assert done.spec.requested_by == REQUESTER and done.spec.pages == ("docs/install.md",)
    assert web.stack.upstream_ref(branch) == approval.commit_sha
    writer.context.close()
    reviewer.context.close()
