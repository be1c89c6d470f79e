"""A forge's webhook, received → its event queued, beside the API's own submit; and
received → its job queued, through the forge worker.

    python -m bench.webhook_bench [--runs 300] [--warmup 20] [--job-runs 30]

A real ``riverbeam api`` process on loopback over a job stack (``redis-server``, the
config), with a GitHub forge configured: each run POSTs GitHub's published ``issue_comment``
example (``@riverbeam fix the install page``), signed with HMAC-SHA256, with a fresh delivery
id, to ``/webhooks/gh``, and times the round trip to its ``202``: the door checks the
signature, parses and normalizes the payload, claims the delivery id (``SET NX``) and queues
the event on the ``forge`` queue before it answers, so the answer is the event queued. The
baseline, interleaved run by run on the same keep-alive connection: ``POST /v1/jobs`` of a
summarize job to its ``201`` (the job stored and ``run_job`` queued). No worker runs in
that part; both queues only fill.

Then one Celery worker consuming the ``forge`` queue only starts, and ``--job-runs``
deliveries of GitHub's ``pull_request`` ``opened`` example, one at a time, each wait for the
review job it makes: from the POST to the job's ``created_at`` (the Redis server's clock,
on this host) is webhook received → job queued (the job waits on the ``review`` queue,
which nobody consumes). Nothing is asserted: the target is a webhook no slower than a
submit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable, Sequence

import httpx

from bench import percentile
from bot.forge.inbound.deliveries import QUEUED, Deliveries
from bot.service.queues import FORGE_QUEUE
from harness.api_server import api_server
from harness.forges import encoded, forge_toml, github_example, github_headers
from harness.stack import Stack, job_stack

SECRET = "bench-webhook-secret"
REPO = "Codertocat/Hello-World"
PULL_REQUEST = github_example("pull_request", "opened", 1)
SUBMIT = {"kind": "summarize", "repo": "docs", "branch": "main", "metadata": {"playbook": "x"}}


def main(argv: Sequence[str] | None = None) -> int:
    options = _arguments(argv)
    payload = github_example("issue_comment", "created", 3)
    payload["comment"]["body"] = "@riverbeam fix the install page"
    body = encoded(payload)
    with job_stack() as stack:
        secret = stack.base / "webhook-secret"
        secret.write_text(SECRET)
        stack.config.write_text(
            stack.config.read_text()
            + forge_toml(
                "gh",
                kind="github",
                secret_file=secret,
                bot_login="riverbeam[bot]",
                installations=[1],
                deliveries_per_minute=1_000_000,
                repositories={REPO: {"repository": "docs"}},
            )
        )
        with (
            api_server(stack, {"bench": ("submitter", None)}) as api,
            api.client("bench") as client,
        ):

            def webhook() -> int:
                headers = github_headers(SECRET, body, "issue_comment", delivery=str(uuid.uuid4()))
                return client.post("/webhooks/gh", content=body, headers=headers).status_code

            def submit() -> int:
                return client.post("/v1/jobs", json=SUBMIT).status_code

            for _ in range(options.warmup):
                webhook(), submit()
            times: dict[str, list[float]] = {"webhook": [], "submit": []}
            for _ in range(options.runs):
                _timed(webhook, 202, times["webhook"])
                _timed(submit, 201, times["submit"])
            stack.start_worker("forge", queues=[FORGE_QUEUE])
            to_job = [_to_job(stack, client) for _ in range(options.job_runs)]
    print(f"{options.runs} runs each, interleaved, one keep-alive connection, loopback")
    print(f"{'':34}{'median':>9}{'p95':>9}{'max':>9}")
    rows = (
        ("webhook received -> event queued", "webhook"),
        ("POST /v1/jobs -> job queued", "submit"),
    )
    for label, key in rows:
        found = times[key]
        print(
            f"{label:34}{statistics.median(found):8.2f}ms{percentile(found, 0.95):8.2f}ms"
            f"{max(found):8.2f}ms"
        )
    print(
        f"{'webhook received -> job queued':34}{statistics.median(to_job):8.2f}ms"
        f"{percentile(to_job, 0.95):8.2f}ms{max(to_job):8.2f}ms"
        f"  ({options.job_runs} pull requests, through the forge worker)"
    )
    ratio = statistics.median(times["webhook"]) / statistics.median(times["submit"])
    met = "met" if ratio <= 1.0 else "not met"
    print(f"webhook / submit: {ratio:.2f}x (target: no slower than a submit: {met})")
    return 0


def _to_job(stack: Stack, client: httpx.Client) -> float:
    """One pull request's webhook, to the review job it made, in milliseconds."""
    body = encoded(PULL_REQUEST)
    delivery = str(uuid.uuid4())
    headers = github_headers(SECRET, body, "pull_request", delivery=delivery)
    deliveries = Deliveries(stack.store.gateway)
    sent = time.time()
    if client.post("/webhooks/gh", content=body, headers=headers).status_code != 202:
        raise SystemExit("the pull request's delivery was not queued")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        outcome = deliveries.outcome("gh", delivery)
        if outcome not in (None, QUEUED):
            job_id = json.loads(outcome)["results"][0]["job_id"]
            return (stack.store.jobs.get(job_id).created_at.timestamp() - sent) * 1000
        time.sleep(0.002)
    raise SystemExit(f"no job for delivery {delivery} in 30 s:\n{stack.log_tails()}")


def _timed(call: Callable[[], int], expected: int, into: list[float]) -> None:
    started = time.perf_counter()
    status = call()
    into.append((time.perf_counter() - started) * 1000)
    if status != expected:
        raise SystemExit(f"expected {expected}, got {status}")


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.webhook_bench", description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--job-runs", type=int, default=30)
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
