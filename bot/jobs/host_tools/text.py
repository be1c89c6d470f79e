"""Reading tree files as text, the same way for every host tool.

The rules match the sandbox's ``read_file`` so that a model sees one notion of "a text file"
and "a line": binary means a NUL byte in the first 8,000 bytes (git's own test) or bytes that
are not UTF-8, and lines end at ``\\n`` only, as in editors and git.
"""

from __future__ import annotations

from bot.errors import BeamError

# git's own test for binary content: a NUL byte in the first 8000 bytes.
BINARY_PROBE = 8000


def decode_text(data: bytes) -> str | None:
    """``data`` as text, or None when it is binary."""
    if b"\0" in data[:BINARY_PROBE]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` without their ``\\n``; a final newline ends the last line."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def missing(tool: str, error: FileNotFoundError | NotADirectoryError) -> BeamError:
    """The failed result for a path that does not exist: the model can look and retry."""
    return BeamError(
        "BEM-100",
        f"{tool}: {error.filename!r} does not exist in the working tree; "
        "search for the page, or check the path",
    )
