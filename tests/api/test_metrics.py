"""``/metrics``: the exposition parses, and its values follow the jobs the service runs
(counts by kind and state, durations, tool calls, approvals waiting)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import httpx

from bot.api.metrics import CONTENT_TYPE, METRICS_TTL_SECONDS, Family, exposition
from bot.store.models import JobKind, JobState
from harness.api_server import ApiServer
from harness.playbooks import FIXED_INSTALL
from harness.stack import Stack
from tests.api.kit import shown

Sample = tuple[str, frozenset[tuple[str, str]]]
Samples = dict[Sample, float]

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse(text: str) -> Samples:
    """Every sample of a text exposition; fails on a line that is not one, on a sample of
    a family with no TYPE line before it, and on a repeated sample."""
    samples: Samples = {}
    typed: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("gauge", "summary", "counter", "histogram"), line
            typed[name] = kind
            continue
        if line.startswith("# HELP "):
            continue
        found = _SAMPLE.match(line)
        assert found is not None, f"not a sample line: {line!r}"
        name, inside, value = found.groups()
        assert name in typed, f"{name} has no TYPE line before it"
        labels = frozenset(
            (key, re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], raw))
            for key, raw in _LABEL.findall(inside or "")
        )
        assert (name, labels) not in samples, f"repeated sample: {line}"
        samples[name, labels] = float(value)
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def scrape(api: ApiServer) -> Samples:
    reply = httpx.get(f"{api.url}/metrics", timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == CONTENT_TYPE
    return parse(reply.text)


def scrape_until(api: ApiServer, holds: Callable[[Samples], bool]) -> Samples:
    """Scrape until ``holds`` (the answer is cached for a few seconds); fail with the last
    exposition after a generous while."""
    deadline = time.monotonic() + 10 * METRICS_TTL_SECONDS + 30
    while True:
        samples = scrape(api)
        if holds(samples):
            return samples
        assert time.monotonic() < deadline, f"the metrics never got there: {samples}"
        time.sleep(0.5)


def jobs(samples: Samples, kind: JobKind, state: JobState) -> float | None:
    return value(samples, "riverbeam_jobs", kind=kind.value, state=state.value)


def test_the_exposition_escapes_label_values_and_help_text() -> None:
    family = Family("riverbeam_example", "gauge", 'a help \\ line\nwith "two" lines')
    family.add(1.5, tool='say "hi"\\\n')
    family.add(2, tool="plain")
    text = exposition([family])

    assert '# HELP riverbeam_example a help \\\\ line\\nwith "two" lines\n' in text
    assert parse(text) == {
        ("riverbeam_example", frozenset({("tool", 'say "hi"\\\n')})): 1.5,
        ("riverbeam_example", frozenset({("tool", "plain")})): 2.0,
    }


def test_the_metrics_follow_the_jobs_the_service_runs(stack: Stack, api: ApiServer) -> None:
    before = scrape(api)
    assert value(before, "riverbeam_metrics_source_up", source="store") == 1
    assert value(before, "riverbeam_metrics_source_up", source="engine") == 1
    assert value(before, "riverbeam_jobs_scan_complete") == 1
    assert value(before, "riverbeam_sandbox_containers", state="running") is not None
    notes_before = jobs(before, JobKind.COMMIT_NOTES, JobState.SUCCEEDED) or 0
    author_before = jobs(before, JobKind.AUTHOR, JobState.SUCCEEDED) or 0

    stack.push_branch("docs/metrics", {"docs/install.md": FIXED_INSTALL}, "Fix the install page")
    with api.client("ci") as ci, api.client("writer") as writer:
        notes = ci.post(
            "/v1/jobs",
            json={
                "kind": "commit-notes",
                "repo": "docs",
                "branch": "docs/metrics",
                "metadata": {"playbook": "commit-notes"},
            },
        )
        author = writer.post(
            "/v1/jobs",
            json={
                "kind": "author",
                "repo": "docs",
                "request": "Fix the install page",
                "metadata": {"playbook": "author-fix-install"},
            },
        )
    assert notes.status_code == 201 and author.status_code == 201, (notes.text, author.text)
    stack.wait_for(notes.json()["id"], JobState.SUCCEEDED)
    stack.wait_for(author.json()["id"], JobState.AWAITING_APPROVAL)

    parked = scrape_until(
        api,
        lambda s: (
            jobs(s, JobKind.COMMIT_NOTES, JobState.SUCCEEDED) == notes_before + 1
            and value(s, "riverbeam_approvals_waiting") == 1
        ),
    )
    assert jobs(parked, JobKind.AUTHOR, JobState.AWAITING_APPROVAL) == 1
    assert (value(parked, "riverbeam_approval_oldest_age_seconds") or 0) > 0
    assert (value(parked, "riverbeam_job_duration_window_jobs", kind="commit-notes") or 0) >= 1
    median = value(parked, "riverbeam_job_duration_seconds", kind="commit-notes", quantile="0.5")
    assert median is not None and median > 0
    for tool in ("git_status", "git_log", "git_diff"):
        assert (value(parked, "riverbeam_tool_call_duration_window_calls", tool=tool) or 0) >= 1
        assert value(parked, "riverbeam_tool_call_duration_seconds", tool=tool, quantile="0.99")

    with api.client("reviewer") as reviewer:
        author_id = author.json()["id"]
        decided = reviewer.post(
            f"/v1/approvals/{author_id}/approve", json=shown(reviewer, author_id)
        )
    assert decided.status_code == 200, decided.text
    stack.wait_for(author.json()["id"], JobState.SUCCEEDED)

    after = scrape_until(
        api,
        lambda s: (
            value(s, "riverbeam_approvals_waiting") == 0
            and jobs(s, JobKind.AUTHOR, JobState.SUCCEEDED) == author_before + 1
        ),
    )
    assert jobs(after, JobKind.AUTHOR, JobState.AWAITING_APPROVAL) == 0
    assert value(after, "riverbeam_approval_oldest_age_seconds") == 0
    assert value(after, "riverbeam_tool_call_duration_window_calls", tool="git_push")
