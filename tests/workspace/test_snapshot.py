"""Parking a workspace on one host and rebuilding it, exactly, on another with nothing local.

The job's work is done the way the container does it: ``WorkingTree`` and the jail on the
tree (in-process, as root, with libgit2's owner check off for that), after which the tree is
handed back to the sandbox uid. Comparisons use the git CLI as the sandbox uid.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import struct
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pygit2
import pytest
from pygit2.enums import FileMode, ObjectType, Option

from bot.config import RepositoryConfig, WorkspaceSettings
from bot.core.errors import BeamError
from harness.gitkit import git, upstream_push
from sandbox.host.relay import relay_push
from sandbox.host.upstream.credentials import upstream_callbacks
from sandbox.host.workspace.objectstore import PackError, pack_objects, unpack
from sandbox.host.workspace.outbox import outbox_branch
from sandbox.host.workspace.outbox_staging import stage_push
from sandbox.host.workspace.prepare import SANDBOX_UID, Workspace, hand_over, prepare_workspace
from sandbox.host.workspace.snapshot import MAGIC, capture, read_header, restore
from sandbox.inside.jail import SandboxRoot
from sandbox.inside.refs import HEADS
from sandbox.inside.worktree import WorkingTree

CAP = 4 << 20
T = TypeVar("T")


@dataclass
class Job:
    """A job's workspace on the first host, and a second host with nothing local yet."""

    workspace: Workspace
    config: RepositoryConfig
    elsewhere: WorkspaceSettings

    def resume_elsewhere(self, data: bytes) -> Workspace:
        base = read_header(data).base_sha
        return prepare_workspace(self.workspace.job_id, "docs", self.config, base, self.elsewhere)


@pytest.fixture
def job(base_dir: Path, repo_config: RepositoryConfig, settings: WorkspaceSettings) -> Job:
    elsewhere = WorkspaceSettings(
        root=base_dir / "host-2" / "work", mirrors=base_dir / "host-2" / "m"
    )
    workspace = prepare_workspace("job-s", "docs", repo_config, None, settings)
    return Job(workspace, repo_config, elsewhere)


@contextmanager
def container(workspace: Workspace) -> Iterator[tuple[SandboxRoot, WorkingTree]]:
    """The container's view of the tree: the jail and a WorkingTree, then back to 10001."""
    pygit2.option(Option.SET_OWNER_VALIDATION, 0)
    try:
        root = SandboxRoot(workspace.tree)
        yield root, WorkingTree(root, ("main",))
    finally:
        pygit2.option(Option.SET_OWNER_VALIDATION, 1)
        hand_over(workspace.tree, workspace.tree / ".git" / "objects", SANDBOX_UID)


def status(tree: Path) -> str:
    return git("-C", str(tree), "status", "--porcelain=v1", "-uall", sandbox=True)


def head(tree: Path) -> str:
    symbolic = git("-C", str(tree), "rev-parse", "--symbolic-full-name", "HEAD", sandbox=True)
    return f"{symbolic} {git('-C', str(tree), 'rev-parse', 'HEAD', sandbox=True)}"


def files(tree: Path) -> dict[str, tuple[str, bytes, int]]:
    """Every entry outside ``.git``: kind, bytes (a link's target) and mode, following none."""
    found: dict[str, tuple[str, bytes, int]] = {}
    for directory, dirs, names in os.walk(tree):
        if directory == str(tree):
            dirs.remove(".git")
        for name in names + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            path = Path(directory, name)
            info = path.lstat()
            key = str(path.relative_to(tree))
            if stat.S_ISLNK(info.st_mode):
                found[key] = ("link", os.readlink(path).encode(), 0)
            else:
                found[key] = ("file", path.read_bytes(), stat.S_IMODE(info.st_mode))
    return found


def everything(top: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``top`` with its mode and content digest: to show nothing changed."""
    seen: dict[str, tuple[int, bytes]] = {}
    for directory, dirs, names in os.walk(top):
        for name in names + dirs:
            path = Path(directory, name)
            info = path.lstat()
            digest = hashlib.sha1(path.read_bytes()).digest() if stat.S_ISREG(info.st_mode) else b""
            seen[str(path)] = (info.st_mode, digest)
    return seen


def busy_job(workspace: Workspace) -> None:
    """Two commits, then staged, unstaged, new, deleted, executable and symlink changes."""
    with container(workspace) as (root, tree):
        root.write_bytes("docs/new.md", b"# New page\n")
        root.write_bytes("docs/tool.sh", b"#!/bin/sh\necho tool\n")
        os.chmod(workspace.tree / "docs" / "tool.sh", 0o755)
        tree.add(".")
        tree.commit("Add a page and a tool")
        root.write_bytes("docs/new.md", b"# New page\n\nWith more.\n")
        (workspace.tree / "README.md").unlink()
        tree.add(".")
        tree.commit("Expand the page, drop the README")
        root.write_bytes("docs/staged.md", b"staged only\n")
        root.write_bytes("docs/both.md", b"staged version\n")
        root.write_bytes("docs/install.md", b"Install it, staged.\n")
        tree.add("docs")
        root.write_bytes("docs/both.md", b"then changed again\n")
        (workspace.tree / "docs" / "new.md").unlink()
        tree.add("docs/new.md")  # a staged removal
        root.write_bytes("notes/untracked.md", b"not added\n")
        root.write_bytes("run.sh", b"#!/bin/sh\n")
        os.chmod(workspace.tree / "run.sh", 0o755)
        os.chmod(workspace.tree / "docs" / "tool.sh", 0o644)  # an unstaged mode change
        os.symlink("docs/install.md", workspace.tree / "install-link.md")
        os.symlink("../docs", workspace.tree / "notes" / "docs-dir")


def test_a_resume_elsewhere_rebuilds_the_exact_tree(job: Job) -> None:
    busy_job(job.workspace)
    before = (status(job.workspace.tree), head(job.workspace.tree), files(job.workspace.tree))

    data = capture(job.workspace, max_bytes=CAP)
    again = job.resume_elsewhere(data)
    assert not (again.tree / "docs" / "tool.sh").exists()  # nothing of the job there yet
    restore(data, again)

    assert (status(again.tree), head(again.tree), files(again.tree)) == before
    assert status(again.tree).splitlines() == [
        "AM docs/both.md",
        "M  docs/install.md",
        "D  docs/new.md",
        "A  docs/staged.md",
        " M docs/tool.sh",
        "?? install-link.md",
        "?? notes/docs-dir",
        "?? notes/untracked.md",
        "?? run.sh",
    ]
    assert os.readlink(again.tree / "install-link.md") == "docs/install.md"
    assert not (again.tree / "README.md").exists()  # removed by a commit, not by restore
    log = ["log", "--format=%H %s", "riverbeam/job-s"]
    assert git("-C", str(again.tree), *log, sandbox=True) == git(
        "-C", str(job.workspace.tree), *log, sandbox=True
    )
    assert pygit2.option(Option.GET_OWNER_VALIDATION)  # switched back on


def test_files_that_changed_type_survive(job: Job) -> None:
    tree = job.workspace.tree
    with container(job.workspace) as (root, work):
        root.write_bytes("guide/page.md", b"a page in a directory\n")
        root.write_bytes("old-link.md", b"a file that becomes a link\n")
        work.add(".")
        work.commit("A guide")
        (tree / "README.md").unlink()
        root.write_bytes("README.md/inner.md", b"a file became a directory\n")
        (tree / "guide" / "page.md").unlink()
        (tree / "guide").rmdir()
        root.write_bytes("guide", b"a directory became a file\n")
        (tree / "old-link.md").unlink()
        os.symlink("guide", tree / "old-link.md")
        work.add("old-link.md")  # staged as a link
    before = (status(tree), files(tree))

    data = capture(job.workspace, max_bytes=CAP)
    again = job.resume_elsewhere(data)
    restore(data, again)

    assert (status(again.tree), files(again.tree)) == before
    assert os.path.islink(again.tree / "old-link.md") and (again.tree / "guide").is_file()


def test_the_restored_tree_belongs_to_the_sandbox_uid(job: Job) -> None:
    busy_job(job.workspace)
    data = capture(job.workspace, max_bytes=CAP)
    again = job.resume_elsewhere(data)
    restore(data, again)

    objects = again.tree / ".git" / "objects"
    for directory, dirs, names in os.walk(again.tree):
        for name in dirs + names:
            path = Path(directory, name)
            if not (path.parent.is_relative_to(objects) and name not in dirs):
                assert path.lstat().st_uid == SANDBOX_UID, path
    # The sandbox can work on at once: commit everything, as the container would.
    git("-C", str(again.tree), "add", "-A", sandbox=True)
    git("-C", str(again.tree), "commit", "-qm", "Resume", sandbox=True)


def test_only_the_new_objects_travel_and_the_pack_is_compact(job: Job) -> None:
    big = b"".join(b"line %d of a long page\n" % n for n in range(4000))
    with container(job.workspace) as (root, tree):
        for edit in range(3):
            root.write_bytes("docs/long.md", big + b"edit %d\n" % edit)
            tree.add(".")
            tree.commit(f"Edit {edit}")

    data = capture(job.workspace, max_bytes=CAP)

    header = read_header(data)
    repo = pygit2.Repository(str(job.workspace.mirror))
    base = repo[pygit2.Oid(hex=job.workspace.base_sha)].peel(pygit2.Commit)
    unchanged = {str(base.tree["README.md"].id), str(base.tree["docs/install.md"].id)}
    assert unchanged.isdisjoint(header.objects)
    # 3 commits, 3 root trees, 3 docs trees, 3 blobs: nothing the base already has.
    assert len(header.objects) == 12
    assert header.pack_bytes < len(big) // 4  # zlib and deltas between the three versions
    assert len(data) < len(big) // 4


def test_the_pack_reader_resolves_deltas_and_bounds_what_it_expands(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "repo"), bare=True)
    page = os.urandom(50_000)  # incompressible: only deltas can make the pack small
    versions = {str(repo.create_blob(page + b"edit %d\n" % n)): page for n in range(3)}

    pack = pack_objects(repo, versions, tmp_path)

    assert len(pack) < len(page) * 1.2  # one whole version, two deltas against it
    objects = unpack(pack, 3 * len(page) + 100)
    assert set(objects) == set(versions)
    assert all(pygit2.hash(data) == pygit2.Oid(hex=oid) for oid, (_, data) in objects.items())
    with pytest.raises(PackError, match="past the size allowed"):
        unpack(pack, 2 * len(page))


def test_a_detached_head_and_another_branch_survive(job: Job) -> None:
    with container(job.workspace) as (root, tree):
        root.write_bytes("docs/a.md", b"on the job branch\n")
        tree.add(".")
        tree.commit("On the job branch")
        tree.checkout_branch("feature", create=True)
        root.write_bytes("docs/b.md", b"on feature\n")
        tree.add(".")
        tree.commit("On feature")
    git("-C", str(job.workspace.tree), "checkout", "-q", "--detach", "HEAD~1", sandbox=True)
    branches = ["for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"]
    before = git("-C", str(job.workspace.tree), *branches, sandbox=True)

    data = capture(job.workspace, max_bytes=CAP)
    again = job.resume_elsewhere(data)
    restore(data, again)

    assert git("-C", str(again.tree), *branches, sandbox=True) == before
    assert head(again.tree) == head(job.workspace.tree)
    assert head(again.tree).startswith("HEAD ")  # detached
    assert files(again.tree) == files(job.workspace.tree)


def test_a_base_that_moved_upstream_is_rebuilt_from_the_parked_one(
    job: Job, upstream: Path
) -> None:
    with container(job.workspace) as (root, tree):
        root.write_bytes("docs/a.md", b"job work\n")
        tree.add(".")
        tree.commit("Job work")
    data = capture(job.workspace, max_bytes=CAP)
    upstream_push(upstream, "main", {"docs/other.md": "Someone else.\n"}, "main")

    moved = prepare_workspace("job-s", "docs", job.config, None, job.elsewhere)
    with pytest.raises(BeamError) as caught:
        restore(data, moved)
    assert caught.value.code == "BEM-502"
    assert job.workspace.base_sha in caught.value.message and "base=" in caught.value.message

    pinned = WorkspaceSettings(
        root=job.elsewhere.root.with_name("again"), mirrors=job.elsewhere.mirrors
    )
    again = prepare_workspace("job-s", "docs", job.config, read_header(data).base_sha, pinned)
    restore(data, again)
    assert head(again.tree) == head(job.workspace.tree)


def test_over_the_cap_is_bem_503_with_both_sizes(job: Job) -> None:
    with container(job.workspace) as (root, _tree):
        root.write_bytes("generated.bin", os.urandom(300_000))

    with pytest.raises(BeamError) as caught:
        capture(job.workspace, max_bytes=200_000)

    assert caught.value.code == "BEM-503"
    assert "200000" in caught.value.message and "300000" in caught.value.message
    assert "jobs.snapshot_max_bytes" in caught.value.message
    data = capture(job.workspace, max_bytes=CAP)
    again = job.resume_elsewhere(data)
    with pytest.raises(BeamError) as smaller:
        restore(data, again, max_bytes=200_000)
    assert smaller.value.code == "BEM-503"


# -- tampering -------------------------------------------------------------------------------


@dataclass
class Parts:
    header: dict[str, Any]
    pack: bytes
    rest: bytes

    @classmethod
    def of(cls, data: bytes) -> Parts:
        payload = zlib.decompress(data[len(MAGIC) :])
        (length,) = struct.unpack(">Q", payload[:8])
        header = json.loads(payload[8 : 8 + length])
        body = payload[8 + length :]
        return cls(header, body[: header["pack_bytes"]], body[header["pack_bytes"] :])

    def encode(self) -> bytes:
        document = json.dumps(self.header).encode()
        payload = struct.pack(">Q", len(document)) + document + self.pack + self.rest
        return MAGIC + zlib.compress(payload)


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def _flip_in_pack(parts: Parts) -> None:
    # The pack's checksum is recomputed, so the object data itself must give it away.
    body = _flip(parts.pack[:-20], len(parts.pack) // 2)
    parts.pack = body + hashlib.sha1(body).digest()


def _flip_in_pack_checksum_kept(parts: Parts) -> None:
    parts.pack = _flip(parts.pack, len(parts.pack) // 2)


def _substitute_pack(parts: Parts) -> None:
    # A well-formed pack of other objects: only the listed ids give the substitution away.
    with tempfile.TemporaryDirectory() as scratch:
        repo = pygit2.init_repository(scratch, bare=True)
        builder = pygit2.PackBuilder(repo)
        for number in range(len(parts.header["objects"])):
            builder.add(repo.create_blob(b"substitute %d\n" % number))
        builder.write(scratch)
        parts.pack = next(Path(scratch).glob("*.pack")).read_bytes()
    parts.header["pack_bytes"] = len(parts.pack)


def _flip_in_file(parts: Parts) -> None:
    parts.rest = _flip(parts.rest, 0)


def _swap_an_id(parts: Parts) -> None:
    parts.header["objects"][0] = "0" * 40


def _claim_another_tip(parts: Parts) -> None:
    branch = parts.header["head"]["branch"]
    parts.header["branches"][branch] = parts.header["head"]["commit"] = parts.header["base_sha"][
        ::-1
    ]


def _next_version(parts: Parts) -> None:
    parts.header["version"] = 2


def _climb_out(parts: Parts) -> None:
    parts.header["files"][0]["path"] = "../../outside.md"


def _into_metadata(parts: Parts) -> None:
    parts.header["files"][0]["path"] = ".git/hooks/post-checkout"


def _refspec_branch(parts: Parts) -> None:
    parts.header["branches"]["+refs/heads/main:x"] = parts.header["head"]["commit"]


TAMPERING: dict[str, tuple[Callable[[Parts], None], str]] = {
    "a flipped byte in a packed object": (_flip_in_pack, "its pack is unusable"),
    "a flipped byte in the pack, checksum kept": (
        _flip_in_pack_checksum_kept,
        "fails its checksum",
    ),
    "a pack of other objects": (_substitute_pack, "not hold exactly the objects"),
    "a flipped byte in a file": (_flip_in_file, "do not match blob"),
    "an object id that is not in the pack": (_swap_an_id, "not hold exactly the objects"),
    "a tip that is not the packed commit": (_claim_another_tip, "is missing, not a commit"),
    "another format version": (_next_version, "format version 2"),
    "a path climbing out": (_climb_out, "BEM-302"),
    "a path into .git": (_into_metadata, "BEM-304"),
    "a branch that is a refspec": (_refspec_branch, "not a plain name"),
}


@pytest.mark.parametrize(("tamper", "why"), TAMPERING.values(), ids=TAMPERING.keys())
def test_a_tampered_snapshot_is_bem_502_and_writes_nothing(
    job: Job, base_dir: Path, tamper: Callable[[Parts], None], why: str
) -> None:
    busy_job(job.workspace)
    data = capture(job.workspace, max_bytes=CAP)
    again = job.resume_elsewhere(data)
    parts = Parts.of(data)
    tamper(parts)
    before = everything(base_dir)

    with pytest.raises(BeamError) as caught:
        restore(parts.encode(), again)

    assert caught.value.code == "BEM-502"
    assert "cannot be restored" in caught.value.message and why in caught.value.message
    assert everything(base_dir) == before


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: b"not a snapshot at all",
        lambda data: data[: len(data) // 2],
        lambda data: _flip(data, len(data) - 3),
        lambda data: data + b"trailing",
    ],
    ids=["garbage", "truncated", "flipped compressed byte", "trailing bytes"],
)
def test_damaged_bytes_are_bem_502(job: Job, damage: Callable[[bytes], bytes]) -> None:
    data = capture(job.workspace, max_bytes=CAP)
    again = job.resume_elsewhere(data)

    with pytest.raises(BeamError) as caught:
        restore(damage(data), again)

    assert caught.value.code == "BEM-502"


def test_a_snapshot_restores_only_into_its_own_fresh_workspace(
    job: Job, settings: WorkspaceSettings
) -> None:
    busy_job(job.workspace)
    data = capture(job.workspace, max_bytes=CAP)
    other = prepare_workspace("job-t", "docs", job.config, None, settings)

    with pytest.raises(BeamError) as wrong_job:
        restore(data, other)
    with pytest.raises(BeamError) as not_fresh:
        restore(data, job.workspace)

    assert (wrong_job.value.code, not_fresh.value.code) == ("BEM-502", "BEM-502")
    assert "job-s" in wrong_job.value.message and "job-t" in wrong_job.value.message
    assert "freshly prepared" in not_fresh.value.message


def test_a_hostile_tree_in_the_snapshot_is_refused_before_checkout(job: Job) -> None:
    """A packed tree naming .git in disguise would make the checkout write metadata."""
    with container(job.workspace) as (root, tree):
        root.write_bytes("docs/a.md", b"work\n")
        tree.add(".")
        tree.commit("Work")
    parts = Parts.of(capture(job.workspace, max_bytes=CAP))
    scratch = pygit2.init_repository(str(job.workspace.tree.parent / "scratch"), bare=True)
    hook = scratch.create_blob(b"#!/bin/sh\necho owned\n")
    inner = scratch.TreeBuilder()
    inner.insert("post-checkout", hook, FileMode.BLOB_EXECUTABLE)
    # libgit2's tree builder refuses the name; a hostile worker writes the bytes itself.
    outer = scratch.odb.write(ObjectType.TREE, b"40000 git~1\0" + inner.write().raw)
    who = pygit2.Signature("x", "x@example.com")
    commit = scratch.create_commit(None, who, who, "evil", outer, [])
    builder = pygit2.PackBuilder(scratch)
    builder.add_recur(commit)
    builder.write(str(job.workspace.tree.parent / "scratch"))
    pack = next((job.workspace.tree.parent / "scratch").glob("*.pack")).read_bytes()
    parts.pack = pack
    parts.header["pack_bytes"] = len(pack)
    parts.header["objects"] = [str(commit), str(hook), str(inner.write()), str(outer)]
    branch = parts.header["head"]["branch"]
    parts.header["branches"][branch] = parts.header["head"]["commit"] = str(commit)
    again = job.resume_elsewhere(parts.encode())

    with pytest.raises(BeamError) as caught:
        restore(parts.encode(), again)

    assert caught.value.code == "BEM-502" and "git~1" in caught.value.message
    assert not (again.tree / "git~1").exists()


# -- hostile trees at capture ----------------------------------------------------------------


def _within(seconds: float, call: Callable[[], T]) -> T:
    """``call()``, failing the test instead of hanging if it blocks (on a FIFO, say)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("value", call()))
        except BaseException as error:  # handed to the test thread
            outcome.append(("error", error))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"still blocked after {seconds} s"
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value  # type: ignore[no-any-return]


def test_a_hostile_tree_is_captured_without_following_anything_out(
    job: Job, base_dir: Path
) -> None:
    secret = b"outside-secret-" + os.urandom(8).hex().encode()
    outside = base_dir / "outside.txt"
    outside.write_bytes(secret)
    tree = job.workspace.tree
    with container(job.workspace):
        os.symlink(outside, tree / "leak.md")  # new, pointing out
        (tree / "docs" / "install.md").unlink()
        os.symlink(outside, tree / "docs" / "install.md")  # tracked, now a link out
        os.mkfifo(tree / "pipe")  # new FIFO
        (tree / "README.md").unlink()
        os.mkfifo(tree / "README.md")  # tracked file replaced by a FIFO
        (tree / "git~1").write_bytes(b"disguised metadata\n")
        (tree / "docs" / ".git").write_bytes(b"gitdir: /etc\n")
        nested = pygit2.init_repository(str(tree / "nested"))
        (tree / "nested" / "inner.md").write_bytes(b"inner\n")
        nested.index.add("inner.md")
        nested.index.write()
        who = pygit2.Signature("x", "x@example.com")
        nested.create_commit("HEAD", who, who, "inner", nested.index.write_tree(), [])
        (tree / "hard.md").write_bytes(b"x")
        os.link(tree / "hard.md", tree / "hard-too.md")

    data = _within(30, lambda: capture(job.workspace, max_bytes=CAP))

    assert secret not in zlib.decompress(data[len(MAGIC) :])
    header = read_header(data)
    kinds = {entry.path: entry.kind for entry in header.files}
    assert kinds == {"docs/install.md": "symlink", "leak.md": "symlink"}
    skipped = {entry.path: entry.reason for entry in header.skipped}
    assert "FIFO" in skipped["README.md"] and "BEM-304" in skipped["git~1"]
    assert "BEM-303" in skipped["hard.md"] and "BEM-303" in skipped["hard-too.md"]
    assert "nested repository" in skipped["nested/"]
    again = job.resume_elsewhere(data)
    restore(data, again)
    assert os.readlink(again.tree / "leak.md") == str(outside)
    assert os.readlink(again.tree / "docs" / "install.md") == str(outside)
    assert not os.path.lexists(again.tree / "README.md")  # left out: absent, not a FIFO
    assert not os.path.lexists(again.tree / "pipe") and not os.path.lexists(again.tree / "git~1")
    assert outside.read_bytes() == secret


def _exclude_link(tree: Path) -> None:
    (tree / ".git" / "info").mkdir()
    os.symlink("/etc/passwd", tree / ".git" / "info" / "exclude")


PLANTED: dict[str, Callable[[Path], None]] = {
    ".gitignore linked to /dev/zero": lambda tree: os.symlink(
        "/dev/zero", tree / "docs" / ".gitignore"
    ),
    "a FIFO .gitattributes": lambda tree: os.mkfifo(tree / ".gitattributes"),
    "info/exclude linked out": _exclude_link,
    "a link among the objects": lambda tree: os.symlink("/", tree / ".git" / "objects" / "ab"),
}


@pytest.mark.parametrize("plant", PLANTED.values(), ids=PLANTED.keys())
def test_files_git_would_read_through_are_refused_at_capture(
    job: Job, plant: Callable[[Path], None]
) -> None:
    with container(job.workspace):
        plant(job.workspace.tree)

    with pytest.raises(BeamError) as caught:
        _within(30, lambda: capture(job.workspace, max_bytes=CAP))

    assert caught.value.code == "BEM-329"
    assert pygit2.option(Option.GET_OWNER_VALIDATION)


# -- staging a push into the outbox on the host: at the park, and after a restore ---------


@pytest.fixture(params=["park", "restore"])
def pushed(request: pytest.FixtureRequest, job: Job) -> tuple[Workspace, str]:
    """A job's tree with a commit to push, and that commit: the tree its container left when
    the job parked (``park``), or the tree a resume on another host rebuilt (``restore``)."""
    busy_job(job.workspace)
    workspace = job.workspace
    if request.param == "restore":
        data = capture(job.workspace, max_bytes=CAP)
        workspace = job.resume_elsewhere(data)
        restore(data, workspace)
    return workspace, git("-C", str(workspace.tree), "rev-parse", workspace.branch, sandbox=True)


def test_a_push_is_staged_from_the_job_tree_and_relays(
    job: Job, settings: WorkspaceSettings, pushed: tuple[Workspace, str]
) -> None:
    workspace, sha = pushed
    assert outbox_branch(workspace.outbox, workspace.branch) == workspace.base_sha
    assert stage_push(workspace, sha, workspace.branch, job.config.protected_refs)
    assert outbox_branch(workspace.outbox, workspace.branch) == sha
    # The outbox holds the whole commit: the relay finds every object it needs there.
    host = settings if workspace is job.workspace else job.elsewhere
    callbacks = upstream_callbacks("docs", job.config, host)
    relayed = relay_push(workspace, sha, workspace.branch, job.config, callbacks=callbacks)
    assert relayed.pushed
    assert git("--git-dir", job.config.upstream, "rev-parse", HEADS + workspace.branch) == sha
    # What the container's later pushes need to write stays the sandbox uid's.
    ref = workspace.outbox / "refs" / "heads" / workspace.branch
    assert ref.stat().st_uid == workspace.outbox.stat().st_uid


def _another_commit(workspace: Workspace, sha: str) -> str:
    return git("-C", str(workspace.tree), "rev-parse", f"{sha}~1", sandbox=True)


@pytest.mark.parametrize(
    "asked",
    [
        pytest.param(lambda ws, sha: ("main", ws.base_sha), id="protected"),
        pytest.param(lambda ws, sha: ("MAIN", ws.base_sha), id="protected-case"),
        pytest.param(lambda ws, sha: (HEADS + ws.branch, sha), id="not-as-spelled"),
        pytest.param(lambda ws, sha: ("+" + ws.branch, sha), id="force-refspec"),
        pytest.param(lambda ws, sha: (ws.branch + "/../x", sha), id="dot-dot"),
        pytest.param(lambda ws, sha: (ws.branch, _another_commit(ws, sha)), id="not-the-tip"),
        pytest.param(lambda ws, sha: (ws.branch, sha.upper()), id="sha-spelling"),
        pytest.param(lambda ws, sha: (ws.branch, sha[:12]), id="short-sha"),
        pytest.param(lambda ws, sha: ("riverbeam/other", sha), id="no-such-branch"),
    ],
)
def test_a_push_that_is_not_exactly_the_tree_branch_is_never_staged(
    pushed: tuple[Workspace, str], asked: Callable[[Workspace, str], tuple[str, str]]
) -> None:
    workspace, sha = pushed
    branch, commit = asked(workspace, sha)
    before = everything(workspace.outbox)
    assert not stage_push(workspace, commit, branch, ["main"])
    assert everything(workspace.outbox) == before


def _loose(gitdir: Path, oid: str) -> Path:
    return gitdir / "objects" / oid[:2] / oid[2:]


def _link_ref_dir(top: Path, branch: str, outside: Path) -> None:
    """Make the directory of ``branch``'s ref under ``top`` a symlink to a copy outside."""
    parent = (top / "refs" / "heads" / branch).parent
    shutil.copytree(parent, outside)
    shutil.rmtree(parent)
    parent.symlink_to(outside)


def _tree_gitdir_linked(ws: Workspace, sha: str, outside: Path) -> None:
    # A whole, valid repository, with the branch at the commit: but reached through a link.
    shutil.copytree(ws.tree / ".git", outside, symlinks=True)
    shutil.rmtree(ws.tree / ".git")
    (ws.tree / ".git").symlink_to(outside)


def _tree_ref_dir_linked(ws: Workspace, sha: str, outside: Path) -> None:
    _link_ref_dir(ws.tree / ".git", ws.branch, outside)


def _tree_ref_file_linked(ws: Workspace, sha: str, outside: Path) -> None:
    ref = ws.tree / ".git" / "refs" / "heads" / ws.branch
    outside.mkdir()
    (outside / "tip").write_text(sha + "\n")
    ref.unlink()
    ref.symlink_to(outside / "tip")


def _tree_lacks_an_object(ws: Workspace, sha: str, outside: Path) -> None:
    # The commit names a tree the job's objects no longer hold; the object exists elsewhere,
    # named by an alternates file, which the host never honours.
    gitdir = ws.tree / ".git"
    tree = git("-C", str(ws.tree), "rev-parse", f"{sha}^{{tree}}", sandbox=True)
    shutil.copytree(gitdir / "objects", outside)
    _loose(gitdir, tree).unlink()
    (gitdir / "objects" / "info").mkdir(exist_ok=True)
    (gitdir / "objects" / "info" / "alternates").write_text(f"{outside}\n")


def _tree_objects_hold_a_link(ws: Workspace, sha: str, outside: Path) -> None:
    loose = _loose(ws.tree / ".git", sha)
    outside.mkdir()
    shutil.move(loose, outside / "commit")
    loose.symlink_to(outside / "commit")


def _outbox_ref_dir_linked(ws: Workspace, sha: str, outside: Path) -> None:
    _link_ref_dir(ws.outbox, ws.branch, outside)


def _outbox_objects_hold_a_link(ws: Workspace, sha: str, outside: Path) -> None:
    outside.mkdir()
    (ws.outbox / "objects" / "ab").mkdir(exist_ok=True)
    (ws.outbox / "objects" / "ab" / ("cd" * 19)).symlink_to(outside)


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(_tree_gitdir_linked, id="tree-gitdir-symlink"),
        pytest.param(_tree_ref_dir_linked, id="tree-ref-directory-symlink"),
        pytest.param(_tree_ref_file_linked, id="tree-ref-file-symlink"),
        pytest.param(_tree_lacks_an_object, id="tree-lacks-an-object"),
        pytest.param(_tree_objects_hold_a_link, id="tree-object-symlink"),
        pytest.param(_outbox_ref_dir_linked, id="outbox-ref-directory-symlink"),
        pytest.param(_outbox_objects_hold_a_link, id="outbox-object-symlink"),
    ],
)
def test_a_tampered_tree_or_outbox_stages_nothing_and_writes_nothing_outside(
    base_dir: Path,
    pushed: tuple[Workspace, str],
    tamper: Callable[[Workspace, str, Path], None],
) -> None:
    # What a hostile container could leave in the tree or the outbox (both bind-mounted in
    # it) by the time the job parks; the snapshot refuses most of it, the host's read all.
    workspace, sha = pushed
    outside = base_dir / "outside"
    tamper(workspace, sha, outside)
    before = _but_objects(workspace.outbox), everything(outside)
    assert not stage_push(workspace, sha, workspace.branch, ["main"])
    # Objects copied before the branch could not be written are unreferenced and harmless.
    assert (_but_objects(workspace.outbox), everything(outside)) == before
    assert not list(workspace.outbox.rglob("*.lock"))


def _but_objects(outbox: Path) -> dict[str, tuple[int, bytes]]:
    objects = str(outbox / "objects")
    return {path: seen for path, seen in everything(outbox).items() if objects not in path}


def test_a_branch_the_outbox_cannot_hold_leaves_it_as_it_was(
    pushed: tuple[Workspace, str],
) -> None:
    workspace, sha = pushed
    # A directory where the branch's ref file goes: the rename fails, nothing points at sha.
    (workspace.outbox / "refs" / "heads" / workspace.branch).unlink()
    (workspace.outbox / "refs" / "heads" / workspace.branch / "x").mkdir(parents=True)
    assert not stage_push(workspace, sha, workspace.branch, ["main"])
    assert outbox_branch(workspace.outbox, workspace.branch) is None
    assert not list((workspace.outbox / "refs" / "heads").rglob("*.lock"))
