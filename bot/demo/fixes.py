"""What the scripted demo model knows how to fix: common misspellings, and the rule that a
relative link must point at a file that exists."""

from __future__ import annotations

import difflib
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

# The scripted model's whole knowledge of spelling: common misspellings, lower case.
MISSPELLINGS: dict[str, str] = {
    "recomend": "recommend",
    "recieve": "receive",
    "enviroment": "environment",
    "teh": "the",
    "succesfully": "successfully",
    "seperate": "separate",
    "dependancy": "dependency",
    "occured": "occurred",
    "instal": "install",
}
_WORD = re.compile(r"[A-Za-z]+")
LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


@dataclass(frozen=True)
class Fix:
    before: str
    after: str

    def __str__(self) -> str:
        return f"{self.before} → {self.after}"


def fix_typos(text: str) -> tuple[str, list[Fix]]:
    """``text`` with every known misspelling replaced, keeping a capital first letter."""
    fixes: list[Fix] = []

    def replace(match: re.Match[str]) -> str:
        word = match.group(0)
        right = MISSPELLINGS.get(word.lower())
        if right is None:
            return word
        if word[0].isupper():
            right = right[0].upper() + right[1:]
        fixes.append(Fix(word, right))
        return right

    return _WORD.sub(replace, text), fixes


def fix_links(text: str, page: str, files: Sequence[str]) -> tuple[str, list[Fix]]:
    """``text`` (the page at ``page``) with each relative link to a missing file pointed at
    the most similar existing file of the same directory, when one is similar enough."""
    here = posixpath.dirname(page)
    existing = set(files)
    neighbours = [
        posixpath.relpath(name, here or ".") for name in files if posixpath.dirname(name) == here
    ]
    fixes: list[Fix] = []

    def replace(match: re.Match[str]) -> str:
        target = match.group("target")
        if not missing_target(target, here, existing):
            return match.group(0)
        closest = difflib.get_close_matches(target, neighbours, n=1, cutoff=0.6)
        if not closest:
            return match.group(0)
        fixes.append(Fix(target, closest[0]))
        return f"]({closest[0]}{match.group('anchor') or ''})"

    return LINK.sub(replace, text), fixes


def missing_target(target: str, here: str, existing: set[str]) -> bool:
    """Whether ``target``, linked from a page in directory ``here``, is a relative link to a
    file that is not in ``existing``."""
    if "://" in target or target.startswith(("/", "mailto:")):
        return False
    return posixpath.normpath(posixpath.join(here, target)) not in existing
