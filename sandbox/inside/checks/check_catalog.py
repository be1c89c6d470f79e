"""The built-in docs checks: each one's command line and how its output becomes findings.

A finding is ``{check, path, line, rule, message}``: ``path`` relative to the repository's
root ("" when the tool names no file), ``line`` 1-based (0 when it names none). Each check
reads the repository's own configuration where the tool has one:

==============  ===========================================  ==============================
check           runs                                         reads
==============  ===========================================  ==============================
markdownlint    pymarkdown on the changed Markdown pages     .markdownlint.{json,jsonc,yaml,
                                                             yml}, .markdownlintrc (the rule
                                                             names), or .pymarkdown
codespell       codespell on the changed files               .codespellrc, setup.cfg,
                                                             pyproject.toml
proselint       proselint on the changed Markdown pages      .proselintrc.json
mkdocs          ``mkdocs build --strict``                    the configured mkdocs.yml
sphinx          ``sphinx-build -W --keep-going``             the configured folder's conf.py
mdbook          ``mdbook build``, when the image has it      book.toml
links           (on the host: ``bot.review.links``)
==============  ===========================================  ==============================

This module is imported in the container (by ``sandbox.inside.checks.runner``) and by the
configuration on the host, so it keeps to the standard library.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CHECKS_DIR",
    "CHECK_NAMES",
    "FILE_CHECKS",
    "HOST_CHECKS",
    "SITE_CHECKS",
    "Context",
    "Invocation",
    "Unavailable",
    "invocation",
    "parse",
    "unfinished",
]

# The checks' own packages in the image (sandbox.host.image.imagefs.CHECKS_DIR).
CHECKS_DIR = "/opt/riverbeam/checks"
CHECK_NAMES = ("markdownlint", "codespell", "proselint", "links", "mkdocs", "sphinx", "mdbook")
SITE_CHECKS = frozenset({"mkdocs", "sphinx", "mdbook"})
FILE_CHECKS = frozenset({"markdownlint", "codespell", "proselint"})
HOST_CHECKS = frozenset({"links"})
MARKDOWN_SUFFIXES = (".md", ".markdown")
_PYTHON = "/usr/bin/python3"
_MARKDOWNLINT_FILES = (
    ".markdownlint.json",
    ".markdownlint.jsonc",
    ".markdownlint.yaml",
    ".markdownlint.yml",
    ".markdownlintrc",
)

Finding = dict[str, Any]


@dataclass(frozen=True)
class Invocation:
    """One check's process: its command, and the file it writes its findings to ("": they
    are in its output)."""

    argv: list[str]
    report_file: str = ""
    # Files the runner writes in the work folder before the run (a translated config).
    prepared: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Unavailable:
    """A check that cannot run here, and why (a tool the image lacks)."""

    reason: str


@dataclass(frozen=True)
class Context:
    """One check's run: the exported tree, its work folder, the changed files, its options."""

    name: str
    tree: Path
    work: Path
    files: tuple[str, ...]
    options: Mapping[str, Any]


def invocation(context: Context) -> Invocation | Unavailable | None:
    """How to run the check; None when it has nothing to look at (no changed page for a
    page check)."""
    return _COMMANDS[context.name](context)


def unfinished(name: str, text: str, code: int) -> bool:
    """Whether a site build that exited ``code`` stopped before it could report (its
    configuration, a plugin it lacks, a crash), rather than on the warnings it found."""
    if name == "mkdocs":
        # "Aborted with 2 warnings in strict mode!", not "Aborted with a configuration error!"
        return code != 0 and re.search(r"Aborted with \d+ warnings", text) is None
    if name == "sphinx":
        return code not in (0, 1)
    return False


def parse(text: str, context: Context) -> list[Finding]:
    """The findings in the check's report ``text``."""
    return _PARSERS[context.name](text, context)


def _module(name: str, *arguments: str) -> list[str]:
    # -P: the tree (the working directory) is never on the import path. Code a site build
    # runs on purpose (conf.py, hooks) runs all the same, as the checks' uid.
    return [_PYTHON, "-X", "utf8", "-P", "-m", name, *arguments]


def _pages(context: Context) -> list[str]:
    return [path for path in context.files if path.lower().endswith(MARKDOWN_SUFFIXES)]


def _finding(check: str, path: str, line: int, rule: str, message: str) -> Finding:
    return {"check": check, "path": path, "line": line, "rule": rule, "message": message.strip()}


def _relative(path: str, tree: Path) -> str:
    """``path`` as the tool printed it (absolute, ``file://``, or relative), from the root."""
    path = path.removeprefix("file://")
    if os.path.isabs(path):
        root = str(tree).rstrip("/") + "/"
        return path[len(root) :] if path.startswith(root) else path
    return posixpath.normpath(path)


# -- markdownlint ------------------------------------------------------------------------


def _markdownlint(context: Context) -> Invocation | None:
    pages = _pages(context)
    if not pages:
        return None
    config = _markdownlint_config(context.tree)
    arguments = ["--return-code-scheme", "minimal"]
    prepared = {}
    if config is not None:
        prepared["pymarkdown.json"] = json.dumps(config)
        arguments = ["--config", str(context.work / "pymarkdown.json"), *arguments]
    return Invocation(_module("pymarkdown", *arguments, "scan", *pages), prepared=prepared)


def _markdownlint_config(tree: Path) -> dict[str, Any] | None:
    """The repository's markdownlint rules as pymarkdown's configuration: markdownlint's
    rule ids and aliases are pymarkdown's too. ``"default": false`` turns every rule off but
    the ones named."""
    for name in _MARKDOWNLINT_FILES:
        path = tree / name
        if path.is_file() and not path.is_symlink():
            rules = _load_rules(path)
            break
    else:
        return None
    plugins: dict[str, Any] = {}
    for rule, value in rules.items():
        if rule in {"default", "extends", "$schema"}:
            continue
        if isinstance(value, bool):
            plugins[rule.lower()] = {"enabled": value}
        elif isinstance(value, dict):
            plugins[rule.lower()] = {"enabled": True, **value}
    config: dict[str, Any] = {"plugins": plugins}
    if rules.get("default") is False:
        every = {f"md{number:03d}": {"enabled": False} for number in range(1, 60)}
        config["plugins"] = {**every, **plugins}
    return config


def _load_rules(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix in {".yaml", ".yml"}:
        import yaml  # from the checks' packages; only a YAML configuration needs it

        loaded = yaml.safe_load(text)
    else:
        loaded = json.loads(_without_comments(text))
    if not isinstance(loaded, dict):
        raise ValueError(f"{path.name} is not a mapping of rules")
    return loaded


def _without_comments(text: str) -> str:
    """JSONC: JSON with // and /* */ comments (outside strings)."""
    pattern = r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/'
    return re.sub(pattern, lambda match: match.group(1) or "", text, flags=re.DOTALL)


_PYMARKDOWN = re.compile(r"^(?P<path>.+?):(?P<line>\d+):\d+: (?P<rule>MD\d+): (?P<message>.*)$")


def _parse_markdownlint(text: str, context: Context) -> list[Finding]:
    found = []
    for line in text.splitlines():
        match = _PYMARKDOWN.match(line)
        if match:
            path = _relative(match["path"], context.tree)
            found.append(
                _finding("markdownlint", path, int(match["line"]), match["rule"], match["message"])
            )
    return found


# -- codespell ---------------------------------------------------------------------------


def _codespell(context: Context) -> Invocation | None:
    if not context.files:
        return None
    return Invocation(_module("codespell_lib", "--", *context.files))


_CODESPELL = re.compile(r"^(?P<path>.+?):(?P<line>\d+): (?P<message>.+==>.*)$")


def _parse_codespell(text: str, context: Context) -> list[Finding]:
    found = []
    for line in text.splitlines():
        match = _CODESPELL.match(line)
        if match:
            path = _relative(match["path"], context.tree)
            found.append(
                _finding("codespell", path, int(match["line"]), "misspelling", match["message"])
            )
    return found


# -- proselint ---------------------------------------------------------------------------


def _proselint(context: Context) -> Invocation | None:
    pages = _pages(context)
    if not pages:
        return None
    config = context.tree / ".proselintrc.json"
    arguments = ["--config", str(config)] if config.is_file() and not config.is_symlink() else []
    return Invocation(_module("proselint", *arguments, "check", "-o", "json", *pages))


def _parse_proselint(text: str, context: Context) -> list[Finding]:
    start = text.find("{")
    report = json.loads(text[start:]) if start >= 0 else {}
    found = []
    for file, entry in (report.get("result") or {}).items():
        path = _relative(str(file), context.tree)
        for item in entry.get("diagnostics") or ():
            position = item.get("pos") or [0]
            found.append(
                _finding(
                    "proselint",
                    path,
                    int(position[0]),
                    str(item.get("check_path", "")),
                    str(item.get("message", "")),
                )
            )
    return found


# -- site builds -------------------------------------------------------------------------


def _mkdocs(context: Context) -> Invocation:
    config = str(context.options.get("mkdocs_config", "mkdocs.yml"))
    site = context.work / "site"
    return Invocation(_module("mkdocs", "build", "--strict", "-f", config, "-d", str(site)))


_MKDOCS = re.compile(r"^(?P<level>WARNING|ERROR)\s+-\s+(?P<message>.*)$")
_MKDOCS_PAGE = re.compile(r"Doc file '(?P<page>[^']+)'")
_DOCS_DIR = re.compile(r"^docs_dir:\s*['\"]?(?P<dir>[^'\"#\s]+)", re.MULTILINE)


def _parse_mkdocs(text: str, context: Context) -> list[Finding]:
    docs = _mkdocs_docs_dir(context)
    found = []
    for line in text.splitlines():
        match = _MKDOCS.match(line)
        if match is None:
            continue
        message = match["message"]
        page = _MKDOCS_PAGE.search(message)
        path = posixpath.normpath(posixpath.join(docs, page["page"])) if page else ""
        found.append(_finding("mkdocs", path, 0, match["level"].lower(), message))
    return found


def _mkdocs_docs_dir(context: Context) -> str:
    config = str(context.options.get("mkdocs_config", "mkdocs.yml"))
    try:
        text = (context.tree / config).read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    match = _DOCS_DIR.search(text)
    return posixpath.join(posixpath.dirname(config), match["dir"] if match else "docs")


def _sphinx(context: Context) -> Invocation:
    source = str(context.options.get("sphinx_source", "docs"))
    work = context.work
    warnings = work / "sphinx-warnings.txt"
    arguments = ["-b", "html", "-W", "--keep-going", "-q", "-E", "-w", str(warnings)]
    arguments += ["-d", str(work / "doctrees"), source, str(work / "html")]
    return Invocation(_module("sphinx", *arguments), report_file=str(warnings))


_SPHINX = re.compile(
    r"^(?P<path>[^\s:][^:]*?)(?::(?P<line>\d+))?: (?P<level>WARNING|ERROR|CRITICAL|SEVERE): "
    r"(?P<message>.*?)(?: \[(?P<kind>[\w.-]+)\])?$"
)


def _parse_sphinx(text: str, context: Context) -> list[Finding]:
    found, seen = [], set()
    for line in text.splitlines():
        match = _SPHINX.match(line)
        if match is None or line in seen:
            continue
        seen.add(line)
        path = _relative(match["path"], context.tree)
        rule = match["kind"] or match["level"].lower()
        found.append(_finding("sphinx", path, int(match["line"] or 0), rule, match["message"]))
    return found


def _mdbook(context: Context) -> Invocation | Unavailable:
    program = shutil.which("mdbook", path=f"{CHECKS_DIR}/bin:/usr/local/bin:/usr/bin")
    if program is None:
        return Unavailable(
            "mdbook is not in the sandbox image; add it as docs/checks.md shows "
            "(sandbox.check_programs)"
        )
    root = str(context.options.get("mdbook_root", "."))
    return Invocation([program, "build", root, "-d", str(context.work / "book")])


_MDBOOK = re.compile(r"^\S*\s*\[?(?P<level>WARN|ERROR)\]?\s*\(?[\w:]*\)?:?\s*(?P<message>.*)$")


def _parse_mdbook(text: str, context: Context) -> list[Finding]:
    found = []
    for line in text.splitlines():
        match = _MDBOOK.match(line)
        if match:
            found.append(_finding("mdbook", "", 0, match["level"].lower(), match["message"]))
    return found


_COMMANDS: dict[str, Callable[[Context], Invocation | Unavailable | None]] = {
    "markdownlint": _markdownlint,
    "codespell": _codespell,
    "proselint": _proselint,
    "mkdocs": _mkdocs,
    "sphinx": _sphinx,
    "mdbook": _mdbook,
}
_PARSERS: dict[str, Callable[[str, Context], list[Finding]]] = {
    "markdownlint": _parse_markdownlint,
    "codespell": _parse_codespell,
    "proselint": _parse_proselint,
    "mkdocs": _parse_mkdocs,
    "sphinx": _parse_sphinx,
    "mdbook": _parse_mdbook,
}
