"""The job benchmarks' baseline run from older code: the workers of the ``previous`` setting
(``--baseline previous``, ``--baseline-commit``, by default the code before issue 18) run
that commit's sources, in the same benchmark process and the same stack as the current
code's run: the same Redis, upstream, service (this tree's, in this process) and playbook.

The commit's sources are unpacked from git into a temporary directory and run by this
virtualenv (``harness.previous_release``); its sandbox image is built by its own
``riverbeam sandbox build`` under its own name (``<image>-<commit>``, beside the current
one), its tag a content hash, so a rerun reuses it. Its workers get a copy of the stack's
config without the keys its schema does not know (``accepted_config``) and run on the
engine's default runtime, as that code did. The model is that tree's own
``bench._jobs_model:for_job`` (``PYTHONPATH`` puts the old tree first, so ``bench`` and
``harness`` resolve there): the same ``author-fix-install`` playbook of its
``harness.playbooks``, timed and logged the same way. At ``eb61274`` both files are as here
but for a playbook the benchmarks do not run.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._jobs import MODEL_FACTORY
from bench._jobs_cpu import PREVIOUS
from harness.gitkit import git
from harness.previous_release import PreviousRelease, unpack
from harness.stack import PROJECT_ROOT, Stack, WorkerProcess

CONFIG_NAME = "riverbeam-previous.toml"


@dataclass
class SettingWorkers:
    """Starts a setting's workers: the older commit's code for ``previous``, else this
    tree's."""

    commit: str | None
    scratch: Path | None
    release: PreviousRelease | None = None
    dropped: list[str] = field(default_factory=list)
    """The keys of the stack's config the older code does not know, left out of its own."""

    def start(self, stack: Stack, setting: str, name: str, **options: Any) -> WorkerProcess:
        """``stack.start_worker(name, **options)``, of the code ``setting`` runs."""
        if setting != PREVIOUS:
            return stack.start_worker(name, **options)
        release = self._release(stack)
        config = stack.base / CONFIG_NAME
        if not config.exists():
            self.dropped = release.accepted_config(stack.config, config)
            release.build_image(config)
        env = {**release.worker_env(), "RIVERBEAM_CONFIG": str(config)}
        return stack.start_worker(name, tree=release.tree, env=env, **options)

    def _release(self, stack: Stack) -> PreviousRelease:
        if self.release is None:
            if self.commit is None or self.scratch is None:
                raise AssertionError("the previous setting runs only with --baseline previous")
            image = f"{stack.settings.sandbox.image}-{self.commit[:12].lower()}"
            self.release = unpack(
                self.commit, self.scratch / "previous", image, model_factory=MODEL_FACTORY
            )
        return self.release

    def describe(self, setting: str) -> str:
        """What code ``setting`` ran: the older commit and the keys its config left out."""
        if setting != PREVIOUS or self.release is None:
            return "this tree"
        left_out = ", ".join(self.dropped) or "none"
        return f"commit {self.commit} (config keys it does not know, left out: {left_out})"


@contextmanager
def setting_workers(options: argparse.Namespace) -> Iterator[SettingWorkers]:
    """The workers' starter for a benchmark's settings; the older tree, when the baseline
    runs one, unpacked for the run and removed after it."""
    if options.baseline != PREVIOUS:
        yield SettingWorkers(None, None)
        return
    named = f"{options.baseline_commit}^{{commit}}"
    commit = git("-C", str(PROJECT_ROOT), "rev-parse", "--verify", named)
    with tempfile.TemporaryDirectory(prefix="riverbeam-bench-previous-") as scratch:
        yield SettingWorkers(commit, Path(scratch))
