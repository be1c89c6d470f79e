"""The release before the restructuring (git tag ``pre-restructure``), run beside the tree
under test by ``harness.previous_release``: its sources unpacked from git into a temporary
directory, run by this virtualenv's interpreter with that directory first on
``PYTHONPATH``, its sandbox containers on an image built from its own sources under its
own name.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.previous_release import PreviousRelease, riverbeam
from harness.previous_release import unpack as unpack_commit

TAG = "dad8858d78873468e677c95170b267f2ccdb91be"
"""The release before the restructuring (tagged ``pre-restructure``), by commit: a clone
of main has the commit whether or not it fetched the tag."""
MODEL_FACTORY = "tests.support.playbooks:for_job"
"""The scripted model of the old tree's tests: the same playbooks as ``harness.playbooks``,
under the old path."""


def unpack(base: Path, image: str) -> PreviousRelease:
    """The old release's sources under ``base/previous``, its containers to run ``image``."""
    return unpack_commit(TAG, base / "previous", image, model_factory=MODEL_FACTORY)


def decision_flags(
    tree: Path, config: Path, job_id: str, *, env: dict[str, str] | None = None
) -> list[str]:
    """The flags naming the job's pending approval, as ``approvals show --json`` of the
    release in ``tree`` gives them to a reviewer."""
    shown = json.loads(riverbeam(tree, config, "approvals", "show", job_id, "--json", env=env))
    return [
        *("--approval", shown["id"]),
        *("--commit", shown["commit_sha"]),
        *("--digest", shown["diff_digest"]),
    ]
