"""The ids the job service gives jobs.

One id names the job's record, its workspace directory, its branch (``riverbeam/<id>``) and
its container, so it keeps to what all of them accept: a letter or digit, then letters,
digits, ``_`` and ``-``, at most 100 characters.
"""

from __future__ import annotations

import re

__all__ = ["JOB_ID_PATTERN", "is_job_id"]

JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$"
_JOB_ID = re.compile(JOB_ID_PATTERN)


def is_job_id(name: object) -> bool:
    """Whether ``name`` is a job id (anything else, a non-string included, is not)."""
    return isinstance(name, str) and _JOB_ID.fullmatch(name) is not None
