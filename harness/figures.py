"""Counts a test records for the run's summary, summed over every process of the run.

A test appends to its item's ``user_properties``, which pytest copies into each report and
pytest-xdist carries from its workers to the process that prints the summary; a module-level
counter would stay in the worker that ran the test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import pytest

_PREFIX = "riverbeam.count:"


def count(node: pytest.Item, name: str, amount: int = 1) -> None:
    """Add ``amount`` to the run's total ``name``."""
    node.user_properties.append((_PREFIX + name, amount))


def totals(stats: Mapping[str, Iterable[object]]) -> Counter[str]:
    """Every total of the run, from the reports the terminal reporter kept."""
    found: Counter[str] = Counter()
    for reports in stats.values():
        for report in reports:
            # The teardown report holds every property the test appended, its fixtures' included.
            if not isinstance(report, pytest.TestReport) or report.when != "teardown":
                continue
            for key, value in report.user_properties:
                if key.startswith(_PREFIX) and isinstance(value, int):
                    found[key.removeprefix(_PREFIX)] += value
    return found
