"""``<!-- check: synopsis -->``: a block of usage lines (``riverbeam ci review --repo NAME
--branch B [--base X]``). Each line's command exists (its ``--help`` exits 0) and has every
option the line shows."""

from __future__ import annotations

import re

from tests.cli.kit import cli
from tests.docs.blocks import Block


def check_synopsis(block: Block) -> None:
    for line in block.text.splitlines():
        if not line.strip():
            continue
        words = line.split()
        assert words[0] == "riverbeam", f"{block.id}: `{line}` is not a riverbeam command"
        command = []
        for word in words[1:]:
            if not re.fullmatch(r"[a-z][a-z-]*", word):
                break
            command.append(word)
        ran = cli(*command, "--help")
        assert ran.code == 0, f"{block.id}: `riverbeam {' '.join(command)} --help`: {ran.err}"
        for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line):
            assert option in ran.out, f"{block.id}: `riverbeam {' '.join(command)}` has no {option}"
