"""The vendored snapshots of real repositories under ``tests/data`` (each with its licence and
a README of ours saying where it comes from)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def snapshot_files(name: str) -> dict[str, str]:
    """The files of the snapshot ``tests/data/<name>``, but its README (ours)."""
    root = DATA / name
    return {
        path.relative_to(root).as_posix(): path.read_text()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.relative_to(root).as_posix() != "README.md"
    }
