"""Every benchmark, one after another: ``python -m bench [--quick] [--only NAME ...]``.

Each runs in its own process (``python -m bench.<name>``) with the arguments below, and its
report is printed as it ends, followed by how long it took. ``--quick`` uses smaller runs:
the same code paths and the same baselines, figures that are noisier; a smoke test of the
benchmarks, not a measurement. ``bench/README.md`` lists what each one measures and its
latest figures.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence

# name → (full arguments, --quick arguments)
BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    "tools_bench": ([], ["--runs", "3"]),
    "container_bench": (
        [],
        ["--runs", "200", "--exec-runs", "5", "--ready-runs", "5", "--stop-runs", "2"],
    ),
    "engine_cycle_bench": ([], ["--runs", "5", "--warmup", "1"]),
    "workspace_bench": ([], ["--runs", "2"]),
    "jobs_bench": ([], ["--jobs", "20", "--latency-jobs", "3"]),
    "load_bench": ([], ["--jobs", "40", "--baseline-jobs", "20"]),
    "worker_cpu_bench": ([], ["--jobs", "5"]),
    "metrics_bench": ([], ["--approvals", "100", "--runs", "5", "--baseline-runs", "1"]),
    "loop_bench": ([], ["--runs", "2", "--rounds", "20"]),
    "cancel_check_bench": ([], ["--checks", "200", "--runs", "3"]),
    "preview_bench": ([], ["--runs", "2"]),
    "mcp_bench": ([], ["--calls", "20", "--runs", "2", "--starts", "2"]),
    "segment_walk": ([], []),
    "webhook_bench": ([], ["--runs", "30", "--warmup", "5", "--job-runs", "5"]),
    "checks_bench": ([], ["--runs", "2"]),
    "real_repos": ([], ["--jobs", "1"]),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), metavar="NAME")
    options = parser.parse_args(argv)
    failed = []
    for name in options.only or BENCHMARKS:
        full, quick = BENCHMARKS[name]
        command = [sys.executable, "-m", f"bench.{name}", *(quick if options.quick else full)]
        print(f"=== {' '.join(command[1:])}", flush=True)
        started = time.monotonic()
        code = subprocess.run(command, check=False).returncode
        print(f"=== {name}: exit {code} after {time.monotonic() - started:.0f} s\n", flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
