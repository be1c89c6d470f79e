"""``riverbeam demo``: the main job, end to end, for a newcomer.

A sample docs repository with a bare upstream, registered in a generated config; the local
stack (``bot.cli.localstack``, reusing what runs); an author job asked to fix the install
page; its frames; the parked push and its diff; a decision (a prompt, or ``--yes``); then
the commit on the upstream branch ``riverbeam/<job-id>`` and ``main`` untouched. Everything
is real (Redis, Celery, Docker, pygit2, the relay) except, without ``BEAM_API_KEY``, the
model, which is the scripted one of ``bot.demo`` and says so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.prompt import Confirm, Prompt
from rich.rule import Rule
from rich.text import Text

if TYPE_CHECKING:
    from bot.cli.common import Services
    from bot.config import Settings
    from bot.demo import UpstreamCommit
    from bot.store.models import JobRecord

# Apart from the default 6379, so the demo never mixes with a Riverbeam already set up.
DEMO_REDIS_URL = "redis://127.0.0.1:6390/0"


def add_demo_command(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="run the main job end to end on a sample repository",
        description="Create a sample docs repository with a bare upstream, bring up the "
        "local stack, ask an author job to fix the install page, show the parked push and "
        "its diff, approve it, and show the commit upstream with main untouched. Without "
        "BEAM_API_KEY a scripted demo model stands in for the language model.",
    )
    demo.add_argument("--yes", action="store_true", help="approve the push without asking")
    demo.add_argument(
        "--keep", action="store_true", help="keep the demo directory (repository, config)"
    )
    demo.add_argument(
        "--dir", type=Path, help="where to create the demo (an empty or new directory)"
    )
    demo.add_argument(
        "--redis-url",
        default=DEMO_REDIS_URL,
        metavar="URL",
        help=f"the demo stack's Redis (default {DEMO_REDIS_URL}: apart from a real one)",
    )
    demo.add_argument("--as", dest="as_name", metavar="NAME", help="you (default: $USER)")
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from bot.cli.common import acting_as, console
    from bot.cli.localstack import LocalStack
    from bot.cli.paths import state_dir

    out = console()
    directory = _directory(args.dir)
    remove = args.dir is None and not args.keep
    try:
        settings = _prepare(out, directory, args.redis_url)
        _step(out, "2. The local stack", f"state in {state_dir()}")
        stack = LocalStack(settings, out, concurrency=1, strict=True)
        try:
            stack.start()
            return _run(out, settings, directory, acting_as(args.as_name), yes=args.yes)
        finally:
            _step(out, "7. Cleaning up")
            stack.stop()
            if stack.reused:
                out.print(f"  left running, as found: {', '.join(stack.reused)}")
    finally:
        if remove:
            from sandbox.host.workspace.overlay import detach_under

            # The jobs' views are mounted under it: detached first, then deleted whole.
            detach_under(directory)
            shutil.rmtree(directory, ignore_errors=True)
            out.print(f"  removed {directory}")
        else:
            config = directory / "riverbeam.toml"
            out.print(f"  kept {directory}; to look around (the jobs are in Redis's data):")
            out.print(f"    riverbeam --config {config} up    # then, in another terminal:")
            out.print(f"    riverbeam --config {config} jobs list")


def _directory(given: Path | None) -> Path:
    from bot.core.errors import BeamError

    if given is None:
        directory = Path(tempfile.mkdtemp(prefix="riverbeam-demo-"))
    else:
        directory = given.resolve()
        if directory.exists() and any(directory.iterdir()):
            raise BeamError("BEM-900", f"--dir {directory} is not empty; give a new directory")
        closed = [parent for parent in directory.parents if parent.exists() and _closed(parent)]
        if closed:
            raise BeamError(
                "BEM-900",
                f"--dir {directory}: the job workspaces go in it, and the sandbox uid cannot "
                f"pass through {closed[0]} (no o+x); choose a directory under /tmp, say",
            )
        directory.mkdir(parents=True, exist_ok=True)
    # The sandbox uid checks the job's tree out under it: it must pass through.
    directory.chmod(0o711)
    return directory


def _closed(directory: Path) -> bool:
    """Whether others (the sandbox uid) may not pass through ``directory``."""
    return not directory.stat().st_mode & stat.S_IXOTH


def _prepare(out: Console, directory: Path, redis_url: str) -> Settings:
    """The repository, the config (``RIVERBEAM_CONFIG`` for this process and what it
    starts) and the settings it makes."""
    from bot.clients.openai_compatible import OpenAiCompatible
    from bot.config import load_settings
    from bot.demo import PAGES, REPO_NAME, SCRIPTED_LABEL, config_text, create_upstream

    live = OpenAiCompatible.from_env()
    out.print(Rule("Riverbeam demo"))
    if live is None:
        model = Text.assemble(
            (SCRIPTED_LABEL, "bold yellow"), " (set BEAM_API_KEY to use a live model)"
        )
    else:
        model = Text(f"live model {live.model} at {live.base_url}")
    out.print(Text.assemble("  model      ", model))
    _step(out, "1. A sample docs repository")
    upstream = directory / "upstream.git"
    main = create_upstream(upstream)
    config = directory / "riverbeam.toml"
    config.write_text(
        config_text(
            redis_url=redis_url, upstream=upstream, workspaces=directory, scripted=live is None
        )
    )
    os.environ["RIVERBEAM_CONFIG"] = str(config)
    out.print(f"  upstream   {upstream} (bare), main at {main[:12]}")
    out.print(f"  pages      {', '.join(sorted(PAGES))}")
    out.print(f"  config     {config}, registering it as {REPO_NAME!r}")
    return load_settings()


def _run(out: Console, settings: Settings, directory: Path, me: str, *, yes: bool) -> int:
    from bot.cli.common import operator, services
    from bot.cli.follow_command import follow
    from bot.cli.render import FrameRenderer
    from bot.demo import REPO_NAME, REQUEST, branch_commit
    from bot.service.schemas import JobRequest
    from bot.store.models import JobKind

    upstream = directory / "upstream.git"
    main_before = branch_commit(upstream, "main")
    assert main_before is not None  # created by _prepare
    renderer = FrameRenderer(out)
    with services(settings) as running:
        _step(out, "3. An author job", f"request: {REQUEST!r}")
        who = operator(me)
        request = JobRequest(kind=JobKind.AUTHOR, repo=REPO_NAME, request=REQUEST)
        job = running.service.submit(who, request)
        out.print(f"  job {job.id} queued, requested by {me}\n")
        try:
            followed = follow(running.service, who, job.id, renderer)
            while followed.parked:
                approve = _decide(out, running, job.id, me, yes=yes)
                _step(out, "5. The job resumes", "approved" if approve else "refused")
                followed = follow(running.service, who, job.id, renderer, after=followed.last_event)
        except BaseException:
            # Interrupted: the demo's job must not wait in a queue or for a decision after
            # the demo is gone.
            running.service.cancel(who, job.id)
            raise
        record = followed.record
    _step(out, "6. Upstream")
    return _verdict(out, record, upstream, main_before)


def _decide(out: Console, running: Services, job_id: str, me: str, *, yes: bool) -> bool:
    from bot.cli.common import operator, os_account
    from bot.cli.render import show_approval

    approval = running.store.approvals.get(job_id)
    assert approval is not None  # the job is parked on it
    _step(out, "4. The parked push", "nothing is pushed until a person approves")
    show_approval(out, approval, commands=False)  # the demo asks below
    question = f"\nApprove the push of {(approval.commit_sha or '')[:12]} to {approval.target_ref}?"
    if yes:
        out.print(f"{question} yes (--yes)")
        approve, comment = True, "approved by riverbeam demo --yes"
    else:
        try:
            approve = Confirm.ask(question, console=out, default=True)
            comment = "" if approve else Prompt.ask("Why? (the model reads this)", console=out)
        except EOFError:  # no one at the keyboard: nothing is approved by default
            approve, comment = False, "nobody answered the prompt"
    running.service.decide(
        operator(me),
        job_id,
        approve=approve,
        comment=comment,
        binding=approval.binding(),  # exactly what was shown above
        os_user=os_account(),
    )
    return approve


def _verdict(out: Console, record: JobRecord, upstream: Path, main_before: UpstreamCommit) -> int:
    from bot.cli.render import state_text
    from bot.demo import branch_commit
    from bot.jobs.branch_change import read_objects_change
    from bot.store.models import AuthorOutcome, JobState

    branch = record.branch or f"riverbeam/{record.id}"
    landed = branch_commit(upstream, branch)
    main_after = branch_commit(upstream, "main")
    out.print(Text.assemble(f"  job {record.id} ", state_text(record.state)))
    if record.error is not None:
        out.print(Text(f"  {record.error.code}: {record.error.message}", style="red"))
    outcome = record.result.outcome if record.result else None
    pushed = outcome.pushed_sha if isinstance(outcome, AuthorOutcome) else None
    if landed is None:
        out.print(f"  {branch}: not upstream (nothing was pushed)")
    else:
        out.print(f"  {branch}: {landed.sha[:12]} {landed.subject!r} by {landed.author}")
        change = read_objects_change(
            upstream / "objects", main_before.sha, landed.sha, max_chars=20_000
        )
        out.print(Text(change.stat.rstrip("\n")))
    untouched = main_after is not None and main_after.sha == main_before.sha
    mark = ("untouched", "green") if untouched else ("CHANGED", "bold red")
    out.print(
        Text.assemble(
            f"  main: {main_before.sha[:12]} before, "
            f"{main_after.sha[:12] if main_after else 'gone'} after: ",
            mark,
        )
    )
    ok = (
        record.state is JobState.SUCCEEDED
        and landed is not None
        and landed.sha == pushed
        and untouched
    )
    if ok:
        out.print(Text("\nThe push landed where it was approved to, and nowhere else.", "green"))
    return 0 if ok or (record.state is JobState.REFUSED and untouched) else 1


def _step(out: Console, title: str, detail: str = "") -> None:
    out.print()
    out.print(Text.assemble((title, "bold"), ("  " + detail if detail else "", "dim")))
