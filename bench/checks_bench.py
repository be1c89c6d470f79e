"""The docs checks' cost at the park: submit → park of scripted author jobs with the
repository's checks beside the same jobs without them, in one run.

    python -m bench.checks_bench [--runs 9]

Everything but the model is real: a ``redis-server``, a Celery worker, one sandbox container
per job, bare upstreams. The model is the ``author-fix-install`` playbook (list the tree,
read the install page, write it fixed, commit, push). Two repositories, each registered
twice on the same upstream, once with ``checks`` and once without:

- **demo**: the test stack's four seed pages, checked by markdownlint, codespell and links;
- **uvicorn**: encode/uvicorn's MkDocs documentation (``tests/data/uvicorn``, a real
  repository) plus the install page, checked by the same three and ``mkdocs build --strict``
  with the repository's own config, theme overrides and hook.

The four registrations take turns, one job at a time, so load and engine drift fall on all of
them alike; each job is refused once parked. Submit is the job record's ``created_at``, park
its ``updated_at`` (the Redis server's clock). Beside the medians: each check's time at the
park on the change and on the base (from the approval's report; the base runs are kept for
the job, so a job pays them once).

Target (issue 31): none set; the figure to watch is the checks' share of submit → park.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from bot.store.models import JobKind, JobState
from harness.playbooks import AUTHOR_REQUEST, seed_upstream, with_install_pages
from harness.snapshots import snapshot_files
from harness.stack import Stack, job_stack

PAGE_CHECKS = ["markdownlint", "codespell", "links"]
PLAYBOOK = "author-fix-install"


def _registrations(uvicorn: Path) -> dict[str, dict[str, object]]:
    site = {"run": [*PAGE_CHECKS, "mkdocs"]}
    return {
        "demo-checked": {"checks": {"run": PAGE_CHECKS}},
        "uvicorn": {"upstream": str(uvicorn)},
        "uvicorn-checked": {"upstream": str(uvicorn), "checks": site},
    }


def _one(
    stack: Stack, repo: str, times: dict[str, list[float]], checks: dict[str, list[str]]
) -> None:
    job = stack.submit(JobKind.AUTHOR, PLAYBOOK, repo=repo, request=AUTHOR_REQUEST)
    parked = stack.wait_for(job.id, JobState.AWAITING_APPROVAL, timeout=120.0)
    times[repo].append(parked.updated_at.timestamp() - job.created_at.timestamp())
    approval = stack.store.approvals.get(job.id)
    if approval is not None and approval.checks is not None:
        for run in approval.checks.runs:
            base = f"{run.base_seconds:.2f}" if run.base_seconds is not None else "-"
            checks[f"{repo} {run.check}"].append(f"{run.seconds:.2f}/{base}/{run.status}")
    stack.decide(job.id, approve=False, comment="benchmark")
    stack.wait_for(job.id, JobState.REFUSED, JobState.SUCCEEDED, JobState.FAILED, timeout=60.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="jobs per registration")
    args = parser.parse_args()
    times: dict[str, list[float]] = defaultdict(list)
    checks: dict[str, list[str]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="riverbeam-checks-bench-") as scratch:
        uvicorn = seed_upstream(
            Path(scratch) / "uvicorn.git", with_install_pages(snapshot_files("uvicorn"))
        )
        with job_stack(repositories=_registrations(uvicorn)) as stack:
            stack.start_worker("a")
            order = ["docs", "demo-checked", "uvicorn", "uvicorn-checked"]
            for repo in order:  # a warm-up each: the mirrors, the base checks' first import
                _one(stack, repo, defaultdict(list), defaultdict(list))
            for _ in range(args.runs):
                for repo in order:
                    _one(stack, repo, times, checks)
    print(f"checks_bench: submit → park, median of {args.runs} jobs each ")
    for plain, checked, label in (
        ("docs", "demo-checked", "demo"),
        ("uvicorn", "uvicorn-checked", "uvicorn"),
    ):
        without, with_ = statistics.median(times[plain]), statistics.median(times[checked])
        print(
            f"  {label:<8} without checks {without * 1000:>6.0f} ms   with {with_ * 1000:>6.0f} ms"
            f"   the checks add {(with_ - without) * 1000:>5.0f} ms ({with_ / without:.2f}x)"
        )
    print("each check at the park, change/base seconds/status (last three jobs):")
    for name, runs in checks.items():
        print(f"  {name:<30} {'  '.join(runs[-3:])}")


if __name__ == "__main__":
    main()
