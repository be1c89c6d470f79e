"""The nine tools through the container's tool server, on a real working tree."""

from __future__ import annotations

import shutil
from pathlib import Path

import docker
import pygit2
import pytest

from bot.config import SandboxLimits
from bot.core.errors import BeamError
from bot.core.input import AgentInput
from harness.workers import own
from sandbox.host.container.lifecycle import ContainerSandbox
from sandbox.host.image.build import ImageInfo
from sandbox.inside.bound_tools import sandbox_tools
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.sandbox_tools import call_tool
from sandbox.inside.tool_schemas import TOOL_NAMES
from sandbox.inside.worktree import WorkingTree
from tests.container.conftest import PROTECTED
from tests.container.kit import PAGES, Workspace, chown_tree, deadline, make_workspace, outbox_refs


def test_ready_line_lists_the_nine_tools(sandbox: ContainerSandbox) -> None:
    assert sandbox.tool_names == TOOL_NAMES


def test_proxied_specs_are_the_in_process_specs(
    sandbox: ContainerSandbox, workspace: Workspace
) -> None:
    in_process = sandbox_tools(WorkingTree(SandboxRoot(workspace.path)))
    assert [tool.spec() for tool in sandbox.tools()] == [tool.spec() for tool in in_process]


def test_read_only_tools_match_the_in_process_dispatcher(
    sandbox: ContainerSandbox, workspace: Workspace, tmp_path: Path
) -> None:
    # A root-owned copy: libgit2 refuses, as git does, a repository another user owns.
    copy = tmp_path / "in-process"
    shutil.copytree(workspace.path, copy, symlinks=True)
    tree = WorkingTree(SandboxRoot(copy), ("main", "release/*"))
    calls = [
        ("list_tree", {}),
        ("list_tree", {"path": "docs"}),
        ("read_file", {"path": "docs/guide/install.md"}),
        ("git_status", {}),
        ("git_diff", {}),
        ("git_log", {"limit": 5}),
    ]
    for name, args in calls:
        assert sandbox.call(name, args) == call_tool(tree, name, args), name


def test_edit_stage_commit_and_push_to_the_outbox(
    sandbox: ContainerSandbox, workspace: Workspace
) -> None:
    written = sandbox.call("write_file", {"path": "docs/new/page.md", "body": "# New\n"})
    assert written == {"path": "docs/new/page.md", "bytes": 6, "created": True}
    assert (workspace.path / "docs/new/page.md").read_text() == "# New\n"

    status = sandbox.call("git_status", {})
    assert isinstance(status, dict) and status["clean"] is False
    diff = sandbox.call("git_diff", {})
    assert isinstance(diff, dict) and "+# New" in str(diff["patch"])

    sandbox.call("git_add", {"path": "."})
    commit = sandbox.call("git_commit", {"message": "Add a page\n\nFor the guide."})
    assert isinstance(commit, dict)
    sha = str(commit["commit"])
    log = sandbox.call("git_log", {"limit": 1})
    assert isinstance(log, dict) and log["commits"][0]["sha"] == sha  # type: ignore[index]

    pushed = sandbox.call("git_push", {})
    assert isinstance(pushed, dict) and pushed["sha"] == sha and pushed["remote"] == "origin"
    assert outbox_refs(workspace.outbox) == {workspace.branch: sha}


def test_protected_ref_push_is_refused_in_the_container(
    sandbox: ContainerSandbox, workspace: Workspace
) -> None:
    with pytest.raises(BeamError) as refused:
        sandbox.call("git_push", {"ref": "main"})
    assert refused.value.code == "BEM-328"
    assert outbox_refs(workspace.outbox) == {}
    assert sandbox.call("read_file", {"path": "README.md"})  # the container lives on


def test_tool_refusals_come_back_as_their_codes(sandbox: ContainerSandbox) -> None:
    cases = {
        "BEM-301": ("read_file", {"path": "/etc/passwd"}),
        "BEM-302": ("read_file", {"path": "../outbox.git/config"}),
        "BEM-304": ("write_file", {"path": ".git/hooks/post-commit", "body": "x"}),
        "BEM-090": ("read_file", {"path": 7}),
        "BEM-089": ("no_such_tool", {}),
        "BEM-100": ("read_file", {"path": "missing.md"}),
    }
    for code, (name, args) in cases.items():
        with pytest.raises(BeamError) as refused:
            sandbox.call(name, args)
        assert refused.value.code == code, (name, args)


async def test_tools_invoke_through_the_async_tool_protocol(
    sandbox: ContainerSandbox, workspace: Workspace
) -> None:
    tools = {tool.spec().name: tool for tool in sandbox.tools()}
    request = AgentInput.of_text("edit the index")
    result = await tools["read_file"].invoke({"path": "docs/index.md"}, request)
    assert isinstance(result, dict) and result["content"] == PAGES["docs/index.md"]
    await tools["write_file"].invoke({"path": "docs/index.md", "body": "# Index 2\n"}, request)
    assert Path(workspace.path / "docs/index.md").read_text() == "# Index 2\n"


def test_stop_leaves_no_container(sandbox: ContainerSandbox, docker_client: object) -> None:
    from tests.container.conftest import container_exists

    container_id = sandbox.container_id
    assert container_id is not None
    sandbox.stop()
    assert not container_exists(docker_client, container_id)  # type: ignore[arg-type]
    with pytest.raises(BeamError) as stopped:
        sandbox.call("list_tree", {})
    assert stopped.value.code == "BEM-404"


def test_a_compare_point_reaches_the_server_and_git_diff_shows_the_committed_change(
    docker_client: docker.DockerClient, image: ImageInfo, limits: SandboxLimits, tmp_path: Path
) -> None:
    # A review's workspace: the branch is checked out clean, its change already committed.
    workspace = make_workspace(tmp_path / own("job-2"), job_id=own("job-2"), uid=0)
    repo = pygit2.Repository(str(workspace.path))
    start = str(repo.head.target)
    (workspace.path / "docs/index.md").write_text("# Index\n\nWelcome, reviewers.\n")
    repo.index.add("docs/index.md")
    repo.index.write()
    author = pygit2.Signature("Docs Team", "docs@example.com", 1_700_000_100, 0)
    tree = repo.index.write_tree()
    change = str(repo.create_commit("HEAD", author, author, "Greet reviewers", tree, [start]))
    for path in (workspace.path, workspace.outbox):
        chown_tree(path, 10001)

    with ContainerSandbox(docker_client, image.ref) as sandbox:
        sandbox.start(
            own("job-2"),
            workspace.path,
            PROTECTED,
            limits,
            deadline=deadline(),
            compare_to=start,
            compare_label="main",
        )
        diff = sandbox.call("git_diff", {})
        log = sandbox.call("git_log", {})
        status = sandbox.call("git_status", {})

    point = {"sha": start, "label": "main"}
    assert isinstance(diff, dict) and isinstance(log, dict) and isinstance(status, dict)
    assert (diff["base"], diff["against"]) == (start, point)
    assert diff["files"] == [
        {
            "path": "docs/index.md",
            "old_path": None,
            "status": "modified",
            "binary": False,
            "additions": 1,
            "deletions": 1,
        }
    ]
    assert "+Welcome, reviewers.\n" in str(diff["patch"])
    assert log["since"] == point
    assert [commit["sha"] for commit in log["commits"]] == [change]  # type: ignore[index,union-attr]
    assert status["clean"] is True  # nothing uncommitted: only the compare point shows it


def test_a_compare_point_the_workspace_lacks_stops_the_start(
    docker_client: docker.DockerClient, image: ImageInfo, workspace: Workspace
) -> None:
    sandbox = ContainerSandbox(docker_client, image.ref)
    with pytest.raises(BeamError) as failed:
        sandbox.start(
            own("job-1"),
            workspace.path,
            PROTECTED,
            SandboxLimits(),
            deadline=deadline(),
            compare_to="0" * 40,
            compare_label="main",
        )
    assert failed.value.code == "BEM-402"
    assert "is not a commit in this repository" in failed.value.message
    assert sandbox.container_id is None
