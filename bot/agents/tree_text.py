"""Reading tree files as text, the same way for every host tool.

Which files are text is ``sandbox.inside.sandbox_tools.decode_text``, the rule of the sandbox's
``read_file``, so that a model sees one notion of "a text file"; lines end at ``\\n`` only,
as in editors and git.
"""

from __future__ import annotations

from bot.core.errors import BeamError


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
