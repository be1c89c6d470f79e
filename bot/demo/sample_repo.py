"""The demo's sample repository: a small handbook whose install page has typos and a broken
relative link, the bare upstream that holds it, and the ``riverbeam.toml`` that registers it.

Built with pygit2 alone: the demo needs no git command on the machine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pygit2

REPO_NAME = "skiff-docs"
PAGE = "docs/install.md"
REQUEST = "Fix the broken links and typos on the install page"
PUBLISH_REF = "published"
DEMO_MODEL_FACTORY = "bot.demo:demo_model"
SCRIPTED_LABEL = "scripted demo model — no language model is called"
AUTHOR = pygit2.Signature("Skiff Docs Team", "docs@skiff.invalid")

PAGES: dict[str, str] = {
    "README.md": (
        "# Skiff documentation\n\n"
        "Skiff turns a folder of Markdown files into a small, fast static website.\n\n"
        "- [Documentation index](docs/index.md)\n"
        "- [Installing Skiff](docs/install.md)\n"
        "- [Configuring a site](docs/configuration.md)\n"
    ),
    "docs/index.md": (
        "# Skiff\n\n"
        "Skiff builds a plain, fast website from a folder of Markdown pages.\n\n"
        "1. [Installing Skiff](install.md) on Linux, macOS and Windows.\n"
        "2. [Configuring a site](configuration.md): title, theme and navigation.\n"
    ),
    PAGE: (
        "# Installing Skiff\n\n"
        "Skiff needs Python 3.10 or newer. We recomend installing it in a virtual\n"
        "enviroment, so that it does not interfere with other tools on your system.\n\n"
        "## With pip\n\n"
        "    python3 -m venv .venv\n"
        "    . .venv/bin/activate\n"
        "    pip install skiff\n\n"
        "## Check teh installation\n\n"
        "Run `skiff --version`. If it prints a version number, Skiff is installed\n"
        "succesfully.\n\n"
        "## Next steps\n\n"
        "Read [configuring your site](configure.md) to set a title and a theme, or go\n"
        "back to the [documentation index](index.md).\n"
    ),
    "docs/configuration.md": (
        "# Configuring a site\n\n"
        "Skiff reads `skiff.toml` at the root of your site:\n\n"
        '    title = "My notes"\n'
        '    theme = "paper"\n\n'
        "| key | default | meaning |\n"
        "|---|---|---|\n"
        "| `title` | the folder name | shown in the browser tab and the header |\n"
        "| `theme` | `plain` | `plain`, `paper` or `night` |\n"
        "| `nav` | every page | the pages of the side bar, in order |\n"
    ),
}


def create_upstream(path: Path, pages: Mapping[str, str] = PAGES) -> str:
    """A bare repository at ``path`` whose ``main`` holds ``pages`` in one commit; its sha.
    Built with pygit2 alone: the demo needs no git command on the machine."""
    repo = pygit2.init_repository(str(path), bare=True, initial_head="main")
    repo.config["core.logAllRefUpdates"] = "always"
    tree = _tree(repo, {name: text.encode() for name, text in pages.items()})
    commit = repo.create_commit("refs/heads/main", AUTHOR, AUTHOR, "Start the handbook", tree, [])
    return str(commit)


def _tree(repo: pygit2.Repository, files: Mapping[str, bytes]) -> pygit2.Oid:
    builder = repo.TreeBuilder()
    children: dict[str, dict[str, bytes]] = {}
    for name, data in files.items():
        top, _, rest = name.partition("/")
        if rest:
            children.setdefault(top, {})[rest] = data
        else:
            builder.insert(top, repo.create_blob(data), pygit2.enums.FileMode.BLOB)
    for directory, inner in children.items():
        builder.insert(directory, _tree(repo, inner), pygit2.enums.FileMode.TREE)
    return builder.write()


@dataclass(frozen=True)
class UpstreamCommit:
    sha: str
    subject: str
    author: str


def branch_commit(upstream: Path, branch: str) -> UpstreamCommit | None:
    """The commit ``branch`` points at in the bare ``upstream``; None without the branch."""
    repo = pygit2.Repository(str(upstream))
    ref = repo.references.get(f"refs/heads/{branch}")
    if ref is None:
        return None
    commit = repo[ref.target]
    assert isinstance(commit, pygit2.Commit)
    return UpstreamCommit(
        sha=str(commit.id),
        subject=commit.message.split("\n", 1)[0],
        author=f"{commit.author.name} <{commit.author.email}>",
    )


def config_text(
    *, redis_url: str, upstream: Path, workspaces: Path, scripted: bool, prefix: str = "riverbeam"
) -> str:
    """The demo's ``riverbeam.toml``. Paths are written as TOML strings (JSON's escaping
    is valid TOML for them)."""
    lines = [
        "# Written by `riverbeam demo`: the sample repository and the stack it runs on.",
        f"redis_url = {json.dumps(redis_url)}",
        "",
        f"[repositories.{REPO_NAME}]",
        f"upstream = {json.dumps(str(upstream))}",
        "# Where a publish job puts a reviewed commit.",
        f"publish_ref = {json.dumps(PUBLISH_REF)}",
        "# In the demo you are the writer and the reviewer; a team keeps this off.",
        "allow_self_approval = true",
        "",
        "[workspaces]",
        f"root = {json.dumps(str(workspaces / 'workspaces'))}",
        f"mirrors = {json.dumps(str(workspaces / 'mirrors'))}",
        "",
        "[jobs]",
        f"prefix = {json.dumps(prefix)}",
    ]
    if scripted:
        lines += ["", "[model]", f"# The {SCRIPTED_LABEL}.", f'factory = "{DEMO_MODEL_FACTORY}"']
    return "\n".join(lines) + "\n"
