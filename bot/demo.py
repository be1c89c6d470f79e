"""The demo: a sample docs repository, its configuration, and the scripted demo model.

``riverbeam demo`` (``bot.cli.demo_command``) builds a bare upstream holding a small handbook whose
install page has typos and a broken relative link, registers it in a generated
``riverbeam.toml``, and asks an author job to fix the page.

Without a model API key the workers use ``demo_model`` (``model.factory =
"bot.demo:demo_model"``): a scripted model, a ``PlaybookClient`` with a plan for every kind
that works through the real tools and computes its answers from what they return. Its whole
knowledge is a list of common misspellings and the rule that a relative link must point at a
file that exists:

- author: lists the tree, reads the install page, writes it back corrected (misspellings
  replaced word by word; a link to a missing page pointed at the closest page that exists),
  looks at the diff, commits and pushes, which parks for approval;
- review: reads the log, the diff, the tree and every changed file, and delivers with
  ``review_change`` one finding per misspelling (minor) and per broken relative link
  (major), the verdict following from them;
- summarize and commit-notes: read the log and the diff and describe the commits, the files
  and the fixes the diff makes;
- publish: states what it publishes, from its brief, and calls ``publish_docset``.

Nothing about the pages is hard-coded in its steps: change them and it finds what is there.
With a key, the workers use the live model and this module only provides the repository.
"""

from __future__ import annotations

import difflib
import json
import posixpath
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pygit2
from pydantic import BaseModel, JsonValue, ValidationError

from bot.clients.base import Completion, Message, ToolCall
from bot.clients.playbook import PlaybookClient, PlaybookStep, last_tool_result, tool_results
from bot.jobs.host_tools.review import SubmittedReview, Verdict
from bot.store.models import Finding, JobKind, JobRecord
from sandbox.inside.reports import DiffReport, LogReport

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
        if not _missing_target(target, here, existing):
            return match.group(0)
        closest = difflib.get_close_matches(target, neighbours, n=1, cutoff=0.6)
        if not closest:
            return match.group(0)
        fixes.append(Fix(target, closest[0]))
        return f"]({closest[0]}{match.group('anchor') or ''})"

    return _LINK.sub(replace, text), fixes


def _missing_target(target: str, here: str, existing: set[str]) -> bool:
    """Whether ``target``, linked from a page in directory ``here``, is a relative link to a
    file that is not in ``existing``."""
    if "://" in target or target.startswith(("/", "mailto:")):
        return False
    return posixpath.normpath(posixpath.join(here, target)) not in existing


# -- the scripted demo model --------------------------------------------------------------


class DemoModel(PlaybookClient):
    """A ``PlaybookClient`` that reports itself as the scripted demo model."""

    model = "riverbeam-demo-script"


def demo_model(job: JobRecord) -> DemoModel:
    """``model.factory`` of the demo: the scripted plan of the job's kind."""
    return DemoModel(PLANS[job.spec.kind]())


def _author_steps() -> list[PlaybookStep]:
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


# -- review ----------------------------------------------------------------------------------

MAX_REVIEW_FILES = 20
_Read = TypeVar("_Read", bound=BaseModel)


def _read(messages: Sequence[Message], tool: str, model: type[_Read]) -> _Read | None:
    """The newest result of ``tool``, as the report it is; None when it failed or is absent."""
    try:
        return model.model_validate(last_tool_result(messages, tool))
    except ValidationError:
        return None


def _review_steps() -> list[PlaybookStep]:
    return [
        Completion.of_calls(ToolCall.of("git_log", {}), ToolCall.of("git_diff", {})),
        _read_changed_files,
        _deliver_review,
        _report_review,
    ]


def _read_changed_files(messages: Sequence[Message]) -> Completion:
    """The tree (for the links) and every text file the diff adds or changes."""
    diff = _read(messages, "git_diff", DiffReport)
    changed = [
        item.path
        for item in (diff.files if diff else [])
        if item.status != "deleted" and not item.binary
    ]
    reads = [ToolCall.of("read_file", {"path": path}) for path in changed[:MAX_REVIEW_FILES]]
    return Completion.of_calls(ToolCall.of("list_tree", {}), *reads)


def review_pages(pages: Mapping[str, str], files: Sequence[str]) -> SubmittedReview:
    """The review of ``pages`` (path → text as read): a finding per misspelling (minor, the
    corrected line as its suggestion) and per relative link to a missing file (major, the
    line pointed at the closest page as its suggestion, when one is similar enough); the
    verdict follows from the findings."""
    existing = set(files)
    findings: list[Finding] = []
    for path, text in pages.items():
        here = posixpath.dirname(path)
        for number, line in enumerate(text.split("\n"), start=1):
            fixed, typos = fix_typos(line)
            findings += [
                Finding(path=path, line=number, severity="minor", suggestion=fixed,
                        note=f"Misspelling: '{typo.before}' should be '{typo.after}'.")
                for typo in typos
            ]  # fmt: skip
            repointed = fix_links(line, path, files)[0]
            findings += [
                Finding(path=path, line=number, severity="major",
                        suggestion=repointed if repointed != line else None,
                        note=f"The link to '{target}' points at a file that does not exist.")
                for target in (match.group("target") for match in _LINK.finditer(line))
                if _missing_target(target, here, existing)
            ]  # fmt: skip
    findings.sort(key=lambda finding: finding.severity != "major")
    majors = sum(finding.severity == "major" for finding in findings)
    minors = len(findings) - majors
    verdict: Verdict
    if majors:
        verdict, why = "request_changes", f"{majors} broken relative link(s) must be fixed"
    elif minors:
        verdict, why = "approve_with_suggestions", f"{minors} misspelling(s) are worth fixing"
    else:
        verdict, why = "approve", "no misspelling I know of and no broken relative link"
    checked = ", ".join(pages) or "no page (the change adds or changes no text file)"
    summary = f"Checked {checked} for misspellings and relative links: {why}."
    return SubmittedReview(verdict=verdict, summary=summary, findings=findings)


def _deliver_review(messages: Sequence[Message]) -> Completion | str:
    tree = last_tool_result(messages, "list_tree")
    names = tree.get("files") if isinstance(tree, dict) else None
    if not isinstance(names, list):
        return f"I could not list the tree ({tree}), so I cannot check the links; no review."
    pages = {
        str(arguments["path"]): str(result["content"])
        for arguments, result in tool_results(messages, "read_file")
        if isinstance(arguments, dict)
        and isinstance(result, dict)
        and isinstance(result.get("content"), str)
    }
    review = review_pages(pages, [str(name) for name in names])
    return _calls("review_change", review.model_dump(mode="json"))


def _report_review(messages: Sequence[Message]) -> str:
    """The final answer: the verdict, the findings by severity, the most important one."""
    delivered = tool_results(messages, "review_change")
    if not delivered or not isinstance(delivered[-1][1], dict) or "error" in delivered[-1][1]:
        return f"review_change did not record the review: {last_tool_result(messages)}"
    review = SubmittedReview.model_validate(delivered[-1][0])
    counts = Counter(finding.severity for finding in review.findings)
    found = ", ".join(f"{count} {severity}" for severity, count in counts.items()) or "none"
    top = review.findings[0] if review.findings else None
    first = f" Most important: {top.path}:{top.line}: {top.note}" if top else ""
    return f"Verdict: {review.verdict}. Findings: {found}.{first}"


# -- summarize and commit-notes: what the log and the diff show ------------------------------


@dataclass
class _FileChange:
    path: str
    status: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def fixes(self) -> tuple[list[Fix], list[Fix]]:
        """The misspellings the change corrects and the link targets it repoints."""
        removed, added = "\n".join(self.removed), "\n".join(self.added)
        typos = {(f.before, f.after): f for f in fix_typos(removed)[1] if f.after in added}
        before = {m.group("target") for m in _LINK.finditer(removed)}
        after = {m.group("target") for m in _LINK.finditer(added)}
        pairs = zip(sorted(before - after), sorted(after - before), strict=False)
        return list(typos.values()), [Fix(old, new) for old, new in pairs]

    def described(self) -> str:
        typos, links = self.fixes()
        parts = []
        if typos:
            parts.append(f"corrects {len(typos)} misspelling(s) ({', '.join(map(str, typos))})")
        if links:
            parts.append(f"repoints {len(links)} link(s) ({', '.join(map(str, links))})")
        what = " and ".join(parts) or self.status
        return f"`{self.path}`: {what}; +{len(self.added)} −{len(self.removed)} lines"


@dataclass
class _Change:
    branch: str
    base: str
    commits: list[str]
    files: list[_FileChange]


def _read_change(messages: Sequence[Message]) -> _Change | str:
    """The change from the log and the diff it read, or why it cannot say."""
    log = _read(messages, "git_log", LogReport)
    diff = _read(messages, "git_diff", DiffReport)
    if log is None or diff is None:
        return f"I could not read the change: {last_tool_result(messages)}"
    since = log.since or diff.against
    files = {item.path: _FileChange(item.path, item.status) for item in diff.files}
    current: _FileChange | None = None
    for line in diff.patch.splitlines():
        if line.startswith("diff --git "):
            current = files.get(line.rsplit(" b/", 1)[-1])
        elif current is None or line.startswith(("+++ ", "--- ")):
            continue
        elif line.startswith("+"):
            current.added.append(line[1:])
        elif line.startswith("-"):
            current.removed.append(line[1:])
    # The workspace's branch is the job's own; the brief names the branch as people know it.
    named = _BRIEF_BRANCH.search(str(messages[0].get("content") or "")) if messages else None
    return _Change(
        branch=named["branch"] if named else log.branch or "HEAD",
        base=since.label if since else "HEAD",
        # The log lists the newest first.
        commits=[f"`{c.sha[:12]}` {c.subject}" for c in reversed(log.commits)],
        files=list(files.values()),
    )


def _change_steps(answer: Callable[[_Change], str]) -> list[PlaybookStep]:
    def final(messages: Sequence[Message]) -> str:
        change = _read_change(messages)
        return change if isinstance(change, str) else answer(change)

    return [Completion.of_calls(ToolCall.of("git_log", {}), ToolCall.of("git_diff", {})), final]


def summary_text(change: _Change) -> str:
    grouped: dict[str, list[str]] = {}
    for item in change.files:
        grouped.setdefault(item.status, []).append(f"`{item.path}`")
    files = "; ".join(f"{status}: {', '.join(paths)}" for status, paths in grouped.items())
    readers = [f"  - {item.described()}" for item in change.files]
    return "\n".join(
        [
            f"### `{change.branch}` compared with `{change.base}`",
            f"- **Commits** ({len(change.commits)}): {'; '.join(change.commits) or 'none'}",
            f"- **Files touched**: {files or 'none'}",
            "- **What changed for readers**:",
            *(readers or ["  - nothing: the branch changes no file"]),
        ]
    )


def commit_subject(files: Sequence[_FileChange]) -> str:
    """An imperative subject from the fixes the change makes, else from what it touches."""
    if not files:
        return "Record an empty change"
    where = files[0].path if len(files) == 1 else f"{len(files)} pages"
    fixes = [item.fixes() for item in files]
    found = {"typos": any(t for t, _ in fixes), "broken links": any(k for _, k in fixes)}
    kinds = [name for name, there in found.items() if there]
    if kinds:
        return f"Fix {' and '.join(kinds)} in {where}"
    verbs = {"added": "Add", "deleted": "Remove", "renamed": "Rename"}
    return f"{verbs.get(files[0].status, 'Update') if len(files) == 1 else 'Update'} {where}"


def notes_text(change: _Change) -> str:
    fixing = any(typos or links for typos, links in (item.fixes() for item in change.files))
    why = (
        "Readers met misspelled words or links to pages that do not exist. What the diff changes:"
        if fixing
        else "What the diff changes:"
    )
    body = [textwrap.fill(why, 72)]
    body += [
        textwrap.fill(f"- {item.described()}", 72, subsequent_indent="  ") for item in change.files
    ]
    if change.commits:
        body.append(textwrap.fill("Commits: " + "; ".join(change.commits), 72))
    message = commit_subject(change.files) + "\n\n" + "\n\n".join(body)
    return f"```text\n{message}\n```"


# -- publish ---------------------------------------------------------------------------------

_BRIEF_BRANCH = re.compile(r"(?:Branch to summarize|Branch): `(?P<branch>[^`]+)`")
_BRIEF_REF = re.compile(r"Reviewed ref to publish: `(?P<ref>[^`]+)`")
_BRIEF_DESTINATION = re.compile(r"Publish to: `(?P<ref>[^`]+)`")


def _publish(messages: Sequence[Message]) -> Completion | str:
    """Says what it publishes, as its brief names it, and calls publish_docset."""
    brief = str(messages[0].get("content") or "") if messages else ""
    ref, destination = _BRIEF_REF.search(brief), _BRIEF_DESTINATION.search(brief)
    if ref is None or destination is None:
        return "My brief does not name the reviewed ref and the destination; nothing to publish."
    text = f"I am about to publish {ref['ref']} to {destination['ref']}."
    call = ToolCall.of("publish_docset", {"note": f"Publishes {ref['ref']} as reviewed."})
    return Completion(text=text, tool_calls=[call])


def _report_publish(messages: Sequence[Message]) -> str:
    result = last_tool_result(messages, "publish_docset")
    if isinstance(result, dict) and result.get("published"):
        return f"Published {result.get('sha')} to {result.get('publish_ref')}."
    if isinstance(result, dict) and result.get("refused"):
        return f"Nothing was published: {result.get('by')} refused ({result.get('comment')})."
    return f"Nothing was published: {result}"


PLANS: dict[JobKind, Callable[[], list[PlaybookStep]]] = {
    JobKind.AUTHOR: _author_steps,
    JobKind.REVIEW: _review_steps,
    JobKind.SUMMARIZE: lambda: _change_steps(summary_text),
    JobKind.COMMIT_NOTES: lambda: _change_steps(notes_text),
    JobKind.PUBLISH: lambda: [_publish, _report_publish],
}
