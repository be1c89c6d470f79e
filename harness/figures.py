"""Counts and measurements a test records for the run's summary, over every process of the
run.

A test appends to its item's ``user_properties``, which pytest copies into each report and
pytest-xdist carries from its workers to the process that prints the summary; a module-level
counter would stay in the worker that ran the test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

import pytest

_PREFIX = "riverbeam.count:"


def count(node: pytest.Item, name: str, amount: int = 1) -> None:
    """Add ``amount`` to the run's total ``name``."""
    node.user_properties.append((_PREFIX + name, amount))


def totals(stats: Mapping[str, Iterable[object]]) -> Counter[str]:
    """Every total of the run, from the reports the terminal reporter kept."""
    found: Counter[str] = Counter()
    for key, value in _properties(stats):
        if key.startswith(_PREFIX) and isinstance(value, int):
            found[key.removeprefix(_PREFIX)] += value
    return found


def _properties(stats: Mapping[str, Iterable[object]]) -> Iterator[tuple[str, object]]:
    for reports in stats.values():
        for report in reports:
            # The teardown report holds every property the test appended, its fixtures' included.
            if isinstance(report, pytest.TestReport) and report.when == "teardown":
                yield from report.user_properties


_MEASURE = "riverbeam.figure:"


def measure(node: pytest.Item, name: str, value: float) -> None:
    """Record one measurement of ``name`` (seconds, tokens per second ...): the summary
    prints the median and the number of measurements."""
    node.user_properties.append((_MEASURE + name, value))


def measurements(stats: Mapping[str, Iterable[object]]) -> dict[str, list[float]]:
    """Every measurement of the run, by name, from the reports the terminal reporter kept."""
    found: dict[str, list[float]] = {}
    for key, value in _properties(stats):
        if key.startswith(_MEASURE) and isinstance(value, int | float):
            found.setdefault(key.removeprefix(_MEASURE), []).append(float(value))
    return found
