"""``review_change``: the review job's structured verdict, checked against the tree.

The tool stores the review in a ``ReviewCollector`` that the executor reads after the run to
build the job's ``ReviewOutcome`` (it adds the branch and the commit it reviewed). Every
finding must name a path that exists in the tree, and a line that the file has, so a review
never cites what is not there; a bad finding is a failed call the model corrects. Calling the
tool again replaces the review: the last one delivered is the review.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, JsonValue

from bot.agents.tree_text import split_lines
from bot.core.errors import BeamError
from bot.core.input import AgentInput
from bot.core.tools import ToolSpec, json_params, validate_arguments
from bot.store.models import Finding, ReviewOutcome
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.sandbox_tools import decode_text

__all__ = ["ReviewChangeTool", "ReviewCollector", "SubmittedReview"]

# ReviewOutcome.verdict without its None (a test keeps the two in step).
Verdict = Literal["approve", "approve_with_suggestions", "request_changes"]
VERDICTS: tuple[str, ...] = get_args(Verdict)
SEVERITIES: tuple[str, ...] = get_args(Finding.model_fields["severity"].annotation)
MAX_FINDINGS = 100
MAX_SUMMARY_CHARS = 4_000
MAX_NOTE_CHARS = 2_000
MAX_SUGGESTION_CHARS = 4_000


class SubmittedReview(BaseModel):
    """What ``review_change`` received, after its checks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    verdict: Verdict
    summary: str
    findings: list[Finding]


class ReviewCollector:
    """Holds the review a run delivered; the executor reads it once the run is over."""

    def __init__(self) -> None:
        self.review: SubmittedReview | None = None
        self.submissions = 0

    def submit(self, review: SubmittedReview) -> bool:
        """Keep ``review``; True when it replaced an earlier one."""
        replaced = self.review is not None
        self.review = review
        self.submissions += 1
        return replaced

    def outcome(self, *, branch: str, commit_sha: str) -> ReviewOutcome:
        """The job's outcome; without a delivered review its verdict is None."""
        review = self.review
        if review is None:
            return ReviewOutcome(branch=branch, commit_sha=commit_sha)
        return ReviewOutcome(
            branch=branch,
            commit_sha=commit_sha,
            verdict=review.verdict,
            summary=review.summary,
            findings=list(review.findings),
        )


class ReviewChangeTool:
    """The ``review_change`` host tool: checks a review against ``root`` and collects it."""

    def __init__(self, collector: ReviewCollector, root: SandboxRoot) -> None:
        self._collector = collector
        self._root = root

    def __repr__(self) -> str:
        return f"ReviewChangeTool({self._root!r})"

    @property
    def collector(self) -> ReviewCollector:
        """What the run delivered through this tool, for the review kind's outcome."""
        return self._collector

    def spec(self) -> ToolSpec:
        finding = {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 1024,
                    "description": "File the finding is about, like 'docs/install.md'.",
                },
                "line": {
                    "type": ["integer", "null"],
                    "minimum": 1,
                    "description": "Line in the new version of the file (1-based), counted "
                    "in what read_file returned; omit for a finding about the whole file.",
                },
                "severity": {"type": "string", "enum": list(SEVERITIES)},
                "note": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_NOTE_CHARS,
                    "description": "The problem, in one or two sentences.",
                },
                "suggestion": {
                    "type": ["string", "null"],
                    "maxLength": MAX_SUGGESTION_CHARS,
                    "description": "Replacement wording the author can paste.",
                },
            },
            "required": ["path", "severity", "note"],
            "additionalProperties": False,
        }
        return ToolSpec(
            name="review_change",
            description=(
                "Deliver your review of the change: a verdict, a summary and the findings. "
                "Call it once, after reading the change; calling it again replaces the "
                "earlier review. verdict: 'approve' (ready as is), 'approve_with_suggestions' "
                "(ready; the findings are optional improvements) or 'request_changes' (must "
                "not merge until the blocker or major findings are fixed). Severity: "
                "'blocker' (wrong, broken or unsafe), 'major' (should be fixed before "
                "merging), 'minor' (worth fixing), 'nit' (polish). Order findings most serious "
                "first. Every path must exist in the working tree and every line must be a "
                "line of that file, or the call fails (BEM-090) and nothing is recorded: fix "
                f"the finding and call again. At most {MAX_FINDINGS} findings."
            ),
            parameters=json_params(
                {
                    "verdict": {"type": "string", "enum": list(VERDICTS)},
                    "summary": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_SUMMARY_CHARS,
                        "description": "The verdict's reason and the review in brief.",
                    },
                    "findings": {"type": "array", "maxItems": MAX_FINDINGS, "items": finding},
                },
                ["verdict", "summary", "findings"],
            ),
        )

    async def invoke(self, args: dict[str, JsonValue], input: AgentInput) -> JsonValue:
        checked = validate_arguments(self.spec(), args)
        review = await asyncio.to_thread(self.check, checked)
        replaced = self._collector.submit(review)
        counts: Counter[str] = Counter(finding.severity for finding in review.findings)
        return {
            "recorded": True,
            "verdict": review.verdict,
            "findings": len(review.findings),
            "by_severity": {severity: counts[severity] for severity in SEVERITIES},
            "replaced_previous": replaced,
            "note": (
                "this review replaces the one recorded earlier; only the last review counts"
                if replaced
                else "review recorded; give your final answer now"
            ),
        }

    def check(self, args: dict[str, Any]) -> SubmittedReview:
        """The review ``args`` describe, once each finding holds against the tree."""
        findings = [self._finding(index, raw) for index, raw in enumerate(args.get("findings", []))]
        return SubmittedReview(
            verdict=args["verdict"], summary=str(args["summary"]).strip(), findings=findings
        )

    def _finding(self, index: int, raw: dict[str, Any]) -> Finding:
        where = f"review_change: findings[{index}]"
        try:
            path = self._root.normalize(raw["path"])
            found = bool(path) and self._root.exists(path)
        except BeamError as error:
            raise BeamError(error.code, f"{where}.path: {error.message}") from None
        if not found:
            raise BeamError(
                "BEM-090",
                f"{where}.path {raw['path']!r} does not exist in the working tree; name a "
                "file of the new version (a removed file's finding belongs in the summary "
                "or on the file that replaces it)",
            )
        line = raw.get("line")
        if line is not None:
            self._check_line(where, path, line)
        suggestion = raw.get("suggestion")
        return Finding(
            path=path,
            line=line,
            severity=raw["severity"],
            note=str(raw["note"]).strip(),
            suggestion=suggestion if suggestion else None,
        )

    def _check_line(self, where: str, path: str, line: int) -> None:
        if self._root.is_dir(path):
            raise BeamError(
                "BEM-090", f"{where}: {path!r} is a directory; a line needs a file (or omit line)"
            )
        try:
            text = decode_text(self._root.read_bytes(path))
        except BeamError:
            # Over the read cap or refused: the path exists, the line cannot be checked.
            return
        if text is None:
            raise BeamError(
                "BEM-090", f"{where}: {path!r} is a binary file; omit line for a binary file"
            )
        total = len(split_lines(text))
        if line > total:
            raise BeamError(
                "BEM-090",
                f"{where}.line {line} is past the end of {path!r}, which has {total} lines; "
                "count lines in what read_file returned",
            )
