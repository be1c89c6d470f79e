"""The jail's attack catalogue: each case must fail with its exact BEM code and change nothing.

Every case runs against a fresh tree (``jail_kit.build_jail_env``) with a real ``.git`` and an
``outside`` sibling holding secrets. A case passes only if the call raises a JailError with the
expected code, within a deadline (a blocking FIFO open fails it), and a snapshot of the
outside, of ``.git`` and of the working tree is identical before and after the call.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.core.errors import JailError
from sandbox.host.workspace.overlay import unmount_view
from sandbox.inside.jail import SandboxRoot
from tests.sandbox.jail_kit import JailEnv, build_jail_env, deadline

Setup = Callable[[JailEnv], object]
MIB = 1 << 20


@pytest.fixture(params=[False, True], ids=["tree", "view"])
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[JailEnv]:
    """The catalogue on a plain tree and on a job's view of a base."""
    made = build_jail_env(tmp_path, view=request.param)
    yield made
    if made.view:
        unmount_view(made.root)


# -- setup steps ---------------------------------------------------------------------------


def _expand(env: JailEnv, text: str) -> str:
    return text.replace("{root}", str(env.root)).replace("{base}", str(env.base))


def symlink(rel: str, target: str) -> Setup:
    return lambda env: env.link(rel, _expand(env, target))


def chain(directory: str, length: int) -> Setup:
    """``l0 -> l1 -> ... -> l<length>``, ending at a real file: only the hop count is wrong."""

    def make(env: JailEnv) -> None:
        for index in range(length):
            env.link(f"{directory}/l{index}", f"l{index + 1}")
        env.link(f"{directory}/l{length}", "index.md")

    return make


def fifo(rel: str) -> Setup:
    return lambda env: os.mkfifo(env.root / rel)


def unix_socket(rel: str) -> Setup:
    def make(env: JailEnv) -> None:
        path = env.root / rel
        cwd = os.getcwd()
        # sun_path holds about 108 bytes; bind by a short name from inside the directory.
        os.chdir(path.parent)
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(path.name)
        finally:
            os.chdir(cwd)

    return make


def device(rel: str, kind: int, major: int, minor: int) -> Setup:
    return lambda env: os.mknod(env.root / rel, 0o600 | kind, os.makedev(major, minor))


def hard_link_to_outside(rel: str) -> Setup:
    def make(env: JailEnv) -> None:
        if not env.view:
            os.link(env.outside / "secret.txt", env.root / rel)
            return
        # Into a view the kernel links nothing from another mount; what a process in it can
        # link is a file of the view (a base file is copied up first): refused alike.
        with pytest.raises(OSError) as refused:
            os.link(env.outside / "secret.txt", env.root / rel)
        assert refused.value.errno == errno.EXDEV
        os.link(env.root / "README.md", env.root / rel)

    return make


def big_file(rel: str, size: int) -> Setup:
    return lambda env: (env.root / rel).write_bytes(b"x" * size)


def nested_git(rel: str) -> Setup:
    def make(env: JailEnv) -> None:
        (env.root / rel).mkdir(parents=True)
        (env.root / rel / "config").write_bytes(b"[core]\n")

    return make


# -- the catalogue -------------------------------------------------------------------------


@dataclass(frozen=True)
class Attack:
    id: str
    op: str
    path: str
    code: str
    setup: tuple[Setup, ...] = ()
    data: bytes = b"pwned\n"


def case(ident: str, op: str, path: str, code: str, *setup: Setup, data: bytes = b"") -> Attack:
    return Attack(ident, op, path, code, setup, data or b"pwned\n")


LEXICAL = [
    case("empty-read", "read", "", "BEM-300"),
    case("empty-write", "write", "", "BEM-300"),
    case("root-dot-read", "read", ".", "BEM-300"),
    case("root-dotslash-write", "write", ".//./", "BEM-300"),
    case("nul-in-name", "read", "docs/in\x00dex.md", "BEM-300"),
    case("nul-truncation-write", "write", "docs/index.md\x00.txt", "BEM-300"),
    case("overlong-path", "write", "a/" * 600 + "x.md", "BEM-300"),
    case("overlong-name", "write", "docs/" + "x" * 256, "BEM-300"),
    case("overlong-name-utf8-bytes", "write", "é" * 128, "BEM-300"),
    case("lone-surrogate", "read", "docs/\udc80.md", "BEM-300"),
    case("nul-checked-before-absolute", "read", "/etc/passwd\x00", "BEM-300"),
    case("abs-etc-passwd", "read", "/etc/passwd", "BEM-301"),
    case("abs-double-slash", "read", "//etc/passwd", "BEM-301"),
    case("abs-path-into-root", "read", "{root}/docs/index.md", "BEM-301"),
    case("abs-write-outside", "write", "{base}/outside/new.txt", "BEM-301"),
    case("abs-backslash", "read", "\\etc\\passwd", "BEM-301"),
    case("abs-unc", "read", "\\\\server\\share\\x", "BEM-301"),
    case("abs-drive-backslash", "read", "C:\\Windows\\win.ini", "BEM-301"),
    case("abs-drive-slash-write", "write", "c:/x.md", "BEM-301"),
    case("abs-drive-relative", "read", "C:x", "BEM-301"),
    case("abs-drive-after-dot", "write", "./C:", "BEM-301"),
    case("abs-backslash-after-dot", "write", ".//\\server\\share", "BEM-301"),
    case("abs-checked-before-dotdot", "read", "/../x", "BEM-301"),
    case("dotdot-leading", "read", "../outside/secret.txt", "BEM-302"),
    case("dotdot-alone", "read", "..", "BEM-302"),
    case("dotdot-after-dir", "read", "docs/../../outside/secret.txt", "BEM-302"),
    case("dotdot-after-dot", "read", "a/./../..", "BEM-302"),
    case("dotdot-trailing", "read", "docs/..", "BEM-302"),
    case("dotdot-even-if-inside", "read", "docs/../README.md", "BEM-302"),
    case("dotdot-backslash", "read", "..\\outside\\secret.txt", "BEM-302"),
    case("dotdot-backslash-nested", "write", "a\\..\\..\\x", "BEM-302"),
    case("dotdot-mixed-separators", "write", "docs/..\\..\\outside/secret.txt", "BEM-302"),
    case("dotdot-sibling-prefix", "read", "../root2/secret.txt", "BEM-302"),
    case("dotdot-checked-before-metadata", "write", ".git/../x", "BEM-302"),
]

OUT_DIR_REL = symlink("docs/out", "../../outside/dir")
OUT_FILE_REL = symlink("docs/rel", "../../outside/secret.txt")
HARD = hard_link_to_outside("docs/hard.txt")

# fmt: off
ESCAPES = [
    case("link-absolute-outside", "read", "docs/abs", "BEM-303",
         symlink("docs/abs", "{base}/outside/secret.txt")),
    case("link-absolute-even-inside", "read", "docs/abs", "BEM-303",
         symlink("docs/abs", "{root}/docs/index.md")),
    case("link-relative-outside", "read", "docs/rel", "BEM-303", OUT_FILE_REL),
    case("link-up-and-back-in", "read", "docs/back", "BEM-303",
         symlink("docs/back", "../../root/docs/index.md")),
    case("link-sibling-prefix", "read", "docs/sib", "BEM-303",
         symlink("docs/sib", "../../root2/secret.txt")),
    case("link-chain-of-two", "read", "docs/one", "BEM-303",
         symlink("docs/one", "two"), symlink("docs/two", "../../outside/secret.txt")),
    case("link-parent-dir-relative", "read", "docs/out/inner.txt", "BEM-303", OUT_DIR_REL),
    case("link-parent-dir-absolute", "read", "docs/out/inner.txt", "BEM-303",
         symlink("docs/out", "{base}/outside/dir")),
    case("link-top-dir-outside", "read", "out/secret.txt", "BEM-303", symlink("out", "../outside")),
    case("link-loop-pair", "read", "docs/a", "BEM-303",
         symlink("docs/a", "b"), symlink("docs/b", "a")),
    case("link-loop-self", "read", "docs/me", "BEM-303", symlink("docs/me", "me")),
    case("link-loop-through-dir", "read", "docs/d/d/d/x", "BEM-303", symlink("docs/d", "d")),
    case("link-chain-41-hops", "read", "docs/l0", "BEM-303", chain("docs", 41)),
    case("link-proc-magic", "read", "docs/proc", "BEM-303",
         symlink("docs/proc", "/proc/self/root/etc/passwd")),
    case("link-dev-null-absolute", "read", "docs/null", "BEM-303",
         symlink("docs/null", "/dev/null")),
    case("link-dev-null-relative", "read", "docs/null", "BEM-303",
         symlink("docs/null", "../" * 16 + "dev/null")),
    case("hardlink-read", "read", "docs/hard.txt", "BEM-303", HARD),
    case("hardlink-write", "write", "docs/hard.txt", "BEM-303", HARD),
    case("hardlink-resolve-for-git-add", "resolve", "docs/hard.txt", "BEM-303", HARD),
    case("write-link-absolute-outside", "write", "docs/w", "BEM-303",
         symlink("docs/w", "{base}/outside/secret.txt")),
    case("write-link-relative-outside", "write", "docs/rel", "BEM-303", OUT_FILE_REL),
    case("write-dangling-link-outside", "write", "docs/w", "BEM-303",
         symlink("docs/w", "../../outside/created.txt")),
    case("write-parents-through-outside-link", "write", "docs/out/new/deeper/x.md", "BEM-303",
         OUT_DIR_REL),
    case("write-into-outside-dir-link", "write", "docs/out/inner.txt", "BEM-303",
         symlink("docs/out", "{base}/outside/dir")),
    case("write-via-sibling-prefix-link", "write", "sib/secret.txt", "BEM-303",
         symlink("sib", "../root2")),
    case("walk-outside-dir-link", "walk", "docs/out", "BEM-303", OUT_DIR_REL),
    case("resolve-outside-link", "resolve", "docs/rel", "BEM-303", OUT_FILE_REL),
    case("exists-outside-link", "exists", "docs/rel", "BEM-303", OUT_FILE_REL),
    case("is-dir-outside-dir-link", "is_dir", "docs/out", "BEM-303", OUT_DIR_REL),
]
# fmt: on

# Each disguise is tried as a leaf (write), in the middle (read) and nested at depth (write).
DISGUISES = {
    "plain": ".git",
    "upper": ".GIT",
    "mixed-case": ".Git",
    "trailing-dot": ".git.",
    "trailing-space": ".git ",
    "trailing-dots": ".git...",
    "trailing-dots-spaces": ".git. . ",
    "short-name": "git~1",
    "short-name-upper": "GIT~1",
    "short-name-4": "GIT~4",
    "short-name-hashed": "GI7EBA~1",
    "zero-width-space": ".g\u200bit",
    "zero-width-non-joiner": ".git\u200c",
    "zero-width-joiner": "\u200d.git",
    "ltr-mark": ".git\u200e",
    "rtl-mark": ".gi\u200ft",
    "rtl-override": "\u202e.git",
    "word-joiner": ".git\u2060",
    "invisible-plus": ".git\u2064",
    "bom": "\ufeff.git",
    "soft-hyphen": ".gi\u00adt",
    "control-char": ".git\x01",
    "no-break-space": ".git\u00a0",
    "fullwidth": "．ｇｉｔ",
    "fullwidth-upper": ".ＧＩＴ",
    "ntfs-index-allocation": ".git::$INDEX_ALLOCATION",
    "ntfs-stream": ".git:stream",
    "variation-selector": ".git\ufe0f",
}

# fmt: off
METADATA = [
    *(case(f"git-leaf-{label}", "write", name, "BEM-304") for label, name in DISGUISES.items()),
    *(case(f"git-middle-{label}", "read", f"{name}/config", "BEM-304")
      for label, name in DISGUISES.items()),
    *(case(f"git-nested-{label}", "write", f"vendor/x/{name}/config", "BEM-304")
      for label, name in DISGUISES.items()),
    case("git-hooks-post-commit", "write", ".git/hooks/post-commit", "BEM-304"),
    case("git-config-write", "write", ".git/config", "BEM-304"),
    case("git-dir-read-304-before-305", "read", ".git", "BEM-304"),
    case("git-dot-prefixed", "read", "./.git/config", "BEM-304"),
    case("git-backslash-separated", "write", "docs\\.git\\config", "BEM-304"),
    case("git-nested-existing", "read", "docs/sub/.git/config", "BEM-304",
         nested_git("docs/sub/.git")),
    case("git-walk", "walk", ".git", "BEM-304"),
    case("git-resolve", "resolve", ".git", "BEM-304"),
    case("git-exists", "exists", ".git/HEAD", "BEM-304"),
    case("git-is-dir", "is_dir", "docs/.GIT", "BEM-304"),
    case("git-normalize", "normalize", "a/.GIT/b", "BEM-304"),
    case("link-into-git-file", "read", "docs/cfg", "BEM-304",
         symlink("docs/cfg", "../.git/config")),
    case("link-into-git-file-write", "write", "docs/cfg", "BEM-304",
         symlink("docs/cfg", "../.git/config")),
    case("link-into-git-dir-write", "write", "docs/meta/hooks/post-commit", "BEM-304",
         symlink("docs/meta", "../.git")),
    case("link-top-level-to-git", "write", "meta/config", "BEM-304", symlink("meta", ".git")),
    case("link-chain-into-git", "read", "docs/l1", "BEM-304",
         symlink("docs/l1", "l2"), symlink("docs/l2", "../.git/HEAD")),
    case("link-into-disguised-git", "read", "docs/cfg", "BEM-304",
         symlink("docs/cfg", "../.GIT/config")),
    case("link-into-nested-git", "write", "docs/n", "BEM-304",
         nested_git("vendor/.git"), symlink("docs/n", "../vendor/.git/config")),
]

PIPE = fifo("docs/pipe")
NULL_DEVICE = device("docs/null", stat.S_IFCHR, 1, 3)

NOT_FILES = [
    case("fifo-read-does-not-block", "read", "docs/pipe", "BEM-305", PIPE),
    case("fifo-write", "write", "docs/pipe", "BEM-305", PIPE),
    case("fifo-via-inside-link", "read", "docs/p", "BEM-305", PIPE, symlink("docs/p", "pipe")),
    case("fifo-resolve", "resolve", "docs/pipe", "BEM-305", PIPE),
    case("unix-socket-read", "read", "docs/sock", "BEM-305", unix_socket("docs/sock")),
    case("unix-socket-write", "write", "docs/sock", "BEM-305", unix_socket("docs/sock")),
    case("char-device-mknod-read", "read", "docs/null", "BEM-305", NULL_DEVICE),
    case("char-device-mknod-write", "write", "docs/null", "BEM-305", NULL_DEVICE),
    case("char-device-via-inside-link", "read", "docs/n", "BEM-305",
         NULL_DEVICE, symlink("docs/n", "null")),
    case("block-device-mknod-read", "read", "docs/loop", "BEM-305",
         device("docs/loop", stat.S_IFBLK, 7, 0)),
    case("directory-read", "read", "docs", "BEM-305"),
    case("directory-write", "write", "docs/guide", "BEM-305"),
    case("directory-via-link-write", "write", "docs/g", "BEM-305", symlink("docs/g", "guide")),
    case("directory-via-dotdot-link-read", "read", "docs/up", "BEM-305",
         symlink("docs/up", "guide/..")),
    case("oversize-read", "read", "docs/big.bin", "BEM-305", big_file("docs/big.bin", MIB + 1)),
    case("oversize-write-creates-nothing", "write", "new/dir/big.bin", "BEM-305",
         data=b"x" * (MIB + 1)),
    case("walk-a-file", "walk", "docs/index.md", "BEM-305"),
]
# fmt: on

ATTACKS = LEXICAL + ESCAPES + METADATA + NOT_FILES

OPERATIONS: dict[str, Callable[[SandboxRoot, str, bytes], object]] = {
    "read": lambda jail, path, data: jail.read_bytes(path),
    "write": lambda jail, path, data: jail.write_bytes(path, data),
    "resolve": lambda jail, path, data: jail.resolve(path),
    "exists": lambda jail, path, data: jail.exists(path),
    "is_dir": lambda jail, path, data: jail.is_dir(path),
    "walk": lambda jail, path, data: list(jail.walk(path)),
    "normalize": lambda jail, path, data: jail.normalize(path),
}


def test_catalogue_is_large_and_ids_are_unique() -> None:
    ids = [attack.id for attack in ATTACKS]
    assert len(ids) == len(set(ids))
    assert len(ATTACKS) >= 60


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda attack: attack.id)
def test_attack_is_refused_and_changes_nothing(env: JailEnv, attack: Attack) -> None:
    for step in attack.setup:
        step(env)
    before = env.snapshot()
    with deadline(5), pytest.raises(JailError) as refused:
        OPERATIONS[attack.op](env.jail, _expand(env, attack.path), attack.data)
    assert refused.value.code == attack.code, refused.value.message
    env.assert_unchanged(before)


# -- names that look like traversal but are literal names inside the root ------------------


@pytest.mark.parametrize(
    "name",
    ["%2e%2e", "%2E%2E", "..%2f", "%252e%252e", "．．", "﹒﹒", "...", "....", ".. ", " .."],
)
def test_lookalike_dot_names_are_literal_names_inside(env: JailEnv, name: str) -> None:
    before = env.snapshot()
    env.jail.write_bytes(f"{name}/x.md", b"literal\n")
    assert (env.root / name / "x.md").read_bytes() == b"literal\n"
    assert env.jail.read_bytes(f"{name}/x.md") == b"literal\n"
    assert env.jail.resolve(f"{name}/x.md") == f"{name}/x.md"
    after = env.snapshot()
    assert after.outside == before.outside
    assert after.git == before.git


# -- the messages tell the model what happened and what to do ------------------------------


def test_hard_link_message_says_hard_links_are_refused(env: JailEnv) -> None:
    HARD(env)
    with pytest.raises(JailError, match="hard links are refused"):
        env.jail.read_bytes("docs/hard.txt")


def test_read_cap_message_states_cap_and_size(tmp_path: Path) -> None:
    env = build_jail_env(tmp_path, max_read_bytes=100)
    (env.root / "docs" / "big.md").write_bytes(b"x" * 101)
    with pytest.raises(JailError, match=r"101 bytes, over the read cap of 100 bytes; .*smaller"):
        env.jail.read_bytes("docs/big.md")
    assert env.jail.read_bytes("docs/index.md")


def test_write_cap_message_states_cap_and_size(tmp_path: Path) -> None:
    env = build_jail_env(tmp_path, max_write_bytes=10)
    with pytest.raises(JailError, match=r"11 bytes, over the write cap of 10 bytes; split"):
        env.jail.write_bytes("docs/new.md", b"x" * 11)
    env.jail.write_bytes("docs/new.md", b"x" * 10)


def test_path_limit_is_configurable(tmp_path: Path) -> None:
    env = build_jail_env(tmp_path, max_path_bytes=13)
    assert env.jail.read_bytes("docs/index.md") == (env.root / "docs/index.md").read_bytes()
    with pytest.raises(JailError) as refused:
        env.jail.read_bytes("docs/./index.md")
    assert refused.value.code == "BEM-300"


def test_loop_message_names_the_loop(env: JailEnv) -> None:
    env.link("docs/a", "b")
    env.link("docs/b", "a")
    with pytest.raises(JailError, match="too many symlinks"):
        env.jail.read_bytes("docs/a")
