"""Scripted models for jobs that real workers run (``model.factory`` in the test stack).

The stack configures ``model.factory = "harness.playbooks:for_job"``.

A job picks its playbook with ``metadata={"playbook": NAME}``. Each playbook is a list of
``PlaybookClient`` steps, so a job that parks in one worker process continues at the right
step in another. Steps that depend on what a tool returned (the text of a page, a refusal)
read it from the conversation.

A scheduled summarize job (``bot.jobs.schedules``) names no playbook: it gets ``summarize``,
or ``summarize-slow`` on a branch whose name starts with ``SLOW_BRANCH_PREFIX``. Nor does a
job from a forge: it gets its kind's (``_FORGE_PLAYBOOKS``).

The pages are the ones ``harness.stack`` seeds upstream: ``docs/install.md`` has two
typos and a link to a page that does not exist; ``FIXED_INSTALL`` is the corrected page.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from bot.clients.base import Completion, Message, ToolCall
from bot.clients.playbook import PlaybookClient, PlaybookStep, last_tool_result
from bot.jobs.schedules import SCHEDULE_REQUESTER
from bot.store.models import JobRecord
from harness.gitkit import commit_all, git, write_files

INSTALL_PAGE = (
    "# Install\n\n"
    "Instal the tool with pip:\n\n"
    "    pip install riverbeam\n\n"
    "Then read teh [configuration guide](configure.md) to set it up.\n"
)
FIXED_INSTALL = (
    "# Install\n\n"
    "Install the tool with pip:\n\n"
    "    pip install riverbeam\n\n"
    "Then read the [configuration guide](configuration.md) to set it up.\n"
)
SEED_PAGES = {
    "README.md": "# Handbook\n\nStart with [the install guide](docs/install.md).\n",
    "docs/index.md": "# Docs\n\n- [Install](install.md)\n- [Configuration](configuration.md)\n",
    "docs/install.md": INSTALL_PAGE,
    "docs/configuration.md": "# Configuration\n\nSettings live in `tool.toml`.\n",
}


def with_install_pages(pages: Mapping[str, str]) -> dict[str, str]:
    """``pages`` (another repository's) with the seed's install and configuration pages
    added, so the install-page playbooks run on them."""
    added = ("docs/install.md", "docs/configuration.md")
    return {**pages, **{name: SEED_PAGES[name] for name in added}}


def seed_upstream(path: Path, pages: Mapping[str, str] = SEED_PAGES) -> Path:
    """A bare upstream with ``main`` holding ``pages``, keeping a reflog of every ref."""
    git("init", "-q", "--bare", "--initial-branch=main", str(path))
    git("-C", str(path), "config", "core.logAllRefUpdates", "always")
    work = path.with_name("seed-work")
    git("clone", "-q", str(path), str(work))
    write_files(work, pages)
    commit_all(work, "Start the handbook")
    git("-C", str(work), "push", "-q", "origin", "HEAD:refs/heads/main")
    shutil.rmtree(work)
    return path


SLOW_SECONDS = 3.0
HUGE_FILE = "huge.bin"
SLOW_BRANCH_PREFIX = "slow/"
REVIEW_SUMMARY = "The fix is correct: both typos and the broken link are fixed."
CHANGES_SUMMARY = "The link still points at a page that does not exist."
SUMMARY_TEXT = "### The branch compared with main\n- **Commits** (1): fix the install page."
NOTES_SUBJECT = "Fix typos and a broken link on the install page"
NOTES_BODY = "Readers followed a link to a page that does not exist."
LONG_SUBJECT = (
    "Fix the typos, the broken configuration link and the wording of the install page "
    "for new readers"
)
# What an author job running one of the install-page playbooks is asked.
AUTHOR_REQUEST = "Fix the broken links and typos on the install page"
COMMIT_SUBJECT = "Fix typos and the configuration link on the install page"
NOTHING_TO_CHANGE = "The install page already says what the request asks for; nothing to change."
DONE_TEXT = "Fixed two typos and the broken link in docs/install.md; the push was approved."
SECOND_LINE = "\nSee also the [FAQ](index.md).\n"


FINDING: dict[str, object] = {
    "path": "docs/install.md",
    "line": 3,
    "severity": "nit",
    "note": "Name the minimum pip version.",
    "suggestion": "Install the tool with pip 23 or newer:",
}


def calls(*items: tuple[str, dict[str, object]]) -> Completion:
    return Completion.of_calls(*(ToolCall.of(name, dict(args)) for name, args in items))


def _fix_page(messages: Sequence[Message]) -> Completion:
    """Write back the page it just read, corrected (fails loudly if it read something else)."""
    read = last_tool_result(messages)
    if not isinstance(read, dict) or read.get("content") != INSTALL_PAGE:
        raise AssertionError(f"the playbook expected the seeded install page, got {read!r}")
    return calls(("write_file", {"path": "docs/install.md", "body": FIXED_INSTALL}))


def _after_push(messages: Sequence[Message]) -> str:
    """The final answer: what happened to the push, as the tool result says."""
    result = last_tool_result(messages)
    if isinstance(result, dict) and result.get("refused"):
        return f"The push was refused by {result.get('by')}: {result.get('comment')}"
    if isinstance(result, dict) and "error" in result:
        return f"The push failed: {result['error']}"
    return DONE_TEXT


def _author_fix_install() -> list[PlaybookStep]:
    return [
        calls(("list_tree", {})),
        calls(("read_file", {"path": "docs/install.md"})),
        _fix_page,
        calls(
            ("git_add", {"path": "docs/install.md"}), ("git_commit", {"message": COMMIT_SUBJECT})
        ),
        calls(("git_push", {})),
        _after_push,
    ]


# The docs checks' playbooks: a first attempt that adds a misspelling and a broken link,
# which the repository's checks (codespell, links) report as new, beside the seeded page's own
# "teh" and broken link, which they count as already on the base.
INSTALL = "docs/install.md"
CHECKED_FIRST = INSTALL_PAGE + "\nRecieve updates from the [changelog](changelog.md).\n"
CHECKED_FIXED = INSTALL_PAGE + "\nReceive updates from the [configuration](configuration.md).\n"


def _checks_report_new(messages: Sequence[Message]) -> Completion:
    """After the first ``run_checks``: new findings, all on the page it wrote; then fix."""
    report = last_tool_result(messages, "run_checks")
    new = report.get("new") if isinstance(report, dict) else None
    paths = {item.get("path") for item in new or [] if isinstance(item, dict)}
    if not isinstance(report, dict) or report.get("clean") is not False or paths != {INSTALL}:
        raise AssertionError(f"the playbook expected new findings on {INSTALL}, got {report!r}")
    return calls(("write_file", {"path": INSTALL, "body": CHECKED_FIXED}))


def _checks_clean_then_commit(messages: Sequence[Message]) -> Completion:
    report = last_tool_result(messages, "run_checks")
    if not isinstance(report, dict) or report.get("clean") is not True:
        raise AssertionError(f"the playbook expected clean checks after the fix, got {report!r}")
    return calls(("git_add", {"path": INSTALL}), ("git_commit", {"message": COMMIT_SUBJECT}))


def _author_check_and_fix() -> list[PlaybookStep]:
    return [
        calls(("read_file", {"path": INSTALL})),
        calls(("write_file", {"path": INSTALL, "body": CHECKED_FIRST})),
        calls(("run_checks", {})),
        _checks_report_new,
        calls(("run_checks", {})),
        _checks_clean_then_commit,
        calls(("git_push", {})),
        _after_push,
    ]


def _author_ignore_checks() -> list[PlaybookStep]:
    """The first attempt committed and pushed as it is: the checks never run before the park."""
    return [
        calls(("write_file", {"path": INSTALL, "body": CHECKED_FIRST})),
        calls(("git_add", {"path": INSTALL}), ("git_commit", {"message": COMMIT_SUBJECT})),
        calls(("git_push", {})),
        _after_push,
    ]


def _author_push_twice() -> list[PlaybookStep]:
    """The install-page fix and its push; whatever the decision, it then commits another
    change and pushes again: the job parks a second time, on another commit."""
    return [
        *_author_fix_install()[:-1],
        calls(("write_file", {"path": "docs/install.md", "body": FIXED_INSTALL + SECOND_LINE})),
        calls(("git_add", {"path": "docs/install.md"}), ("git_commit", {"message": "See also"})),
        calls(("git_push", {})),
        _after_push,
    ]


def _author_address_review() -> list[PlaybookStep]:
    """On a pull request's branch that already holds the install-page fix: reads the fixed
    page and adds the line the review asked for, commits and pushes (a fast-forward)."""

    def add_line(messages: Sequence[Message]) -> Completion:
        read = last_tool_result(messages)
        if not isinstance(read, dict) or read.get("content") != FIXED_INSTALL:
            raise AssertionError(f"the playbook expected the fixed install page, got {read!r}")
        return calls(
            ("write_file", {"path": "docs/install.md", "body": FIXED_INSTALL + SECOND_LINE})
        )

    return [
        calls(("read_file", {"path": "docs/install.md"})),
        add_line,
        calls(("git_add", {"path": "docs/install.md"}), ("git_commit", {"message": "See also"})),
        calls(("git_push", {})),
        _after_push,
    ]


def _author_fix_slowly() -> list[PlaybookStep]:
    """The install-page fix, thinking for a few seconds before it reads the page: a run
    still going, for a fault to hit mid-run."""
    steps = _author_fix_install()
    steps[1] = _slowly(SLOW_SECONDS, calls(("read_file", {"path": "docs/install.md"})))
    return steps


def _after_read(messages: Sequence[Message]) -> str:
    result = last_tool_result(messages)
    if isinstance(result, dict) and "error" in result:
        return f"The read failed: {result['error']}"
    return "Read it."


def _author_read_huge() -> list[PlaybookStep]:
    """Reads ``huge.bin`` whole (a page the branch under ``base`` must hold), then answers
    with what happened: for a container's memory limit."""
    return [calls(("read_file", {"path": HUGE_FILE})), _after_read]


def _author_push_main() -> list[PlaybookStep]:
    """Commits, then tries to push the protected ``main``: policy refuses it at once."""
    return [
        calls(("write_file", {"path": "docs/install.md", "body": FIXED_INSTALL})),
        calls(("git_add", {"path": "."}), ("git_commit", {"message": COMMIT_SUBJECT})),
        calls(("git_push", {"ref": "main"})),
        _after_push,
    ]


def _slowly(seconds: float, then: Completion) -> PlaybookStep:
    def step(messages: Sequence[Message]) -> Completion:
        time.sleep(seconds)
        return then

    return step


def _author_slow() -> list[PlaybookStep]:
    """Thinks for a few seconds before its second tool call: time to cancel it mid-run."""
    return [
        calls(("list_tree", {})),
        _slowly(SLOW_SECONDS, calls(("read_file", {"path": "docs/install.md"}))),
        "Read the page.",
    ]


def _review_approve() -> list[PlaybookStep]:
    """Reads a branch that fixed the install page and approves it with one suggestion."""
    review: dict[str, object] = {
        "verdict": "approve_with_suggestions",
        "summary": REVIEW_SUMMARY,
        "findings": [FINDING],
    }
    return [
        calls(("git_log", {}), ("git_diff", {})),
        calls(("review_change", review)),
        "Approve with suggestions: 1 nit (docs/install.md line 3).",
    ]


def _review_fix_finding() -> list[PlaybookStep]:
    """Cites a line past the end of the page first: review_change refuses it (BEM-090) and
    the corrected review is the one recorded."""
    past_end = {**FINDING, "line": 99}
    review = {"verdict": "approve_with_suggestions", "summary": REVIEW_SUMMARY}
    return [
        calls(("git_diff", {})),
        calls(("review_change", {**review, "findings": [past_end]})),
        calls(("review_change", {**review, "findings": [FINDING]})),
        "Approve with suggestions: 1 nit.",
    ]


def _review_request_changes() -> list[PlaybookStep]:
    review: dict[str, object] = {
        "verdict": "request_changes",
        "summary": CHANGES_SUMMARY,
        "findings": [
            {
                "path": "docs/install.md",
                "line": 7,
                "severity": "blocker",
                "note": "configure.md does not exist.",
                "suggestion": "Then read the [configuration guide](configuration.md).",
            }
        ],
    }
    return [calls(("git_diff", {})), calls(("review_change", review)), "Changes requested."]


def _summarize() -> list[PlaybookStep]:
    return [calls(("git_log", {}), ("git_diff", {})), SUMMARY_TEXT]


def _summarize_slow() -> list[PlaybookStep]:
    """Thinks for a few seconds before its second call: a run still going, to cancel or to
    overlap."""
    return [
        calls(("git_log", {})),
        _slowly(SLOW_SECONDS, calls(("git_diff", {}))),
        SUMMARY_TEXT,
    ]


def _commit_notes() -> list[PlaybookStep]:
    return [
        calls(("git_status", {}), ("git_log", {}), ("git_diff", {})),
        f"```text\n{NOTES_SUBJECT}\n\n{NOTES_BODY}\n```\nNo other remarks.",
    ]


def _commit_notes_long() -> list[PlaybookStep]:
    """A draft whose subject is over 72 characters: the outcome cuts it at a word."""
    return [calls(("git_log", {})), f"```\n{LONG_SUBJECT}\n\n{NOTES_BODY}\n```"]


def _publish() -> list[PlaybookStep]:
    """Says what it publishes, then calls publish_docset (which parks), then reports."""
    publish = ToolCall.of("publish_docset", {"note": "The reviewed install page fix."})
    return [
        Completion(
            text="Publishing the reviewed docs to the publish branch.", tool_calls=[publish]
        ),
        _after_publish,
    ]


def _after_publish(messages: Sequence[Message]) -> str:
    result = last_tool_result(messages)
    if isinstance(result, dict) and result.get("published"):
        return f"Published {result.get('sha')} to {result.get('publish_ref')}."
    return f"Nothing was published: {result}"


# -- runs that end without what their kind must produce (they fail, never succeed) ---------


def _review_no_verdict() -> list[PlaybookStep]:
    """Reads the change and answers in words, never calling review_change."""
    return [calls(("git_diff", {})), "Looks fine to me."]


def _summarize_empty() -> list[PlaybookStep]:
    return [calls(("git_log", {})), ""]


def _commit_notes_no_subject() -> list[PlaybookStep]:
    return [calls(("git_diff", {})), "```text\n\n```"]


def _commit_notes_unknown_tools() -> list[PlaybookStep]:
    """An author's steps in a commit-notes job: list_tree and read_file are not its tools
    (BEM-089), and it answers anyway."""
    return [
        calls(("list_tree", {})),
        calls(("read_file", {"path": "docs/install.md"})),
        "I could not read docs/install.md, so I changed nothing.",
    ]


def _author_commit_no_push() -> list[PlaybookStep]:
    return [
        calls(("write_file", {"path": "docs/install.md", "body": FIXED_INSTALL})),
        calls(("git_add", {"path": "docs/install.md"}), ("git_commit", {"message": "Fix"})),
        "Committed the fix.",
    ]


NEW_PAGE = "riverbeam-bench.md"


def _author_new_page() -> list[PlaybookStep]:
    """An author job that needs no page of the repository: it lists the root, writes a new
    page there, commits and pushes (``bench.real_repos`` on any real repository)."""
    return [
        calls(("list_tree", {})),
        calls(("write_file", {"path": NEW_PAGE, "body": "# Riverbeam\n\nA new page.\n"})),
        calls(("git_add", {"path": NEW_PAGE}), ("git_commit", {"message": "Add a page"})),
        calls(("git_push", {})),
        _after_push,
    ]


def _author_write_no_commit() -> list[PlaybookStep]:
    return [
        calls(("write_file", {"path": "docs/install.md", "body": FIXED_INSTALL})),
        "Fixed the page.",
    ]


def _author_nothing_silent() -> list[PlaybookStep]:
    return [calls(("list_tree", {})), ""]


def _author_nothing_to_change() -> list[PlaybookStep]:
    return [calls(("list_tree", {})), NOTHING_TO_CHANGE]


def _author_read_missing() -> list[PlaybookStep]:
    """Reads a page that does not exist and answers as if that were fine."""
    return [calls(("read_file", {"path": "docs/missing.md"})), "The page reads well."]


def _summarize_without_reading() -> list[PlaybookStep]:
    """Answers at once, calling no tool: a segment that never needs its container."""
    return [SUMMARY_TEXT]


def _publish_without_calling() -> list[PlaybookStep]:
    return ["I would rather not publish today."]


PLAYBOOKS: dict[str, Callable[[], list[PlaybookStep]]] = {
    "author-fix-install": _author_fix_install,
    "author-push-main": _author_push_main,
    "author-slow": _author_slow,
    "author-fix-slowly": _author_fix_slowly,
    "author-push-twice": _author_push_twice,
    "author-address-review": _author_address_review,
    "author-read-huge": _author_read_huge,
    "author-check-and-fix": _author_check_and_fix,
    "author-ignore-checks": _author_ignore_checks,
    "review-approve": _review_approve,
    "review-fix-finding": _review_fix_finding,
    "review-request-changes": _review_request_changes,
    "summarize": _summarize,
    "summarize-slow": _summarize_slow,
    "commit-notes": _commit_notes,
    "commit-notes-long": _commit_notes_long,
    "publish": _publish,
    "review-no-verdict": _review_no_verdict,
    "summarize-empty": _summarize_empty,
    "commit-notes-no-subject": _commit_notes_no_subject,
    "commit-notes-unknown-tools": _commit_notes_unknown_tools,
    "author-commit-no-push": _author_commit_no_push,
    "author-write-no-commit": _author_write_no_commit,
    "author-new-page": _author_new_page,
    "author-nothing-silent": _author_nothing_silent,
    "author-nothing-to-change": _author_nothing_to_change,
    "author-read-missing": _author_read_missing,
    "publish-without-calling": _publish_without_calling,
    "summarize-without-reading": _summarize_without_reading,
}


# A job from a forge names no playbook: its kind does (and for an author job, whether it
# addresses a review, on the pull request's branch).
_FORGE_PLAYBOOKS = {
    ("author", False): "author-fix-install",
    ("author", True): "author-address-review",
    ("review", True): "review-approve",
    ("commit-notes", True): "commit-notes",
}


def for_job(job: JobRecord) -> PlaybookClient:
    """The model factory the test stack configures: the job's playbook, by name."""
    name = job.spec.metadata.get("playbook")
    if name is None and "forge" in job.spec.metadata:
        name = _FORGE_PLAYBOOKS.get((job.spec.kind.value, bool(job.spec.branch)))
    if name is None and job.spec.requested_by == SCHEDULE_REQUESTER:
        slow = (job.spec.branch or "").startswith(SLOW_BRANCH_PREFIX)
        name = "summarize-slow" if slow else "summarize"
    if not isinstance(name, str) or name not in PLAYBOOKS:
        raise AssertionError(f"job {job.id} names no known playbook ({name!r}): {list(PLAYBOOKS)}")
    return PlaybookClient(PLAYBOOKS[name]())
