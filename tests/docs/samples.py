"""Checks of samples that need a working tree or the code, not the job service.

``<!-- result-of: TOOL ARGS -->``: the sample is what tool TOOL returns for the JSON
arguments ARGS. The tool runs, with the page's earlier ``result-of`` calls before it, on
one working tree per page (branch ``feature`` off ``main``, holding ``README.md`` and
``docs/index.md``, an ``origin`` to push to); the sample names the same fields at every
level as the real result. The host tools ``search``, ``get_page``, ``review_change`` and
``remember`` run over the same tree.

``<!-- output-of: COMMAND -->`` samples are compared with ``same_lines``.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pygit2

import bot.core.errors
from bot import AgentInput, BeamError, Tool
from bot.agents.consume.get_page import GetPageTool
from bot.agents.consume.search import SearchTool
from bot.agents.memory import InMemoryStore, RememberTool
from bot.clients import OpenAiCompatible
from bot.jobs.host_tools.review import ReviewChangeTool, ReviewCollector
from bot.jobs.schedules import ScheduleRun
from bot.store.models import JobState
from harness.stub_model import STUB_MODEL, StubModel, completion
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.sandbox_tools import call_tool
from sandbox.inside.tool_specs import TOOL_SPECS
from sandbox.inside.worktree import WorkingTree
from skills import load_skill
from tests.docs.blocks import Block, blocks
from tests.docs.pychecks import assert_same_keys, json_sample

error_names = vars(bot.core.errors)
PROTECTED = ["main", "master", "release/*"]


class ToolBench:
    """The working tree of one page's ``result-of`` samples."""

    def __init__(self, base: Path) -> None:
        (base / "tree").mkdir()
        self.root = SandboxRoot(str(base / "tree"))
        self.tree = WorkingTree(self.root, PROTECTED)
        self.tree.init()
        for path, body in {
            "README.md": "# Docs\n",
            "docs/index.md": "# Index\n\nWelcome.\n",
        }.items():
            call_tool(self.tree, "write_file", {"path": path, "body": body})
        call_tool(self.tree, "git_add", {"path": "."})
        call_tool(self.tree, "git_commit", {"message": "Start the docs"})
        self.tree.checkout_branch("feature", True)
        origin = base / "origin.git"
        pygit2.init_repository(str(origin), bare=True)
        self.tree.add_origin(str(origin))
        self.host: dict[str, Tool] = {
            tool.spec().name: tool
            for tool in (
                SearchTool(self.root),
                GetPageTool(self.root),
                ReviewChangeTool(ReviewCollector(), self.root),
                RememberTool(InMemoryStore(), scope="docs"),
            )
        }
        self.done: set[int] = set()

    def call(self, name: str, args: dict[str, Any]) -> Any:
        if name in self.host:
            return asyncio.run(self.host[name].invoke(args, AgentInput.of_text("docs")))
        return call_tool(self.tree, name, args)


def result_of(block: Block, bench: ToolBench) -> None:
    """Run the page's ``result-of`` calls up to ``block``; compare the last with it."""
    result: Any = None
    for earlier in blocks(block.page):
        if earlier.line > block.line:
            break
        if earlier.marker != "result-of" or (earlier.line in bench.done and earlier != block):
            continue
        name, _, args = earlier.argument.partition(" ")
        result = bench.call(name, json.loads(args or "{}"))
        bench.done.add(earlier.line)
    if isinstance(result, BeamError):
        raise result
    assert_same_keys(json_sample(block.text), result, block.id)


def check_job_states(block: Block) -> None:
    """A diagram of the job states names every state, and no state that does not exist."""
    words = set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b|\b[a-z]+\b", block.text))
    states = {state.value for state in JobState}
    assert states <= words, f"{block.id} leaves out {sorted(states - words)}"


def check_error_classes(block: Block) -> None:
    """The tree of error classes is the classes of ``bot.core.errors``: each class on the page
    exists and its base is the class it hangs from, and every class of the code is there."""
    parents: list[tuple[int, type]] = []
    documented: set[type] = set()
    for line in block.text.splitlines():
        found = re.search(r"[A-Z]\w+", line)
        if found is None:
            continue
        depth, cls = found.start(), error_names.get(found.group(0))
        assert isinstance(cls, type), f"{block.id}: bot.core.errors has no {found.group(0)}"
        while parents and parents[-1][0] >= depth:
            parents.pop()
        if parents:
            parent = parents[-1][1]
            assert cls.__bases__ == (parent,), (
                f"{block.id}: {cls.__name__} derives from {cls.__bases__}, not {parent.__name__}"
            )
        parents.append((depth, cls))
        documented.add(cls)
    real = {
        value
        for value in error_names.values()
        if isinstance(value, type) and issubclass(value, BeamError)
    }
    missing = sorted(cls.__name__ for cls in real - documented)
    assert not missing, f"{block.id} leaves out {missing}"


ELISION = re.compile(r"[ ,]*(?:\.\.\.|…)[ ,]*")
# Parts of a line that differ from run to run: ids, times, sizes, paths, pids, ports.
VOLATILE = [
    (re.compile(r"\b\d{13}-\d+\b"), "<event>"),
    (re.compile(r"\b[0-9a-f]{7,64}\b"), "<hex>"),
    (re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:\d\d)?"), "<time>"),
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s|KiB|MiB|GiB)\b"), "<n>"),
    (re.compile(r"/tmp/[^\s,)'\"]+"), "<path>"),
    (re.compile(r"/root/[^\s,)'\"]+"), "<path>"),
    (re.compile(r"\bpid \d+"), "pid <n>"),
    (re.compile(r"\b\d+(?= (?:lines|files?|chars|bytes|staged)\b)"), "<n>"),
    (re.compile(r"─{2,}"), "──"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),
    (re.compile(r"[0-9a-z-]+@[\w.-]+"), "<name>@<host>"),
]


def normalise(line: str) -> str:
    for pattern, replacement in VOLATILE:
        line = pattern.sub(replacement, line)
    return line.strip()


def same_lines(sample: str, actual: str, where: str) -> int:
    """Every line of ``sample`` matches a line of ``actual``, in order (a sample may leave
    lines out): equal once ids, times, paths and ports are normalised, an elision
    (``...``, ``…``) matching anything. Blank lines and SSE keep-alive comments (``:``),
    which depend on timing, are not compared. The number of lines compared."""
    lines = [normalise(line) for line in actual.splitlines()]
    position, compared = 0, 0
    for raw in sample.splitlines():
        line = normalise(raw)
        if not line or line.startswith(": "):
            continue
        pattern = re.compile(
            ".*".join(re.escape(part) for part in ELISION.split(line)).replace(r"\ ", " ")
        )
        while position < len(lines) and not pattern.fullmatch(lines[position]):
            position += 1
        assert position < len(lines), (
            f"{where}: the sample's line\n  {raw}\nis not in the real output (after its "
            f"earlier lines):\n{actual}"
        )
        position += 1
        compared += 1
    return compared


def check_skill_file(block: Block) -> None:
    """A skill file loads, and its prompt renders."""
    skill = load_skill(block.text)
    assert skill.tools, f"{block.id}: the skill allows no tool"
    assert skill.render(repository="docs", branch="docs/fix").strip()


def check_model_request(block: Block) -> None:
    """The body the model client sends (to a loopback stub) names the sample's fields."""
    with StubModel() as stub:
        stub.enqueue(completion("hello"))
        client = OpenAiCompatible(stub.base_url, "key", STUB_MODEL)
        asyncio.run(client.complete([{"role": "user", "content": "hi"}], [TOOL_SPECS["git_log"]]))
        sent = stub.requests[0].json
    assert_same_keys(json_sample(block.text), sent, block.id)


def check_summary_webhook(block: Block) -> None:
    """What a scheduled run posts to its ``summary_webhook``: the sample, read as a run,
    gives the same document."""
    sample = json_sample(block.text)
    run = ScheduleRun(
        id=sample["run"],
        repo=sample["repository"],
        started_at=sample["started_at"],
        finished_at=sample["finished_at"],
        summaries=sample["summaries"],
    )
    assert_same_keys(sample, run.payload(), block.id)
