"""The job commands against a real stack: Redis, a Celery worker process, containers, a bare
upstream. Only the model is scripted (``harness.playbooks``, picked with ``--meta``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.cli.common import os_account
from bot.service.queues import queue_for, worker_queues
from bot.store.models import ApprovalState, JobKind, JobRecord, JobState
from harness.playbooks import COMMIT_SUBJECT
from harness.stack import REQUESTER, REVIEWER, Stack, job_stack, wait_until
from tests.cli.kit import Background, Ran, approval_flags, cli, environment

pytestmark = pytest.mark.slow

REQUEST = "Fix the broken links and typos on the install page"
# No worker takes commit-notes jobs here: they stay queued for as long as a test needs.
IDLE_KIND = JobKind.COMMIT_NOTES


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with job_stack(lease_seconds=2.0) as running:
        queues = [queue for queue in worker_queues() if queue != queue_for(IDLE_KIND)]
        running.start_worker("a", queues=queues)
        yield running


@pytest.fixture(autouse=True)
def _configured(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIVERBEAM_CONFIG", str(stack.config))


def submit(*extra: str, playbook: str = "author-fix-install") -> Ran:
    return cli(
        "submit", "author", "--repo", "docs", "--request", REQUEST, "--as", REQUESTER,
        "--meta", f"playbook={playbook}", *extra,
    )  # fmt: skip


def parked(stack: Stack) -> JobRecord:
    ran = submit()
    assert ran.code == 0, ran.err
    return stack.wait_for(ran.out.strip(), JobState.AWAITING_APPROVAL)


def _job_id(output: str) -> str:
    found = re.search(r"job ([0-9a-f]{12}) queued", output)
    assert found, output
    return found.group(1)


def has_field(output: str, name: str, value: str) -> bool:
    """Whether ``name`` is shown with ``value`` on its line, as ``show`` aligns them."""
    return re.search(rf"^{re.escape(name)} +{re.escape(value)}", output, re.MULTILINE) is not None


def named(job_id: str) -> list[str]:
    """The flags that name the job's approval, as ``approvals show`` prints them for the
    reviewer to decide with."""
    return approval_flags(cli("approvals", "show", job_id).out, job_id)


def _queued_messages(stack: Stack) -> int:
    redis = stack.store.gateway.client
    return sum(int(redis.llen(queue)) for queue in worker_queues())


def test_submit_follow_streams_frames_and_stops_at_the_park(stack: Stack) -> None:
    ran = submit("--follow")
    assert ran.code == 0, ran.err
    job_id = _job_id(ran.out)
    for line in (
        "▸ list_tree → 4 files",
        "▸ read_file path=docs/install.md → 7 lines",
        "▸ write_file path=docs/install.md body=",
        f'▸ git_commit message="{COMMIT_SUBJECT[:30]}',
        f" {COMMIT_SUBJECT}  ",
        "⏸ git_push waits for a person's approval",
        f"riverbeam approvals show {job_id}",
    ):
        assert line in ran.out, ran.out
    assert stack.store.jobs.get(job_id).state is JobState.AWAITING_APPROVAL

    listed = cli("approvals", "list")
    assert job_id in listed.out and f"riverbeam/{job_id}" in listed.out

    shown = cli("approvals", "show", job_id)
    approval = stack.store.approvals.get(job_id)
    assert shown.code == 0 and approval is not None
    assert has_field(shown.out, "target ref", f"riverbeam/{job_id}")
    assert has_field(shown.out, "commit", str(approval.commit_sha))
    for text in (
        "docs/install.md | 4 ++--",
        "1 file changed, 2 insertions(+), 2 deletions(-)",
        "--- a/docs/install.md",
        "-Instal the tool with pip:",
        "+Install the tool with pip:",
        "+Then read the [configuration guide](configuration.md) to set it up.",
    ):
        assert text in shown.out, shown.out

    decided = cli(
        "approvals", "approve", job_id, *named(job_id), "--as", REVIEWER, "--comment", "Good",
        "--follow",
    )  # fmt: skip
    assert decided.code == 0, decided.err
    assert f"approved: job {job_id}'s git_push to riverbeam/{job_id}" in decided.out
    assert "pushed upstream" in decided.out and "● job succeeded" in decided.out
    # Only the frames after the decision: the parked segment's are not repeated.
    assert "read_file" not in decided.out
    assert stack.upstream_ref(f"riverbeam/{job_id}") == approval.commit_sha
    assert cli("approvals", "list").out.strip() == "no pushes wait for a decision"


def test_refuse_needs_a_comment_and_the_model_reads_it(stack: Stack) -> None:
    job = parked(stack)
    missing = cli("approvals", "refuse", job.id, "--as", REVIEWER)
    assert missing.code == 2 and "--comment" in missing.err
    assert stack.store.jobs.get(job.id).state is JobState.AWAITING_APPROVAL

    ran = cli("approvals", "refuse", job.id, "--as", REVIEWER, "--comment", "Not this week")
    assert ran.code == 0, ran.err
    done = stack.wait_for(job.id, JobState.REFUSED)
    assert done.result is not None and "Not this week" in done.result.text
    assert stack.upstream_ref(f"riverbeam/{job.id}") is None

    again = cli("approvals", "approve", job.id, "--as", REVIEWER)
    assert again.code == 2 and "BEM-601" in again.err and REVIEWER in again.err


def test_a_requester_cannot_approve_their_own_push(stack: Stack) -> None:
    job = parked(stack)
    ran = cli("approvals", "approve", job.id, "--as", REQUESTER)
    assert ran.code == 2 and ran.err.startswith("riverbeam: BEM-602: ")
    approval = stack.store.approvals.get(job.id)
    assert approval is not None and approval.state is ApprovalState.PENDING
    assert cli("jobs", "cancel", job.id).code == 0


def test_an_approve_names_the_approval_shown_and_one_left_stale_is_refused(stack: Stack) -> None:
    """The reviewer's `show` names approval 1; another refuses it and the job parks again on
    another commit: the approve naming approval 1 is BEM-604, and nothing is pushed."""
    ran = submit(playbook="author-push-twice")
    job_id = ran.out.strip()
    stack.wait_for(job_id, JobState.AWAITING_APPROVAL)
    first = named(job_id)
    refused = cli("approvals", "refuse", job_id, *first, "--as", "b", "--comment", "Not yet")
    assert refused.code == 0, refused.err
    wait_until(
        lambda: (
            stack.store.jobs.get(job_id).approval_id not in (None, first[1])
            and stack.store.jobs.get(job_id).state is JobState.AWAITING_APPROVAL
        ),
        60,
        lambda: str(stack.store.jobs.get(job_id)),
    )
    stale = cli("approvals", "approve", job_id, *first, "--as", REVIEWER)
    assert stale.code == 2 and stale.err.startswith("riverbeam: BEM-604: "), stale.err
    blind = cli("approvals", "approve", job_id, "--as", REVIEWER)
    assert blind.code == 2 and "BEM-605" in blind.err and "approvals show" in blind.err
    assert stack.upstream_ref(f"riverbeam/{job_id}") is None

    second = named(job_id)
    assert second != first
    assert cli("approvals", "approve", job_id, *second, "--as", REVIEWER).code == 0
    stack.wait_for(job_id, JobState.SUCCEEDED)
    assert stack.upstream_ref(f"riverbeam/{job_id}") == second[3]


def test_as_records_the_os_account_beside_the_claimed_name(stack: Stack) -> None:
    me = os_account()
    job = parked(stack)
    ran = cli("approvals", "refuse", job.id, "--as", REVIEWER, "--comment", "Not like this")
    assert ran.code == 0 and f"by {REVIEWER} (OS user {me})" in ran.out, ran.out
    decided = stack.store.approvals.get(job.id)
    assert decided is not None
    assert (decided.decided_by, decided.decided_by_os_user) == (REVIEWER, me)
    done = stack.wait_for(job.id, JobState.REFUSED)
    # The model and the job's log read both names too.
    assert done.result is not None and f"{REVIEWER} (OS user {me})" in done.result.text
    assert f"refused by {REVIEWER} (OS user {me})" in cli("jobs", "show", job.id).out
    assert f"● git_push refused by {REVIEWER} (OS user {me})" in cli("jobs", "follow", job.id).out
    as_json = json.loads(cli("approvals", "show", job.id, "--json").out)
    assert as_json["decided_by_os_user"] == me

    # A job the OS account asked for under its own name: claiming another name does not
    # let it approve its own push.
    own = cli(
        "submit", "author", "--repo", "docs", "--request", REQUEST, "--as", me,
        "--meta", "playbook=author-fix-install",
    ).out.strip()  # fmt: skip
    stack.wait_for(own, JobState.AWAITING_APPROVAL)
    walked = cli("approvals", "approve", own, *named(own), "--as", "someone-else")
    assert walked.code == 2 and walked.err.startswith("riverbeam: BEM-602: "), walked.err
    assert cli("jobs", "cancel", own).code == 0


def test_jobs_list_and_show_filter_and_describe(stack: Stack) -> None:
    done = parked(stack)
    approval = stack.store.approvals.get(done.id)
    assert approval is not None and approval.commit_sha is not None
    cli("approvals", "approve", done.id, *named(done.id), "--as", REVIEWER)
    stack.wait_for(done.id, JobState.SUCCEEDED)
    queued = cli(
        "submit", IDLE_KIND.value, "--repo", "docs", "--branch", "main", "--as", "someone-else"
    )
    queued_id = queued.out.strip()

    listed = cli("jobs", "list", "--limit", "100")
    assert listed.code == 0 and done.id in listed.out and queued_id in listed.out
    by_state = cli("jobs", "list", "--state", "queued", "--json").out.splitlines()
    records = [JobRecord.model_validate_json(line) for line in by_state]
    assert [r.id for r in records] == [queued_id]
    by_kind = cli("jobs", "list", "--kind", "author", "--limit", "100").out
    assert done.id in by_kind and queued_id not in by_kind
    by_person = cli("jobs", "list", "--by", "someone-else").out
    assert queued_id in by_person and done.id not in by_person
    assert cli("jobs", "list", "--repo", "elsewhere").out.strip() == "no jobs"
    assert "(more: raise --limit above 1)" in cli("jobs", "list", "--limit", "1").out

    shown = cli("jobs", "show", done.id).out
    for name, value in (
        ("job", done.id),
        ("state", "succeeded"),
        ("requested by", REQUESTER),
        ("request", REQUEST),
        ("branch", f"riverbeam/{done.id}"),
        ("pushed sha", approval.commit_sha),
        ("decision", f"approved by {REVIEWER}"),
    ):
        assert has_field(shown, name, value), shown
    assert COMMIT_SUBJECT in shown and "docs/install.md | 4 ++--" in shown
    as_json = json.loads(cli("jobs", "show", done.id, "--json").out)
    assert as_json["job"]["state"] == "succeeded"
    assert as_json["approval"]["decided_by"] == REVIEWER
    assert cli("jobs", "cancel", queued_id).code == 0


def test_follow_until_end_says_a_parked_job_waits_for_a_person_not_a_worker(
    stack: Stack, tmp_path: Path
) -> None:
    """A worker runs and the job waits for a decision: the quiet notice must say so."""
    job = parked(stack)
    env = environment(tmp_path) | {"RIVERBEAM_CONFIG": str(stack.config)}
    with Background(["jobs", "follow", job.id, "--until-end"], env) as follower:
        follower.wait_for("awaiting_approval: waiting for a person to approve or refuse")
        decided = cli("approvals", "approve", job.id, *named(job.id), "--as", REVIEWER)
        assert decided.code == 0, decided.err
        assert follower.finish() == 0, follower.output
    assert f"riverbeam approvals show {job.id}" in follower.output
    assert "waiting for a worker" not in follower.output
    assert "● job succeeded" in follower.output


def test_follow_replays_from_the_start_or_after_an_event(stack: Stack) -> None:
    job = parked(stack)
    cli("approvals", "approve", job.id, *named(job.id), "--as", REVIEWER)
    stack.wait_for(job.id, JobState.SUCCEEDED)
    whole = cli("jobs", "follow", job.id)
    assert whole.code == 0
    assert whole.out.index("▸ list_tree") < whole.out.index("▸ git_push")
    assert whole.out.rstrip().endswith("● job succeeded")

    events = stack.store.events.read(job.id, count=10_000)
    pushes = [
        e.id for e in events if e.frame is not None and getattr(e.frame, "record", None)
        and e.frame.record.name == "git_push"  # type: ignore[union-attr]
    ]  # fmt: skip
    later = cli("jobs", "follow", job.id, "--after", pushes[0])
    assert "list_tree" not in later.out and "● job succeeded" in later.out

    bad = cli("jobs", "follow", job.id, "--after", "yesterday")
    assert bad.code == 2 and "BEM-501" in bad.err
    # Redis would read "3" as the moment 3-0 and replay everything: refused instead.
    for almost in ("3", pushes[0].split("-")[0], f"{pushes[0]}9", "١٢-٣"):
        refused = cli("jobs", "follow", job.id, "--after", almost)
        assert refused.code == 2 and "BEM-501" in refused.err, almost
        assert refused.out == ""


def test_a_follow_that_stops_at_the_park_says_where_to_go_on(stack: Stack) -> None:
    job = parked(stack)
    first = cli("jobs", "follow", job.id)
    assert first.code == 0
    last = stack.store.events.last_id(job.id)
    assert f"riverbeam jobs follow {job.id} --after {last}" in first.out
    again = cli("jobs", "follow", job.id, "--after", last)
    assert again.code == 0 and "list_tree" not in again.out


def test_cancel_works_in_every_state_and_leaves_no_container(stack: Stack) -> None:
    queued = cli("submit", IDLE_KIND.value, "--repo", "docs", "--range", "main..main")
    queued_id = queued.out.strip()
    ran = cli("jobs", "cancel", queued_id)
    assert ran.code == 0 and "cancelled (it was queued)" in ran.out
    assert stack.store.jobs.get(queued_id).state is JobState.CANCELLED

    slow = submit(playbook="author-slow").out.strip()
    stack.wait_for(slow, JobState.RUNNING)
    wait_until(lambda: bool(stack.sandbox_containers(slow)), 20, lambda: "no container started")
    ran = cli("jobs", "cancel", slow)
    assert ran.code == 0 and "cancelled (it was running)" in ran.out, ran.out
    assert stack.store.jobs.get(slow).error.code == "BEM-506"  # type: ignore[union-attr]
    wait_until(lambda: not stack.sandbox_containers(slow), 10, lambda: "a container was left")

    job = parked(stack)
    ran = cli("jobs", "cancel", job.id)
    assert ran.code == 0 and "cancelled (it was awaiting_approval)" in ran.out
    approval = stack.store.approvals.get(job.id)
    assert approval is not None and approval.state is ApprovalState.WITHDRAWN
    assert cli("approvals", "approve", job.id, "--as", REVIEWER).code == 2
    assert stack.sandbox_containers(job.id) == []

    ran = cli("jobs", "cancel", job.id)
    assert ran.code == 0 and "already ended: cancelled" in ran.out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["submit", "author", "--repo", "nowhere", "--request", "x"], "no repository named"),
        (["submit", "translate", "--repo", "docs", "--request", "x"], "kind: Input should be"),
        (["submit", "author", "--repo", "docs"], "an author job needs request"),
        (["submit", "review", "--repo", "docs"], "a review job needs branch"),
        (["submit", "commit-notes", "--repo", "docs", "--range", "a...b"], "range must look"),
        (["submit", "author", "--repo", "docs", "--request", "x", "--meta", "k"], "KEY=VALUE"),
        # As the API says it: the repository is looked up once, before the spec is built.
        (["submit", "author", "--repo", "../etc", "--request", "x"], "named '../etc' (known"),
        (["jobs", "list", "--state", "lost"], "'lost' is not a job state"),
        (["jobs", "show", "000000000000"], "BEM-500: no job with id"),
        (["approvals", "show", "000000000000"], "BEM-500"),
    ],
)  # fmt: skip
def test_bad_input_is_a_bem_error_and_queues_nothing(
    stack: Stack, argv: list[str], message: str
) -> None:
    jobs_before = stack.store.listing.list(limit=1000)[0]
    queued_before = _queued_messages(stack)
    ran = cli(*argv)
    assert ran.code == 2
    assert re.match(r"riverbeam: BEM-\d{3}: ", ran.err), ran.err
    assert message in ran.err and "Traceback" not in ran.err
    assert ran.out == ""
    assert stack.store.listing.list(limit=1000)[0] == jobs_before
    assert _queued_messages(stack) == queued_before


def test_a_request_can_come_from_standard_input(stack: Stack) -> None:
    ran = cli(
        "submit", "author", "--repo", "docs", "--request", "-", "--meta", "playbook=author-slow",
        stdin="Fix the install page\nand its links\n",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    job_id = ran.out.strip()
    # The one newline a pipe or heredoc ends the text with is dropped, and only that one.
    assert stack.store.jobs.get(job_id).spec.request == "Fix the install page\nand its links"
    assert cli("jobs", "cancel", job_id).code == 0
    stack.wait_for(job_id, JobState.CANCELLED)
