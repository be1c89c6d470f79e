"""``bot.jobs.kinds``: a kind is one module and one registry line. A kind registered here, in
the test, runs a real segment in process (real Redis, a real git upstream and workspace, a
scripted model that calls no container tool), and the segment takes its plan, its request,
its prompt values, its outcome and its judgment from that module alone."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import docker
import pytest

from bot.clients.base import Message
from bot.clients.playbook import PlaybookClient
from bot.config import JobSettings, ModelSettings, RepositoryConfig, Settings, WorkspaceSettings
from bot.core.errors import JobError
from bot.jobs.executor import Executor, ImageCheck
from bot.jobs.kinds import REGISTRY, kind_of
from bot.jobs.kinds.kind import Ended, Kind
from bot.jobs.parking import PublishTarget
from bot.jobs.plans import Tree, TreePlan
from bot.store.models import JobKind, JobRecord, JobSpec, JobState, Outcome, SummaryOutcome
from bot.store.store import JobStore
from harness.gitkit import traversable_dir
from harness.playbooks import seed_upstream
from harness.redis_server import RedisServer, running_redis
from tests.store.kit import open_store

SEGMENT_MODULES = ("executor", "plans", "toolsets", "outcomes", "parking", "tasks")
SEEN: list[list[Message]] = []


class Glossary(Kind):
    """The kind under test: the glossary of a branch, checked for at least one term."""

    job_kind = JobKind.SUMMARIZE
    default_request = "List the glossary terms on {branch} (base {base})."

    def plan(self, spec: JobSpec, repo: RepositoryConfig) -> TreePlan:
        return TreePlan(
            checkout=repo.default_branch, branch="glossary", base="main", compare=None, merge=False
        )

    def prompt_values(self, tree: Tree | None, publish: PublishTarget | None) -> dict[str, Any]:
        return {"branch": "glossary", "base": "main"}

    def outcome(self, ended: Ended) -> Outcome | None:
        assert ended.tree is not None
        summary = f"terms at {ended.tree.workspace.base_sha[:7]}: {ended.state.text}"
        return SummaryOutcome(branch=ended.tree.plan.branch, base="main", summary=summary)

    def judge(self, ended: Ended, outcome: Outcome | None) -> JobError | None:
        if "term:" in ended.state.text:
            return None
        return JobError("BEM-522", "the glossary names no term")


def glossary_model(job: JobRecord) -> PlaybookClient:
    def answer(messages: Sequence[Message]) -> str:
        SEEN.append(messages)
        return str(job.spec.metadata.get("answer", ""))

    return PlaybookClient([answer])


class _Built(ImageCheck):
    """No container starts in these segments (the model calls no tool): no image is needed."""

    def current(self, client: docker.DockerClient, settings: Settings) -> str:
        return "riverbeam-sandbox:unused"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as running:
        yield running


@pytest.fixture
def store(server: RedisServer) -> Iterator[JobStore]:
    jobs = open_store(server.url)
    yield jobs
    jobs.gateway.client.close()


@pytest.fixture
def settings() -> Iterator[Settings]:
    with traversable_dir("riverbeam-kinds-test-") as base:
        upstream = seed_upstream(base / "upstream.git")
        yield Settings(
            repositories={"docs": RepositoryConfig(upstream=str(upstream))},
            workspaces=WorkspaceSettings(root=base / "ws", mirrors=base / "mirrors"),
            model=ModelSettings(factory=f"{__name__}:glossary_model"),
            jobs=JobSettings(container_start="on_demand"),
        )


def _segment(store: JobStore, settings: Settings, answer: str) -> JobRecord:
    spec = JobSpec(kind=JobKind.SUMMARIZE, repo="docs", branch="main", metadata={"answer": answer})
    job = store.jobs.create(spec)
    claimed = store.jobs.claim(job.id, worker="w1", lease_seconds=30)
    assert claimed is not None
    executor = Executor(
        settings, store, worker="w1", docker_client=docker.from_env(), images=_Built()
    )
    ended = executor.execute(claimed)
    assert ended is not None
    return ended


def test_a_registered_kind_is_what_the_segment_plans_prompts_and_judges_by(
    store: JobStore, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(REGISTRY, JobKind.SUMMARIZE, Glossary())
    SEEN.clear()

    done = _segment(store, settings, "term: relay")

    assert done.state is JobState.SUCCEEDED, done.error
    assert SEEN[0][-1]["content"] == "List the glossary terms on glossary (base main)."
    assert done.result is not None and isinstance(done.result.outcome, SummaryOutcome)
    assert done.result.outcome.branch == "glossary"
    assert done.result.outcome.summary.endswith(": term: relay")

    failed = _segment(store, settings, "nothing here")
    assert failed.state is JobState.FAILED
    assert failed.error is not None and failed.error.message == "the glossary names no term"


def test_every_job_kind_has_its_module() -> None:
    assert set(REGISTRY) == set(JobKind)
    for kind in JobKind:
        assert kind_of(JobSpec.model_construct(kind=kind, repo="docs")).job_kind is kind


def test_the_segment_names_no_kind() -> None:
    """Outside ``bot.jobs.kinds`` the segment's modules never name a JobKind member: what a
    kind does is asked of its module."""
    jobs = Path(__file__).parents[2] / "bot" / "jobs"
    named = [
        f"{name}.py:{node.lineno}"
        for name in SEGMENT_MODULES
        for node in ast.walk(ast.parse((jobs / f"{name}.py").read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "JobKind"
    ]
    assert named == []
