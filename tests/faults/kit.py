"""Helpers the fault tests share: waiting for a job to reach a tool call, letting the
recovery sweep find a job whose worker died, making the upstream slow."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bot.service.queues import send_recover
from bot.store.models import Approval, JobKind, JobRecord, JobState
from harness.playbooks import AUTHOR_REQUEST
from harness.stack import Stack, wait_until

TOOL_SECONDS = 30.0


def tool_called(stack: Stack, job_id: str, name: str) -> None:
    """Wait until the job's event stream shows a ``name`` tool frame."""
    wait_until(
        lambda: bool(stack.tool_calls(job_id, name)),
        TOOL_SECONDS,
        lambda: f"job {job_id} never called {name}",
    )


def park(stack: Stack, playbook: str = "author-fix-install") -> tuple[JobRecord, Approval]:
    """Submit an author job and wait for it to park on its push."""
    job = stack.submit(JobKind.AUTHOR, playbook, request=AUTHOR_REQUEST)
    parked = stack.wait_for(job.id, JobState.AWAITING_APPROVAL, timeout=60)
    approval = stack.store.approvals.get(job.id)
    assert approval is not None and approval.commit_sha is not None
    return parked, approval


def recover(stack: Stack, job_id: str, *, timeout: float = 30.0) -> None:
    """Once the job's lease has run out (its worker is dead), send the recovery sweep as
    beat does every minute."""
    wait_until(
        lambda: job_id in stack.store.leases.expired(),
        timeout,
        lambda: f"job {job_id}'s lease never ran out: {stack.store.jobs.get(job_id)}",
    )
    send_recover(stack.app)


def slow_upstream(upstream: Path, marker: Path, seconds: float) -> None:
    """A ``pre-receive`` hook on the bare upstream: it touches ``marker`` (the push is in
    flight) and sleeps before it lets the push through. Runs only for pushes over HTTP
    (``job_stack(serve_upstream=True)``)."""
    hook = upstream / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ncat >/dev/null\ntouch '{marker}'\nsleep {seconds}\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@contextmanager
def push_in_flight(
    stack: Stack, job: JobRecord, marker: Path, seconds: float, worker: str = "a"
) -> Iterator[None]:
    """Approve the parked ``job`` with the upstream slowed down, and run the block once its
    relay push has reached the upstream's hook; the hook is gone after the block."""
    slow_upstream(stack.upstream, marker, seconds)
    try:
        stack.decide(job.id, approve=True)
        wait_until(marker.exists, 60, lambda: stack.workers[worker].log_tail())
        yield
    finally:
        (stack.upstream / "hooks" / "pre-receive").unlink()


@contextmanager
def paused(stack: Stack, name: str) -> Iterator[None]:
    """The worker's whole process group stopped (SIGSTOP) for the block, then continued:
    whatever happens meanwhile happens between two of its steps."""
    group = stack.workers[name].process.pid
    os.killpg(group, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(group, signal.SIGCONT)
