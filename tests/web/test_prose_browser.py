"""What a reviewer sees of a docs change, in a real Chromium at 1280 and 390 px: the changed
words marked in the diff, the broken link flagged with page and line, and the rendered page
before and after (side by side on the desktop, stacked on the phone), with no request leaving
for the hostile page's remote image and no Content-Security-Policy violation.

Screenshots go to the test's ``tmp_path``, as in test_browser.py (kept out of the
repository; docs/web.md describes each)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ViewportSize, expect, sync_playwright

from harness.stack import REVIEWER
from tests.web.kit import Web
from tests.web.test_prose_review import store_prose_change

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
SIZES = {
    "desktop": ViewportSize(width=1280, height=900),
    "phone": ViewportSize(width=390, height=844),
}


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    # Chromium's own sandbox refuses to start as root; the tests only visit loopback.
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield launched
        launched.close()


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_a_reviewer_sees_words_links_and_the_rendered_page(
    web: Web, chromium: Browser, tmp_path: Path, size: str
) -> None:
    job_id = store_prose_change(web)
    context = chromium.new_context(viewport=SIZES[size])
    context.set_default_timeout(30_000)
    page = context.new_page()
    requests: list[str] = []
    complaints: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda message: complaints.append(message.text))
    page.goto(f"{web.url}/sign-in?next=/jobs/{job_id}")
    page.get_by_label("Your Riverbeam token").fill(web.api.tokens[REVIEWER])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    page.goto(f"{web.url}/jobs/{job_id}")

    # The diff: only the changed word is marked, on both sides.
    expect(page.locator("mark.w-del", has_text="instaler")).to_be_visible()
    expect(page.locator("mark.w-add", has_text="installer")).to_be_visible()
    expect(page.get_by_text("rewrapped only: the same words")).to_be_visible()
    # The broken link, with its page and line.
    broken = page.locator(".broken-links li")
    expect(broken).to_have_count(1)
    expect(broken).to_contain_text("docs/install.md line 7")
    # The rendered page, before and after, the changed paragraph marked on both sides.
    before = page.locator(".pv-before .pv-changed", has_text="Run the instaler.")
    after = page.locator(".pv-after .pv-changed", has_text="Run the installer.")
    expect(before).to_be_visible()
    expect(after).to_be_visible()
    expect(page.locator(".pv-after .pv-img", has_text="http://evil.example/p.png")).to_be_visible()
    left, right = before.bounding_box(), after.bounding_box()
    assert left is not None and right is not None
    if size == "desktop":
        assert right["x"] > left["x"] + left["width"] - 1 and abs(right["y"] - left["y"]) < 5
    else:
        assert right["y"] > left["y"] + left["height"] - 1 and abs(right["x"] - left["x"]) < 5
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the job page scrolls sideways by {overflow} px at phone width"
    page.locator("#preview").scroll_into_view_if_needed()
    page.screenshot(path=tmp_path / f"prose-{size}.png", full_page=True)
    page.goto(f"{web.url}/approvals")
    expect(page.locator(f"#approval-{job_id} mark.w-add", has_text="installer")).to_be_visible()
    page.screenshot(path=tmp_path / f"prose-queue-{size}.png", full_page=True)
    context.close()

    assert not [url for url in requests if "evil.example" in url]
    assert not [text for text in complaints if "Content Security Policy" in text]
