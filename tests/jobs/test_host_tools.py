"""The job kinds' host tools on real trees, real bare upstreams and a real webhook receiver.

review_change checks a review against the tree and hands it to the executor's collector;
publish_docset fast-forwards a publish branch upstream to a reviewed commit and notifies
a docs build over HTTP on loopback. Every refusal leaves the upstream's refs untouched.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import pytest

from bot.config import RepositoryConfig, Settings, WorkspaceSettings
from bot.core.errors import BeamError
from bot.core.input import AgentInput
from bot.core.tools import Tool
from bot.jobs.host_tools.publish import PublishDocsetTool
from bot.jobs.host_tools.review import VERDICTS, ReviewChangeTool, ReviewCollector
from bot.jobs.webhooks import public_webhook_url
from bot.store.models import (
    JobKind,
    JobRecord,
    JobResult,
    JobSpec,
    JobState,
    PublishOutcome,
    ReviewOutcome,
)
from harness.gitkit import (
    git,
    is_ancestor,
    make_upstream,
    refs_and_logs,
    upstream_push,
    write_files,
)
from sandbox.host.relay import publish_commit
from sandbox.host.upstream.credentials import upstream_callbacks
from sandbox.host.upstream.mirror import sync_mirror
from sandbox.inside.jail import SandboxRoot
from tests.jobs.webhook_receiver import Receiver, webhook_receiver

INPUT = AgentInput.of_text("")


# -- review_change -------------------------------------------------------------------


@pytest.fixture
def review_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    write_files(
        tree,
        {
            "docs/install.md": "# Install\n\nRun it.\nThen check.\n",
            "docs/logo.png": b"\x89PNG\0\0\0",
        },
    )
    return tree


def finding(**fields: Any) -> dict[str, Any]:
    return {"path": "docs/install.md", "severity": "major", "note": "Unclear.", **fields}


async def test_a_review_is_checked_and_collected(review_tree: Path) -> None:
    collector = ReviewCollector()
    tool = ReviewChangeTool(collector, SandboxRoot(review_tree))
    args = {
        "verdict": "approve_with_suggestions",
        "summary": "  Good change.  ",
        "findings": [
            finding(line=3, suggestion="Run the installer."),
            finding(severity="nit", note="Title case.", line=None, suggestion=None),
            finding(path="./docs", severity="minor", note="Add an index."),
        ],
    }

    result = await tool.invoke(args, INPUT)

    assert result == {
        "recorded": True,
        "verdict": "approve_with_suggestions",
        "findings": 3,
        "by_severity": {"blocker": 0, "major": 1, "minor": 1, "nit": 1},
        "replaced_previous": False,
        "note": "review recorded; give your final answer now",
    }
    outcome = collector.outcome(branch="docs/fix", commit_sha="a" * 40)
    assert (outcome.verdict, outcome.summary, outcome.branch) == (
        "approve_with_suggestions",
        "Good change.",
        "docs/fix",
    )
    assert [(f.path, f.line, f.severity, f.suggestion) for f in outcome.findings] == [
        ("docs/install.md", 3, "major", "Run the installer."),
        ("docs/install.md", None, "nit", None),
        ("docs", None, "minor", None),
    ]
    assert ReviewOutcome.model_validate_json(outcome.model_dump_json()) == outcome


async def test_a_second_review_replaces_the_first_and_says_so(review_tree: Path) -> None:
    collector = ReviewCollector()
    tool = ReviewChangeTool(collector, SandboxRoot(review_tree))
    await tool.invoke({"verdict": "request_changes", "summary": "No.", "findings": []}, INPUT)

    result = await tool.invoke({"verdict": "approve", "summary": "Yes.", "findings": []}, INPUT)

    assert isinstance(result, dict) and result["replaced_previous"] is True
    assert "replaces the one recorded earlier" in str(result["note"])
    assert collector.submissions == 2
    assert collector.outcome(branch="b", commit_sha="c" * 40).verdict == "approve"


@pytest.mark.parametrize(
    ("bad", "code", "words"),
    [
        (finding(path="docs/missing.md"), "BEM-090", "does not exist in the working tree"),
        (finding(line=5), "BEM-090", "past the end of 'docs/install.md', which has 4 lines"),
        (finding(line=0), "BEM-090", "line"),
        (finding(path="docs", line=1), "BEM-090", "is a directory"),
        (finding(path="docs/logo.png", line=1), "BEM-090", "binary"),
        (finding(severity="should fix"), "BEM-090", "severity"),
        (finding(path="../outside/secret.md"), "BEM-302", "findings[1].path"),
        (finding(path=".git/config"), "BEM-304", "findings[1].path"),
        ({"path": "docs/install.md", "note": "x"}, "BEM-090", "severity"),
    ],
)
async def test_a_bad_finding_fails_the_call_and_records_nothing(
    review_tree: Path, bad: dict[str, Any], code: str, words: str
) -> None:
    collector = ReviewCollector()
    tool = ReviewChangeTool(collector, SandboxRoot(review_tree))

    with pytest.raises(BeamError) as caught:
        await tool.invoke(
            {"verdict": "approve", "summary": "Fine.", "findings": [finding(line=1), bad]}, INPUT
        )

    assert caught.value.code == code and words in caught.value.message
    assert collector.review is None and collector.submissions == 0


@pytest.mark.parametrize(
    "args",
    [
        {"verdict": "lgtm", "summary": "x", "findings": []},
        {"verdict": "approve", "summary": "", "findings": []},
        {"verdict": "approve", "summary": "x"},
        {"verdict": "approve", "summary": "x", "findings": [finding()] * 101},
    ],
)
async def test_review_arguments_outside_the_schema_are_refused(
    review_tree: Path, args: dict[str, Any]
) -> None:
    tool = ReviewChangeTool(ReviewCollector(), SandboxRoot(review_tree))
    with pytest.raises(BeamError) as caught:
        await tool.invoke(args, INPUT)
    assert caught.value.code == "BEM-090"


def test_a_finding_on_a_file_past_the_read_cap_keeps_its_line(review_tree: Path) -> None:
    write_files(review_tree, {"docs/huge.md": "z" * 5000})
    tool = ReviewChangeTool(ReviewCollector(), SandboxRoot(review_tree, max_read_bytes=1000))

    review = tool.check(
        {"verdict": "approve", "summary": "x", "findings": [finding(path="docs/huge.md", line=9)]}
    )

    assert review.findings[0].line == 9


def test_without_a_review_the_outcome_has_no_verdict() -> None:
    outcome = ReviewCollector().outcome(branch="b", commit_sha="c" * 40)
    assert outcome.verdict is None and outcome.findings == []


def test_the_verdicts_are_the_review_outcomes() -> None:
    annotation = ReviewOutcome.model_fields["verdict"].annotation
    choices = {value for arg in get_args(annotation) for value in get_args(arg)}
    assert set(VERDICTS) == choices


# -- publish_docset ------------------------------------------------------------------

REPO = "docs"
PUBLISH_REF = "docs-live"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """The docs-build webhook."""
    with webhook_receiver("/hooks/build?token=s3cret") as state:
        yield state


@dataclass
class World:
    """An upstream with a reviewed branch, its review job, and a publish job for it."""

    upstream: Path
    reviewed_sha: str
    jobs: dict[str, JobRecord]
    workspaces: WorkspaceSettings
    receiver: Receiver

    def config(self, **changes: Any) -> RepositoryConfig:
        fields: dict[str, Any] = {
            "upstream": str(self.upstream),
            "publish_ref": PUBLISH_REF,
            "docs_build_webhook": self.receiver.url,
        }
        # Unvalidated changes: the configuration refuses a malformed publish_ref as it is
        # read; the tool checks again what it is given (a config built elsewhere).
        return RepositoryConfig(**fields).model_copy(update=changes)

    def lookup(self, job_id: str) -> JobRecord:
        if job_id not in self.jobs:
            raise BeamError("BEM-500", f"no job {job_id}")
        return self.jobs[job_id]

    def tool(self, review_job: str = "review-1", **changes: Any) -> PublishDocsetTool:
        spec = JobSpec(kind=JobKind.PUBLISH, repo=REPO, review_job=review_job)
        job = JobRecord(id="publish-1", spec=spec)
        config = self.config(**changes)
        return PublishDocsetTool(
            job,
            config,
            lookup=self.lookup,
            workspaces=self.workspaces,
            callbacks=upstream_callbacks(REPO, config, self.workspaces),
            webhook_timeout=5.0,
        )

    def refused(self, code: str, action: Callable[[], object]) -> BeamError:
        """``action`` fails with ``code``, nothing moves upstream and no build is notified."""
        before = refs_and_logs(self.upstream)
        with pytest.raises(BeamError) as caught:
            action()
        assert caught.value.code == code, caught.value
        assert refs_and_logs(self.upstream) == before
        assert self.receiver.requests == []
        return caught.value


def review_job(
    job_id: str,
    sha: str,
    *,
    verdict: str | None = "approve",
    state: JobState = JobState.SUCCEEDED,
    repo: str = REPO,
    kind: str = "review",
) -> JobRecord:
    outcome = ReviewOutcome.model_validate(
        {"branch": "docs/reviewed", "commit_sha": sha, "verdict": verdict}
    )
    spec = JobSpec(kind=JobKind(kind), repo=repo, branch="docs/reviewed")
    return JobRecord(id=job_id, spec=spec, state=state, result=JobResult(outcome=outcome))


@pytest.fixture
def world(tmp_path: Path, receiver: Receiver) -> World:
    upstream = make_upstream(tmp_path / "upstream.git")
    sha = upstream_push(upstream, "docs/reviewed", {"docs/new.md": "A reviewed page.\n"}, "main")
    jobs = {"review-1": review_job("review-1", sha)}
    workspaces = WorkspaceSettings(root=tmp_path / "workspaces", mirrors=tmp_path / "mirrors")
    return World(upstream, sha, jobs, workspaces, receiver)


def test_publish_creates_the_publish_branch_at_the_reviewed_commit_and_notifies(
    world: World,
) -> None:
    tool = world.tool()

    result = tool.publish()

    assert refs_and_logs(world.upstream)[f"refs/heads/{PUBLISH_REF}"] == world.reviewed_sha
    assert result == {
        "published": True,
        "repository": REPO,
        "publish_ref": PUBLISH_REF,
        "sha": world.reviewed_sha,
        "already_there": False,
        "review_job": "review-1",
        "webhook": {
            "url": public_webhook_url(world.receiver.url),
            "delivered": True,
            "status": 204,
            "error": None,
        },
        "note": "published",
    }
    (request,) = world.receiver.requests
    assert request["path"] == "/hooks/build?token=s3cret"
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["body"] == {
        "repository": REPO,
        "publish_ref": PUBLISH_REF,
        "sha": world.reviewed_sha,
        "review_job": "review-1",
        "job": "publish-1",
    }
    assert "s3cret" not in json.dumps(result)
    assert tool.outcome == PublishOutcome(
        publish_ref=PUBLISH_REF, sha=world.reviewed_sha, webhook_status=204
    )
    git("-C", str(world.upstream), "fsck", "--strict", "--no-dangling")


def test_a_second_publish_is_already_there_and_pushes_nothing(world: World) -> None:
    world.tool().publish()
    after_first = refs_and_logs(world.upstream)

    again = world.tool().publish()

    assert again["already_there"] is True and again["sha"] == world.reviewed_sha
    assert "nothing was pushed" in again["note"]
    assert refs_and_logs(world.upstream) == after_first
    # Delivery is at least once: the repeat notifies again, with the same commit.
    assert [r["body"]["sha"] for r in world.receiver.requests] == [world.reviewed_sha] * 2


def test_publish_fast_forwards_an_existing_publish_branch_without_force(world: World) -> None:
    main = refs_and_logs(world.upstream)["refs/heads/main"]
    git("-C", str(world.upstream), "branch", PUBLISH_REF, main)

    world.tool().publish()

    state = refs_and_logs(world.upstream)
    assert state[f"refs/heads/{PUBLISH_REF}"] == world.reviewed_sha
    assert state["refs/heads/main"] == main
    log = state[f"log:refs/heads/{PUBLISH_REF}"].splitlines()
    assert [line.split()[:2] for line in log][-1] == [main, world.reviewed_sha]
    assert is_ancestor(world.upstream, main, world.reviewed_sha)


def test_a_publish_branch_with_commits_the_review_lacks_is_never_forced(world: World) -> None:
    hotfix = upstream_push(world.upstream, PUBLISH_REF, {"docs/hotfix.md": "Live fix.\n"}, "main")

    error = world.refused("BEM-351", world.tool().publish)

    assert hotfix in error.message and world.reviewed_sha in error.message
    assert "never forces" in error.message


@pytest.mark.parametrize(
    ("review", "words"),
    [
        (dict(verdict="request_changes"), "verdict is request_changes"),
        (dict(verdict=None), "verdict is missing"),
        (dict(state=JobState.FAILED), "is failed, not succeeded"),
        (dict(state=JobState.RUNNING), "is running, not succeeded"),
        (dict(repo="other-docs"), "reviewed the repository 'other-docs'"),
        (dict(kind="summarize"), "is a summarize job, not a review"),
    ],
)
def test_publish_refuses_a_review_that_does_not_approve(
    world: World, review: dict[str, Any], words: str
) -> None:
    world.jobs["review-2"] = review_job("review-2", world.reviewed_sha, **review)

    error = world.refused("BEM-360", world.tool("review-2").publish)

    assert words in error.message and "nothing was published" in error.message


def test_a_review_that_recorded_no_outcome_is_refused(world: World) -> None:
    record = review_job("review-2", world.reviewed_sha)
    world.jobs["review-2"] = record.model_copy(update={"result": JobResult(text="done")})

    error = world.refused("BEM-360", world.tool("review-2").publish)
    assert "without recording a review" in error.message


def test_an_unknown_review_job_is_bem_500(world: World) -> None:
    world.refused("BEM-500", world.tool("no-such-review").publish)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (dict(publish_ref=None), "has no publish_ref configured"),
        (dict(publish_ref="main"), "is protected (it matches 'refs/heads/main')"),
        (dict(publish_ref="Release/2"), "is protected"),
        (
            dict(publish_ref="docs-live", protected_refs=("main", "docs-*")),
            "is protected (it matches 'refs/heads/docs-*')",
        ),
        (dict(publish_ref="+docs-live"), "not a usable branch"),
        (dict(publish_ref="refs/tags/v1"), "not a usable branch"),
    ],
)
def test_publish_refuses_an_unset_protected_or_invalid_publish_ref(
    world: World, changes: dict[str, Any], words: str
) -> None:
    error = world.refused("BEM-361", world.tool(**changes).publish)
    assert words in error.message


def test_a_failing_webhook_is_reported_but_the_publish_stands(world: World) -> None:
    world.receiver.status = 500
    tool = world.tool()

    result = tool.publish()

    assert refs_and_logs(world.upstream)[f"refs/heads/{PUBLISH_REF}"] == world.reviewed_sha
    webhook = result["webhook"]
    assert result["published"] is True and webhook["delivered"] is False
    assert webhook["status"] == 500 and webhook["error"]["code"] == "BEM-362"
    assert "answered HTTP 500" in webhook["error"]["message"]
    assert "publish itself is done" in webhook["error"]["message"]
    assert "do not call publish_docset again" in result["note"]
    assert tool.outcome is not None and tool.outcome.webhook_status == 500
    assert tool.webhook is not None and tool.webhook.error is not None
    assert "s3cret" not in json.dumps(result)


def test_an_unreachable_webhook_is_reported_without_its_secret(world: World) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://user:pw@127.0.0.1:{port}/hook?key=s3cret"

    result = world.tool(docs_build_webhook=url).publish()

    webhook = result["webhook"]
    assert result["published"] is True and webhook["status"] is None
    assert webhook["error"]["code"] == "BEM-362"
    assert "could not be reached" in webhook["error"]["message"]
    assert webhook["url"] == f"http://127.0.0.1:{port}/hook"
    assert "s3cret" not in json.dumps(result) and "pw@" not in json.dumps(result)
    assert refs_and_logs(world.upstream)[f"refs/heads/{PUBLISH_REF}"] == world.reviewed_sha


def test_without_a_webhook_the_publish_notifies_nobody(world: World) -> None:
    tool = world.tool(docs_build_webhook=None)

    result = tool.publish()

    assert result["webhook"] is None and world.receiver.requests == []
    assert tool.outcome == PublishOutcome(publish_ref=PUBLISH_REF, sha=world.reviewed_sha)


def test_the_plan_names_what_would_be_published_and_moves_nothing(world: World) -> None:
    before = refs_and_logs(world.upstream)

    plan = world.tool().plan()

    assert (plan.sha, plan.publish_ref, plan.review_job, plan.job) == (
        world.reviewed_sha,
        PUBLISH_REF,
        "review-1",
        "publish-1",
    )
    assert (plan.reviewed_branch, plan.verdict) == ("docs/reviewed", "approve")
    assert refs_and_logs(world.upstream) == before


async def test_publish_through_the_tool_protocol_needs_confirmation(world: World) -> None:
    tool = world.tool()
    spec = tool.spec()
    assert isinstance(tool, Tool) and spec.confirm_required
    assert set(spec.parameters["properties"]) == {"note"} and spec.parameters["required"] == []

    result = await tool.invoke({"note": "The reviewed install page."}, INPUT)

    assert isinstance(result, dict) and result["published"] is True
    with pytest.raises(BeamError) as caught:
        await tool.invoke({"publish_ref": "main"}, INPUT)
    assert caught.value.code == "BEM-090"


def test_the_tool_is_built_from_settings(world: World) -> None:
    settings = Settings(
        repositories={REPO: world.config()},
        workspaces=world.workspaces,
    )
    spec = JobSpec(kind=JobKind.PUBLISH, repo=REPO, review_job="review-1")
    job = JobRecord(id="publish-1", spec=spec)

    tool = PublishDocsetTool.for_job(job, settings, lookup=world.lookup)

    assert tool.publish()["sha"] == world.reviewed_sha
    with pytest.raises(ValueError, match="not a publish job"):
        PublishDocsetTool.for_job(
            JobRecord(id="r", spec=JobSpec(kind=JobKind.REVIEW, repo=REPO, branch="x")),
            settings,
            lookup=world.lookup,
        )


# -- publish_commit, the relay's publish path ----------------------------------------


def test_publish_commit_rechecks_the_protected_refs(world: World) -> None:
    config = world.config()
    mirror = sync_mirror(REPO, config, world.workspaces)

    world.refused(
        "BEM-328",
        lambda: publish_commit(
            mirror,
            world.reviewed_sha,
            "main",
            config,
            callbacks=upstream_callbacks(REPO, config, world.workspaces),
        ),
    )


def test_publish_commit_refuses_a_commit_the_mirror_lacks(world: World) -> None:
    config = world.config()
    mirror = sync_mirror(REPO, config, world.workspaces)
    ghost = "1234567890abcdef1234567890abcdef12345678"

    error = world.refused(
        "BEM-363",
        lambda: publish_commit(
            mirror,
            ghost,
            PUBLISH_REF,
            config,
            callbacks=upstream_callbacks(REPO, config, world.workspaces),
        ),
    )
    assert ghost in error.message
