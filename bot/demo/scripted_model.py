"""The scripted demo model: a ``PlaybookClient`` with a plan for every job kind, working
through the real tools and computing its answers from what they return (see ``bot.demo``)."""

from __future__ import annotations

import posixpath
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import JsonValue, TypeAdapter, ValidationError

from bot.clients.base import Completion, Message, ToolCall
from bot.clients.playbook import PlaybookClient, PlaybookStep, last_tool_result, tool_results
from bot.demo.fixes import LINK, Fix, fix_links, fix_typos, missing_target
from bot.demo.sample_repo import PAGE
from bot.jobs.host_tools.review import SubmittedReview, Verdict
from bot.store.models import Finding, JobKind, JobRecord
from sandbox.inside.reports import DiffReport, LogReport


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
# Link targets looked up per review; a link past them is judged from the listings alone.
MAX_LOOKUPS = 40
_Read = TypeVar("_Read")


def _read(messages: Sequence[Message], tool: str, model: type[_Read]) -> _Read | None:
    """The newest result of ``tool``, as the report it is; None when it failed or is absent."""
    try:
        return TypeAdapter(model).validate_python(last_tool_result(messages, tool))
    except ValidationError:
        return None


def _review_steps() -> list[PlaybookStep]:
    return [
        Completion.of_calls(ToolCall.of("git_log", {}), ToolCall.of("git_diff", {})),
        _read_changed_files,
        _once_delivered_report(_look_up_links),
        _once_delivered_report(_deliver_review),
        _report_review,
    ]


def _once_delivered_report(step: Callable[[Sequence[Message]], Completion | str]) -> PlaybookStep:
    """``step``, unless the review went out a round early (a change with no page to look
    links up in): then the final report, so the review is never delivered twice."""

    def answer(messages: Sequence[Message]) -> Completion | str:
        if tool_results(messages, "review_change"):
            return _report_review(messages)
        return step(messages)

    return answer


def _read_changed_files(messages: Sequence[Message]) -> Completion:
    """Every text file the diff adds or changes."""
    diff = _read(messages, "git_diff", DiffReport)
    changed = [
        item.path
        for item in (diff.files if diff else [])
        if item.status != "deleted" and not item.binary
    ]
    reads = [ToolCall.of("read_file", {"path": path}) for path in changed[:MAX_REVIEW_FILES]]
    return Completion.of_calls(*reads) if reads else _calls("list_tree", {})


def _pages_read(messages: Sequence[Message]) -> dict[str, str]:
    """The changed pages as read whole (a look-up reads one line and is not one)."""
    return {
        str(arguments["path"]): str(result["content"])
        for arguments, result in tool_results(messages, "read_file")
        if isinstance(arguments, dict)
        and "limit" not in arguments
        and isinstance(result, dict)
        and isinstance(result.get("content"), str)
    }


def _link_targets(pages: Mapping[str, str]) -> list[str]:
    """The files the pages' relative links name, from the tree's root, first seen first."""
    targets: dict[str, None] = {}
    for path, text in pages.items():
        for match in LINK.finditer(text):
            target = match.group("target")
            if "://" in target or target.startswith(("/", "mailto:")):
                continue
            named = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            if named != ".." and not named.startswith("../"):
                targets[named] = None
    return list(targets)


def _look_up_links(messages: Sequence[Message]) -> Completion | str:
    """A listing of each read page's folder (its first page: the neighbours a broken link
    is pointed at) and a one-line read of each link target: however large the tree, each
    target is looked up, never searched for in a listing cut to a page."""
    pages = _pages_read(messages)
    if not pages:
        return _deliver_review(messages)
    folders = dict.fromkeys(posixpath.dirname(path) for path in pages)
    listings = [ToolCall.of("list_tree", {"path": folder}) for folder in folders]
    targets = _link_targets(pages)[:MAX_LOOKUPS]
    lookups = [ToolCall.of("read_file", {"path": target, "limit": 1}) for target in targets]
    return Completion.of_calls(*listings, *lookups)


def _deliver_review(messages: Sequence[Message]) -> Completion | str:
    """The review, from the pages read, the files listed and the link targets found."""
    listings = tool_results(messages, "list_tree")
    listed: list[str] = []
    for _, result in listings:
        names = result.get("files") if isinstance(result, dict) else None
        listed += map(str, names) if isinstance(names, list) else []
    if not listed:
        shown = listings[-1][1] if listings else None
        return f"I could not list the tree ({shown}), so I cannot check the links; no review."
    found = [
        str(arguments["path"])
        for arguments, result in tool_results(messages, "read_file")
        if isinstance(arguments, dict) and isinstance(result, dict) and "content" in result
    ]
    review = review_pages(_pages_read(messages), sorted({*listed, *found}))
    return _calls("review_change", review.model_dump(mode="json"))


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
                for target in (match.group("target") for match in LINK.finditer(line))
                if missing_target(target, here, existing)
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
        before = {m.group("target") for m in LINK.finditer(removed)}
        after = {m.group("target") for m in LINK.finditer(added)}
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
