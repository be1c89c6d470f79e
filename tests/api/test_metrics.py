"""``/metrics``: the exposition parses (with ``prometheus_client``'s own parser), holds the
families docs/monitoring.md lists and nothing else, its values follow the jobs the service
runs (counts by kind and state, durations, tool calls, approvals waiting), and a source
that does not answer is left out and marked down."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.parser import text_string_to_metric_families

from bot.api.metrics import METRICS_TTL_SECONDS, RiverbeamCollector, store_metrics
from bot.store.models import JobKind, JobState
from harness.api_server import ApiServer
from harness.playbooks import FIXED_INSTALL
from harness.stack import Stack
from tests.api.kit import shown

MONITORING = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"

Sample = tuple[str, frozenset[tuple[str, str]]]
Samples = dict[Sample, float]
# Per family: its type and the label names its samples carry.
Families = dict[str, tuple[str, frozenset[str]]]


def parse(text: str) -> tuple[Families, Samples]:
    """Every family and sample of a text exposition; fails on a family that is not
    Riverbeam's (the app's registry holds its collector only) and on a repeated sample."""
    families: Families = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("riverbeam_"), f"not a Riverbeam family: {family.name}"
        labels = {name for sample in family.samples for name in sample.labels}
        families[family.name] = (family.type, frozenset(labels))
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"repeated sample: {sample}"
            samples[key] = sample.value
    return families, samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def scrape_families(api: ApiServer) -> tuple[Families, Samples]:
    reply = httpx.get(f"{api.url}/metrics", timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == CONTENT_TYPE_PLAIN_0_0_4
    assert reply.headers["cache-control"] == "no-store"
    return parse(reply.text)


def scrape(api: ApiServer) -> Samples:
    return scrape_families(api)[1]


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


def source_up(samples: Samples, source: str) -> float | None:
    return value(samples, "riverbeam_metrics_source_up", source=source)


def documented() -> Families:
    """The table of docs/monitoring.md: each metric, its type and its label names (the
    backquoted names of the labels column, leaving out the values in parentheses)."""
    table: Families = {}
    for name, kind, labels in re.findall(
        r"^\| `(riverbeam_\w+)` \| (\w+) \|([^|]*)\|", MONITORING.read_text(), re.MULTILINE
    ):
        table[name] = (kind, frozenset(re.findall(r"`(\w+)`", re.sub(r"\(.*?\)", "", labels))))
    return table


def test_the_metrics_follow_the_jobs_the_service_runs(stack: Stack, api: ApiServer) -> None:
    before = scrape(api)
    assert source_up(before, "store") == 1
    assert source_up(before, "engine") == 1
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


def test_the_families_are_those_the_monitoring_page_lists(api: ApiServer) -> None:
    families, _ = scrape_families(api)
    table = documented()
    assert set(families) == set(table)
    for name, (kind, labels) in families.items():
        assert kind == table[name][0], name
        # A family with no samples (no tool call yet when run alone) shows no labels.
        assert labels == table[name][1] or not labels, name


def test_a_store_that_does_not_answer_is_left_out_and_marked_down(
    stack: Stack, api: ApiServer
) -> None:
    with stack.redis.paused():
        down = scrape_until(api, lambda s: source_up(s, "store") == 0)
    assert source_up(down, "engine") == 1
    assert {name for name, _ in down} == {
        "riverbeam_metrics_source_up",
        "riverbeam_metrics_collect_seconds",
        "riverbeam_sandbox_containers",
    }
    back = scrape_until(api, lambda s: source_up(s, "store") == 1)
    assert value(back, "riverbeam_jobs_scan_complete") == 1


def test_a_source_past_the_timeout_is_left_out_and_the_others_kept(stack: Stack) -> None:
    registry = CollectorRegistry()
    registry.register(
        RiverbeamCollector(
            {
                "store": lambda: store_metrics(stack.store, datetime.now(UTC)),
                "empty": list,
            },
            timeout_seconds=0.5,
        )
    )
    with stack.redis.paused():
        _, samples = parse(generate_latest(registry).decode())
    assert source_up(samples, "store") == 0
    assert source_up(samples, "empty") == 1
    assert (value(samples, "riverbeam_metrics_collect_seconds", source="store") or 0) >= 0.5
    assert value(samples, "riverbeam_jobs_scan_complete") is None
