"""The Docker engine restarted (SIGTERM, then started again) under a running job.

The engine stops the job's container on its way down; the job's next tool call finds the
tool server gone, which the model reads as a failed call, and the run ends. The worker is
held (SIGSTOP) while the engine restarts, so that next call comes after the restart, not
during the engine's shutdown grace period, when the old container still answers. The job ends in
a clear state, nothing is pushed, and no container of it is left. The engine is back as
``docker/provision`` starts it before the test ends, for the tests that follow.
"""

from __future__ import annotations

import pytest

from bot.store.models import JobKind
from harness.playbooks import AUTHOR_REQUEST
from harness.stack import job_stack
from tests.faults.engine import restart_engine
from tests.faults.invariants import check_invariants
from tests.faults.kit import paused, tool_called

# Serial: the engine restart stops every container on it, other tests' too.
pytestmark = [pytest.mark.slow, pytest.mark.serial]


def test_an_engine_restart_under_a_running_job_ends_it_clearly() -> None:
    with job_stack(lease_seconds=2.0) as stack:
        stack.start_worker("a")
        job = stack.submit(JobKind.AUTHOR, "author-slow", request=AUTHOR_REQUEST)
        tool_called(stack, job.id, "list_tree")
        with paused(stack, "a"):
            restart_engine()

        records = check_invariants(stack, [job.id])

        read = stack.tool_calls(job.id, "read_file")[0]
        assert read.error is not None and read.error.code in ("BEM-400", "BEM-404"), read
        assert records[job.id].attempt == 1
        assert stack.upstream_ref(f"riverbeam/{job.id}") is None
