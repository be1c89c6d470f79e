"""Command lines named in the pages, checked against the command's ``--help``: the usage
blocks (``<!-- check: synopsis -->``: ``riverbeam ci review --repo NAME --branch B [--base
X]``, one a line) and every inline ```riverbeam ...``` in the prose. The command exists
(its ``--help`` exits 0) and has every option the line shows; ``a|b`` names two commands."""

from __future__ import annotations

import itertools
import re
from functools import cache
from typing import Any

import yaml

from tests.cli.kit import cli
from tests.docs.blocks import ROOT, Block

INLINE = re.compile(r"`(riverbeam(?: [^`]*)?)`")
ENDPOINT = re.compile(r"`((?:GET|POST|PUT|PATCH|DELETE) /[^`\s]*)`")
FENCED = re.compile(r"^(\s*)(`{3,}|~{3,}).*?^\1\2", re.MULTILINE | re.DOTALL)


@cache
def _help(*command: str) -> str | None:
    ran = cli(*command, "--help")
    return ran.out if ran.code == 0 else None


def problems(line: str) -> list[str]:
    """What is wrong with command line ``line`` (``[]``: nothing)."""
    words = line.replace("\\|", " | ").split()
    assert words[0] == "riverbeam", f"`{line}` is not a riverbeam command"
    alternatives: list[list[str]] = []
    rest = words[1:]
    while rest and re.fullmatch(r"[a-z][a-z-]*(?:\|[a-z][a-z-]*)*", rest[0]):
        alternatives.append(rest.pop(0).split("|"))
    # Options up to the end of the command (a pipe or redirection ends it).
    options = []
    for word in rest:
        if word in ("|", ">", "&&", ";"):
            break
        options += re.findall(r"^\[?(--[a-z][a-z-]*)", word)
    found = []
    for command in itertools.product(*alternatives):
        shown = _help(*command)
        if shown is None:
            found.append(f"`riverbeam {' '.join(command)}` is not a command")
            continue
        found += [
            f"`riverbeam {' '.join(command)}` has no {option}"
            for option in options
            if option not in shown
        ]
    return found


def check_synopsis(block: Block) -> None:
    wrong = [p for line in block.text.splitlines() if line.strip() for p in problems(line)]
    assert not wrong, f"{block.id}: " + "; ".join(wrong)


def inline_commands(page: str) -> list[str]:
    """The ```riverbeam ...``` spans of ``page``'s prose (fenced blocks left out)."""
    return INLINE.findall(_prose(page))


def inline_endpoints(page: str) -> list[str]:
    """The ```GET /path``` spans of ``page``'s prose."""
    return ENDPOINT.findall(_prose(page))


def _prose(page: str) -> str:
    return FENCED.sub("", (ROOT / page).read_text())


def check_ci_workflow(block: Block) -> None:
    """A CI pipeline (GitHub Actions, GitLab CI): it parses as YAML, and each riverbeam
    command in its steps exists with the options it uses."""
    lines = [
        line.strip()
        for text in _strings(yaml.safe_load(block.text))
        for line in text.replace("\\\n", " ").splitlines()
        if line.strip().startswith("riverbeam ")
    ]
    assert lines, f"{block.id}: the pipeline runs no riverbeam command"
    wrong = [p for line in lines for p in problems(line)]
    assert not wrong, f"{block.id}: " + "; ".join(wrong)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []
