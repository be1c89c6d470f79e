"""Skill files: TOML front matter (name, description, tool allowlist) and a Jinja2 prompt.

A skill file is ``skills/<name>.md``::

    +++
    name = "commit-notes"
    description = "Draft a commit message for the change in the working tree."
    tools = ["git_status", "git_diff", "git_log"]
    +++
    You draft commit messages for {{ repository }} ...

Built-in skills ship as package data and are read through ``importlib.resources``, so they
load the same from a checkout, an installed wheel or a zip. Problems with a file are BEM-111
and are caught when it is loaded (including template syntax, unknown value names and a trial
render with default values), so a bad skill fails at start-up rather than in the middle of a
job. BEM-112 is left for failures that depend on the values of one render.

The request is not a template value: it reaches the model as the user message, and a prompt
that also rendered it would make the model read it twice.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from os import PathLike
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import jinja2
from jinja2 import meta
from jinja2.sandbox import SandboxedEnvironment

from bot.core.errors import BeamError
from bot.core.tools import (
    MCP_ALLOWLIST_PATTERN,
    MCP_SERVER_NAME_PATTERN,
    TOOL_NAME_PATTERN,
    mcp_tool_name,
)

PROMPT_VALUES: Final[Mapping[str, str | tuple[str, ...]]] = MappingProxyType(
    {
        "base": "",
        "branch": "",
        "protected_refs": (),
        "publish_ref": "",
        "repository": "",
        "style_notes": (),
        "target_ref": "",
    }
)
"""Every value a prompt template may use, with its default. A string default means a string
value; a tuple default means a list of strings. Templates test for the empty default
(``{% if base %}``), so a job that lacks a value still gets a coherent prompt. Every value is
folded onto one line (``_one_line``), so text from a repository or from memory cannot pose as a
heading, a rule or an extra bullet. There is no ``request``: that is the user message."""

PromptValue = str | Sequence[str] | None
"""What ``Skill.render`` accepts for one value; ``None`` means "not given"."""

_PACKAGE: Final = "skills"
_FRONT_MATTER_KEYS: Final = frozenset({"name", "description", "tools", "confirm_first", "version"})
_NAME: Final = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_NAME_MAX: Final = 64
# The rule of ``bot.core.tools.ToolSpec.name``: an allowlist entry that no tool could ever be
# named is a typo, and should fail when the file loads rather than silently allow nothing.
_TOOL_NAME: Final = re.compile(TOOL_NAME_PATTERN)
# A system prompt goes into every model request of a job; a file this large is a mistake (the
# wrong file, or generated text), not a prompt.
_MAX_CHARS: Final = 65_536
# Values are passed as context and never compiled, so text such as "{{ 7*7 }}" in a branch
# name or a style note is printed as-is. The sandbox confines what a template itself may do (no
# private attributes, no mutation of the values); StrictUndefined turns a misspelt value or
# attribute into an error instead of an empty string; prompts are plain text, so no escaping.
_ENV: Final = SandboxedEnvironment(
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass(frozen=True)
class Skill:
    """A kind of docs work: a system-prompt template and the tools the model may use."""

    name: str
    description: str
    tools: frozenset[str]
    """The allowlist: names of the tools an agent running this skill may be given."""
    template: str = field(repr=False)
    """The Jinja2 source of the system prompt (the body of the skill file)."""
    confirm_first: bool = False
    """Every tool call of this skill must be approved by a person before it runs."""
    version: str | None = None

    def render(self, **values: PromptValue) -> str:
        """The system prompt for one job. Only names in ``PROMPT_VALUES`` are accepted; a value
        left out (or ``None``) takes its default. Any failure is BEM-112."""
        context = _context(self.name, values)
        try:
            return _compile(self.template).render(context)
        except Exception as exc:
            # Whatever the template raises (undefined attribute, sandbox refusal, a filter's
            # TypeError) means the same thing to the caller: this prompt cannot be built.
            raise BeamError(
                "BEM-112",
                f"skill {self.name!r}: prompt failed to render: {type(exc).__name__}: {exc}; "
                "fix the template or the values passed to it",
            ) from exc


def builtin_skills() -> list[Skill]:
    """The skills shipped with Riverbeam, sorted by name. Files are read once per process."""
    return list(_builtin_index().values())


def skill_by_name(name: str) -> Skill:
    """The built-in skill called exactly ``name`` (case-sensitive). Unknown names are BEM-110."""
    index = _builtin_index()
    skill = index.get(name)
    if skill is not None:
        return skill
    known = ", ".join(index)
    hint = ""
    near = name.strip().lower() if isinstance(name, str) else ""
    if near in index:
        hint = f"; names match exactly and are lower-case: did you mean {near!r}?"
    raise BeamError("BEM-110", f"unknown skill {name!r}{hint}; known skills: {known}")


def load_skill(source: str | PathLike[str]) -> Skill:
    """A skill from a file path, or from skill text.

    A ``str`` is skill text when it starts with ``+++`` or spans lines (no path does either);
    any other ``str`` or path-like is a file, which must be named ``<name>.md`` after the
    ``name`` in its front matter. Anything wrong is BEM-111 with a message that says what to fix.
    """
    if isinstance(source, str) and (
        source.removeprefix("\ufeff").startswith("+++") or "\n" in source
    ):
        return _parse(source, origin="skill text", file_name=None)
    path = Path(source)
    try:
        with path.open("rb") as stream:
            # UTF-8 takes at most four bytes a character: enough to see that a file is too big.
            data = stream.read(4 * _MAX_CHARS + 1)
    except OSError as exc:
        raise BeamError(
            "BEM-111",
            f"cannot read skill file {str(path)!r} ({exc.strerror or exc}); pass the path of a "
            "readable <name>.md file, or skill text that starts with a '+++' line",
        ) from exc
    return _parse(_decode(data, str(path)), origin=str(path), file_name=path.name)


@functools.cache
def _builtin_index() -> Mapping[str, Skill]:
    skills: dict[str, Skill] = {}
    for entry in resources.files(_PACKAGE).iterdir():
        if entry.name.endswith(".md") and entry.is_file():
            origin = f"{_PACKAGE}/{entry.name}"
            text = _decode(entry.read_bytes(), origin)
            skill = _parse(text, origin=origin, file_name=entry.name)
            skills[skill.name] = skill
    return MappingProxyType(dict(sorted(skills.items())))


@functools.lru_cache(maxsize=64)
def _compile(template: str) -> jinja2.Template:
    return _ENV.from_string(template)


def _decode(data: bytes, origin: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BeamError(
            "BEM-111",
            f"{origin}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8",
        ) from exc


def _parse(text: str, *, origin: str, file_name: str | None) -> Skill:
    if len(text) > _MAX_CHARS:
        raise BeamError(
            "BEM-111", f"{origin}: over {_MAX_CHARS} characters; a system prompt should be short"
        )
    front, body = _split(text, origin)
    try:
        data = tomllib.loads(front)
    except tomllib.TOMLDecodeError as exc:
        raise BeamError(
            "BEM-111",
            f"{origin}: front matter is not valid TOML: {exc} "
            "(line 1 is the first line after the opening '+++')",
        ) from exc
    skill = _skill_from(data, body, origin)
    if file_name is not None and file_name != f"{skill.name}.md":
        raise BeamError(
            "BEM-111",
            f"{origin}: the file is named {file_name!r} but its front matter says "
            f"name = {skill.name!r}; rename the file to '{skill.name}.md' or fix the name",
        )
    _check_template(skill, origin)
    return skill


def _split(text: str, origin: str) -> tuple[str, str]:
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")
    if lines[0].rstrip() != "+++":
        raise BeamError(
            "BEM-111",
            f"{origin}: a skill file must start with a '+++' line, then TOML front matter "
            "(name, description, tools), then another '+++' line, then the prompt",
        )
    for index in range(1, len(lines)):
        if lines[index].rstrip() == "+++":
            body = "\n".join(lines[index + 1 :]).lstrip("\n")
            return "\n".join(lines[1:index]), body
    raise BeamError(
        "BEM-111", f"{origin}: the front matter is never closed; add a '+++' line after it"
    )


def _skill_from(data: dict[str, Any], body: str, origin: str) -> Skill:
    unknown = sorted(data.keys() - _FRONT_MATTER_KEYS)
    if unknown:
        raise BeamError(
            "BEM-111",
            f"{origin}: unknown front-matter key(s) {', '.join(unknown)}; "
            f"allowed keys are {', '.join(sorted(_FRONT_MATTER_KEYS))}",
        )
    name = _required_text(data, "name", origin)
    if len(name) > _NAME_MAX or not _NAME.fullmatch(name):
        raise BeamError(
            "BEM-111",
            f"{origin}: name = {name!r} is not a valid skill name; use lower-case letters and "
            f"digits in words joined by single hyphens, at most {_NAME_MAX} characters "
            "(for example 'release-notes')",
        )
    confirm_first = data.get("confirm_first", False)
    if not isinstance(confirm_first, bool):
        raise BeamError("BEM-111", f"{origin}: confirm_first must be true or false")
    version = data.get("version")
    if version is not None and not isinstance(version, str):
        raise BeamError("BEM-111", f'{origin}: version must be a string, e.g. version = "1"')
    if not body.strip():
        raise BeamError(
            "BEM-111", f"{origin}: the prompt is empty; write the system prompt after the '+++'"
        )
    return Skill(
        name=name,
        description=_required_text(data, "description", origin),
        tools=_allowlist(data, origin),
        template=body,
        confirm_first=confirm_first,
        version=version,
    )


def _required_text(data: dict[str, Any], key: str, origin: str) -> str:
    value = data.get(key)
    if value is None:
        raise BeamError("BEM-111", f'{origin}: front matter has no {key}; add {key} = "..."')
    if not isinstance(value, str) or not value.strip():
        raise BeamError("BEM-111", f"{origin}: {key} must be a non-empty string")
    return value.strip()


def _allowlist(data: dict[str, Any], origin: str) -> frozenset[str]:
    tools = data.get("tools")
    if tools is None:
        raise BeamError(
            "BEM-111",
            f'{origin}: front matter has no tools; add tools = ["read_file", ...] '
            "(or tools = [] for a skill that uses no tools)",
        )
    if not isinstance(tools, list):
        raise BeamError("BEM-111", f"{origin}: tools must be a list of tool names")
    seen: set[str] = set()
    for tool in tools:
        if not isinstance(tool, str):
            raise BeamError(
                "BEM-111", f"{origin}: tools must hold only strings (tool names), not {tool!r}"
            )
        if not _allowed_name(tool):
            raise BeamError(
                "BEM-111",
                f"{origin}: {tool!r} in tools is not a tool name; tool names are 1-64 "
                "letters, digits, '_' or '-', and an MCP server's tool is 'server.tool'",
            )
        if tool in seen:
            raise BeamError("BEM-111", f"{origin}: tools lists {tool!r} twice; list it once")
        seen.add(tool)
    return frozenset(seen)


def _allowed_name(entry: str) -> bool:
    """A host or container tool's name, or ``server.tool`` whose model-facing name (see
    ``bot.core.tools.mcp_tool_name``) is a valid tool name."""
    if _TOOL_NAME.fullmatch(entry):
        return True
    mcp = re.fullmatch(MCP_ALLOWLIST_PATTERN, entry)
    return bool(
        mcp
        and re.fullmatch(MCP_SERVER_NAME_PATTERN, mcp.group(1))
        and _TOOL_NAME.fullmatch(mcp_tool_name(mcp.group(1), mcp.group(2)))
    )


def _check_template(skill: Skill, origin: str) -> None:
    try:
        tree = _ENV.parse(skill.template)
    except jinja2.TemplateSyntaxError as exc:
        raise BeamError(
            "BEM-111",
            f"{origin}: the prompt is not a valid Jinja2 template: {exc.message} "
            f"(line {exc.lineno} of the prompt)",
        ) from exc
    unknown = sorted(
        meta.find_undeclared_variables(tree) - PROMPT_VALUES.keys() - _ENV.globals.keys()
    )
    if unknown:
        raise BeamError(
            "BEM-111",
            f"{origin}: the prompt uses unknown value(s) {', '.join(unknown)}; "
            f"the values a prompt can use are {', '.join(PROMPT_VALUES)}{_request_hint(unknown)}",
        )
    try:
        skill.render()
    except BeamError as exc:
        raise BeamError(
            "BEM-111",
            f"{origin}: the prompt does not render when a job gives no values ({exc.message}); "
            "guard optional parts, e.g. {% if base %}...{% endif %}",
        ) from exc


def _context(skill: str, values: Mapping[str, object]) -> dict[str, object]:
    unknown = sorted(values.keys() - PROMPT_VALUES.keys())
    if unknown:
        raise BeamError(
            "BEM-112",
            f"skill {skill!r}: unknown prompt value(s) {', '.join(unknown)}; "
            f"the values are {', '.join(PROMPT_VALUES)}{_request_hint(unknown)}",
        )
    context: dict[str, object] = dict(PROMPT_VALUES)
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(PROMPT_VALUES[key], str):
            if not isinstance(value, str):
                raise BeamError(
                    "BEM-112",
                    f"skill {skill!r}: {key} must be a string, not {type(value).__name__}",
                )
            context[key] = _one_line(value)
        else:
            context[key] = _string_list(skill, key, value)
    return context


def _request_hint(unknown: Sequence[str]) -> str:
    # Skills written before the request became the user message rendered it in the prompt.
    if "request" not in unknown:
        return ""
    return " (the request is not a template value: the model gets it as the user message)"


def _string_list(skill: str, key: str, value: object) -> tuple[str, ...]:
    # A bare string is a Sequence[str] too; accepting it would render one bullet per character.
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise BeamError(
            "BEM-112",
            f"skill {skill!r}: {key} must be a list of strings, not {type(value).__name__}",
        )
    # Blank entries are dropped so an empty note neither prints a bare bullet nor makes a
    # list that holds nothing look non-empty to the template.
    return tuple(line for line in map(_one_line, value) if line)


def _one_line(text: str) -> str:
    return " ".join(text.split())
