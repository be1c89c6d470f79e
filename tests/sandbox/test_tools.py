"""The nine sandbox tools: specs, the sync dispatcher, the async wrappers, caps and errors."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from bot.core.errors import BeamError
from bot.core.input import AgentInput
from bot.core.tools import Tool, ToolSpec
from sandbox.inside.bound_tools import sandbox_tools
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.sandbox_tools import call_tool
from sandbox.inside.tool_schemas import TOOL_NAMES
from sandbox.inside.tool_specs import MAX_LIST_ENTRIES, MAX_READ_CHARS, TOOL_SPECS
from sandbox.inside.worktree import WorkingTree
from tests.sandbox.git_kit import GitEnv, build_git_env, refs_of

NINE = (
    "list_tree",
    "read_file",
    "write_file",
    "git_status",
    "git_diff",
    "git_log",
    "git_add",
    "git_commit",
    "git_push",
)


@pytest.fixture
def env(tmp_path: Path) -> GitEnv:
    return build_git_env(tmp_path)


def call(env: GitEnv, name: str, **args: Any) -> dict[str, Any]:
    result = call_tool(env.tree, name, args)
    json.dumps(result)  # every result is plain JSON
    return result


def refused(env: GitEnv, name: str, **args: Any) -> BeamError:
    with pytest.raises(BeamError) as caught:
        call_tool(env.tree, name, args)
    return caught.value


# -- the contract --------------------------------------------------------------------------


def test_sandbox_tools_are_the_nine_in_order(env: GitEnv) -> None:
    tools = sandbox_tools(env.tree)
    assert all(isinstance(tool, Tool) for tool in tools)
    assert tuple(tool.spec().name for tool in tools) == NINE == TOOL_NAMES
    assert [tool.spec().name for tool in tools if tool.spec().confirm_required] == ["git_push"]
    assert "SandboxTool('git_push', WorkingTree(" in repr(tools[-1])


@pytest.mark.parametrize(
    ("name", "required", "optional"),
    [
        ("list_tree", [], ["path", "offset"]),
        ("read_file", ["path"], ["start_line", "limit"]),
        ("write_file", ["path", "body"], []),
        ("git_status", [], []),
        ("git_diff", [], ["path"]),
        ("git_log", [], ["limit", "path"]),
        ("git_add", ["path"], []),
        ("git_commit", ["message"], []),
        ("git_push", [], ["ref"]),
    ],
)
def test_spec_arguments(name: str, required: list[str], optional: list[str]) -> None:
    spec = TOOL_SPECS[name]
    assert isinstance(spec, ToolSpec)
    assert spec.parameters["required"] == required
    assert sorted(spec.parameters["properties"]) == sorted(required + optional)
    assert spec.parameters["additionalProperties"] is False
    assert len(spec.description) > 150  # written for a model: what, when, limits, errors
    assert spec.openai_format()["function"]["name"] == name


def test_git_log_limit_defaults_to_twenty() -> None:
    assert TOOL_SPECS["git_log"].parameters["properties"]["limit"]["default"] == 20


def test_git_diff_and_git_log_tell_the_model_about_the_compare_point() -> None:
    diff, log = TOOL_SPECS["git_diff"].description, TOOL_SPECS["git_log"].description
    assert "compare point" in diff and "'against'" in diff and "HEAD" in diff
    assert "compare point" in log and "'since'" in log and "<point>..HEAD" in log


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("list_tree", {"path": 3}),
        ("read_file", {}),
        ("read_file", {"path": "a", "start_line": 0}),
        ("read_file", {"path": "a", "limit": 0}),
        ("write_file", {"path": "a"}),
        ("git_status", {"verbose": True}),
        ("git_log", {"limit": 0}),
        ("git_log", {"limit": 201}),
        ("git_add", {}),
        ("git_commit", {"message": ""}),
        ("git_commit", {"message": "  \n "}),
        ("git_push", {"ref": ["main"]}),
        ("git_push", {"force": True}),
    ],
)
def test_invalid_arguments_are_bem_090(env: GitEnv, name: str, args: dict[str, Any]) -> None:
    assert refused(env, name, **args).code == "BEM-090"


def test_arguments_that_are_not_an_object_are_bem_090(env: GitEnv) -> None:
    with pytest.raises(BeamError) as caught:
        call_tool(env.tree, "git_status", ["not", "an", "object"])  # type: ignore[arg-type]
    assert caught.value.code == "BEM-090"


# Every string argument of every tool, with valid values for the others: a hostile value in
# any one of them must end as a BeamError with the code below, never a raw exception.
_VALID = {"path": "docs/index.md", "body": "text\n", "message": "Edit", "ref": "feature"}
_HOSTILE_TEXT = {
    ("list_tree", "path"): {"\ud800": "BEM-300", "a\x00b": "BEM-300"},
    ("read_file", "path"): {"\ud800": "BEM-300", "a\x00b": "BEM-300"},
    ("write_file", "path"): {"\ud800": "BEM-300", "a\x00b": "BEM-300"},
    ("write_file", "body"): {"x\udcff": "BEM-332", "\ud83d alone": "BEM-332"},
    ("git_diff", "path"): {"\ud800": "BEM-300", "a\x00b": "BEM-300"},
    ("git_log", "path"): {"\ud800": "BEM-300", "a\x00b": "BEM-300"},
    ("git_add", "path"): {"\ud800": "BEM-300", "a\x00b": "BEM-300"},
    ("git_commit", "message"): {"Fix \udc80": "BEM-332", "Fix\x00\nSigned-off-by: x": "BEM-331"},
    ("git_push", "ref"): {"feat\ud800": "BEM-324", "feat\x00": "BEM-324"},
}


def test_the_hostile_text_table_covers_every_string_argument() -> None:
    strings = {
        (name, arg)
        for name, spec in TOOL_SPECS.items()
        for arg, schema in spec.parameters["properties"].items()
        if schema.get("type") == "string"
    }
    assert strings == set(_HOSTILE_TEXT)


@pytest.mark.parametrize(
    ("name", "arg", "value", "code"),
    [
        (name, arg, value, code)
        for (name, arg), cases in _HOSTILE_TEXT.items()
        for value, code in cases.items()
    ],
)
def test_nul_and_lone_surrogates_in_any_text_argument_are_bem_codes(
    env: GitEnv, name: str, arg: str, value: str, code: str
) -> None:
    required = TOOL_SPECS[name].parameters["required"]
    args = {key: _VALID[key] for key in required} | {arg: value}
    if name == "git_commit":
        call(env, "write_file", path="docs/index.md", body="staged\n")
        call(env, "git_add", path="docs/index.md")
    head = env.tree.head_sha()
    assert refused(env, name, **args).code == code
    assert env.tree.head_sha() == head  # nothing was committed, cut or not


# Every integer argument of every tool, written as a float: the tool answers as it does to
# the integer (the in-container check hands it an int), never with a raw exception.
_INTEGERS = sorted(
    (name, arg)
    for name, spec in TOOL_SPECS.items()
    for arg, schema in spec.parameters["properties"].items()
    if schema.get("type") == "integer"
)


@pytest.mark.parametrize(("name", "arg"), _INTEGERS)
def test_an_integer_argument_written_as_a_float_is_that_integer(
    env: GitEnv, name: str, arg: str
) -> None:
    required = TOOL_SPECS[name].parameters["required"]
    args = {key: _VALID[key] for key in required}
    assert call(env, name, **args, **{arg: 2.0}) == call(env, name, **args, **{arg: 2})


@pytest.mark.parametrize("bad", [2.5, True, float("nan"), float("inf"), "below its minimum"])
@pytest.mark.parametrize(("name", "arg"), _INTEGERS)
def test_an_integer_argument_that_is_no_integer_is_bem_090(
    env: GitEnv, name: str, arg: str, bad: object
) -> None:
    schema = TOOL_SPECS[name].parameters
    if bad == "below its minimum":
        bad = float(schema["properties"][arg]["minimum"] - 1)
    args = {key: _VALID[key] for key in schema["required"]} | {arg: bad}
    assert refused(env, name, **args).code == "BEM-090"


def test_an_unknown_tool_is_bem_089(env: GitEnv) -> None:
    error = refused(env, "git_reset")
    assert error.code == "BEM-089"
    assert "git_push" in error.message


async def test_async_tools_run_the_dispatcher(env: GitEnv) -> None:
    tools = {tool.spec().name: tool for tool in sandbox_tools(env.tree)}
    request = AgentInput.of_text("edit the docs")
    written = await tools["write_file"].invoke({"path": "a.md", "body": "a\n"}, request)
    assert written == {"path": "a.md", "bytes": 2, "created": True}
    status = await tools["git_status"].invoke({}, request)
    assert isinstance(status, dict)
    assert status["files"] == [{"path": "a.md", "staged": None, "unstaged": "untracked"}]
    with pytest.raises(BeamError) as caught:
        await tools["git_push"].invoke({"ref": "main"}, request)
    assert caught.value.code == "BEM-328"


async def test_request_metadata_cannot_move_the_tree(env: GitEnv, tmp_path: Path) -> None:
    (tool,) = [tool for tool in sandbox_tools(env.tree) if tool.spec().name == "list_tree"]
    request = AgentInput.of_text(
        "x", metadata={"sandbox_root": str(tmp_path), "protected_refs": []}
    )
    listed = await tool.invoke({}, request)
    assert isinstance(listed, dict)
    assert listed["files"] == ["README.md", "docs/index.md"]


# -- list_tree -----------------------------------------------------------------------------


def test_list_tree_is_sorted_and_skips_git(env: GitEnv) -> None:
    env.write("b/z.md", "z")
    env.write("a.md", "a")
    assert call(env, "list_tree") == {
        "path": "",
        "directories": [{"path": "b", "files": 1}, {"path": "docs", "files": 1}],
        "files": ["README.md", "a.md", "b/z.md", "docs/index.md"],
        "total_files": 4,
        "offset": 0,
        "next_offset": None,
        "truncated": False,
        "note": None,
    }
    assert call(env, "list_tree", path="docs")["files"] == ["docs/index.md"]


def test_list_tree_pages_its_files_and_gives_the_directories_first(env: GitEnv) -> None:
    for number in range(MAX_LIST_ENTRIES + 50):
        env.write(f"big/part-{number % 3}/{number:05d}.md", "")
    first = call(env, "list_tree")
    assert list(first)[:2] == ["path", "directories"]
    assert first["directories"] == [
        {"path": "big", "files": MAX_LIST_ENTRIES + 50},
        {"path": "docs", "files": 1},
    ]
    assert first["truncated"] is True and first["total_files"] == MAX_LIST_ENTRIES + 52
    # A page fits the loop's default result cap, directories and note included.
    assert len(json.dumps(first)) < 24_000
    assert f"offset={first['next_offset']}" in first["note"]
    seen, result = list(first["files"]), first
    while result["next_offset"] is not None:
        result = call(env, "list_tree", offset=result["next_offset"])
        assert result["offset"] == len(seen) and result["directories"] == first["directories"]
        seen += result["files"]
    assert result["truncated"] is False and result["note"] is None
    assert seen == sorted(seen) and len(set(seen)) == MAX_LIST_ENTRIES + 52
    assert call(env, "list_tree", offset=10**6)["files"] == []
    narrowed = call(env, "list_tree", path="big")
    assert sorted(d["path"] for d in narrowed["directories"]) == [
        "big/part-0",
        "big/part-1",
        "big/part-2",
    ]
    assert sum(d["files"] for d in narrowed["directories"]) == MAX_LIST_ENTRIES + 50


def test_a_capped_listing_through_a_symlinked_folder_ends_and_offers_its_directories(
    env: GitEnv,
) -> None:
    # tldr's pages.en -> pages: the files come back named where they are, which once kept
    # the directory summary from ever moving on (a hang, holding the tree's lock).
    for number in range(MAX_LIST_ENTRIES + 10):
        env.write(f"pages/part-{number % 2}/{number:05d}.md", "")
    (env.work / "pages.en").symlink_to("pages")
    outcome: dict[str, Any] = {}
    listing = threading.Thread(
        target=lambda: outcome.update(call(env, "list_tree", path="pages.en")), daemon=True
    )
    listing.start()
    listing.join(timeout=30)

    assert not listing.is_alive(), "list_tree through a symlinked folder did not return"
    assert outcome["truncated"] is True and outcome["total_files"] == MAX_LIST_ENTRIES + 10
    assert outcome["files"][0].startswith("pages/part-")
    assert sorted(d["path"] for d in outcome["directories"]) == ["pages/part-0", "pages/part-1"]


@pytest.mark.parametrize(
    ("path", "code"),
    [("README.md", "BEM-305"), ("missing", "BEM-100"), ("../", "BEM-302"), (".git", "BEM-304")],
)
def test_list_tree_errors(env: GitEnv, path: str, code: str) -> None:
    assert refused(env, "list_tree", path=path).code == code


# -- read_file and write_file --------------------------------------------------------------


def test_read_file_returns_text_with_line_numbers(env: GitEnv) -> None:
    result = call(env, "read_file", path="docs/index.md")
    assert result == {
        "path": "docs/index.md",
        "size": 18,
        "sha": str(env.repo.revparse_single("HEAD:docs/index.md").id),
        "binary": False,
        "content": "# Index\n\nWelcome.\n",
        "start_line": 1,
        "end_line": 3,
        "total_lines": 3,
        "truncated": False,
        "note": None,
    }


def test_read_file_pages_through_a_long_file(env: GitEnv) -> None:
    line = "x" * 99 + "\n"
    env.write("long.md", line * 1_500)
    first = call(env, "read_file", path="long.md")
    assert first["truncated"] is True
    assert first["end_line"] == MAX_READ_CHARS // len(line)
    assert f"start_line={first['end_line'] + 1}" in first["note"]
    rest = call(env, "read_file", path="long.md", start_line=first["end_line"] + 1)
    assert rest["truncated"] is False
    assert rest["end_line"] == rest["total_lines"] == 1_500
    assert first["content"] + rest["content"] == line * 1_500


def test_read_file_cuts_a_single_huge_line(env: GitEnv) -> None:
    env.write("one.md", "y" * (MAX_READ_CHARS + 10))
    result = call(env, "read_file", path="one.md")
    assert len(result["content"]) == MAX_READ_CHARS
    assert result["truncated"] is True
    assert "was cut" in result["note"]


def test_read_file_reads_a_window_of_lines_and_reports_the_total(env: GitEnv) -> None:
    env.write("many.md", "".join(f"line {number}\n" for number in range(1, 101)))

    window = call(env, "read_file", path="many.md", start_line=41, limit=3)
    tail = call(env, "read_file", path="many.md", start_line=99, limit=10)

    assert window["content"] == "line 41\nline 42\nline 43\n"
    assert (window["start_line"], window["end_line"], window["total_lines"]) == (41, 43, 100)
    assert window["truncated"] is True and window["note"].startswith("lines 41-43 of 100")
    assert (tail["content"], tail["end_line"], tail["truncated"]) == (
        "line 99\nline 100\n",
        100,
        False,
    )


def test_read_file_past_the_end_is_bem_090(env: GitEnv) -> None:
    error = refused(env, "read_file", path="docs/index.md", start_line=9)
    assert error.code == "BEM-090"
    assert "3 lines" in error.message


def test_read_file_counts_lines_at_newlines_only(env: GitEnv) -> None:
    env.write("odd.md", "a\x0cb\u2028c\nd")
    result = call(env, "read_file", path="odd.md")
    assert (result["total_lines"], result["content"]) == (2, "a\x0cb\u2028c\nd")
    assert call(env, "read_file", path="odd.md", start_line=2)["content"] == "d"


def test_read_file_of_an_empty_file(env: GitEnv) -> None:
    env.write("empty.md", "")
    result = call(env, "read_file", path="empty.md")
    assert (result["content"], result["total_lines"], result["end_line"]) == ("", 0, 0)


@pytest.mark.parametrize("data", [b"PNG\x00\x01\x02", b"caf\xe9 latin-1"])
def test_read_file_of_a_binary_file_reports_size_and_sha(env: GitEnv, data: bytes) -> None:
    env.write("logo.bin", data)
    result = call(env, "read_file", path="logo.bin")
    assert result["binary"] is True
    assert result["size"] == len(data)
    assert result["content"] is None
    assert set(result) == set(call(env, "read_file", path="README.md"))
    env.tree.add("logo.bin")
    assert result["sha"] == str(env.repo.index["logo.bin"].id)


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("missing.md", "BEM-100"),
        ("docs", "BEM-305"),
        ("/etc/passwd", "BEM-301"),
        ("../outside/secret.txt", "BEM-302"),
        (".git/config", "BEM-304"),
        ("", "BEM-300"),
    ],
)
def test_read_file_errors(env: GitEnv, path: str, code: str) -> None:
    assert refused(env, "read_file", path=path).code == code


def test_read_file_through_a_symlink_out_is_bem_303(env: GitEnv) -> None:
    (env.work / "escape.md").symlink_to(env.outside / "secret.txt")
    assert refused(env, "read_file", path="escape.md").code == "BEM-303"


def test_write_file_creates_parents_and_reports_creation(env: GitEnv) -> None:
    assert call(env, "write_file", path="new/deep/page.md", body="é\n") == {
        "path": "new/deep/page.md",
        "bytes": 3,
        "created": True,
    }
    assert call(env, "write_file", path="new/deep/page.md", body="x")["created"] is False
    assert (env.work / "new/deep/page.md").read_text() == "x"


@pytest.mark.parametrize(
    ("path", "code"),
    [(".git/hooks/pre-commit", "BEM-304"), ("../x.md", "BEM-302"), ("docs", "BEM-305")],
)
def test_write_file_errors(env: GitEnv, path: str, code: str) -> None:
    before = refs_of(env.work / ".git")
    assert refused(env, "write_file", path=path, body="x").code == code
    assert refs_of(env.work / ".git") == before
    assert not (env.work / ".git/hooks/pre-commit").exists()


def test_write_file_over_the_cap_is_bem_305(env: GitEnv) -> None:
    body = "x" * (env.tree.root.max_write_bytes + 1)
    assert refused(env, "write_file", path="big.md", body=body).code == "BEM-305"


# -- the git tools -------------------------------------------------------------------------


def test_a_full_edit_commit_push_round(env: GitEnv) -> None:
    call(env, "write_file", path="docs/install.md", body="# Install\n")
    assert call(env, "git_status")["files"] == [
        {"path": "docs/install.md", "staged": None, "unstaged": "untracked"}
    ]
    diff = call(env, "git_diff")
    assert "+# Install\n" in diff["patch"]
    staged = call(env, "git_add", path="docs/install.md")
    assert staged["staged"] == [{"path": "docs/install.md", "staged": "added", "unstaged": None}]
    commit = call(env, "git_commit", message="Add the install page")
    assert len(commit["commit"]) == 40
    log = call(env, "git_log", limit=1)
    assert log["commits"][0]["sha"] == commit["commit"]
    assert log["more"] is True
    pushed = call(env, "git_push")
    assert pushed == {"remote": "origin", "ref": "refs/heads/feature", "sha": commit["commit"]}
    assert refs_of(env.upstream)["refs/heads/feature"] == commit["commit"]


def test_git_add_dot_and_empty_stage_everything(env: GitEnv) -> None:
    env.write("a.md", "a")
    (env.work / "README.md").unlink()
    assert call(env, "git_add", path="")["total_staged"] == 2
    assert call(env, "git_add", path=".")["total_staged"] == 2


def test_git_diff_narrows_with_path(env: GitEnv) -> None:
    env.write("docs/index.md", "changed\n")
    env.write("other.md", "new\n")
    assert [f["path"] for f in call(env, "git_diff", path="docs")["files"]] == ["docs/index.md"]


def test_git_diff_truncates_with_a_note(env: GitEnv) -> None:
    env.write("docs/huge.md", "".join(f"line {n}\n" for n in range(30_000)))
    result = call(env, "git_diff")
    assert result["truncated"] is True
    assert len(result["patch"]) < 100_200
    assert "path=" in result["note"]


def test_git_log_default_limit(env: GitEnv) -> None:
    for number in range(25):
        env.commit_file("a.md", f"{number}\n", f"Commit {number}")
    result = call(env, "git_log")
    assert len(result["commits"]) == 20
    assert result["commits"][0]["subject"] == "Commit 24"


def test_git_diff_and_git_log_say_there_is_no_compare_point(env: GitEnv) -> None:
    # Fixed keys: without a compare point 'against' and 'since' are there, and null.
    assert call(env, "git_diff")["against"] is None
    assert call(env, "git_log")["since"] is None


def test_git_diff_and_git_log_from_a_compare_point(env: GitEnv) -> None:
    start = env.tree.head_sha()
    assert start is not None
    first = env.commit_file("docs/index.md", "# Index\n\nWelcome back.\n", "Welcome back")
    second = env.commit_file("docs/faq.md", "# FAQ\n", "Add a FAQ")
    env.write("docs/faq.md", "# FAQ\n\nNone yet.\n")
    tree = WorkingTree(SandboxRoot(env.work), compare_to=start, compare_label="main")
    point = {"sha": start, "label": "main"}

    diff: dict[str, Any] = call_tool(tree, "git_diff", {})
    assert (diff["base"], diff["against"]) == (start, point)
    assert [(f["path"], f["status"]) for f in diff["files"]] == [
        ("docs/faq.md", "added"),
        ("docs/index.md", "modified"),
    ]
    assert "+Welcome back.\n" in diff["patch"] and "+None yet.\n" in diff["patch"]

    log: dict[str, Any] = call_tool(tree, "git_log", {"limit": 5})
    assert log["since"] == point
    assert [c["sha"] for c in log["commits"]] == [second, first]
    assert log["more"] is False
    json.dumps([diff, log])


def test_git_commit_with_nothing_staged_is_bem_321(env: GitEnv) -> None:
    assert refused(env, "git_commit", message="Nothing").code == "BEM-321"


def test_git_push_without_origin_is_bem_322(tmp_path: Path) -> None:
    env = build_git_env(tmp_path)
    tree = WorkingTree(SandboxRoot(env.work))
    with pytest.raises(BeamError) as caught:
        call_tool(tree, "git_push", {})
    assert caught.value.code == "BEM-322"


def test_git_push_from_a_detached_head_is_bem_323(env: GitEnv) -> None:
    repo = env.repo
    repo.set_head(repo.head.target)
    assert refused(env, "git_push").code == "BEM-323"
    assert call(env, "git_status")["detached"] is True


def test_git_push_of_protected_refs_is_bem_328(env: GitEnv) -> None:
    before = refs_of(env.upstream)
    assert refused(env, "git_push", ref="main").code == "BEM-328"
    assert refs_of(env.upstream) == before


def test_libgit2_failures_are_bem_320_with_the_reason(env: GitEnv) -> None:
    env.tree.add_origin(str(env.base / "no-such.git"))
    error = refused(env, "git_push")
    assert error.code == "BEM-320"
    assert "failed" in error.message


def test_a_missing_repository_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    tree = WorkingTree(SandboxRoot(tmp_path))
    for name in ("git_status", "git_diff", "git_log"):
        with pytest.raises(BeamError) as caught:
            call_tool(tree, name, {})
        assert caught.value.code == "BEM-329"
        assert "init()" in caught.value.message
