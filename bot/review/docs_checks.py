"""The docs checks a repository declares, run on a change in the job's container and read
against the change's base (docs/checks.md).

One ``DocsChecks.run`` is: the tools' uid exports the change's tree and the base's
(``sandbox.inside.checks.export``: the whole tree for a site build, else the changed files
and the top-level configuration), the checks' uid runs every in-container check on each
(``sandbox.inside.checks.runner``), and the host checks the links of the changed pages in
both trees (``bot.review.links``, on the objects read as untrusted data). The base's runs
are kept for the job: a second ``run`` on the same change set reads none of them again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import pygit2
from docker.utils import parse_bytes

from bot.config import RepositoryChecks, SandboxLimits, Site
from bot.core.errors import BeamError
from bot.review.check_report import CheckFinding, CheckRun, ChecksReport, compare_run
from bot.review.check_report import link_findings as links_as_findings
from bot.review.links import check_links, is_markdown
from sandbox.host.container.hardening import OUTBOX_MOUNT, WORKSPACE_MOUNT
from sandbox.host.workspace.outbox import untrusted_odb
from sandbox.inside.checks import EXPORT_MODULE, RUNNER_MODULE
from sandbox.inside.checks.check_catalog import HOST_CHECKS, SITE_CHECKS

__all__ = ["DocsChecks", "ProgramRunner"]

WORKTREE = "worktree"
_GRACE_SECONDS = 10.0


class ProgramRunner(Protocol):
    """Runs a program of the image in the job's container (``ContainerSandbox``)."""

    def run_program(
        self, module: str, request: Mapping[str, Any], *, checks: bool, timeout: float
    ) -> dict[str, Any]: ...


class DocsChecks:
    """The checks of one job: its container, its repository's checks, its base commit and
    the host path of its objects (for the link check)."""

    def __init__(
        self,
        sandbox: ProgramRunner,
        checks: RepositoryChecks,
        limits: SandboxLimits,
        *,
        base_sha: str,
        objects: Path,
        site: Site | None = None,
    ) -> None:
        self._sandbox = sandbox
        self._checks = checks
        self._limits = limits
        self._base_sha = base_sha
        self._objects = objects
        self._site = site
        # The base's findings, kept for the job like the base itself: a key is the base's
        # exported tree and the changed files the checks looked at.
        self._base_runs: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}
        self._base_links: dict[tuple[str, tuple[str, ...]], tuple[list[CheckFinding], float]] = {}

    @property
    def checks(self) -> RepositoryChecks:
        return self._checks

    def checked(self, commit: str) -> ChecksReport:
        """The report on ``commit`` as the worker records it: checks that could not run at
        all are one ``error`` run named ``checks``, never a green report."""
        try:
            return self.run(commit)
        except BeamError as error:
            failed = CheckRun(check="checks", status="error", seconds=0.0, detail=str(error))
            return ChecksReport(commit=commit, base=self._base_sha, runs=[failed])

    def run(self, head: str = WORKTREE) -> ChecksReport:
        """Check ``head`` (a commit sha, or the working tree as a commit would record it)."""
        started = time.monotonic()
        inside = [name for name in self._checks.run if name not in HOST_CHECKS]
        exported = self._export(head, full=any(name in SITE_CHECKS for name in inside))
        changed = [str(path) for path in exported["changed"]]
        head_runs = self._runner(exported["head"]["dir"], changed, inside)
        base = exported.get("base")
        key = (str(base["dir"]) if base else "", tuple(changed))
        if key not in self._base_runs:
            self._base_runs[key] = self._runner(base["dir"], changed, inside) if base else []
        base_runs = {str(run["check"]): run for run in self._base_runs[key]}
        cap = self._checks.max_findings
        runs = []
        for name in self._checks.run:
            if name == "links":
                runs.append(self._links(exported, changed))
                continue
            run = next(item for item in head_runs if item["check"] == name)
            before = base_runs.get(name)
            runs.append(
                compare_run(
                    name,
                    _findings(run),
                    _findings(before) if before else [],
                    seconds=float(run["seconds"]),
                    base_seconds=float(before["seconds"]) if before else None,
                    error=str(run["detail"]) if run["status"] == "error" else "",
                    cap=cap,
                )
            )
        return ChecksReport(
            commit=None if head == WORKTREE else head,
            base=self._base_sha,
            runs=runs,
            seconds=round(time.monotonic() - started, 3),
        )

    def _export(self, head: str, *, full: bool) -> dict[str, Any]:
        request = {
            "root": WORKSPACE_MOUNT,
            "private": [OUTBOX_MOUNT],
            "head": head,
            "base": self._base_sha,
            "full": full,
            "max_bytes": parse_bytes(self._limits.checks_trees_size) // 2,
            "max_read_bytes": self._limits.max_read_bytes,
        }
        timeout = self._checks.timeout_seconds + _GRACE_SECONDS
        return self._sandbox.run_program(EXPORT_MODULE, request, checks=False, timeout=timeout)

    def _runner(self, tree: str, changed: list[str], names: list[str]) -> list[dict[str, Any]]:
        if not names:
            return []
        checks = self._checks
        options = {
            "mkdocs_config": checks.mkdocs_config,
            "sphinx_source": checks.sphinx_source,
            "mdbook_root": checks.mdbook_root,
        }
        request = {
            "tree": tree,
            "files": changed,
            "checks": [{"name": name, **options} for name in names],
            "limits": {
                "timeout": checks.timeout_seconds,
                "cpu": checks.cpu_seconds,
                "memory": parse_bytes(checks.memory),
                "processes": checks.processes,
                "output": checks.output_bytes,
                "findings": checks.max_findings,
            },
        }
        timeout = checks.timeout_seconds * len(names) + _GRACE_SECONDS
        reply = self._sandbox.run_program(RUNNER_MODULE, request, checks=True, timeout=timeout)
        runs = reply.get("runs")
        if not isinstance(runs, list) or [run.get("check") for run in runs] != names:
            raise BeamError("BEM-412", "the checks' runner answered for other checks")
        return runs

    def _links(self, exported: Mapping[str, Any], changed: list[str]) -> CheckRun:
        pages = [path for path in changed if is_markdown(path)]
        view = pygit2.Repository()
        view.set_odb(untrusted_odb(self._objects))

        def findings(tree_sha: str, *, on_base: bool) -> tuple[list[CheckFinding], float]:
            started = time.monotonic()
            tree = _tree(view, tree_sha)
            checked = [page for page in pages if page in tree] if on_base else pages
            found = links_as_findings(check_links(tree, checked, self._site))
            return found, round(time.monotonic() - started, 3)

        head, seconds = findings(exported["head"]["tree"], on_base=False)
        base = exported.get("base")
        before: list[CheckFinding] = []
        base_seconds: float | None = None
        if base:
            key = (str(base["tree"]), tuple(pages))
            if key not in self._base_links:
                self._base_links[key] = findings(base["tree"], on_base=True)
            before, base_seconds = self._base_links[key]
        return compare_run(
            "links",
            head,
            before,
            seconds=seconds,
            base_seconds=base_seconds,
            cap=self._checks.max_findings,
        )


def _tree(view: pygit2.Repository, sha: str) -> pygit2.Tree:
    try:
        return view[sha].peel(pygit2.Tree)
    except (KeyError, ValueError, pygit2.GitError):
        raise BeamError("BEM-412", f"the exported tree {sha} is not in the job's objects") from None


def _findings(run: Mapping[str, Any]) -> list[CheckFinding]:
    return [CheckFinding.model_validate(item) for item in run.get("findings") or ()]
