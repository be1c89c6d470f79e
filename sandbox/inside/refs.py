"""Which branch names Riverbeam accepts, and which refs it never pushes or checks out.

A name a model supplies passes three gates, in this order, each with its own code:

1. **Refspec or option syntax** (BEM-325). Anything git would read as more than a branch
   name: a leading ``+`` (force) or ``-`` (option), ``:`` (``src:dst``), ``*`` (a pattern),
   ``^``/``~``/``@{`` (revision syntax), ``@`` and the ``HEAD`` family, and full refs outside
   ``refs/heads/``. ``refs/heads/<name>`` itself is accepted as a spelling of ``<name>``.
2. **git's check-ref-format rules**, implemented here, plus plain printable ASCII (BEM-324):
   no control characters, spaces or ``?[\\``, no ``..``, no ``//``, no leading ``/``, no
   trailing ``/`` or ``.``, no component starting with ``.`` or ending with ``.lock``, at most
   ``MAX_BRANCH_BYTES``. ASCII-only rules out confusables (Cyrillic ``а`` in ``mаin``) and
   zero-width characters, which would otherwise let a ref *look* like a protected one.
3. **The protected-ref policy** (BEM-328). Patterns are names (``main``) or globs
   (``release/*``); a pattern without ``refs/`` means ``refs/heads/<pattern>``. Both sides are
   compared as case-folded full refs, so ``MAIN`` and ``refs/heads/Main`` are protected when
   ``main`` is: a remote on a case-insensitive filesystem stores them as the same file. ``*``
   matches any run of characters *including* ``/``, so ``release/*`` protects
   ``release/1.0`` and ``release/1.0/hotfix`` alike (deeper levels are never a way around).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from bot.core.errors import BeamError

__all__ = ["HEADS", "MAX_BRANCH_BYTES", "ProtectedRefs", "branch_name", "full_ref"]

HEADS = "refs/heads/"
# Filesystems cap one name at 255 bytes; the cap keeps every ref file and lock file valid.
MAX_BRANCH_BYTES = 200

# Symbolic and special refs git resolves before branches; a branch named like one is
# ambiguous in every revision expression, whatever its case.
_SPECIAL = frozenset(
    name.casefold()
    for name in (
        "HEAD",
        "FETCH_HEAD",
        "ORIG_HEAD",
        "MERGE_HEAD",
        "CHERRY_PICK_HEAD",
        "REVERT_HEAD",
        "REBASE_HEAD",
        "BISECT_HEAD",
        "AUTO_MERGE",
    )
)
_REVISION_CHARS = "^~"
# ":", "^", "~" and "*" are also forbidden by git; they are refused earlier as refspec syntax.
_FORBIDDEN_CHARS = frozenset("?[\\")


def full_ref(name: str) -> str:
    """``refs/heads/<name>`` for a branch name that passed ``branch_name``."""
    return HEADS + name


def branch_name(candidate: str) -> str:
    """The plain branch name ``candidate`` spells, or BEM-325 / BEM-324 saying why not."""
    if not isinstance(candidate, str) or not candidate:
        raise BeamError("BEM-324", "the branch name is empty; name a branch such as 'docs/fix'")
    _refuse_refspec_syntax(candidate, candidate)
    name = candidate.removeprefix(HEADS)
    if name != candidate:
        # What follows refs/heads/ must itself be a plain name: refs/heads/+x, refs/heads/HEAD,
        # and not another full ref (refs/heads/refs/heads/main reads as main but is not).
        nested = name.casefold().startswith("refs/")
        _refuse_refspec_syntax(
            name, candidate, "it names a ref inside refs/heads/" if nested else None
        )
    _check_ref_format(name, candidate)
    return name


def _refuse_refspec_syntax(name: str, shown: str, reason: str | None = None) -> None:
    reason = reason or _refspec_reason(name)
    if reason is not None:
        raise BeamError(
            "BEM-325",
            f"{_quote(shown)} was refused: {reason}. Give a plain branch name such as 'docs/fix'; "
            "Riverbeam builds the refspec itself and never forces, deletes or pushes tags.",
        )


def _refspec_reason(name: str) -> str | None:
    checks = (
        (name.startswith("+"), "a leading '+' asks for a forced update"),
        (name.startswith("-"), "a leading '-' reads as a command-line option"),
        (":" in name, "':' makes it a src:dst refspec"),
        ("*" in name, "'*' makes it a refspec pattern"),
        ("@{" in name, "'@{' is reflog syntax"),
        (any(ch in name for ch in _REVISION_CHARS), "'^' and '~' are revision syntax"),
        (name == "@", "'@' is another name for HEAD"),
        (name.casefold() in _SPECIAL, f"{name!r} is a symbolic ref, not a branch"),
        (_is_foreign_ref(name), "only branches under refs/heads/ can be named"),
    )
    return next((reason for refused, reason in checks if refused), None)


def _is_foreign_ref(name: str) -> bool:
    # refs/tags/..., refs/remotes/..., and case variants such as Refs/Heads/x, which a
    # case-insensitive remote would store under refs/heads/ without our policy seeing it.
    return name.casefold().startswith("refs/") and not name.startswith(HEADS)


def _check_ref_format(name: str, shown: str) -> None:
    problem = _format_problem(name)
    if problem is not None:
        raise BeamError(
            "BEM-324",
            f"{_quote(shown)} is not a valid branch name: {problem}. Use printable ASCII letters, "
            "digits and '-', '_', '.', '/' (for example 'docs/fix-install-page').",
        )


def _format_problem(name: str) -> str | None:
    if not name:
        return "nothing follows refs/heads/"
    # Length first, so a megabyte of text costs one comparison; for the ASCII names that
    # can pass, characters and bytes are the same count.
    if len(name) > MAX_BRANCH_BYTES:
        return f"it is {len(name)} characters long; the limit is {MAX_BRANCH_BYTES}"
    for index, ch in enumerate(name):
        if not "!" <= ch <= "~":
            return f"character {index} is {_describe_char(ch)}; only printable ASCII is allowed"
        if ch in _FORBIDDEN_CHARS:
            return f"character {index} is {ch!r}, which git forbids in ref names"
    return _shape_problem(name)


def _shape_problem(name: str) -> str | None:
    checks = (
        (".." in name, "it contains '..'"),
        ("//" in name, "it contains '//'"),
        (name.startswith("/"), "it starts with '/'"),
        (name.endswith("/"), "it ends with '/'"),
        (name.endswith("."), "it ends with '.'"),
    )
    reason = next((reason for refused, reason in checks if refused), None)
    if reason is not None:
        return reason
    for component in name.split("/"):
        if component.startswith("."):
            return f"the component {component!r} starts with '.'"
        # Case-folded: a remote on a case-insensitive filesystem treats x.LOCK as a lock file.
        if component.casefold().endswith(".lock"):
            return f"the component {component!r} ends with '.lock'"
    return None


def _quote(text: str) -> str:
    # Names come from a model; keep an oversized one from flooding the error message.
    return repr(text) if len(text) <= 80 else repr(text[:77]) + "..."


def _describe_char(ch: str) -> str:
    if ch == " ":
        return "a space"
    label = unicodedata.name(ch, "a control character")
    return f"U+{ord(ch):04X} ({label})"


class ProtectedRefs:
    """The refs Riverbeam never pushes or checks out, matched case-insensitively.

    Invalid patterns are a configuration error (BEM-900): a typo must not silently protect
    nothing.
    """

    def __init__(self, patterns: Iterable[str]) -> None:
        compiled = [_compile(pattern) for pattern in patterns]
        self._patterns = tuple(full for full, _ in compiled)
        self._matchers = tuple(matcher for _, matcher in compiled)

    @property
    def patterns(self) -> tuple[str, ...]:
        """The patterns as case-folded full refs, in the order given."""
        return self._patterns

    def __repr__(self) -> str:
        return f"ProtectedRefs({list(self._patterns)!r})"

    def matching_pattern(self, ref: str) -> str | None:
        """The first pattern protecting ``ref`` (a branch name or a full ref), if any."""
        folded = _normalize_ref(ref)
        for pattern, matcher in zip(self._patterns, self._matchers, strict=True):
            if matcher.fullmatch(folded):
                return pattern
        return None

    def is_protected(self, ref: str) -> bool:
        return self.matching_pattern(ref) is not None

    def check_branch(self, candidate: str) -> str:
        """The branch name ``candidate`` spells, once it is valid and not protected."""
        name = branch_name(candidate)
        pattern = self.matching_pattern(full_ref(name))
        if pattern is not None:
            raise BeamError(
                "BEM-328",
                f"{_quote(candidate)} is protected (it matches {pattern!r}, compared without "
                "regard to case). Work on a branch of your own and let a person merge it.",
            )
        return name


def _normalize_ref(ref: str) -> str:
    folded = ref.casefold()
    return folded if folded.startswith("refs/") else HEADS + folded


def _compile(pattern: str) -> tuple[str, re.Pattern[str]]:
    text = pattern.strip() if isinstance(pattern, str) else ""
    if not text or not all("!" <= ch <= "~" for ch in text):
        raise BeamError(
            "BEM-900",
            f"protected ref pattern {pattern!r} must be non-empty printable ASCII "
            "(a name such as 'main' or a glob such as 'release/*')",
        )
    full = _normalize_ref(text)
    regex = ".*".join(re.escape(piece) for piece in full.split("*"))
    return full, re.compile(regex, re.ASCII)
