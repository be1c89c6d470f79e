"""What one sandbox container costs the machine: ``python -m bench.engine_cycle_bench``.

A cycle is one hardened sandbox container (the flags of ``create_arguments``, the current
image, the configured runtime) created, started, run to its exit and removed; its process is
a bare ``python3 -I -c pass``, so the figures are the engine's and the runtime's, not the
tool server's (``bench.container_bench`` has that). Two settings, cycles taken in turn so
that the machine's load falls on both alike:

- **network sandbox** (as before 2026-12-02): ``network_mode="none"`` only, so the engine
  still builds a network sandbox for the container and the runtime runs the engine's
  prestart hook (``libnetwork-setkey``, a re-executed ``dockerd``) on every start;
- **network disabled** (now): ``network_disabled=True`` as well; the runtime gives the
  container a network namespace of its own with a loopback only, and no hook runs.

Printed per setting, median per cycle: wall time, and CPU-seconds of the whole machine (from
``/proc/stat``: every process, the kernel included: the engine, the shim, the runtime, the
hooks, the container's process, and this one). Run it on a quiet machine: what other
processes do in the meantime counts too. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from docker import APIClient

from bot.config import Settings
from sandbox.host.container.hardening import SandboxJob, create_arguments
from sandbox.host.container.runtime import resolve_runtime
from sandbox.host.engine import connect
from sandbox.host.image.build import build_image

TICKS = os.sysconf("SC_CLK_TCK")
ENTRYPOINT = ["python3", "-I", "-c", "pass"]
SETTINGS = ("network sandbox (before)", "network disabled (now)")


def machine_cpu_seconds() -> float:
    """Busy CPU-seconds of the whole machine since boot: every state of ``/proc/stat``'s
    ``cpu`` line but idle and iowait."""
    values = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / TICKS


@dataclass
class Cycles:
    wall: list[float] = field(default_factory=list)
    machine: list[float] = field(default_factory=list)


def _cycle(api: APIClient, arguments: dict[str, Any], into: Cycles) -> None:
    started, cpu = time.perf_counter(), machine_cpu_seconds()
    container_id = api.create_container(**arguments)["Id"]
    try:
        api.start(container_id)
        api.wait(container_id, timeout=60)
    finally:
        api.remove_container(container_id, force=True)
    into.wall.append(time.perf_counter() - started)
    into.machine.append(machine_cpu_seconds() - cpu)


def run(runs: int, warmup: int) -> str:
    settings = Settings()
    client = connect()
    api = client.api
    image = build_image(settings, client=client).ref
    job = SandboxJob(
        job_id="bench-engine-cycle",
        workspace=Path("/nonexistent"),
        deadline=datetime.now(UTC) + timedelta(hours=1),
        limits=settings.sandbox,
        protected_refs=(),
    )
    arguments = create_arguments(api, image, job, entrypoint=ENTRYPOINT)
    arguments["host_config"]["Mounts"] = []  # nothing to mount: the process only exits
    arguments["stdin_open"] = False
    before = {**arguments, "network_disabled": False}
    figures = {setting: Cycles() for setting in SETTINGS}
    load = os.getloadavg()[0]
    for index in range(warmup + runs):
        for setting, create in zip(SETTINGS, (before, arguments), strict=True):
            _cycle(api, create, figures[setting] if index >= warmup else Cycles())
    runtime = resolve_runtime(api, settings.sandbox.runtime)
    lines = [
        f"one hardened container created, run to its exit and removed ({image}, {runtime}); "
        f"median of {runs} cycles per setting, in turn; load average {load:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end on {os.cpu_count()} CPUs",
        f"{'':40}{'wall':>12}{'machine CPU':>14}",
    ]
    for setting, cycles in figures.items():
        wall, machine = statistics.median(cycles.wall), statistics.median(cycles.machine)
        lines.append(f"{setting:40}{wall * 1000:>9.1f} ms{machine * 1000:>11.1f} ms")
    old, new = (statistics.median(figures[setting].machine) for setting in SETTINGS)
    lines.append(f"machine CPU per cycle, {SETTINGS[0]} / {SETTINGS[1]}: {old / new:.2f}×")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine_cycle_bench")
    parser.add_argument("--runs", type=int, default=30, help="cycles per setting")
    parser.add_argument("--warmup", type=int, default=2, help="cycles per setting not counted")
    args = parser.parse_args(argv)
    print(run(args.runs, args.warmup))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
