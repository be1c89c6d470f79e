"""Benchmarks; results are printed, never asserted (see each module)."""
