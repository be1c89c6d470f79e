"""The documented commands and requests run against one real stack (tests/docs/shell.py),
and the documented output matches what they print (tests/docs/samples.py:same_lines)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.docs.blocks import LIVE_CHECKS, Block, all_blocks, pages, runner
from tests.docs.pychecks import assert_same_keys, json_sample
from tests.docs.samples import normalise, same_lines
from tests.docs.shell import DOC_JOB_ID, DocsStack, Ran, docs_stack
from tests.docs.synopsis import inline_endpoints

DEMO = re.compile(r"^(?:docker/demo|riverbeam demo\b.*)$")


BLOCKS = all_blocks()
COMMANDS = [b for b in BLOCKS if runner(b) == "shell"]
OUTPUTS = [b for b in BLOCKS if runner(b) == "output-of"]


@pytest.fixture(scope="module")
def docs() -> Iterator[DocsStack]:
    with docs_stack() as stack:
        # One parked job for each documented job id that is not an event stream's.
        texts = [b.text for b in COMMANDS] + [b.argument for b in OUTPUTS]
        stack.submit(sum(len(re.findall(rf"{DOC_JOB_ID}(?!/events)", t)) for t in texts) + 1)
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
@pytest.mark.parametrize("block", COMMANDS, ids=lambda block: block.id)
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
@pytest.mark.parametrize("block", OUTPUTS, ids=lambda block: block.id)
def test_documented_output_matches(block: Block, docs: DocsStack, tmp_path: Path) -> None:
    ran = _run(docs, block.argument, tmp_path)
    assert ran.code == 0, f"{block.id}: `{block.argument}` exited {ran.code}:\n{ran.out}"
    image = docs.stack.settings.sandbox.image
    assert same_lines(block.text, ran.out.replace(image, "riverbeam-sandbox"), block.id)


def _push_result(block: Block, docs: DocsStack) -> None:
    """What git_push returned in a job that pushed (through the relay)."""
    pushes = docs.stack.tool_calls(docs.succeeded_job(), "git_push")
    assert_same_keys(json_sample(block.text), pushes[-1].result, block.id)


def _metric_names(block: Block, docs: DocsStack) -> None:
    """Every series an alert rule reads is on the live ``/metrics``, with its labels."""
    rules = yaml.safe_load(block.text)
    assert rules["groups"], block.id
    exposed = httpx.get(f"{docs.api.url}/metrics", headers=docs.api.auth("admin")).text
    for name, labels in re.findall(r"\b(riverbeam_\w+)(?:\{([^}]*)\})?", block.text):
        series = [line for line in exposed.splitlines() if re.match(rf"{name}[{{ ]", line)]
        assert series, f"{block.id}: /metrics has no {name}"
        for label in re.findall(r"(\w+)=", labels):
            assert any(f"{label}=" in line for line in series), f"{block.id}: {name} {label}"


LIVE = {"push-result": _push_result, "metric-names": _metric_names}


@pytest.mark.slow
@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if runner(b) in LIVE_CHECKS], ids=lambda block: block.id
)
def test_documented_sample_matches_the_live_service(block: Block, docs: DocsStack) -> None:
    LIVE[block.argument](block, docs)


@pytest.mark.slow
@pytest.mark.parametrize("page", [page for page in pages() if inline_endpoints(page)])
def test_endpoints_named_in_the_prose_exist(page: str, docs: DocsStack) -> None:
    """Each ``METHOD /path`` the prose names is served: asked with no body, for a job
    that does not exist, it answers anything but "no such endpoint" (BEM-706) or "method
    not allowed" (BEM-707). Nothing is changed."""
    with docs.api.client("admin") as client:
        for endpoint in inline_endpoints(page):
            method, path = endpoint.split(" ", 1)
            reply = client.request(method, re.sub(r"\{\w+\}", "000000000000", path))
            problem = "problem+json" in reply.headers.get("content-type", "")
            code = reply.json().get("code") if problem else None
            assert reply.status_code not in (404, 405) or code not in ("BEM-706", "BEM-707"), (
                f"{page}: `{endpoint}`: {reply.status_code} {reply.text}"
            )
