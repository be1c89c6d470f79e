"""Documented commands, run against a real stack: Redis, a Celery worker, the sandbox
image, a seeded bare upstream registered as ``docs``, and a ``riverbeam api`` process. The
model is the scripted demo model (``bot.demo:demo_model``), what a user without a key gets.

A block runs as a ``bash -e`` script in a fresh directory, with ``riverbeam`` on the
``PATH`` and ``RIVERBEAM_CONFIG`` naming the stack's configuration; ``curl`` fails on an
HTTP error status (``--fail-with-body``), so every request must succeed. In a ``console``
block, the lines starting with ``$ `` are the commands and the others their output.

The placeholders of the pages are substituted, always the same way (``SUBSTITUTIONS``):

* the API's address (``$RB``, ``http://127.0.0.1:8000``, ``https://riverbeam.example.com``)
  is the live API; ``$TOKEN``, ``$RIVERBEAM_TOKEN`` and ``rb_...`` an admin's token;
* the documented job id ``3f9c2a71b0de`` is a job of the stack in the state the request
  needs: a job that succeeded for ``/events``, otherwise a fresh job parked on its push
  (each occurrence its own, so an approve and a refuse decide two jobs); the documented
  approval id, commit and diff digest after it are that job's approval's;
* ``<job-id>`` is the newest job (the one the block submitted);
* the demo's configuration ``/tmp/riverbeam-demo-…/riverbeam.toml`` is the stack's, and
  its repository ``skiff-docs`` is ``docs``;
* ``docker/demo`` is ``riverbeam demo --yes`` on a free Redis port (the script's other
  part, provisioning the machine, does not belong in a test);
* a server a block starts (``riverbeam api``, a Celery worker) runs in the background on
  a free port until it answers, and is stopped after the block.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bot.service.access import Principal
from bot.store.models import JobKind, JobSpec, JobState
from harness.api_server import ApiServer, api_server
from harness.gitkit import traversable_dir
from harness.stack import PROJECT_ROOT, REPO, Stack, job_stack, wait_until
from harness.workers import free_port

DOC_JOB_ID = "3f9c2a71b0de"
# Who runs the commands: the user of the pages' samples.
REQUESTER = "root"
READY_SECONDS = 60.0
BLOCK_SECONDS = 180.0

# Defined for every block: the id of the newest job, what ``<job-id>`` stands for.
_PRELUDE = """newest_job() {
  riverbeam jobs list --limit 1 --json \\
    | python -c 'import json, sys; print(json.load(sys.stdin)["id"])'
}
"""

_CURL = f"""#!/bin/sh
exec {shutil.which("curl") or "curl-is-not-installed"} --fail-with-body "$@"
"""


@dataclass
class Ran:
    code: int
    out: str
    script: str


@dataclass
class DocsStack:
    stack: Stack
    api: ApiServer
    bin: Path
    scratch: Path
    _succeeded: str | None = None
    _pool: list[str] = field(default_factory=list)
    _last_parked: str | None = None
    _demo: dict[str, Ran] = field(default_factory=dict)

    @property
    def config(self) -> Path:
        return self.stack.base / "riverbeam-api.toml"

    def environment(self) -> dict[str, str]:
        token = self.api.tokens["admin"]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RIVERBEAM_")}
        return {
            **clean,
            "PATH": f"{self.bin}:{Path(sys.executable).parent}:{clean.get('PATH', '')}",
            "PYTHONPATH": str(PROJECT_ROOT),
            "RIVERBEAM_CONFIG": str(self.config),
            "RIVERBEAM_STATE_DIR": str(self.scratch / "state"),
            "RIVERBEAM_SANDBOX__IMAGE": self.stack.settings.sandbox.image,
            "RB": self.api.url,
            "TOKEN": token,
            "RIVERBEAM_API_URL": self.api.url,
            "RIVERBEAM_TOKEN": token,
            "USER": REQUESTER,
        }

    # -- jobs the placeholders stand for ---------------------------------------------------

    def submit(self, count: int) -> None:
        """Queue ``count`` author jobs ahead, for the blocks that need a parked job: the
        worker runs them while earlier blocks run."""
        self._pool.extend(self._submit() for _ in range(count))

    def parked_job(self) -> str:
        job_id = self._pool.pop(0) if self._pool else self._submit()
        self._last_parked = self.stack.wait_for(job_id, JobState.AWAITING_APPROVAL, timeout=90).id
        return self._last_parked

    def binding_of_last_parked(self, part: str) -> str:
        """``part`` (``id``, ``commit_sha`` or ``diff_digest``) of the approval of the job
        the text named last: what a reviewer copies from the approval they looked at."""
        assert self._last_parked is not None, "an approval named before its job"
        approval = self.stack.store.approvals.get(self._last_parked)
        assert approval is not None
        return str(getattr(approval, part))

    def _submit(self) -> str:
        spec = JobSpec(
            kind=JobKind.AUTHOR,
            repo=REPO,
            request="Fix the broken links and typos on the install page",
            requested_by=REQUESTER,
        )
        job = self.stack.service.submit(Principal.operator(REQUESTER), spec)
        return job.id

    def succeeded_job(self) -> str:
        if self._succeeded is None:
            job_id = self.parked_job()
            self.stack.decide(job_id, approve=True, by="admin")
            self._succeeded = self.stack.wait_for(job_id, JobState.SUCCEEDED, timeout=90).id
        return self._succeeded

    # -- running a block ----------------------------------------------------------------

    def substitute(self, text: str) -> str:
        for pattern, replace in SUBSTITUTIONS:
            text = re.sub(pattern, lambda found, by=replace: by(self, found), text)
        return text

    def run(self, script: str, *, cwd: Path, own_config: bool = False) -> Ran:
        """``script`` (substituted) in bash -e, its servers in the background;
        ``own_config``: the script brings its configuration (no ``RIVERBEAM_CONFIG``)."""
        script = self.substitute(script)
        environment = self.environment()
        if own_config:
            del environment["RIVERBEAM_CONFIG"]
        with ExitStack() as servers:
            lines = []
            for line in script.splitlines():
                server = next((s for s in SERVERS if re.match(s.pattern, line)), None)
                if server is None:
                    lines.append(line)
                else:
                    servers.enter_context(self._serve(server, line, cwd))
            body = "\n".join(lines)
            done = subprocess.run(
                ["bash", "-e", "-c", _PRELUDE + body],
                cwd=cwd,
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=BLOCK_SECONDS,
                check=False,
            )
        return Ran(done.returncode, done.stdout, body)

    def demo(self, command: str) -> Ran:
        """The demo's run (once per documented command)."""
        if command not in self._demo:
            self._demo[command] = self.run(command, cwd=self.scratch, own_config=True)
        return self._demo[command]

    @contextmanager
    def _serve(self, server: Server, line: str, cwd: Path) -> Iterator[None]:
        log = cwd / "server.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                ["bash", "-c", f"exec {line}"],
                cwd=cwd,
                env=self.environment(),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_until(
                lambda: server.ready(self, line),
                READY_SECONDS,
                lambda: f"`{line}` did not get ready:\n{log.read_text(errors='replace')}",
                alive=process,
            )
            yield
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@dataclass(frozen=True)
class Server:
    pattern: str
    ready: Callable[[DocsStack, str], bool]


def _answers_http(_docs: DocsStack, line: str) -> bool:
    port = re.search(r"--port (\d+)", line)
    assert port is not None, f"`{line}`: a served command needs --port"
    try:
        return httpx.get(f"http://127.0.0.1:{port.group(1)}/healthz", timeout=2).status_code > 0
    except httpx.TransportError:
        time.sleep(0.1)
        return False


def _worker_ready(docs: DocsStack, _line: str) -> bool:
    """One more worker answers a ping than the stack started."""
    replies = docs.stack.app.control.ping(timeout=0.5)
    return len(replies) > len(docs.stack.workers)


SERVERS = [
    Server(r"^riverbeam api\b", _answers_http),
    Server(r"^python -m celery -A bot\.jobs\.celery_app worker\b", _worker_ready),
]


# The approval the pages show with ``DOC_JOB_ID``; ``…`` stands for the rest of a value.
DOC_BINDING = {
    "id": "9f1c2b3a4d5e6f708192a3b4c5d6e7f8",
    "commit_sha": "d71fbd12(?:9f8c1a17572ffedbc3295d2717c4b9d4|…)",
    "diff_digest": "b053e4fc(?:dbf3d70750a88617a912aec90c1de4d3109e38017bfc919133bbfa1e|…)",
}
# One pattern, so each binding value follows the job id before it in the text.
_JOB_OR_BINDING = "|".join(
    [rf"(?P<job>{DOC_JOB_ID})(?P<events>/events)?"]
    + [rf"(?P<{part}>{value})" for part, value in DOC_BINDING.items()]
)


def _job_for(docs: DocsStack, found: re.Match[str]) -> str:
    part = found.lastgroup
    if part in DOC_BINDING:
        return docs.binding_of_last_parked(part)
    if found.group("events"):
        return docs.succeeded_job() + "/events"
    return docs.parked_job()


SUBSTITUTIONS: list[tuple[str, Callable[[DocsStack, re.Match[str]], str]]] = [
    (r"https://riverbeam\.example\.com|http://127\.0\.0\.1:8000", lambda d, _: d.api.url),
    (r"--port 8000\b", lambda d, _: f"--port {free_port()}"),
    (r"\brb_\.\.\.", lambda d, _: d.api.tokens["admin"]),
    (_JOB_OR_BINDING, _job_for),
    (r"<job-id>", lambda d, _: "$(newest_job)"),
    (r"/tmp/riverbeam-demo-…/riverbeam\.toml", lambda d, _: str(d.config)),
    (r"\bskiff-docs\b", lambda d, _: REPO),
    (
        r"(?m)^docker/demo\b",
        lambda d, _: f"riverbeam demo --yes --redis-url redis://127.0.0.1:{free_port()}/0",
    ),
]


@contextmanager
def docs_stack() -> Iterator[DocsStack]:
    """The stack the documented commands run against; see the module docstring."""
    image = os.environ.get("RIVERBEAM_SANDBOX__IMAGE", "riverbeam-sandbox")
    with ExitStack() as stack_cleanup:
        stack = stack_cleanup.enter_context(
            job_stack(
                model_factory="bot.demo:demo_model",
                repositories={REPO: {"allow_self_approval": True}},
                more_config={"sandbox": {"image": image}},
            )
        )
        api = stack_cleanup.enter_context(api_server(stack, {"admin": ("admin", None)}))
        stack.start_worker("docs", concurrency=2)
        scratch = stack_cleanup.enter_context(traversable_dir("riverbeam-docs-"))
        bin_dir = scratch / "bin"
        bin_dir.mkdir()
        (bin_dir / "curl").write_text(_CURL)
        (bin_dir / "curl").chmod(0o755)
        yield DocsStack(stack, api, bin_dir, scratch)
