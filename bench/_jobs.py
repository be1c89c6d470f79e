"""What the job benchmarks share: one author job's moments on the Redis server's clock,
submitting and approving through the real service, and the in-process floor.

``bench.jobs_bench`` (latency, one burst) and ``bench.load_bench`` (200 jobs, several worker
layouts) both drive the end-to-end test stack (``harness.stack``) with the
``author-fix-install`` playbook and compare with the same floor: the playbook in this
process on in-process tools, no Celery, no Redis, no container.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import percentile
from bot.clients.playbook import PlaybookClient
from bot.core.frames import Frame, ResultStatus
from bot.core.identity import Identity
from bot.core.input import AgentContext, AgentInput
from bot.runner.loop import ToolLoopAgent
from bot.runner.state import CallDecision, RunState
from bot.store.models import JobKind, JobRecord, JobState
from harness.gitkit import git
from harness.playbooks import AUTHOR_REQUEST, PLAYBOOKS, seed_upstream
from harness.stack import REPO, Stack
from sandbox.inside.bound_tools import sandbox_tools
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.worktree import WorkingTree

PLAYBOOK = "author-fix-install"
APPROVER = "bench-reviewer"
MODEL_FACTORY = "bench._jobs_model:for_job"
POLL_SECONDS = 0.02
JOB_TIMEOUT_SECONDS = 60.0


@dataclass
class JobTimes:
    """One job's moments on the Redis server's clock (epoch seconds)."""

    job_id: str
    submitted: float
    parked: float = 0.0
    approved: float = 0.0
    pushed: float = 0.0

    @property
    def to_park(self) -> float:
        return self.parked - self.submitted

    @property
    def to_push(self) -> float:
        return self.pushed - self.approved


def submit(stack: Stack) -> JobTimes:
    record = stack.submit(JobKind.AUTHOR, PLAYBOOK, request=AUTHOR_REQUEST)
    return JobTimes(record.id, submitted=record.created_at.timestamp())


def approve(stack: Stack, times: JobTimes, parked: JobRecord) -> None:
    times.parked = parked.updated_at.timestamp()
    times.approved = decide(stack, times.job_id)


def decide(stack: Stack, job_id: str) -> float:
    """Approve the job's parked push as the benchmark; returns the decision's time (the
    Redis server's clock)."""
    decided = stack.decide(job_id, approve=True, by=APPROVER)
    if decided.decided_at is None:
        raise AssertionError("a decided approval has a decision time")
    return decided.decided_at.timestamp()


def run_one(stack: Stack) -> JobTimes:
    """One job alone: submit, wait for the park, approve, wait for the push."""
    times = submit(stack)
    parked = stack.wait_for(times.job_id, JobState.AWAITING_APPROVAL, timeout=JOB_TIMEOUT_SECONDS)
    approve(stack, times, parked)
    pushed = stack.wait_for(times.job_id, JobState.SUCCEEDED, timeout=JOB_TIMEOUT_SECONDS)
    times.pushed = pushed.updated_at.timestamp()
    return times


@dataclass
class Floor:
    to_park: list[float]
    to_push: list[float]
    cpu: list[float]
    """CPU-seconds of each run, start to pushed (this process's, ``time.process_time``)."""


def run_floor(runs: int) -> Floor:
    """The author playbook in this process on in-process tools: no Celery, Redis or
    container. The clone each run works on is made before the clock starts."""
    scratch = Path(tempfile.mkdtemp(prefix="riverbeam-jobs-bench-"))
    try:
        upstream = seed_upstream(scratch / "upstream.git")
        asyncio.run(_floor_once(upstream, scratch / "warm-up"))
        samples = [asyncio.run(_floor_once(upstream, scratch / f"run-{n}")) for n in range(runs)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Floor(
        [park for park, _, _ in samples],
        [push for _, push, _ in samples],
        [cpu for _, _, cpu in samples],
    )


async def _floor_once(upstream: Path, work: Path) -> tuple[float, float, float]:
    branch = f"riverbeam/{work.name}"
    git("clone", "-q", "--branch", "main", str(upstream), str(work))
    git("-C", str(work), "checkout", "-q", "-b", branch)
    tree = WorkingTree(SandboxRoot(work), ("main", "release/*"), identity=Identity())
    tree.add_origin(str(upstream))
    agent = ToolLoopAgent.for_skill(
        "author",
        PlaybookClient(PLAYBOOKS[PLAYBOOK]()),
        sandbox_tools(tree),
        prompt_values={
            "repository": REPO,
            "branch": branch,
            "base": "main",
            "protected_refs": ["main", "release/*"],
            "style_notes": [],
        },
    )
    started, cpu = time.perf_counter(), time.process_time()
    state = agent.start(AgentInput.of_text(AUTHOR_REQUEST), AgentContext())
    await _drain(agent.run(state))
    parked = time.perf_counter()
    if state.status is not ResultStatus.INTERRUPTED or state.pending is None:
        raise AssertionError(f"the floor run did not stop at the push: {state.status}")
    resumed = time.perf_counter()
    saved = RunState.load(state.model_dump_json())  # what a park and a resume cost at least
    decision = CallDecision(call_id=saved.pending.id if saved.pending else "", approved=True)
    await _drain(agent.resume(saved, decision))
    pushed, cpu = time.perf_counter(), time.process_time() - cpu
    if git("-C", str(upstream), "rev-parse", branch) != tree.head_sha():
        raise AssertionError("the floor run did not push")
    return parked - started, pushed - resumed, cpu


async def _drain(frames: AsyncGenerator[Frame, None]) -> None:
    async for _ in frames:
        pass


def row(label: str, seconds: Sequence[float]) -> str:
    """``label``, then the median and p95 of ``seconds`` in milliseconds."""
    median, p95 = statistics.median(seconds), percentile(seconds, 0.95)
    return f"  {label:<34}{median * 1000:>8.0f} ms {p95 * 1000:>8.0f} ms"
