"""Two deployments on one Docker engine, each with its own Redis (two test stacks; in
production, two Riverbeam services on one host). Each job store knows only its own jobs, so
a reaper that judged every sandbox container on the engine by its own store would kill the
other deployment's running sandboxes. Containers carry their deployment's identity
(``RedisGateway.deployment``) and a reaper judges only its own by job.
"""

from __future__ import annotations

import pytest

from bot.store.models import JobKind, JobState
from harness.playbooks import AUTHOR_REQUEST
from harness.stack import job_stack
from tests.faults.invariants import check_invariants
from tests.faults.kit import tool_called

# Serial: what one deployment's reaper leaves alone is clearest on an engine that no other
# test reaps on meanwhile.
pytestmark = [pytest.mark.slow, pytest.mark.serial]


def test_one_deployments_reaper_leaves_another_deployments_running_sandbox_alone() -> None:
    with job_stack() as ours, job_stack() as theirs:
        assert ours.store.gateway.deployment() != theirs.store.gateway.deployment()
        theirs.start_worker("b")
        job = theirs.submit(JobKind.AUTHOR, "author-fix-slowly", request=AUTHOR_REQUEST)
        tool_called(theirs, job.id, "list_tree")
        running = theirs.sandbox_containers(job.id)
        assert running

        # Our reaper, and the reap of a cancel on our side, while their job runs.
        assert job.id not in ours.worker("reaper").reap_sandboxes()
        mine = ours.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
        assert ours.cancel(mine.id).state is JobState.CANCELLED
        assert theirs.sandbox_containers(job.id) == running

        theirs.wait_for(job.id, JobState.AWAITING_APPROVAL, timeout=60)
        theirs.decide(job.id, approve=True)
        theirs.wait_for(job.id, JobState.SUCCEEDED, timeout=60)
        check_invariants(theirs, [job.id])
