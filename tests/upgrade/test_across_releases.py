"""An upgrade across the restructuring loses no job: jobs parked, decided, queued and
cancelled by the release before it (``tests/upgrade/previous.py``) are approved, refused,
resumed, run and stopped by the tree under test, on the same Redis, the same upstream and
the same host's workspaces.

The old release, through its own worker and command line:

- parks five author jobs on ``git_push`` and a publish on ``publish_docset``;
- cancels a running job whose worker was killed mid-run: only the record says so;
- approves two parked author jobs while no worker runs: the resume message of one is lost
  (the queue purged), so only the sweep can resume it; the other's waits in the queue;
- queues one job with no worker to run it.

Then the tree under test, with its own worker on the same host (where one parked job's
workspace is gone, so its resume rebuilds it from the old snapshot), decides through the
API, the command line and the job service, and sends the sweeps beat would send.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import redis

from bot.runner.state import RunState
from bot.service.queues import send_recover, send_resume_sweep
from bot.store.models import ApprovalState, JobState
from harness.api_server import api_server
from harness.playbooks import AUTHOR_REQUEST, FIXED_INSTALL
from harness.previous_release import PreviousRelease, riverbeam
from harness.stack import (
    PROJECT_ROOT,
    PUBLISH_REF,
    REQUESTER,
    REVIEWER,
    Stack,
    job_stack,
    wait_until,
)
from sandbox.host.workspace.snapshot_format import read_header
from tests.api.kit import shown
from tests.upgrade.previous import decision_flags, unpack

pytestmark = pytest.mark.slow

PREFIX = "riverbeam"
OLD_REVIEWER = "old-reviewer@example.com"
API_REVIEWER = "reviewer"
REFUSAL = "Not this week: the install page is frozen."
JOB_SECONDS = 90.0
AUTHORS = ("api", "cli", "refused", "dropped", "handover")
"""The author jobs the old release parks on their push: decided through the new API, the
new CLI and refused; decided by the old release, its resume lost or handed over."""
LEASE_SECONDS = 20.0
"""Long enough for the old release's cancel to land while the killed worker's lease holds
(after it, a cancel ends the job at once and the new worker would have nothing to stop)."""


@dataclass
class Crossing:
    """What the old release left, what the new one did with it."""

    stack: Stack
    previous: PreviousRelease
    main_before: str
    jobs: dict[str, str] = field(default_factory=dict)
    """Role in the story → job id."""
    approved_sha: dict[str, str] = field(default_factory=dict)
    """Role → the commit the old release parked for approval."""
    old_events: dict[str, list[str]] = field(default_factory=dict)
    """Job id → its event ids as the old release left them."""
    old_keys: dict[str, str] = field(default_factory=dict)
    """Every key the old release wrote → what reading it with the new code gave."""


def _submit(previous: PreviousRelease, stack: Stack, kind: str, playbook: str, *more: str) -> str:
    out = previous.riverbeam(
        stack.config,
        "submit",
        kind,
        "--repo",
        "docs",
        "--meta",
        f"playbook={playbook}",
        "--as",
        REQUESTER,
        *more,
    )
    return out.strip().splitlines()[-1]


def _author(previous: PreviousRelease, stack: Stack, playbook: str = "author-fix-install") -> str:
    return _submit(previous, stack, "author", playbook, "--request", AUTHOR_REQUEST)


@pytest.fixture(scope="module")
def crossing() -> Iterator[Crossing]:
    more = {"jobs": {"prefix": PREFIX, "resume_grace_seconds": 1.0}}
    with job_stack(lease_seconds=LEASE_SECONDS, more_config=more) as stack:
        # The old release's image beside the one the stack built, named after it.
        previous = unpack(stack.base, f"{stack.settings.sandbox.image}-old")
        previous.build_image(stack.config)
        main_before = stack.upstream_ref("main")
        assert main_before is not None
        crossed = Crossing(stack, previous, main_before)
        _with_the_old_release(crossed)
        crossed.old_keys = _read_every_key(stack)
        _with_the_new_release(crossed)
        yield crossed


def _with_the_old_release(crossed: Crossing) -> None:
    stack, previous, jobs = crossed.stack, crossed.previous, crossed.jobs
    stack.start_worker("old", tree=previous.tree, env=previous.worker_env())
    # A review to publish: a fixed branch, reviewed and approved by the old worker.
    stack.push_branch("docs/fixed", {"docs/install.md": FIXED_INSTALL}, "Fix the install page")
    review = _submit(previous, stack, "review", "review-approve", "--branch", "docs/fixed")
    stack.wait_for(review, JobState.SUCCEEDED, timeout=JOB_SECONDS)
    jobs["publish"] = _submit(previous, stack, "publish", "publish", "--review-job", review)
    for role in AUTHORS:
        jobs[role] = _author(previous, stack)
    for role in ("publish", *AUTHORS):
        stack.wait_for(jobs[role], JobState.AWAITING_APPROVAL, timeout=JOB_SECONDS)
        approval = stack.store.approvals.get(jobs[role])
        assert approval is not None and approval.commit_sha is not None
        crossed.approved_sha[role] = approval.commit_sha

    # A running job: its worker dies mid-run, then the old release cancels it.
    jobs["cancelled"] = _author(previous, stack, "author-slow")
    wait_until(
        lambda: bool(stack.tool_calls(jobs["cancelled"], "list_tree")),
        JOB_SECONDS,
        lambda: f"the slow job never listed the tree:\n{stack.log_tails()}",
    )
    stack.kill_worker("old")
    previous.riverbeam(
        stack.config, "jobs", "cancel", jobs["cancelled"], "--wait", "0", codes=(0, 1)
    )
    cancelled = stack.store.jobs.get(jobs["cancelled"])
    # Running still, and only the record says cancel: the worker died in the model's pause
    # (a few seconds) and its lease held through the cancel.
    assert cancelled.state is JobState.RUNNING and cancelled.cancel_requested, cancelled

    # A decision whose resume message is lost: approved with no worker, the queue purged.
    _approve_with_the_cli(stack, jobs["dropped"], previous=previous, by=OLD_REVIEWER)
    stack.app.control.purge()
    # A decision whose resume message waits in the queue for the new worker.
    _approve_with_the_cli(stack, jobs["handover"], previous=previous, by=OLD_REVIEWER)
    # A job queued while no worker runs.
    jobs["queued"] = _author(previous, stack, "author-nothing-to-change")
    assert stack.store.jobs.get(jobs["queued"]).state is JobState.QUEUED

    for job_id in jobs.values():
        crossed.old_events[job_id] = [e.id for e in stack.store.events.read(job_id, count=10_000)]


def _with_the_new_release(crossed: Crossing) -> None:
    stack, jobs = crossed.stack, crossed.jobs
    # The upgraded worker runs on the old one's host: its workspaces and mirrors. One parked
    # job lost its workspace there (a host replaced in the upgrade): its resume rebuilds it
    # from the snapshot the old release wrote.
    shutil.rmtree(stack.worker_settings("old").workspaces.root / jobs["cli"])
    stack.start_worker("new", host="old")
    stack.wait_for(jobs["queued"], JobState.SUCCEEDED, timeout=JOB_SECONDS)
    stack.wait_for(jobs["handover"], JobState.SUCCEEDED, timeout=JOB_SECONDS)
    # A resume (priority 0) goes before a run (6): had the lost one still been queued, it
    # would have run first.
    assert stack.store.jobs.get(jobs["dropped"]).state is JobState.AWAITING_APPROVAL
    # The killed worker's job: taken over by the recovery sweep once its lease ran out.
    wait_until(
        lambda: jobs["cancelled"] in stack.store.leases.expired(),
        LEASE_SECONDS * 2,
        lambda: (
            f"the killed worker's lease never ran out: {stack.store.jobs.get(jobs['cancelled'])}"
        ),
    )
    send_recover(stack.app)
    stack.wait_for(jobs["cancelled"], JobState.CANCELLED, timeout=JOB_SECONDS)
    send_resume_sweep(stack.app)
    stack.wait_for(jobs["dropped"], JobState.SUCCEEDED, timeout=JOB_SECONDS)

    with (
        api_server(stack, {API_REVIEWER: ("reviewer", None)}) as api,
        api.client(API_REVIEWER) as client,
    ):
        for role, verb, body in (
            ("api", "approve", {"comment": "Looks right"}),
            ("refused", "refuse", {"comment": REFUSAL}),
        ):
            seen = shown(client, jobs[role])
            reply = client.post(f"/v1/approvals/{jobs[role]}/{verb}", json={**seen, **body})
            assert reply.status_code == 200, reply.text
    _approve_with_the_cli(stack, jobs["cli"])
    stack.decide(jobs["publish"], approve=True)
    for role in ("api", "cli", "publish"):
        stack.wait_for(jobs[role], JobState.SUCCEEDED, timeout=JOB_SECONDS)
    stack.wait_for(jobs["refused"], JobState.REFUSED, timeout=JOB_SECONDS)


def _approve_with_the_cli(
    stack: Stack, job_id: str, *, previous: PreviousRelease | None = None, by: str = REVIEWER
) -> None:
    """``approvals show`` then ``approvals approve`` as a reviewer does, with the CLI of
    the tree under test, or of the ``previous`` release."""
    tree, env = (PROJECT_ROOT, None) if previous is None else (previous.tree, previous.worker_env())
    flags = decision_flags(tree, stack.config, job_id, env=env)
    riverbeam(tree, stack.config, "approvals", "approve", job_id, *flags, "--as", by, env=env)


# -- reading what the old release wrote -------------------------------------------------


def _read_every_key(stack: Stack) -> dict[str, str]:
    """Each ``riverbeam:*`` key, read with the new code before its worker touches any:
    ``key → what was read`` (a failure to read raises here, naming the key)."""
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    reader = KeyReader(stack, client)
    found = {}
    for key in sorted(client.scan_iter(match=f"{PREFIX}:*")):
        name = key.removeprefix(f"{PREFIX}:")
        read = next(
            (getattr(reader, how) for pattern, how in KEYS if re.fullmatch(pattern, name)), None
        )
        assert read is not None, f"the new release knows no key like {key}"
        found[key] = read(name.rpartition(":")[2])
    return found


KEYS = [
    (r"job:[0-9a-f]+", "job"),
    (r"run:[0-9a-f]+", "run"),
    (r"snapshot:[0-9a-f]+", "snapshot"),
    (r"approval:[0-9a-f]+", "approval"),
    (r"approvals:history:[0-9a-f]+", "history"),
    (r"events:[0-9a-f]+", "events"),
    (r"jobs", "jobs"),
    (r"approvals:pending", "pending"),
    (r"approvals:summaries", "summaries"),
    (r"approvals:decided", "decided"),
    (r"leases", "leases"),
    (r"deployment", "deployment"),
]
"""The keys ``docs/storage.md`` lists that the old release writes for these jobs, each
with the ``KeyReader`` method that reads it through the new code."""


@dataclass
class KeyReader:
    """Reads one kind of key through the new release's store and models; each method takes
    the key's last part (a job id, or the whole name of a one-off key)."""

    stack: Stack
    client: redis.Redis

    def job(self, job_id: str) -> str:
        return self.stack.store.jobs.get(job_id).state.value

    def run(self, job_id: str) -> str:
        return f"run of {RunState.load(self.stack.store.blobs.load_run_state(job_id)).agent}"

    def snapshot(self, job_id: str) -> str:
        data = self.stack.store.blobs.load_snapshot(job_id)
        assert data is not None
        cap = self.stack.settings.jobs.snapshot_max_bytes
        return f"snapshot on {read_header(data, max_bytes=cap).base_sha}"

    def approval(self, job_id: str) -> str:
        found = self.stack.store.approvals.get(job_id)
        assert found is not None
        return found.state.value

    def history(self, job_id: str) -> str:
        return ",".join(a.state.value for a in self.stack.store.approvals.history(job_id))

    def events(self, job_id: str) -> str:
        return f"{len(self.stack.store.events.read(job_id, count=10_000))} events"

    def jobs(self, _: str) -> str:
        return f"{len(self.stack.store.listing.list(limit=100)[0])} jobs"

    def pending(self, _: str) -> str:
        return ",".join(a.job_id for a in self.stack.store.approvals.pending())

    def summaries(self, _: str) -> str:
        waiting, shown = self.stack.store.approvals.pending_summaries(limit=100, migrate=0)
        return f"{waiting} waiting: {','.join(summary.job_id for summary in shown)}"

    def decided(self, _: str) -> str:
        members = self.client.zrange(f"{PREFIX}:approvals:decided", 0, -1)
        return ",".join(self.job(str(member)) for member in members)

    def leases(self, _: str) -> str:
        return ",".join(self.stack.store.leases.expired())

    def deployment(self, _: str) -> str:
        return self.stack.store.gateway.deployment()


# -- the assertions ---------------------------------------------------------------------


def test_the_old_release_wrote_what_the_new_one_reads(crossing: Crossing) -> None:
    kinds = {re.sub(r":[0-9a-f]+$", ":<id>", key) for key in crossing.old_keys}
    assert {
        "riverbeam:job:<id>",
        "riverbeam:run:<id>",
        "riverbeam:snapshot:<id>",
        "riverbeam:approval:<id>",
        "riverbeam:approvals:history:<id>",
        "riverbeam:events:<id>",
        "riverbeam:jobs",
        "riverbeam:approvals:pending",
        "riverbeam:approvals:decided",
    } <= kinds, sorted(kinds)
    jobs = crossing.jobs
    assert crossing.old_keys[f"riverbeam:job:{jobs['api']}"] == "awaiting_approval"
    assert crossing.old_keys[f"riverbeam:approval:{jobs['dropped']}"] == "approved"


def test_each_approved_push_landed_once_at_the_approved_commit(crossing: Crossing) -> None:
    stack, jobs = crossing.stack, crossing.jobs
    for role in ("api", "cli", "dropped", "handover"):
        branch = f"riverbeam/{jobs[role]}"
        assert stack.upstream_ref(branch) == crossing.approved_sha[role], role
        assert len(stack.upstream_updates(branch)) == 1, role
    assert stack.upstream_ref(PUBLISH_REF) == crossing.approved_sha["publish"]
    assert stack.upstream_ref("main") == crossing.main_before


def test_the_deciders_are_in_the_history(crossing: Crossing) -> None:
    store, jobs = crossing.stack.store, crossing.jobs
    decided = {
        role: [(a.state, a.decided_by) for a in store.approvals.history(jobs[role])]
        for role in ("publish", *AUTHORS)
    }
    assert decided == {
        "api": [(ApprovalState.APPROVED, API_REVIEWER)],
        "cli": [(ApprovalState.APPROVED, REVIEWER)],
        "refused": [(ApprovalState.REFUSED, API_REVIEWER)],
        "dropped": [(ApprovalState.APPROVED, OLD_REVIEWER)],
        "handover": [(ApprovalState.APPROVED, OLD_REVIEWER)],
        "publish": [(ApprovalState.APPROVED, REVIEWER)],
    }


def test_the_refusal_reaches_the_model(crossing: Crossing) -> None:
    stack, job_id = crossing.stack, crossing.jobs["refused"]
    done = stack.store.jobs.get(job_id)
    assert done.result is not None and REFUSAL in done.result.text
    assert stack.upstream_ref(f"riverbeam/{job_id}") is None


def test_the_queued_job_ran_on_the_new_worker(crossing: Crossing) -> None:
    done = crossing.stack.store.jobs.get(crossing.jobs["queued"])
    assert done.state is JobState.SUCCEEDED
    assert done.worker is not None and done.worker.startswith("new@")


def test_the_cancel_the_old_release_wrote_stops_the_job(crossing: Crossing) -> None:
    stack, job_id = crossing.stack, crossing.jobs["cancelled"]
    done = stack.store.jobs.get(job_id)
    assert done.state is JobState.CANCELLED
    assert done.worker is not None and done.worker.startswith("new@")
    assert stack.upstream_ref(f"riverbeam/{job_id}") is None


def test_event_streams_read_whole_across_the_releases(crossing: Crossing) -> None:
    store = crossing.stack.store
    for role, job_id in crossing.jobs.items():
        ids = [event.id for event in store.events.read(job_id, count=10_000)]
        old = crossing.old_events[job_id]
        assert ids[: len(old)] == old, role
        assert len(ids) > len(old), f"{role}: the new release added no event"
        assert [_id_key(i) for i in ids] == sorted({_id_key(i) for i in ids}), role


def _id_key(event_id: str) -> tuple[int, int]:
    milliseconds, _, sequence = event_id.partition("-")
    return int(milliseconds), int(sequence)
