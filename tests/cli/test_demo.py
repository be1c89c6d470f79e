"""``riverbeam demo``: the main job for a newcomer, end to end in a real process, and the
scripted demo model's fixes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from bot.demo import MISSPELLINGS, PAGE, PAGES, SCRIPTED_LABEL, fix_links, fix_typos
from bot.store.models import JobKind
from harness.gitkit import traversable_dir
from harness.stack import job_stack
from harness.stub_model import STUB_MODEL, StubModel, completion, tool_call
from harness.workers import free_port
from sandbox.host.container.hardening import ROLE_LABEL, ROLE_SANDBOX, container_job
from sandbox.host.engine import connect
from tests.cli.kit import Background, assert_all_gone, cli, environment, started_pids


@pytest.fixture
def open_dir() -> Iterator[Path]:
    with traversable_dir("riverbeam-demo-test-") as path:
        yield path


def _blob(repo: pygit2.Repository, commit: pygit2.Commit, path: str) -> str:
    entry = commit.tree[path]
    return repo[entry.id].data.decode()  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_demo_lands_the_fix_upstream_and_leaves_nothing_running(
    tmp_path: Path, open_dir: Path
) -> None:
    demo_dir, port = open_dir / "demo", free_port()
    argv = ["demo", "--yes", "--dir", str(demo_dir), "--redis-url", f"redis://127.0.0.1:{port}/0"]
    with Background(argv, environment(tmp_path / "state")) as demo:
        assert demo.finish(timeout=300) == 0, demo.output
    out = demo.output
    job_id = re.search(r"job ([0-9a-f]{12}) queued", out).group(1)  # type: ignore[union-attr]
    branch = f"riverbeam/{job_id}"
    for text in (
        SCRIPTED_LABEL,
        f"started  redis at 127.0.0.1:{port}",
        "▸ read_file path=docs/install.md → 20 lines",
        "⏸ git_push waits for a person's approval",
        f"target ref     {branch}",
        "-Skiff needs Python 3.10 or newer. We recomend installing it in a virtual",
        "+Skiff needs Python 3.10 or newer. We recommend installing it in a virtual",
        "+Read [configuring your site](configuration.md) to set a title and a theme, or go",
        " docs/install.md | 10 +++++-----",
        "yes (--yes)",
        "pushed upstream",
        "● job succeeded",
        "untouched",
    ):
        assert text in out, f"{text!r} missing from:\n{out}"

    # Upstream: the branch holds one commit on top of main, and main is the seed commit.
    repo = pygit2.Repository(str(demo_dir / "upstream.git"))
    main = repo.revparse_single("refs/heads/main")
    fixed = repo.revparse_single(f"refs/heads/{branch}")
    assert isinstance(main, pygit2.Commit) and isinstance(fixed, pygit2.Commit)
    assert main.parents == [] and _blob(repo, main, PAGE) == PAGES[PAGE]
    assert f"main: {str(main.id)[:12]} before, {str(main.id)[:12]} after" in out
    assert [parent.id for parent in fixed.parents] == [main.id]
    page = _blob(repo, fixed, PAGE)
    assert page == PAGES[PAGE].replace("recomend", "recommend").replace(
        "enviroment", "environment"
    ).replace("teh ", "the ").replace("succesfully", "successfully").replace(
        "(configure.md)", "(configuration.md)"
    )
    assert fixed.message.startswith("Fix typos and broken links on the install page")
    assert f"{branch}: {str(fixed.id)[:12]}" in out

    # Nothing left: no container of the job, no process the demo started.
    # By its label, or by its name for a spare the job claimed.
    found = connect().api.containers(all=True, filters={"label": f"{ROLE_LABEL}={ROLE_SANDBOX}"})
    assert [c for c in found if container_job(c["Labels"] or {}, c["Names"]) == job_id] == []
    assert_all_gone(started_pids(out))
    assert "stopped  redis" in out and "stopped  worker" in out and "stopped  beat" in out


@pytest.mark.slow
def test_with_a_model_key_the_demo_uses_the_live_model(
    tmp_path: Path, open_dir: Path, stub_model: StubModel
) -> None:
    """BEAM_API_KEY set: no scripted model in the config, the workers call the endpoint (a
    scripted OpenAI-compatible server on loopback here) through OpenAiCompatible."""
    fixed = fix_links(fix_typos(PAGES[PAGE])[0], PAGE, list(PAGES))[0]
    calls = [
        ("list_tree", {}),
        ("read_file", {"path": PAGE}),
        ("write_file", {"path": PAGE, "body": fixed}),
        ("git_add", {"path": PAGE}),
        ("git_commit", {"message": "Fix the install page"}),
        ("git_push", {}),
    ]
    made = [tool_call(name, json.dumps(args), f"call_{n}") for n, (name, args) in enumerate(calls)]
    # One model turn per call, but git_add and git_commit in one turn, as models do.
    turns = [made[0:1], made[1:2], made[2:3], made[3:5], made[5:6]]
    stub_model.enqueue(*(completion(None, tool_calls=calls) for calls in turns))
    stub_model.enqueue(completion("Fixed the install page and pushed it."))
    env = environment(tmp_path / "state") | {
        "BEAM_API_KEY": "demo-key",
        "BEAM_API_BASE_URL": stub_model.base_url,
        "BEAM_MODEL": STUB_MODEL,
    }
    demo_dir = open_dir / "demo"
    argv = [
        "demo",
        "--yes",
        "--dir",
        str(demo_dir),
        "--redis-url",
        f"redis://127.0.0.1:{free_port()}/0",
    ]
    with Background(argv, env) as demo:
        assert demo.finish(timeout=300) == 0, demo.output
    assert f"live model {STUB_MODEL} at {stub_model.base_url}" in demo.output
    assert SCRIPTED_LABEL not in demo.output
    assert "factory" not in (demo_dir / "riverbeam.toml").read_text()
    assert "Fixed the install page and pushed it." in demo.output
    assert f"model {STUB_MODEL}" in demo.output and "● job succeeded" in demo.output
    assert len(stub_model.requests) == 6
    assert all(r.headers["authorization"] == "Bearer demo-key" for r in stub_model.requests)
    job_id = re.search(r"job ([0-9a-f]{12}) queued", demo.output).group(1)  # type: ignore[union-attr]
    repo = pygit2.Repository(str(demo_dir / "upstream.git"))
    pushed = repo.revparse_single(f"refs/heads/riverbeam/{job_id}")
    assert isinstance(pushed, pygit2.Commit) and _blob(repo, pushed, PAGE) == fixed


@pytest.mark.slow
def test_the_demo_will_not_share_its_redis_with_another_configurations_worker(
    open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The demo points RIVERBEAM_CONFIG at its own config; put it back after the test.
    monkeypatch.delenv("RIVERBEAM_CONFIG", raising=False)
    with job_stack() as stack:
        worker = stack.start_worker("a")
        ran = cli("demo", "--yes", "--dir", str(open_dir / "demo"), "--redis-url", stack.redis_url)
        assert ran.code == 2
        assert "BEM-900: worker a@riverbeam-test serves this Redis" in ran.err
        assert worker.process.poll() is None
        assert stack.store.listing.list(kind=JobKind.AUTHOR)[0] == []


def test_the_demo_wants_an_empty_directory_the_sandbox_can_reach(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    ran = cli("demo", "--dir", str(tmp_path))
    assert ran.code == 2 and "BEM-900" in ran.err and "is not empty" in ran.err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]

    tmp_path.chmod(0o700)
    ran = cli("demo", "--dir", str(tmp_path / "demo"))
    assert ran.code == 2 and f"cannot pass through {tmp_path} (no o+x)" in ran.err
    assert not (tmp_path / "demo").exists()


def test_typos_are_fixed_word_by_word_keeping_capitals() -> None:
    text, fixes = fix_typos("Teh page. We recomend it; instal, install and teheran stay.")
    assert text == "The page. We recommend it; install, install and teheran stay."
    assert [str(fix) for fix in fixes] == ["Teh → The", "recomend → recommend", "instal → install"]
    assert all(wrong.islower() and wrong != right for wrong, right in MISSPELLINGS.items())


def test_only_relative_links_to_missing_pages_are_repointed() -> None:
    files = ["README.md", "docs/index.md", "docs/install.md", "docs/configuration.md"]
    page = (
        "[a](configure.md#keys) [b](index.md) [c](https://example.com/configure.md) "
        "[d](../README.md) [e](zzz.md) [f](/configure.md)"
    )
    text, fixes = fix_links(page, "docs/install.md", files)
    assert text == page.replace("(configure.md#keys)", "(configuration.md#keys)")
    assert [str(fix) for fix in fixes] == ["configure.md → configuration.md"]
