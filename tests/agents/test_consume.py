"""The consume skill's tools, ``search`` and ``get_page``, on real trees (hostile links
included), and the skill wired to them through ``consume_tools``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bot import InvokeRequest, RiverBeam
from bot.agents.consume import consume_tools
from bot.agents.consume import search as search_module
from bot.agents.consume.get_page import MAX_PAGE_CHARS, GetPageTool, page_title
from bot.agents.consume.search import MAX_LIMIT, SearchTool
from bot.clients import Completion, ScriptedClient, ToolCall
from bot.core.errors import BeamError
from bot.core.input import AgentInput
from bot.core.tools import Tool
from bot.runner import ToolLoopAgent
from harness.gitkit import write_files
from sandbox.inside.jail import SandboxRoot
from skills import skill_by_name

INPUT = AgentInput.of_text("")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    path = tmp_path / "tree"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Files next to the tree, which no host tool may read."""
    path = tmp_path / "outside"
    write_files(path, {"secret.md": "zebra password hunter2\n", "dir/more.md": "zebra in a dir\n"})
    return path


# -- search --------------------------------------------------------------------------


def search(tree: Path, query: str, **args: Any) -> dict[str, Any]:
    return SearchTool(SandboxRoot(tree)).search(query, **args)


def test_search_ranks_files_by_matching_lines_and_needs_every_word_in_one_line(
    tree: Path,
) -> None:
    write_files(
        tree,
        {
            "docs/proxy.md": "# Proxy\nSet the HTTPS proxy.\nThe Proxy for HTTPS is optional.\n",
            "docs/install.md": "Install.\nUse an https proxy if needed.\n",
            "docs/split.md": "proxy here\nhttps there\n",
            "README.md": "nothing relevant\n",
        },
    )

    result = search(tree, "HTTPS proxy")

    assert result["hits"] == [
        {"path": "docs/proxy.md", "line": 2, "text": "Set the HTTPS proxy."},
        {"path": "docs/proxy.md", "line": 3, "text": "The Proxy for HTTPS is optional."},
        {"path": "docs/install.md", "line": 2, "text": "Use an https proxy if needed."},
    ]
    assert (result["total_hits"], result["files_matched"]) == (3, 2)
    assert (result["files_searched"], result["truncated"], result["complete"]) == (4, False, True)
    assert result["note"] is None


def test_a_quoted_phrase_matches_as_a_whole(tree: Path) -> None:
    write_files(tree, {"a.md": "connection was refused\n", "b.md": "Connection Refused by pip\n"})

    assert [hit["path"] for hit in search(tree, '"connection refused" pip')["hits"]] == ["b.md"]
    assert [hit["path"] for hit in search(tree, "connection refused")["hits"]] == ["a.md", "b.md"]


def test_no_hit_says_how_to_search_again(tree: Path) -> None:
    write_files(tree, {"a.md": "hello\n"})

    result = search(tree, "kubernetes helm")

    assert result["hits"] == [] and result["total_hits"] == 0
    assert "'kubernetes', 'helm'" in result["note"] and "fewer or other words" in result["note"]


def test_the_limit_caps_hits_and_one_long_page_does_not_crowd_out_the_rest(tree: Path) -> None:
    write_files(tree, {"big.md": "term\n" * 150, "small.md": "term\n" * 2, "mid.md": "term\n" * 7})

    default = search(tree, "term")
    assert len(default["hits"]) == 20 and default["total_hits"] == 159
    assert default["truncated"] and "showing 20 of 159 matching lines in 3 files" in default["note"]
    per_file = {
        path: [h["line"] for h in default["hits"] if h["path"] == path]
        for path in ("big.md", "mid.md", "small.md")
    }
    # Every file gets a first share of five; the leftover slots go to the best-ranked file.
    assert per_file == {
        "big.md": list(range(1, 14)),
        "mid.md": list(range(1, 6)),
        "small.md": [1, 2],
    }
    assert [h["path"] for h in default["hits"]] == ["big.md"] * 13 + ["mid.md"] * 5 + [
        "small.md"
    ] * 2

    assert len(search(tree, "term", limit=3)["hits"]) == 3
    assert len(search(tree, "term", limit=MAX_LIMIT)["hits"]) == MAX_LIMIT


async def test_limits_outside_the_schema_are_refused(tree: Path) -> None:
    tool = SearchTool(SandboxRoot(tree))
    assert isinstance(tool, Tool)
    for args in ({"query": "x", "limit": MAX_LIMIT + 1}, {"query": "x", "limit": 0}, {}):
        with pytest.raises(BeamError) as caught:
            await tool.invoke(args, INPUT)
        assert caught.value.code == "BEM-090"


@pytest.mark.parametrize("query", ["   ", '""', " ".join(f"w{i}" for i in range(11))])
def test_an_empty_or_wordy_query_is_bem_090(tree: Path, query: str) -> None:
    with pytest.raises(BeamError) as caught:
        search(tree, query)
    assert caught.value.code == "BEM-090"


def test_a_long_line_is_cut_around_the_match(tree: Path) -> None:
    line = "a" * 500 + " needle " + "b" * 500
    write_files(tree, {"long.md": line + "\n"})

    (hit,) = search(tree, "NEEDLE")["hits"]

    assert "needle" in hit["text"] and hit["text"].startswith("…") and hit["text"].endswith("…")
    assert len(hit["text"]) <= 202


def test_binary_and_oversized_files_are_skipped(tree: Path) -> None:
    write_files(
        tree,
        {
            "text.md": "zebra\n",
            "nul.md": b"zebra\0zebra\n",
            "latin1.md": "zebra caf\xe9\n".encode("latin-1"),
            "image.png": "zebra in a file named like an image\n",
            "huge.md": "zebra\n" + "x" * 5000,
        },
    )

    result = SearchTool(SandboxRoot(tree, max_read_bytes=4000)).search("zebra")

    assert [hit["path"] for hit in result["hits"]] == ["text.md"]
    # nul, latin1 and huge were opened and skipped; the .png was never read at all.
    assert (result["files_searched"], result["files_skipped"]) == (1, 3)


def test_a_file_named_on_purpose_is_searched_whatever_its_extension(tree: Path) -> None:
    write_files(tree, {"notes.png": "zebra\n", "other.md": "zebra\n"})

    result = search(tree, "zebra", path="notes.png")

    assert [hit["path"] for hit in result["hits"]] == ["notes.png"]


def test_search_never_follows_a_link_out_of_the_tree(tree: Path, outside: Path) -> None:
    write_files(tree, {"docs/page.md": "zebra at home\n"})
    (tree / "docs" / "escape.md").symlink_to(outside / "secret.md")
    (tree / "docs" / "relative.md").symlink_to("../../outside/secret.md")
    (tree / "linked-dir").symlink_to(outside / "dir")
    os.link(outside / "dir" / "more.md", tree / "hardlink.md")
    (tree / "inside.md").symlink_to("docs/page.md")

    result = search(tree, "zebra")

    assert sorted(hit["path"] for hit in result["hits"]) == ["docs/page.md", "inside.md"]
    assert "hunter2" not in json.dumps(result)
    assert result["files_skipped"] == 4


def test_search_skips_repository_metadata(tree: Path) -> None:
    write_files(tree, {".git/config": "zebra\n", "docs/.git": "zebra\n", "page.md": "zebra\n"})

    assert [hit["path"] for hit in search(tree, "zebra")["hits"]] == ["page.md"]


def test_path_narrows_the_search_and_is_jailed(tree: Path) -> None:
    write_files(tree, {"docs/a.md": "zebra\n", "blog/b.md": "zebra\n"})

    assert [hit["path"] for hit in search(tree, "zebra", path="docs")["hits"]] == ["docs/a.md"]
    assert search(tree, "zebra", path="docs/a.md")["path"] == "docs/a.md"
    for path, code in (("nowhere", "BEM-100"), ("../outside", "BEM-302"), ("/etc", "BEM-301")):
        with pytest.raises(BeamError) as caught:
            search(tree, "zebra", path=path)
        assert caught.value.code == code


def test_a_spent_byte_budget_stops_after_the_docs_and_says_so(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_files(tree, {"a.py": "zebra = 1\n" * 50, "docs/z.md": "zebra\n" * 50})
    monkeypatch.setattr(search_module, "MAX_SCAN_BYTES", 100)

    result = search(tree, "zebra")

    # Docs are read first, so the page is searched and the code is what the budget cut.
    assert {hit["path"] for hit in result["hits"]} == {"docs/z.md"}
    assert result["complete"] is False and "narrow it with path" in result["note"]


async def test_search_through_the_tool_protocol(tree: Path) -> None:
    write_files(tree, {"a.md": "zebra\n"})
    tool = SearchTool(SandboxRoot(tree))

    result = await tool.invoke({"query": "zebra", "path": "", "limit": 5}, INPUT)

    assert isinstance(result, dict) and result["hits"] == [
        {"path": "a.md", "line": 1, "text": "zebra"}
    ]
    assert tool.spec().name == "search" and not tool.spec().confirm_required


# -- get_page ------------------------------------------------------------------------


def get_page(tree: Path, path: str, start_line: int = 1, **root: Any) -> dict[str, Any]:
    return GetPageTool(SandboxRoot(tree, **root)).get_page(path, start_line)


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("intro\n\n## Install it ##\n\ntext\n", "Install it"),
        ('---\nlayout: page\ntitle: "Front matter"\n---\n# Heading\n', "Front matter"),
        ("+++\ntitle = 'Hugo page'\n+++\n# Heading\n", "Hugo page"),
        ("---\nlayout: page\n---\nSetext title\n============\n", "Setext title"),
        ("=======\nRST title\n=======\n\nbody\n", "RST title"),
        ("Sub title\n---------\n", "Sub title"),
        ("<html><head><title>HTML <b>page</b></title></head></html>\n", "HTML page"),
        ("```\n# not a heading\n```\n# Real one\n", "Real one"),
        ("just text\nno heading at all\n", None),
        ("", None),
    ],
)
def test_the_title_is_the_front_matter_title_or_the_first_heading(
    text: str, title: str | None
) -> None:
    assert page_title(text) == title


def test_get_page_returns_title_and_text(tree: Path) -> None:
    write_files(tree, {"docs/install.md": "# Install\n\nRun the installer.\n"})

    page = get_page(tree, "./docs//install.md")

    assert page == {
        "path": "docs/install.md",
        "title": "Install",
        "text": "# Install\n\nRun the installer.",
        "start_line": 1,
        "end_line": 3,
        "total_lines": 3,
        "truncated": False,
        "note": None,
    }


def test_a_long_page_is_capped_and_read_on_from_the_next_line(tree: Path) -> None:
    lines = ["# Big page"] + [f"line {n} " + "x" * 990 for n in range(2, 151)]
    write_files(tree, {"big.md": "\n".join(lines) + "\n"})

    first = get_page(tree, "big.md")
    assert first["truncated"] and first["end_line"] < 150
    assert len(first["text"]) <= MAX_PAGE_CHARS
    assert f"start_line={first['end_line'] + 1}" in first["note"]

    pieces, page = [first["text"]], first
    while page["truncated"]:
        page = get_page(tree, "big.md", page["end_line"] + 1)
        assert page["title"] == "Big page"
        pieces.append(page["text"])
    assert "\n".join(pieces) == "\n".join(lines)
    assert page["note"] is None and page["end_line"] == page["total_lines"] == 150


def test_a_directory_stands_for_its_index_page(tree: Path) -> None:
    write_files(tree, {"docs/install/README.md": "# Installing\n", "docs/empty/x.txt": "x\n"})

    assert get_page(tree, "docs/install")["path"] == "docs/install/README.md"
    with pytest.raises(BeamError, match="without an index page") as caught:
        get_page(tree, "docs/empty")
    assert caught.value.code == "BEM-100"


def test_get_page_refusals(tree: Path, outside: Path) -> None:
    write_files(tree, {"logo.md": b"\x89PNG\0\0", "big.md": "y" * 3000, "ok.md": "one\ntwo\n"})
    (tree / "escape.md").symlink_to(outside / "secret.md")

    cases = [
        ("missing.md", 1, "BEM-100"),
        ("logo.md", 1, "BEM-100"),
        ("big.md", 1, "BEM-305"),
        ("escape.md", 1, "BEM-303"),
        ("../outside/secret.md", 1, "BEM-302"),
        (".git/config", 1, "BEM-304"),
        ("ok.md", 3, "BEM-090"),
    ]
    for path, start, code in cases:
        with pytest.raises(BeamError) as caught:
            get_page(tree, path, start, max_read_bytes=2000)
        assert caught.value.code == code, (path, caught.value)
        assert "hunter2" not in caught.value.message


async def test_get_page_through_the_tool_protocol(tree: Path) -> None:
    write_files(tree, {"a.md": "# A\nbody\n"})
    tool = GetPageTool(SandboxRoot(tree))

    result = await tool.invoke({"path": "a.md", "start_line": 2}, INPUT)

    assert isinstance(result, dict) and (result["title"], result["text"]) == ("A", "body")
    assert isinstance(tool, Tool)


# -- the skill, wired ------------------------------------------------------------------


def test_consume_tools_are_exactly_the_skills_allowlist(tree: Path) -> None:
    tools = consume_tools(SandboxRoot(tree))

    assert all(isinstance(tool, Tool) for tool in tools)
    assert {tool.spec().name for tool in tools} == skill_by_name("consume").tools


async def test_the_consume_skill_searches_reads_and_cites_and_cannot_write(tree: Path) -> None:
    write_files(tree, {"docs/proxy.md": "# Proxies\n\nSet https_proxy before you install.\n"})
    model = ScriptedClient(
        [
            Completion.of_calls(ToolCall.of("search", {"query": "https_proxy"})),
            Completion.of_calls(ToolCall.of("get_page", {"path": "docs/proxy.md"})),
            # A model that tries to write gets a refusal: the skill offers no write tool.
            Completion.of_calls(ToolCall.of("write_file", {"path": "x.md", "content": "x"})),
            Completion.of_text("Set https_proxy first [docs/proxy.md]."),
        ]
    )
    agent = ToolLoopAgent.for_skill("consume", model, consume_tools(SandboxRoot(tree)))
    beam = RiverBeam()
    beam.register_agent(agent)

    result = await beam.invoke(
        InvokeRequest(agent_name="consume", input=AgentInput.of_text("How do I use a proxy?"))
    )

    assert [spec.name for spec in agent.tools] == ["get_page", "search"]
    search_call, page_call, write_call = result.tool_calls
    assert isinstance(search_call.result, dict) and isinstance(page_call.result, dict)
    assert search_call.result["hits"] == [
        {"path": "docs/proxy.md", "line": 3, "text": "Set https_proxy before you install."}
    ]
    assert page_call.result["title"] == "Proxies"
    assert not write_call.ok and write_call.error is not None
    assert sorted(path.name for path in tree.iterdir()) == ["docs"]
    assert result.text == "Set https_proxy first [docs/proxy.md]."
