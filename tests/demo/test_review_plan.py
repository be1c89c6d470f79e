"""The scripted demo model's review plan, run in process by the real tool loop over the real
sandbox tools and ``review_change`` on a git working tree: whatever the change holds, the
review is delivered exactly once and the run ends with the model's report."""

from __future__ import annotations

from pathlib import Path

from bot.core.input import AgentContext
from bot.demo.scripted_model import DemoModel, _review_steps
from bot.jobs.host_tools.review import ReviewChangeTool, ReviewCollector
from bot.runner import ToolLoopAgent
from sandbox.inside.bound_tools import sandbox_tools
from tests.runner.kit import collect, request, result_of
from tests.sandbox.git_kit import GitEnv, build_git_env


async def _review(env: GitEnv) -> tuple[ReviewCollector, str]:
    collector = ReviewCollector()
    tools = [*sandbox_tools(env.tree), ReviewChangeTool(collector, env.tree.root)]
    agent = ToolLoopAgent("reviewer", DemoModel(_review_steps()), tools)
    frames = await collect(agent.run(agent.start(request("Review the change."), AgentContext())))
    return collector, result_of(frames).text


async def test_a_change_with_no_text_file_to_read_is_reviewed_once(tmp_path: Path) -> None:
    env = build_git_env(tmp_path)
    (env.work / "docs/index.md").unlink()  # the change only deletes a page
    collector, answer = await _review(env)
    assert collector.submissions == 1
    assert collector.review is not None and collector.review.verdict == "approve"
    assert answer.startswith("Verdict: approve.")


async def test_a_change_with_a_broken_link_is_reviewed_once(tmp_path: Path) -> None:
    env = build_git_env(tmp_path)
    env.write("docs/new.md", "# New\n\nSee [the index](index.md) and [gone](gone.md).\n")
    collector, answer = await _review(env)
    assert collector.submissions == 1
    assert collector.review is not None and collector.review.verdict == "request_changes"
    assert [finding.note for finding in collector.review.findings] == [
        "The link to 'gone.md' points at a file that does not exist."
    ]
    assert answer.startswith("Verdict: request_changes.")
