"""The change's links, checked against the commit that would land, in a real git tree read
the way the host reads a job's tree (``read_pages``: an untrusted object database)."""

from __future__ import annotations

from pathlib import Path

from bot.config import Site
from bot.jobs.branch_change import read_pages
from bot.review.links import (
    MAX_LISTED,
    MAX_PARSED_BYTES,
    LinkReport,
    anchors_of,
    links_of,
    slugify,
)
from harness.gitkit import commit_all, git, write_files

GUIDE = """# Guide

## Getting started

## Getting started

## `pip` & friends!
<a id="custom-anchor"></a>
"""

PAGE = """# Install

See [the guide](guide.md), [its start](guide.md#getting-started) and
[the second start](guide.md#getting-started-1), [pip](guide.md#pip--friends),
[custom](guide.md#custom-anchor) and [here](#install).

Broken: [gone](missing.md), [no such heading](guide.md#nowhere), [self](#nope),
[up and out](../../outside.md), ![picture](img/missing.png) and ![folder](img).

Fine: ![logo](img/logo.png), [root](/README.md), [folder](img/), [spaced](my%20page.md).

Outside: [site](https://example.com/docs), [mail](mailto:docs@example.com),
[proto](//cdn.example.com/x).
Hostile: [click](javascript:alert(1)), [data](data:text/html,hi).

```
[not a link](in-code.md)
```

| Table | Link |
|---|---|
| row | [in a table](table-missing.md) |

[ref-style][r]

[r]: ref-missing.md
"""


def repo_with_change(tmp_path: Path, files: dict[str, str | bytes]) -> tuple[Path, str, str]:
    work = tmp_path / "work"
    git("init", "-q", "--initial-branch=main", str(work))
    write_files(work, {"README.md": "# Docs\n", "docs/guide.md": GUIDE})
    base = commit_all(work, "base")
    write_files(work, files)
    head = commit_all(work, "change")
    return work / ".git" / "objects", base, head


def test_broken_links_are_found_with_page_and_line(tmp_path: Path) -> None:
    objects, base, head = repo_with_change(
        tmp_path,
        {
            "docs/install.md": PAGE,
            "docs/img/logo.png": b"\x89PNG",
            "docs/img/other.png": b"\x89PNG",
            "docs/my page.md": "# Mine\n",
        },
    )
    report = read_pages(objects, base, head).links
    # Every changed Markdown page, and only those (the picture is no page).
    assert report.pages == ["docs/install.md", "docs/my page.md"]
    broken = [(b.page, b.line, b.target) for b in report.broken]
    assert broken == [
        ("docs/install.md", 7, "missing.md"),
        ("docs/install.md", 7, "guide.md#nowhere"),
        ("docs/install.md", 7, "#nope"),
        ("docs/install.md", 8, "../../outside.md"),
        ("docs/install.md", 8, "img/missing.png"),
        ("docs/install.md", 8, "img"),
        ("docs/install.md", 14, "javascript:alert(1)"),
        ("docs/install.md", 14, "data:text/html,hi"),
        ("docs/install.md", 22, "table-missing.md"),
        ("docs/install.md", 24, "ref-missing.md"),
    ]
    reasons = {b.target: b.reason for b in report.broken}
    assert reasons["missing.md"] == "docs/missing.md is not in the commit"
    assert reasons["guide.md#nowhere"] == "docs/guide.md has no heading #nowhere"
    assert reasons["../../outside.md"] == "leads outside the repository"
    assert reasons["img"] == "docs/img is a folder, not an image"
    assert "javascript: scheme is not allowed" in reasons["javascript:alert(1)"]
    assert [(e.line, e.url) for e in report.external] == [
        (12, "https://example.com/docs"),
        (12, "mailto:docs@example.com"),
        (13, "//cdn.example.com/x"),
    ]
    assert not report.cut and not report.skipped


def test_an_unchanged_page_and_a_deleted_page_are_not_checked(tmp_path: Path) -> None:
    work = tmp_path / "work"
    git("init", "-q", "--initial-branch=main", str(work))
    write_files(work, {"a.md": "[x](gone.md)\n", "b.md": "[y](gone.md)\n"})
    base = commit_all(work, "base")
    (work / "b.md").unlink()
    write_files(work, {"c.txt": "not markdown [z](gone.md)\n"})
    head = commit_all(work, "change")
    report = read_pages(work / ".git" / "objects", base, head).links
    assert report == LinkReport()


def test_headings_slug_as_the_forges_do() -> None:
    assert slugify("`pip` & friends!") == "pip--friends"
    assert slugify("Étape 2: Installer") == "étape-2-installer"
    assert anchors_of(GUIDE) >= {
        "guide",
        "getting-started",
        "getting-started-1",
        "pip--friends",
        "custom-anchor",
    }


def test_ten_thousand_links_are_listed_within_the_cap(tmp_path: Path) -> None:
    page = "".join(f"[l{i}](missing-{i}.md) [e{i}](https://example.com/{i})\n" for i in range(5000))
    assert len(links_of(page)) == 10_000
    objects, base, head = repo_with_change(tmp_path, {"many.md": page})
    report = read_pages(objects, base, head).links
    assert len(report.broken) == len(report.external) == MAX_LISTED
    assert report.cut


def test_a_page_over_the_size_cap_is_named_not_read(tmp_path: Path) -> None:
    objects, base, head = repo_with_change(tmp_path, {"huge.md": "[x](gone.md)\n" * 100_000})
    report = read_pages(objects, base, head).links
    assert report.skipped == ["huge.md"] and report.broken == []


def test_the_bytes_parsed_in_all_are_bounded(tmp_path: Path) -> None:
    """Nine pages of 1,000,000 bytes: eight are parsed (8 MB of the 8 MiB budget), the ninth
    is named as not checked."""
    page = "word " * 200_000
    assert len(page) == 1_000_000 and 8 * len(page) <= MAX_PARSED_BYTES < 9 * len(page)
    objects, base, head = repo_with_change(tmp_path, {f"p{i}.md": page for i in range(9)})
    report = read_pages(objects, base, head).links
    assert report.pages == [f"p{i}.md" for i in range(8)]
    assert report.skipped == ["p8.md"]


# -- links the way the site generator reads them --------------------------------------------

BOOK_CHAPTER = """# Ownership

See [the previous chapter](ch03-00-common-concepts.html), [its variables
section](ch03-01-variables.html#shadowing), [the start](index.html) and
[the appendix](appendix/index.html). Broken: [gone](ch99-missing.html).
"""


def _broken(tmp_path: Path, files: dict[str, str | bytes], site: Site | None = None) -> list[str]:
    objects, base, head = repo_with_change(tmp_path, files)
    return [link.target for link in read_pages(objects, base, head, site).links.broken]


def test_mdbook_html_links_resolve_to_their_markdown_sources(tmp_path: Path) -> None:
    book: dict[str, str | bytes] = {
        "book.toml": '[book]\ntitle = "A book"\n',
        "src/README.md": "# Intro\n",
        "src/ch03-00-common-concepts.md": "# Common concepts\n",
        "src/ch03-01-variables.md": "# Variables\n\n## Shadowing\n",
        "src/appendix/index.md": "# Appendix\n",
        "src/ch04-01-what-is-ownership.md": BOOK_CHAPTER,
    }
    assert _broken(tmp_path, book) == ["ch99-missing.html"]


def test_the_site_setting_overrides_what_the_tree_says(tmp_path: Path) -> None:
    chapters: dict[str, str | bytes] = {
        "src/ch01.md": "# One\n",
        "src/ch02.md": "# Two\n\nBack to [one](ch01.html).\n",
    }
    assert _broken(tmp_path / "plain", chapters) == ["ch01.html"]
    assert _broken(tmp_path / "book", chapters, "mdbook") == []


def test_mkdocs_directory_urls_and_sphinx_html_links(tmp_path: Path) -> None:
    mkdocs: dict[str, str | bytes] = {
        "mkdocs.yml": "site_name: Docs\n",
        "docs/setup.md": "# Setup\n",
        "docs/api/index.md": "# API\n",
        "docs/start.md": "[setup](../setup/), [api](../api/) and [nothing](../nothing/).\n",
    }
    assert _broken(tmp_path / "mkdocs", mkdocs) == ["../nothing/"]
    sphinx: dict[str, str | bytes] = {
        "docs/conf.py": "project = 'Docs'\n",
        "docs/usage.rst": "Usage\n=====\n",
        "docs/start.md": "[usage](usage.html) and [nothing](nothing.html).\n",
    }
    assert _broken(tmp_path / "sphinx", sphinx) == ["nothing.html"]


def test_a_link_through_a_symlinked_folder_is_in_the_commit(tmp_path: Path) -> None:
    work = tmp_path / "work"
    git("init", "-q", "--initial-branch=main", str(work))
    write_files(work, {"pages/common/tar.md": "# tar\n"})
    (work / "pages.en").symlink_to("pages")
    (work / "escape").symlink_to("../outside")
    base = commit_all(work, "base")
    links = "[tar](../../pages.en/common/tar.md) and [out](../../escape/x.md)\n"
    write_files(work, {"pages/common/ls.md": f"# ls\n\n{links}"})
    head = commit_all(work, "change")

    report = read_pages(work / ".git" / "objects", base, head).links

    assert [link.target for link in report.broken] == ["../../escape/x.md"]
