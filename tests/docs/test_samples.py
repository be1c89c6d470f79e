"""Every fenced block of README.md and docs/ is checked, or its page says why not.

The blocks that need no running service are checked here (Python, configuration, JSON
documents and tool results, diagrams of the code); the documented commands and their
output run in tests/docs/test_commands.py. See tests/docs/blocks.py for the markers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.blocks import (
    CHECK_NAMES,
    LIVE_CHECKS,
    Block,
    all_blocks,
    pages,
    parse,
    runner,
    unchecked,
)
from tests.docs.pychecks import check_fragment, check_schema, check_toml, run_python
from tests.docs.samples import (
    ToolBench,
    check_error_classes,
    check_job_states,
    check_model_request,
    check_skill_file,
    check_summary_webhook,
    result_of,
)
from tests.docs.synopsis import check_ci_workflow, check_synopsis, inline_commands, problems

BLOCKS = all_blocks()
CHECKS = {
    "fragment": check_fragment,
    "job-states": check_job_states,
    "error-classes": check_error_classes,
    "synopsis": check_synopsis,
    "skill-file": check_skill_file,
    "model-request": check_model_request,
    "summary-webhook": check_summary_webhook,
    "ci-workflow": check_ci_workflow,
}


def test_every_block_is_checked_or_says_why_not() -> None:
    assert set(CHECKS) | LIVE_CHECKS == CHECK_NAMES
    left = unchecked(BLOCKS)
    assert not left, (
        "these blocks are neither checked by a test nor marked `<!-- not-run: why -->` "
        "(see tests/docs/blocks.py):\n" + "\n".join(left)
    )


def test_a_new_sample_without_a_runner_or_a_reason_is_caught() -> None:
    page = (
        "```yaml\na: 1\n```\n\n<!-- not-run -->\n```yaml\nb: 2\n```\n\n"
        "<!-- check: no-such-check -->\n```\nc\n```\n\n"
        "<!-- not-run: needs a registry -->\n```yaml\nd: 4\n```\n\n"
        "```sh\nriverbeam jobs list\n```\n"
    )
    assert unchecked(parse("docs/new.md", page)) == [
        "docs/new.md:1 (yaml)",
        "docs/new.md:6 (yaml)",
        "docs/new.md:11 (no language)",
    ]
    with pytest.raises(ValueError, match="unknown marker 'not_run'"):
        parse("docs/new.md", "<!-- not_run: typo -->\n```sh\nls\n```\n")


def _of(*kinds: str) -> list[Block]:
    return [block for block in BLOCKS if runner(block) in kinds]


@pytest.mark.parametrize("block", _of("python"), ids=lambda block: block.id)
def test_python_example_runs(block: Block) -> None:
    run_python(block)


@pytest.mark.parametrize("block", _of("toml"), ids=lambda block: block.id)
def test_configuration_is_valid(block: Block) -> None:
    check_toml(block)


@pytest.mark.parametrize("block", _of("schema"), ids=lambda block: block.id)
def test_json_document_fits_its_model(block: Block) -> None:
    check_schema(block)


@pytest.mark.parametrize("block", _of(*CHECKS), ids=lambda block: block.id)
def test_named_check(block: Block) -> None:
    CHECKS[block.argument](block)


_benches: dict[str, ToolBench] = {}


@pytest.fixture(scope="module")
def bench_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("docs-tools")


@pytest.mark.parametrize("block", _of("result-of"), ids=lambda block: block.id)
def test_tool_result_names_the_real_fields(block: Block, bench_base: Path) -> None:
    if block.page not in _benches:
        base = bench_base / block.page.replace("/", "-")
        base.mkdir()
        _benches[block.page] = ToolBench(base)
    result_of(block, _benches[block.page])


@pytest.mark.parametrize("page", [page for page in pages() if inline_commands(page)])
def test_commands_named_in_the_prose_exist_with_their_options(page: str) -> None:
    wrong = [f"`{line}`: {p}" for line in inline_commands(page) for p in problems(line)]
    assert not wrong, f"{page}: " + "; ".join(wrong)
