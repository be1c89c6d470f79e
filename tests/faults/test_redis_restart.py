"""Redis killed (SIGKILL) and started again on its append-only file, configured with the
shipped ``docker/redis.conf``, while one job is parked and another is running.

Everything the store held comes back (``docs/storage.md``): the parked job and its pending
approval, the running job, the queues. The running segment goes on once Redis answers
again and parks; both pushes are then approved and land once.

A worker whose broker connection broke while it had a task in hand exits once that task is
done (Celery 5.7 fails to close the broken connection: "Unrecoverable error:
AttributeError"), so, as its supervisor would (``restart: unless-stopped`` in
``docker/compose.yaml``), the test starts any worker that exited again. An idle worker
reconnects by itself.
"""

from __future__ import annotations

import pytest

from bot.service.queues import send_recover
from bot.store.models import ApprovalState, JobKind, JobState
from harness.playbooks import AUTHOR_REQUEST
from harness.stack import PROJECT_ROOT, Stack, job_stack, wait_until
from tests.faults.invariants import check_invariants
from tests.faults.kit import park, tool_called

pytestmark = pytest.mark.slow

REDIS_CONF = PROJECT_ROOT / "docker" / "redis.conf"
WAIT_SECONDS = 60.0


def _supervised_until(stack: Stack, job_id: str, state: JobState) -> None:
    """Wait for ``state``, restarting workers that exited and sweeping for a job whose
    lease ran out, as the deployment's supervisor and beat would."""

    def reached() -> bool:
        for name, worker in list(stack.workers.items()):
            if worker.process.poll() is not None:
                stack.workers.pop(name)
                stack.start_worker(name)
        if job_id in stack.store.leases.expired():
            send_recover(stack.app)
        return stack.store.jobs.get(job_id).state is state

    wait_until(reached, WAIT_SECONDS, lambda: f"{job_id}: {stack.store.jobs.get(job_id)}")


def test_a_redis_restart_keeps_parked_and_running_jobs() -> None:
    with job_stack(lease_seconds=2.0, redis_config=REDIS_CONF) as stack:
        stack.start_worker("a")
        stack.start_worker("b")
        waiting, approval = park(stack)
        running = stack.submit(JobKind.AUTHOR, "author-fix-slowly", request=AUTHOR_REQUEST)
        tool_called(stack, running.id, "list_tree")

        stack.redis.crash()
        stack.redis.start()

        kept = stack.store.approvals.get(waiting.id)
        assert kept == approval and kept.state is ApprovalState.PENDING
        assert stack.store.jobs.get(waiting.id).state is JobState.AWAITING_APPROVAL
        assert [a.job_id for a in stack.store.approvals.pending()] == [waiting.id]
        _supervised_until(stack, running.id, JobState.AWAITING_APPROVAL)
        for job_id in (waiting.id, running.id):
            stack.decide(job_id, approve=True)
        for job_id in (waiting.id, running.id):
            _supervised_until(stack, job_id, JobState.SUCCEEDED)

        records = check_invariants(stack, [waiting.id, running.id])
        assert stack.upstream_ref(f"riverbeam/{waiting.id}") == approval.commit_sha
        assert records[waiting.id].attempt == 2  # the park, the resume: nothing ran twice
