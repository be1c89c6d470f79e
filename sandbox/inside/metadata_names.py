"""Recognise the repository metadata directory, ``.git``, in every disguise.

A name is metadata when some filesystem or tool would treat it as ``.git``. Linux compares
names byte for byte, but the working tree is pushed and later checked out by people on NTFS
and HFS+, and the jail must not let a model plant or reach ``.git`` under a spelling that
another system folds back to it. Folding, in order:

1. split on ``/`` and ``\\`` (Windows treats a backslash in a name as a separator);
2. drop characters that are invisible to a reader and ignored by HFS+: Unicode categories
   Cf and Cc (zero-width joiners, bidi marks, BOM, soft hyphen, controls) and the other
   default-ignorable code points (variation selectors, Hangul fillers, ...);
3. NFKC-normalise and casefold (fullwidth ``．ｇｉｔ`` and ``.GIT`` become ``.git``);
4. cut an NTFS alternate data stream (``.git::$INDEX_ALLOCATION``, ``.git:x``);
5. drop trailing dots and spaces, which Win32 strips from names.

What remains is metadata when it is ``.git`` or an NTFS 8.3 short name of it: ``git~N``,
more generally any ``git…~N`` (the short name of a long name starting with ``git``), and
``gi7eba~N``, the hashed short form NTFS falls back to.

Only the ``.git`` name itself is metadata. ``.gitignore``, ``.gitattributes`` and
``.gitmodules`` are ordinary files a docs repository may hold.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["is_repository_metadata"]

# Default-ignorable code points outside categories Cf/Cc: combining grapheme joiner, Khmer
# inherent vowels, Mongolian variation selectors, Hangul fillers, variation selectors.
_IGNORABLE_EXTRA = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u3164\uffa0"
    + "".join(chr(c) for c in range(0xFE00, 0xFE10))
    + "".join(chr(c) for c in range(0xE0100, 0xE01F0))
)
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc"})
_SEPARATORS = re.compile(r"[/\\]")
_SHORT_NAME = re.compile(r"git[^~]*~[0-9]+|gi7eba~[0-9]+")
# A printable ASCII name can only fold to metadata if it starts like ".git" or "git~1".
_METADATA_FIRST_CHARS = frozenset(".gG")


def is_repository_metadata(component: str) -> bool:
    """True when ``component`` names ``.git`` under any folding listed in the module doc."""
    if "/" in component or "\\" in component:
        return any(_is_metadata_name(piece) for piece in _SEPARATORS.split(component))
    return _is_metadata_name(component)


def _is_metadata_name(name: str) -> bool:
    # Fast path: the directory walker calls this for every entry of large trees, and nearly
    # all names are printable ASCII, where folding is just lower-casing.
    if name.isascii() and name.isprintable():
        if name[:1] not in _METADATA_FIRST_CHARS:
            return False
        return _is_folded_metadata(name.lower())
    return _is_folded_metadata(_fold(name))


def _fold(name: str) -> str:
    # NFKC can expose new ignorables and casefold can denormalise, hence the second round.
    folded = unicodedata.normalize("NFKC", _strip_invisible(name)).casefold()
    return _strip_invisible(unicodedata.normalize("NFKC", folded))


def _strip_invisible(name: str) -> str:
    return "".join(
        ch
        for ch in name
        if ch not in _IGNORABLE_EXTRA and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES
    )


def _is_folded_metadata(folded: str) -> bool:
    base = folded.split(":", 1)[0].rstrip(". ")
    return base == ".git" or _SHORT_NAME.fullmatch(base) is not None
