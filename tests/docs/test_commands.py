"""The documented commands and requests run against one real stack (tests/docs/shell.py),
and the documented output matches what they print (tests/docs/samples.py:same_lines)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.blocks import Block
from tests.docs.samples import normalise, same_lines
from tests.docs.shell import DocsStack, Ran, docs_stack
from tests.docs.test_samples import BLOCKS, runner

DEMO = re.compile(r"^(?:docker/demo|riverbeam demo\b.*)$")


@pytest.fixture(scope="module")
def docs() -> Iterator[DocsStack]:
    with docs_stack() as stack:
        yield stack


def _run(docs: DocsStack, text: str, cwd: Path) -> Ran:
    if DEMO.match(text.strip()):
        return docs.demo(text.strip())
    return docs.run(text, cwd=cwd)


def _console(block: Block) -> tuple[str, list[list[str]]]:
    """A console block's commands, and the output lines shown after each."""
    commands: list[str] = []
    outputs: list[list[str]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            commands.append(line[2:])
            outputs.append([])
        elif outputs:
            outputs[-1].append(line)
    return "\n".join(commands), outputs


@pytest.mark.slow
@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if runner(b) == "shell"], ids=lambda block: block.id
)
def test_documented_commands_run(block: Block, docs: DocsStack, tmp_path: Path) -> None:
    if block.lang == "console" or block.text.startswith("$ "):
        script, outputs = _console(block)
    else:
        script, outputs = block.text, []
    ran = _run(docs, script, tmp_path)
    assert ran.code == 0, f"{block.id} exited {ran.code}:\n{ran.script}\n---\n{ran.out}"
    shown = [line for lines in outputs for line in lines if line.strip()]
    if shown:
        # What a console block shows: each output line's first word, in order.
        image = docs.stack.settings.sandbox.image
        actual = [
            normalise(line.replace(image, "riverbeam-sandbox")).split()[0]
            for line in ran.out.splitlines()
            if line.strip()
        ]
        expected = [normalise(line).split()[0] for line in shown]
        assert actual == expected, f"{block.id}: the output differs:\n{ran.out}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if runner(b) == "output-of"], ids=lambda block: block.id
)
def test_documented_output_matches(block: Block, docs: DocsStack, tmp_path: Path) -> None:
    ran = _run(docs, block.argument, tmp_path)
    assert ran.code == 0, f"{block.id}: `{block.argument}` exited {ran.code}:\n{ran.out}"
    image = docs.stack.settings.sandbox.image
    assert same_lines(block.text, ran.out.replace(image, "riverbeam-sandbox"), block.id)
