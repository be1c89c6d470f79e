"""Working-file content for git, read through the jail: what ``git_add`` stages and what
``git_diff`` shows of the files on disk.

libgit2 reads a working file by its path, after the jail has looked at it: a directory on
the way swapped for a symlink in between would have it read (and stage, or show) a file
outside the root, and it never checks link counts. So neither staging nor the worktree
side of a patch is left to libgit2. The content comes from ``SandboxRoot.git_file``, which
resolves the path one descriptor at a time and reads through the descriptor it checked;
libgit2 only gets bytes: the repository's clean filters (``text``, ``eol``, ``ident``
attributes) are applied to them as libgit2 would, then they become a blob and an index
entry, or one side of a patch.
"""

from __future__ import annotations

import os

import pygit2
from pygit2.enums import DeltaStatus, DiffOption
from pygit2.errors import check_error
from pygit2.ffi import C, ffi

from sandbox.inside.jail import LINK_MODE, GitFile

__all__ = ["stage_file", "worktree_patch"]

_NEW = (DeltaStatus.ADDED, DeltaStatus.UNTRACKED)
_CONTENT_STARTS = ("--- ", "Binary files ")
# git's quote_c_style with core.quotePath on: these bytes get a short escape, any other
# control byte, DEL and every byte >= 0x80 an octal one.
_SHORT_ESCAPES = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 34: '"', 92: "\\"}


def stage_file(repo: pygit2.Repository, index: pygit2.Index, path: str, file: GitFile) -> None:
    """Stage ``file`` (read by the jail) at ``path``, with its stat data as ``git add`` keeps
    it, so that the next scan finds it unchanged without reading it again."""
    if file.data is None:
        raise ValueError("stage_file needs a GitFile that was read")
    oid = repo.create_blob(_clean(repo, path, file))
    entry = ffi.new("git_index_entry *")
    st = file.st
    # libgit2 keeps these as 32-bit fields, truncated the same way when it compares.
    for field, stamp in ((entry.ctime, st.st_ctime_ns), (entry.mtime, st.st_mtime_ns)):
        seconds, field.nanoseconds = divmod(stamp, 10**9)
        field.seconds = (seconds + 2**31) % 2**32 - 2**31
    entry.dev, entry.ino = st.st_dev & 0xFFFFFFFF, st.st_ino & 0xFFFFFFFF
    entry.uid, entry.gid = st.st_uid & 0xFFFFFFFF, st.st_gid & 0xFFFFFFFF
    entry.file_size = st.st_size & 0xFFFFFFFF
    entry.mode = file.mode
    ffi.buffer(ffi.addressof(entry, "id"))[:] = oid.raw
    name = ffi.new("char[]", os.fsencode(path))  # must outlive the call
    entry.path = name
    check_error(C.git_index_add(index._index, entry))


def worktree_patch(
    repo: pygit2.Repository, delta: pygit2.DiffDelta, file: GitFile
) -> tuple[str, tuple[int, int], bool]:
    """The patch of ``delta``, whose new side is ``file`` on disk: text, (added, removed)
    line counts, and whether it is binary. ``file.data`` None (over the read cap) is shown
    as binary, unread."""
    path = delta.new_file.path
    data = None if file.data is None else _clean(repo, path, file)
    old = None if delta.status in _NEW else delta.old_file
    header = _header(path, old, file.mode, "0" * 40 if data is None else str(pygit2.hash(data)))
    if data is None:
        new_name = quoted_path("b/", path)
        return header + f"Binary files {_old_name(path, old)} and {new_name} differ\n", (0, 0), True
    flag = DiffOption.FORCE_BINARY if repo.get_attr(path, "diff") is False else DiffOption.NORMAL
    patch = pygit2.Patch.create_from(
        None if old is None else _old_data(repo, old),
        data,
        old_as_path=path,
        new_as_path=path,
        flag=flag,
        context_lines=3,
        interhunk_lines=0,
    )
    _, added, removed = patch.line_stats
    return header + _content_of(patch.text or ""), (added, removed), bool(patch.delta.is_binary)


def _clean(repo: pygit2.Repository, path: str, file: GitFile) -> bytes:
    """The file's content as git stores it: clean filters applied, a link's target as is."""
    data = file.data or b""
    if file.mode == LINK_MODE:
        return data
    filters = repo.load_filter_list(path)
    return data if filters is None else bytes(filters.apply_to_buffer(data))


def _old_data(repo: pygit2.Repository, old: pygit2.DiffFile) -> bytes:
    blob = repo.get(old.id)
    # Not a blob: the old side was a submodule's commit, which has no content here.
    return blob.data if isinstance(blob, pygit2.Blob) else b""


def quoted_path(prefix: str, path: str) -> str:
    """``prefix + path`` as git writes it in a patch: as is when plain, else in double quotes
    with C escapes, so a name holding a newline cannot start a line of its own."""
    raw = os.fsencode(prefix + path)
    if not any(byte < 0x20 or byte >= 0x7F or byte in (34, 92) for byte in raw):
        return prefix + path
    escaped = "".join(
        "\\" + _SHORT_ESCAPES[byte]
        if byte in _SHORT_ESCAPES
        else f"\\{byte:03o}"
        if byte < 0x20 or byte >= 0x7F
        else chr(byte)
        for byte in raw
    )
    return f'"{escaped}"'


def _header(path: str, old: pygit2.DiffFile | None, mode: int, new_id: str) -> str:
    """git's extended header for the change, modes taken from the tree and the disk."""
    lines = [f"diff --git {quoted_path('a/', path)} {quoted_path('b/', path)}"]
    if old is None:
        lines += [f"new file mode {mode:o}", f"index 0000000..{new_id[:7]}"]
    else:
        old_id, old_mode = str(old.id), int(old.mode)
        if old_mode != mode:
            lines += [f"old mode {old_mode:o}", f"new mode {mode:o}"]
        if old_id != new_id:
            same = f" {mode:o}" if old_mode == mode else ""
            lines.append(f"index {old_id[:7]}..{new_id[:7]}{same}")
    return "\n".join(lines) + "\n"


def _content_of(text: str) -> str:
    """A generated patch without its header (which knows no modes): from ``---`` or the
    binary line on; empty when the contents are equal."""
    for start in _CONTENT_STARTS:
        at = text.find("\n" + start)
        if at >= 0:
            return text[at + 1 :]
    return ""


def _old_name(path: str, old: pygit2.DiffFile | None) -> str:
    return "/dev/null" if old is None else quoted_path("a/", path)
