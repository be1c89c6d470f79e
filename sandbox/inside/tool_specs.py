"""The nine sandbox tools as a model sees them: names, arguments and descriptions.

Descriptions are written for the model: what the tool does, when to reach for it, its
limits, and what its errors mean, so that a failed call can be corrected rather than retried
blindly. Argument names are the contract of DESIGN §3.3; ``read_file.start_line`` and
``limit`` (the line offset and count) and ``git_diff.path`` are optional additions for
reading past a cap. The arguments themselves are in ``sandbox.inside.tool_schemas``, which
the tool server checks calls against without loading these specs.
"""

from __future__ import annotations

from bot.core.tools import ToolSpec
from sandbox.inside.tool_schemas import (
    GIT_LOG_BEFORE_PATH,
    LIST_TREE_BEFORE_PAGES,
    MAX_LIST_ENTRIES,
    MAX_LOG_LIMIT,
    MAX_READ_CHARS,
    READ_FILE_BEFORE_LIMIT,
    TOOL_PARAMETERS,
)

__all__ = ["EARLIER_SPECS", "MAX_LIST_ENTRIES", "MAX_LOG_LIMIT", "MAX_READ_CHARS", "TOOL_SPECS"]

_PATH_RULES = (
    "Paths are relative to the working tree root, like 'docs/index.md'. Absolute paths, '..', "
    "and anything inside .git are refused (BEM-300..304); symlinks are followed only while "
    "they stay inside the working tree."
)

_LIST_WHAT = (
    "List the files under a directory of the working tree, recursively, sorted, "
    "skipping .git. Use it first to find the pages to read or edit. Returns "
)
_LIST_ERRORS = (
    f"{_PATH_RULES} Errors: BEM-305 when the path is a file; BEM-100 when it does not exist."
)

# list_tree before its pages (see EARLIER_SPECS).
_LIST_TREE_BEFORE_PAGES = ToolSpec(
    name="list_tree",
    description=(
        f"{_LIST_WHAT}'files' (at most {MAX_LIST_ENTRIES}) and 'total_files'; when "
        "'truncated' is true, 'directories' counts the files per subdirectory: call again "
        f"with path=<subdirectory> to narrow. {_LIST_ERRORS}"
    ),
    parameters=LIST_TREE_BEFORE_PAGES,
)

_LIST_TREE = ToolSpec(
    name="list_tree",
    description=(
        f"{_LIST_WHAT}'directories' first (the files per immediate subdirectory, largest "
        f"first), then one page of 'files' (at most {MAX_LIST_ENTRIES}) from 'offset', and "
        "'total_files'; when 'truncated' is true, call again with offset=<next_offset> "
        f"for the next page, or with path=<a directory> to narrow. {_LIST_ERRORS}"
    ),
    parameters=TOOL_PARAMETERS["list_tree"],
)

# read_file before its limit (see EARLIER_SPECS).
_READ_FILE_BEFORE_LIMIT = ToolSpec(
    name="read_file",
    description=(
        "Read a text file of the working tree. Returns 'content' with 'start_line', "
        f"'end_line' and 'total_lines'; at most {MAX_READ_CHARS} characters per call. "
        "When 'truncated' is true, call again with start_line=end_line+1 for the rest. "
        "A binary file (NUL bytes or not UTF-8) returns binary=true with its size and git "
        f"blob sha instead of content. {_PATH_RULES} Errors: BEM-305 for a directory, "
        "a special file or a file over the size cap; BEM-303 for a hard-linked file or a "
        "symlink leading outside; BEM-100 when the file does not exist."
    ),
    parameters=READ_FILE_BEFORE_LIMIT,
)


def _extended(earlier: ToolSpec, addition: str) -> ToolSpec:
    """``earlier`` with an optional argument added: its description says how to use it."""
    return ToolSpec(
        name=earlier.name,
        description=f"{earlier.description} {addition}",
        parameters=TOOL_PARAMETERS[earlier.name],
    )


_READ_FILE = _extended(
    _READ_FILE_BEFORE_LIMIT,
    "Pass 'limit' to read at most that many lines from start_line (a window of a long"
    " file; 'total_lines' says how many there are).",
)

# git_log before its path (see EARLIER_SPECS).
_GIT_LOG_BEFORE_PATH = ToolSpec(
    name="git_log",
    description=(
        "List the newest commits reachable from HEAD, newest first, with sha, author, "
        "date (ISO 8601), subject and body. When the job set a compare point, only the "
        "commits made since it are listed (git log <point>..HEAD) and 'since' names it "
        "({sha, label}); otherwise 'since' is null and the list runs back through the "
        "whole history. 'more' is true when more of those commits exist: raise limit to "
        "see them. Use it to see what a change consists of, recent history, or house "
        f"style for messages. limit: 1 to {MAX_LOG_LIMIT}, default 20."
    ),
    parameters=GIT_LOG_BEFORE_PATH,
)

_GIT_LOG = _extended(
    _GIT_LOG_BEFORE_PATH,
    "Pass 'path' for the commits that changed one page or folder (git log -- <path>):"
    " what changed on this page, and when.",
)

EARLIER_SPECS: dict[str, tuple[ToolSpec, ...]] = {
    "read_file": (_READ_FILE, _READ_FILE_BEFORE_LIMIT),
    "list_tree": (_LIST_TREE_BEFORE_PAGES, _LIST_TREE_BEFORE_PAGES),
    "git_log": (_GIT_LOG_BEFORE_PATH, _GIT_LOG_BEFORE_PATH),
}
"""The specs a parked run may have been saved with, one release back per position: the
release before this one offered the first of each tool's versions, the one before it the
second. A change that only adds an optional argument keeps what such a run did valid, so
it may resume."""

_SPECS = [
    _LIST_TREE,
    _READ_FILE,
    ToolSpec(
        name="write_file",
        description=(
            "Create or replace a file of the working tree with 'body' (UTF-8 text), creating "
            "parent directories. The whole file is replaced atomically: read it first and "
            "send the complete new content. Returns the byte count and whether the file is "
            "new. Writing only changes the file; use git_add and git_commit to record it. "
            f"{_PATH_RULES} Errors: BEM-305 when the body is over the write cap or the path "
            "is a directory; BEM-304 for anything under .git."
        ),
        parameters=TOOL_PARAMETERS["write_file"],
    ),
    ToolSpec(
        name="git_status",
        description=(
            "Show the current branch, HEAD commit, and every changed path with its 'staged' "
            "change (HEAD to index: what git_commit would record) and 'unstaged' change "
            "(index to files, including 'untracked' new files). Use it before git_add and "
            "git_commit to see what would be committed. At most 1000 paths are listed."
        ),
        parameters=TOOL_PARAMETERS["git_status"],
    ),
    ToolSpec(
        name="git_diff",
        description=(
            "Show the change as a unified patch with per-file stats: from a starting commit "
            "to the working files, staged and unstaged changes together, and new files with "
            "their content. When the job set a compare point (where the change under review "
            "began, such as the branch's fork from its base), the patch starts there, so it "
            "includes the commits made since, and 'against' names that point ({sha, label}); "
            "otherwise 'against' is null and the patch starts at HEAD. 'base' is the starting "
            "commit. Use it to review a change or to write a commit message. The patch is "
            "capped at 100000 characters and 500 files; when 'truncated' is true, call again "
            "with path=<file or directory> to see one part in full. Errors: BEM-300..304 for "
            "a refused path."
        ),
        parameters=TOOL_PARAMETERS["git_diff"],
    ),
    _GIT_LOG,
    ToolSpec(
        name="git_add",
        description=(
            "Stage a file or a directory for the next commit, deletions included; '' or '.' "
            "stages every change in the working tree. Files matched by .gitignore are not "
            "staged. Returns everything now staged. Errors: BEM-320 when the path matches no "
            "file or is ignored; BEM-300..304 for a refused path."
        ),
        parameters=TOOL_PARAMETERS["git_add"],
    ),
    ToolSpec(
        name="git_commit",
        description=(
            "Commit what is staged on the current branch, as the bot, and return the new "
            "commit id. Write a short subject line, a blank line, then what changed and why. "
            "Errors: BEM-321 when nothing is staged (call git_add first); BEM-320 for an "
            "empty message."
        ),
        parameters=TOOL_PARAMETERS["git_commit"],
    ),
    ToolSpec(
        name="git_push",
        description=(
            "Push a branch to origin so people can review it. A person must approve every "
            "push before it runs. Pushes the current branch, or the branch named by 'ref' "
            "(a plain branch name like 'docs/fix-install'; never a refspec or option). "
            "Fast-forward only: nothing is forced or deleted, and no tags are pushed. "
            "Errors: BEM-328 protected branch (like main) - never retry, keep working on "
            "your own branch; BEM-325 the name looks like a refspec or option; BEM-324 not a "
            "valid branch name; BEM-323 HEAD is detached or has no commit; BEM-326 no such "
            "local branch; BEM-327 the remote has newer commits; BEM-322 no origin."
        ),
        confirm_required=True,
        parameters=TOOL_PARAMETERS["git_push"],
    ),
]

TOOL_SPECS: dict[str, ToolSpec] = {spec.name: spec for spec in _SPECS}
