"""Benchmarks; results are printed, never asserted (see each module)."""

from collections.abc import Sequence


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The sample at ``fraction`` of the way up (0.95: the 95th percentile), nearest rank."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]
