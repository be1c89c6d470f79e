"""The demo: a sample docs repository, its configuration, and the scripted demo model.

``riverbeam demo`` (``bot.cli.demo``) builds a bare upstream holding a small handbook whose
install page has typos and a broken relative link, registers it in a generated
``riverbeam.toml``, and asks an author job to fix the page.

Without a model API key the workers use ``demo_model`` (``model.factory =
"bot.demo:demo_model"``): a ``PlaybookClient`` that works through the real tools. It lists
the tree and reads the install page through them, computes the corrected page from what
it read (known misspellings replaced word by word; a relative link to a page that does not
exist pointed at the closest page that does), writes it back, looks at the diff, commits,
and pushes, which parks for approval. Nothing about the page is hard-coded in its steps:
change the page and it fixes what it finds. With a key, the workers use the live model and
this module only provides the repository.
"""

from __future__ import annotations

import difflib
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pydantic import JsonValue

from bot.clients.base import Completion, Message, ToolCall
from bot.clients.playbook import PlaybookClient, PlaybookStep, last_tool_result
from bot.jobs.models import JobRecord

REPO_NAME = "skiff-docs"
PAGE = "docs/install.md"
REQUEST = "Fix the broken links and typos on the install page"
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

# The scripted model's whole knowledge of spelling: common misspellings, lower case.
MISSPELLINGS: dict[str, str] = {
    "recomend": "recommend",
    "recieve": "receive",
    "enviroment": "environment",
    "teh": "the",
    "succesfully": "successfully",
    "seperate": "separate",
    "dependancy": "dependency",
    "occured": "occurred",
    "instal": "install",
}
_WORD = re.compile(r"[A-Za-z]+")
_LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


# -- the repository ----------------------------------------------------------------------


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


# -- what the scripted model knows how to fix -------------------------------------------


@dataclass(frozen=True)
class Fix:
    before: str
    after: str

    def __str__(self) -> str:
        return f"{self.before} → {self.after}"


def fix_typos(text: str) -> tuple[str, list[Fix]]:
    """``text`` with every known misspelling replaced, keeping a capital first letter."""
    fixes: list[Fix] = []

    def replace(match: re.Match[str]) -> str:
        word = match.group(0)
        right = MISSPELLINGS.get(word.lower())
        if right is None:
            return word
        if word[0].isupper():
            right = right[0].upper() + right[1:]
        fixes.append(Fix(word, right))
        return right

    return _WORD.sub(replace, text), fixes


def fix_links(text: str, page: str, files: Sequence[str]) -> tuple[str, list[Fix]]:
    """``text`` (the page at ``page``) with each relative link to a missing file pointed at
    the most similar existing file of the same directory, when one is similar enough."""
    here = posixpath.dirname(page)
    existing = set(files)
    neighbours = [
        posixpath.relpath(name, here or ".") for name in files if posixpath.dirname(name) == here
    ]
    fixes: list[Fix] = []

    def replace(match: re.Match[str]) -> str:
        target = match.group("target")
        if "://" in target or target.startswith(("/", "mailto:")):
            return match.group(0)
        if posixpath.normpath(posixpath.join(here, target)) in existing:
            return match.group(0)
        closest = difflib.get_close_matches(target, neighbours, n=1, cutoff=0.6)
        if not closest:
            return match.group(0)
        fixes.append(Fix(target, closest[0]))
        return f"]({closest[0]}{match.group('anchor') or ''})"

    return _LINK.sub(replace, text), fixes


# -- the scripted demo model --------------------------------------------------------------


class DemoModel(PlaybookClient):
    """A ``PlaybookClient`` that reports itself as the scripted demo model."""

    model = "riverbeam-demo-script"


def demo_model(job: JobRecord) -> DemoModel:
    """``model.factory`` of the demo: the scripted steps below, for any author job."""
    return DemoModel(_steps())


def _steps() -> list[PlaybookStep]:
    return [
        _calls("list_tree", {}),
        _calls("read_file", {"path": PAGE}),
        _write_fixed_page,
        _calls("git_diff", {"path": PAGE}),
        _commit,
        _calls("git_push", {}),
        _report,
    ]


def _calls(name: str, arguments: dict[str, JsonValue]) -> Completion:
    return Completion.of_calls(ToolCall.of(name, arguments))


def _page_fixes(messages: Sequence[Message]) -> tuple[str, list[Fix], list[Fix]] | None:
    """The corrected page and what changed, from the page and the tree the tools returned."""
    read, tree = last_tool_result(messages, "read_file"), last_tool_result(messages, "list_tree")
    if not isinstance(read, dict) or not isinstance(read.get("content"), str):
        return None
    files = tree.get("files") if isinstance(tree, dict) else None
    text, typos = fix_typos(str(read["content"]))
    names = [str(name) for name in files] if isinstance(files, list) else []
    text, links = fix_links(text, PAGE, names)
    return text, typos, links


def _write_fixed_page(messages: Sequence[Message]) -> Completion | str:
    fixed = _page_fixes(messages)
    if fixed is None:
        return f"I could not read {PAGE}, so I changed nothing."
    text, typos, links = fixed
    if not typos and not links:
        return f"{PAGE} has no misspellings I know of and no broken relative links."
    return _calls("write_file", {"path": PAGE, "body": text})


def _commit(messages: Sequence[Message]) -> Completion:
    fixed = _page_fixes(messages)
    typos, links = (fixed[1], fixed[2]) if fixed else ([], [])
    body = "\n".join(f"- {fix}" for fix in [*typos, *links])
    message = f"Fix typos and broken links on the install page\n\n{body}"
    return Completion.of_calls(
        ToolCall.of("git_add", {"path": PAGE}), ToolCall.of("git_commit", {"message": message})
    )


def _report(messages: Sequence[Message]) -> str:
    """The final answer: what was fixed, and what became of the push."""
    pushed = last_tool_result(messages, "git_push")
    if isinstance(pushed, dict) and pushed.get("refused"):
        return (
            f"{pushed.get('by')} refused the push ({pushed.get('comment') or 'no comment'}); "
            "nothing was sent upstream."
        )
    if not isinstance(pushed, dict) or "sha" not in pushed:
        return f"The push did not go through: {pushed}"
    fixed = _page_fixes(messages)
    typos, links = (fixed[1], fixed[2]) if fixed else ([], [])
    return (
        f"Fixed {len(typos)} typos ({', '.join(map(str, typos))}) and {len(links)} broken "
        f"link(s) ({', '.join(map(str, links))}) in {PAGE}, and pushed commit "
        f"{str(pushed['sha'])[:12]} to {str(pushed.get('ref', '')).removeprefix('refs/heads/')}."
    )
