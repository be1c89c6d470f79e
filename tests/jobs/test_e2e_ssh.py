"""An author job end to end over SSH: real worker processes, containers, Redis and a real
``sshd`` serving the upstream through ``git-shell``. Only the model is scripted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.store.models import JobKind, JobState
from harness.gitkit import traversable_dir
from harness.playbooks import AUTHOR_REQUEST
from harness.ssh_server import ssh_server
from harness.stack import job_stack
from tests.cli.kit import cli

pytestmark = pytest.mark.slow

SERVED = "upstream.git"


@pytest.fixture
def scratch() -> Iterator[Path]:
    with traversable_dir("riverbeam-e2e-ssh-") as path:
        yield path


def test_an_author_job_over_ssh_needs_the_trusted_key_then_lands(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    known_hosts = scratch / "docs_known_hosts"
    with ssh_server() as server:
        repository = {
            "upstream": server.url(SERVED),
            "credentials.ssh_key": str(server.client_key),
            "known_hosts": str(known_hosts),
        }
        with job_stack(repositories={"docs": repository}) as stack:
            server.serve(stack.upstream, SERVED)
            stack.start_worker("a")
            [fingerprint] = server.fingerprints()

            # Never trusted: the worker refuses the server before fetching anything.
            first = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
            failed = stack.wait_for(first.id, JobState.FAILED)
            assert failed.error is not None and failed.error.code == "BEM-344"
            assert fingerprint in failed.error.message

            # The operator pins the key they verified; the next job parks, then lands.
            monkeypatch.setenv("RIVERBEAM_CONFIG", str(stack.config))
            trusted = cli("repos", "trust", "docs", "--fingerprint", fingerprint)
            assert trusted.code == 0, trusted.err
            assert server.host_public_keys()[0] in known_hosts.read_text()
            job = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
            stack.wait_for(job.id, JobState.AWAITING_APPROVAL)
            approval = stack.store.approvals.get(job.id)
            assert approval is not None and approval.commit_sha
            branch = f"riverbeam/{job.id}"
            assert server.tip(SERVED, branch) is None

            stack.decide(job.id, approve=True)
            stack.wait_for(job.id, JobState.SUCCEEDED)

            assert server.tip(SERVED, branch) == approval.commit_sha
            assert server.tip(SERVED, "main") == stack.upstream_ref("main")

            # The server's key changes while a push waits for approval: the approved push is
            # refused on the relay, and nothing reaches the upstream.
            second = stack.submit(JobKind.AUTHOR, "author-fix-install", request=AUTHOR_REQUEST)
            stack.wait_for(second.id, JobState.AWAITING_APPROVAL)
            server.regenerate_host_keys()
            stack.decide(second.id, approve=True)
            ended = stack.wait_for(second.id, JobState.SUCCEEDED, JobState.FAILED)

            [push] = stack.tool_calls(second.id, "git_push")
            assert not push.ok and push.error is not None and push.error.code == "BEM-354"
            assert "BEM-345" in push.error.message
            assert server.fingerprints()[0] in push.error.message
            assert server.tip(SERVED, f"riverbeam/{second.id}") is None
            assert ended.result is not None
            assert getattr(ended.result.outcome, "pushed_sha", None) is None
