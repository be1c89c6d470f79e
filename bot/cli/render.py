"""How the job commands show things: frames as they stream, job records, approvals and
their diffs. Everything a model, a repository or a person wrote is printed as text, never
as rich markup, so a page that contains ``[red]`` prints as it is."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import JsonValue
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bot.core.frames import (
    ChunkFrame,
    DoneFrame,
    ErrorFrame,
    Frame,
    PlaceholderFrame,
    ResultStatus,
    ThinkingFrame,
    ToolCallRecord,
    ToolFrame,
)
from bot.core.tools import allowlist_name
from bot.review.links import LinkReport
from bot.review.words import WordChange, line_kinds, word_changes
from bot.store.models import DIGEST_PREFIX, Approval, ApprovalState, JobRecord, JobState

STATE_STYLES: dict[JobState, str] = {
    JobState.QUEUED: "cyan",
    JobState.RUNNING: "blue",
    JobState.AWAITING_APPROVAL: "yellow",
    JobState.SUCCEEDED: "green",
    JobState.FAILED: "red",
    JobState.REFUSED: "magenta",
    JobState.CANCELLED: "dim",
}
ARGUMENT_CHARS = 48
SUMMARY_CHARS = 100
REQUEST_CHARS = 48


def state_text(state: JobState) -> Text:
    return Text(state.value, style=STATE_STYLES[state])


def when(moment: datetime | None) -> str:
    """A timestamp in the reader's local time, to the second."""
    return "" if moment is None else moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def shorten(text: str, limit: int) -> str:
    """One line of at most ``limit`` characters: newlines shown as ``⏎``, the cut as ``…``."""
    flat = text.replace("\n", "⏎")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# -- frames ------------------------------------------------------------------------------


class FrameRenderer:
    """Prints a job's frames as they arrive: one line per tool call (its arguments and what
    it returned, in brief), answer text as it streams, and how each run segment ended."""

    def __init__(self, out: Console) -> None:
        self._out = out
        self._in_text = False

    def frame(self, frame: Frame) -> None:
        if isinstance(frame, ChunkFrame):
            # Token deltas join up on one line; the terminal wraps it where it must.
            self._out.print(Text(frame.text), end="", soft_wrap=True)
            self._in_text = not frame.text.endswith("\n")
            return
        self._end_text()
        if isinstance(frame, ToolFrame):
            self._out.print(tool_line(frame.record), soft_wrap=True)
        elif isinstance(frame, PlaceholderFrame) and frame.text:
            self._out.print(Text(f"  ● {frame.text}", style="dim"))
        elif isinstance(frame, ThinkingFrame) and frame.text:
            self._out.print(Text(f"  … {shorten(frame.text, SUMMARY_CHARS)}", style="dim"))
        elif isinstance(frame, DoneFrame):
            self._done(frame)
        elif isinstance(frame, ErrorFrame):
            self._out.print(Text(f"  ✗ {frame.error.code}: {frame.error.message}", style="red"))

    def end(self, state: JobState) -> None:
        """The job reached a final state."""
        self._end_text()
        self._out.print(Text.assemble("● job ", state_text(state)))

    def note(self, text: str) -> None:
        self._end_text()
        self._out.print(Text(text, style="dim"))

    def _end_text(self) -> None:
        if self._in_text:
            self._out.print()
            self._in_text = False

    def _done(self, frame: DoneFrame) -> None:
        result = frame.result
        if result.status is ResultStatus.INTERRUPTED and result.pending is not None:
            line = f"  ⏸ {result.pending.tool} waits for a person's approval"
            self._out.print(Text(line, style="yellow"))
            return
        if result.status is ResultStatus.REFUSED:
            line = f"  ✗ the model declined the request: {result.refusal or ''}"
            self._out.print(Text(line, style="magenta"))
            return
        if result.status is ResultStatus.FAILED and result.error is not None:
            line = f"  ✗ the run failed: {result.error.code}: {result.error.message}"
            self._out.print(Text(line, style="red"))
            return
        usage = result.usage.total_tokens
        parts = [f"{len(result.tool_calls)} tool calls"]
        if usage:
            parts.append(f"{usage:,} tokens")
        if result.model_used:
            parts.append(f"model {result.model_used}")
        self._out.print(Text(f"  ✓ answered ({', '.join(parts)})", style="green"))


def tool_line(record: ToolCallRecord) -> Text:
    """``▸ read_file path=docs/install.md → 17 lines  3 ms``, or ``✗ … → BEM-xxx: why``."""
    arguments = _arguments(record.arguments)
    line = Text("  ")
    line.append("▸ " if record.ok else "✗ ", style="green" if record.ok else "red")
    line.append(record.name, style="bold")
    if arguments:
        line.append(f" {arguments}")
    if record.ok:
        line.append(f" → {summarize_result(record.name, record.result)}")
    elif record.error is not None:
        line.append(f" → {record.error.code}: {shorten(record.error.message, 160)}", style="red")
    line.append(f"  {record.duration_ms:.0f} ms", style="dim")
    return line


def _arguments(arguments: JsonValue) -> str:
    if isinstance(arguments, dict):
        return " ".join(_argument(name, value) for name, value in arguments.items())
    return "" if arguments is None else shorten(json.dumps(arguments), ARGUMENT_CHARS)


def _argument(name: str, value: JsonValue) -> str:
    if not isinstance(value, str):
        return f"{name}={shorten(json.dumps(value), ARGUMENT_CHARS)}"
    shown = shorten(value, ARGUMENT_CHARS)
    if not shown or " " in shown:
        shown = json.dumps(shown, ensure_ascii=False)
    size = f" ({len(value)} chars)" if len(value) > ARGUMENT_CHARS else ""
    return f"{name}={shown}{size}"


def _count(result: dict[str, Any], key: str, noun: str) -> str:
    value = result.get(key)
    return f"{value} {noun}" if value is not None else noun


def _git_diff(result: dict[str, Any]) -> str:
    files = [f for f in result.get("files") or [] if isinstance(f, dict)]
    added = sum(f.get("additions") or 0 for f in files)
    removed = sum(f.get("deletions") or 0 for f in files)
    if not files:
        return str(result.get("note") or "no changes")
    return f"{len(files)} file(s), +{added} −{removed}"


def _git_push(result: dict[str, Any]) -> str:
    if result.get("refused"):
        return f"refused by {result.get('by')}: {result.get('comment') or 'no comment'}"
    text = f"{str(result.get('sha'))[:12]} to {result.get('ref')}"
    upstream = result.get("upstream")
    if isinstance(upstream, dict):
        landed = "already there" if upstream.get("already_there") else "pushed upstream"
        text += f", {landed} ({upstream.get('branch')})"
    return text


_SUMMARIES: dict[str, Callable[[dict[str, Any]], str]] = {
    "list_tree": lambda r: _count(r, "total_files", "files"),
    "read_file": lambda r: (
        f"binary, {r.get('size')} bytes" if r.get("binary") else _count(r, "total_lines", "lines")
    ),
    "write_file": lambda r: (
        f"{r.get('bytes')} bytes written" + (", new" if r.get("created") else "")
    ),
    "git_status": lambda r: "clean" if r.get("clean") else _count(r, "total_files", "changed"),
    "git_diff": _git_diff,
    "git_log": lambda r: f"{len(r.get('commits') or [])} commits",
    "git_add": lambda r: _count(r, "total_staged", "staged"),
    "git_commit": lambda r: f"{str(r.get('commit'))[:12]} {r.get('subject', '')!s}",
    "git_push": _git_push,
}


def summarize_result(tool: str, result: JsonValue) -> str:
    """What a tool returned, in a few words: the nine sandbox tools by what matters in their
    results, any other tool as shortened JSON."""
    summary = _SUMMARIES.get(tool)
    if isinstance(result, dict) and summary is not None:
        return shorten(summary(result), SUMMARY_CHARS)
    return shorten(json.dumps(result, ensure_ascii=False), SUMMARY_CHARS)


# -- records ---------------------------------------------------------------------------


def jobs_table(records: list[JobRecord]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("id", "kind", "repo", "state", "requested by", "created", "request"):
        table.add_column(name.upper(), no_wrap=name != "request", overflow="ellipsis")
    for record in records:
        spec = record.spec
        what = spec.request or spec.branch or spec.range or spec.review_job or ""
        table.add_row(
            record.id,
            spec.kind.value,
            spec.repo,
            state_text(record.state),
            spec.requested_by,
            when(record.created_at),
            Text(shorten(what, REQUEST_CHARS)),
        )
    return table


def _fields(rows: list[tuple[str, Any]]) -> Text:
    """``name  value`` lines, the values aligned; empty values left out. A value of several
    lines keeps its alignment."""
    shown = [(name, value) for name, value in rows if value not in (None, "", [], {})]
    width = max((len(name) for name, _ in shown), default=0) + 2
    text = Text()
    for name, value in shown:
        value_text = value if isinstance(value, Text) else Text(str(value))
        text.append(name.ljust(width), style="bold")
        for number, line in enumerate(value_text.split("\n")):
            if number:
                text.append("\n" + " " * width)
            text.append_text(line)
        text.append("\n")
    text.rstrip()
    return text


def show_job(out: Console, record: JobRecord, approval: Approval | None) -> None:
    """Everything about one job: the request, where it stands, what it produced or why it
    failed, and its approval."""
    spec = record.spec
    out.print(
        _fields(
            [
                ("job", record.id),
                ("kind", spec.kind.value),
                ("repository", spec.repo),
                ("state", state_text(record.state)),
                ("requested by", spec.requested_by),
                ("request", spec.request),
                ("base", spec.base),
                ("branch", spec.branch or record.branch),
                ("range", spec.range),
                ("review job", spec.review_job),
                ("created", when(record.created_at)),
                ("updated", when(record.updated_at)),
                ("attempts", record.attempt),
                ("worker", record.worker),
                ("cancel requested", "yes" if record.cancel_requested else None),
            ]
        )
    )
    if record.error is not None:
        out.print(Text(f"\nerror {record.error.code}: {record.error.message}", style="red"))
    result = record.result
    if result is not None:
        out.print(Text("\nresult", style="bold"))
        if result.text:
            out.print(Text(result.text))
        if result.refusal is not None:
            out.print(Text(f"the model declined: {result.refusal}", style="magenta"))
        if result.outcome is not None:
            out.print(_outcome(result.outcome.model_dump(mode="json", exclude={"kind"})))
        usage = f"{result.usage.total_tokens:,} tokens" if result.usage.total_tokens else None
        out.print(
            _fields(
                [("tool calls", result.tool_calls), ("model", result.model_used), ("usage", usage)]
            )
        )
    if record.pushes:
        out.print(Text("\npushed upstream", style="bold"))
        for push in record.pushes:
            error = f" ({push.error.code}: {push.error.message})" if push.error else ""
            there = ", already there" if push.already_there else ""
            out.print(f"  {push.sha} to {push.ref}: {push.state.value}{there}{error}")
    if approval is not None:
        out.print(Text("\napproval", style="bold"))
        out.print(approval_fields(approval))


def _outcome(outcome: dict[str, Any]) -> Text:
    """A kind's outcome, field by field; lists of records (commits, findings) one a line."""
    rows: list[tuple[str, Any]] = []
    for name, value in outcome.items():
        label = name.replace("_", " ")
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines = [" ".join(str(v) for v in item.values() if v is not None) for item in value]
            rows.append((label, Text("\n".join(lines))))
        elif isinstance(value, list):
            rows.append((label, Text("\n".join(str(v) for v in value))))
        elif isinstance(value, dict):
            rows.append((label, Text(json.dumps(value))))
        elif isinstance(value, str):
            rows.append((label, Text(textwrap.dedent(value).strip("\n"))))
        else:
            rows.append((label, value))
    return _fields(rows)


def approval_fields(approval: Approval) -> Text:
    decision = None
    if approval.decided_by:
        decision = f"{approval.state.value} by {approval.decider} at {when(approval.decided_at)}"
    elif approval.state.value != "pending":
        decision = approval.state.value
    return _fields(
        [
            ("job", approval.job_id),
            ("approval", approval.id),
            ("repository", approval.repo),
            ("requested by", approval.requested_by),
            ("state", approval.state.value),
            # An MCP call as skills name it (server.tool): the server is what a person checks.
            ("tool", f"{allowlist_name(approval.tool)} {json.dumps(approval.arguments)}"),
            ("target ref", approval.target_ref),
            ("commit", approval.commit_sha),
            ("base", approval.base_sha),
            ("diff digest", approval.diff_digest and f"sha256:{approval.diff_digest}"),
            ("waiting since", when(approval.created_at)),
            ("decision", decision),
            ("comment", approval.comment),
        ]
    )


def show_approval(out: Console, approval: Approval, *, commands: bool = True) -> None:
    """The parked call, the diff stat, the diff that would land, highlighted, and (while it
    waits, with ``commands``) the commands that decide exactly this approval."""
    out.print(approval_fields(approval))
    if approval.diff_stat:
        out.print(Text("\ndiff stat", style="bold"))
        out.print(Text(textwrap.dedent(approval.diff_stat).strip("\n")))
    if approval.diff:
        out.print(Text("\ndiff", style="bold"))
        print_diff(out, approval.diff)
    if approval.checks is not None:
        print_checks(out, approval)
    if approval.links is not None:
        print_links(out, approval.links)
    if commands and approval.state is ApprovalState.PENDING:
        named = decision_flags(approval)
        out.print(Text("\ndecide this approval (and no other)", style="bold"))
        # Unwrapped: a command cut across lines would not paste whole.
        approve = f"  riverbeam approvals approve {approval.job_id} {named} [--comment TEXT]"
        out.print(approve, soft_wrap=True)
        refuse = f"  riverbeam approvals refuse {approval.job_id} {named} --comment TEXT"
        out.print(refuse, soft_wrap=True)


def decision_flags(approval: Approval) -> str:
    """The CLI flags that name ``approval`` in a decision."""
    flags = f"--approval {approval.id}"
    if approval.commit_sha:
        flags += f" --commit {approval.commit_sha}"
    if approval.diff_digest:
        flags += f" --digest {DIGEST_PREFIX}{approval.diff_digest}"
    return flags


DIFF_STYLES = {"file": "bold", "hunk": "magenta", "add": "green", "del": "red", "ctx": ""}
WORD_STYLES = {"old": "bold white on red", "new": "bold white on green"}
KIND_WORDS = {
    "whitespace": "spacing only",
    "rewrap": "rewrapped only (the same words)",
    "too_long": "too long to compare word by word",
}


def print_diff(out: Console, diff: str) -> None:
    """The diff, one line each, with the words a changed pair changed highlighted. Styles
    only: piped, the text is exactly the diff (the console drops colour off a terminal)."""
    changes = word_changes(diff)
    marks = {line.diff_line: line for change in changes for line in change.lines}
    lines = diff.splitlines()
    for index, (line, kind) in enumerate(zip(lines, line_kinds(lines), strict=True)):
        style = DIFF_STYLES[kind]
        text = Text(line[:1] if index in marks else line, style=style)
        if index in marks:
            changed = marks[index]
            for segment in changed.segments:
                word_style = WORD_STYLES[changed.side] if segment.mark == "changed" else style
                text.append(segment.text, style=word_style)
        # Not cropped to the terminal: a diff line cut short would misstate the change.
        out.print(text, crop=False, soft_wrap=True)
    if changes:
        out.print(Text("\nword changes", style="bold"))
        for change in changes:
            out.print(word_change_line(change), crop=False, soft_wrap=True)


def word_change_line(change: WordChange) -> Text:
    """``path:line  [-old-] {+new+}``, git's plain word-diff marks, readable without colour."""
    text = Text(f"  {change.path}:{change.new_start}  ")
    if change.kind != "words":
        return text.append(KIND_WORDS[change.kind], style="italic")
    for side, opening, closing, kind in (("old", "[-", "-]", "del"), ("new", "{+", "+}", "add")):
        for line in change.lines:
            for segment in line.segments:
                if line.side == side and segment.mark == "changed":
                    text.append(f"{opening}{segment.text}{closing}", style=DIFF_STYLES[kind])
                    text.append(" ")
    return text


def print_checks(out: Console, approval: Approval) -> None:
    """The docs checks: new failures first, then what the base had already, then times."""
    report = approval.checks
    if report is None:
        return
    state = "clean" if report.clean else f"{report.new_failures} new failures"
    blocks = " (blocks the approve)" if approval.checks_block and not report.clean else ""
    out.print(Text(f"\ndocs checks: {state}{blocks}", style="bold"))
    runs = report.ordered()
    for run in runs:
        if run.status == "error":
            line = Text(f"  {run.check}  could not say: ").append(run.detail, style="red")
            out.print(line, crop=False, soft_wrap=True)
        for finding in run.new:
            where = f"  {run.check}  {finding.path}:{finding.line}  {finding.rule}  "
            out.print(Text(where).append(finding.message, style="red"), crop=False, soft_wrap=True)
    for run in runs:
        if run.existing_total:
            out.print(f"  {run.check}: {run.existing_total} findings already on the base")
    for run in runs:
        base = f", {run.base_seconds:.2f} s on the base" if run.base_seconds is not None else ""
        out.print(f"  {run.check}: {run.status}, {run.seconds:.2f} s{base}")
    if approval.checks_overridden_by:
        out.print(f"  approved over the checks by {approval.checks_overridden_by}")


def print_links(out: Console, report: LinkReport) -> None:
    """The changed pages' broken links, each with page and line; external ones listed."""
    if not report.pages and not report.skipped:
        return
    out.print(Text(f"\nlinks ({len(report.pages)} changed pages checked)", style="bold"))
    for broken in report.broken:
        where = f"  {broken.page}:{broken.line}  {broken.target}  "
        out.print(Text(where).append(broken.reason, style="red"), crop=False, soft_wrap=True)
    if not report.broken:
        out.print(Text("  every relative link and image resolves", style="green"))
    for external in report.external:
        line = f"  {external.page}:{external.line}  {external.url}  (external, not checked)"
        out.print(line, crop=False, soft_wrap=True)
    for page in report.skipped:
        out.print(f"  {page}  not checked: over the size cap, or past the page limit")
    if report.cut:
        out.print("  more links than the lists keep: only the first are shown")


def approvals_table(approvals: list[Approval]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("job", "repo", "requested by", "target ref", "commit", "change", "waiting since"):
        table.add_column(name.upper(), no_wrap=True, overflow="ellipsis")
    for approval in approvals:
        stat = approval.diff_stat.strip().splitlines()
        table.add_row(
            approval.job_id,
            approval.repo,
            approval.requested_by,
            approval.target_ref or "",
            (approval.commit_sha or "")[:12],
            Text(stat[-1].strip() if stat else ""),
            when(approval.created_at),
        )
    return table
