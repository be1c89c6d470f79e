"""Copy-on-write views of a base tree: overlayfs mounts the worker makes on its own host.

A job's tree is an overlay of a checked-out base (``sandbox.host.workspace.bases``, read-only
through the view) and a directory of its own that takes every change: writing a base file
copies it up first, deleting one leaves a whiteout, and the base itself is never written.
The kernel does the copying, with the worker's (the mounter's) credentials; a process in the
view gets only its own permissions on what it sees.

Mounting needs ``CAP_SYS_ADMIN`` in the mount namespace that the Docker engine also sees: a
worker running as root on the host has both. A spare container (``bot.jobs.spares``) is
started on an empty directory before its job's view exists, so the view must reach a bind
mount made earlier: the spare's ``tree`` is made a shared mount of its own (``share_mount``)
and the spare binds it ``rslave``, which carries the view mounted on it later into the
container and nothing of the container's back out.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import shutil
import tempfile
from pathlib import Path

from bot.core.errors import BeamError

__all__ = [
    "ViewUnavailable",
    "detach_under",
    "is_mounted",
    "mount_view",
    "mounts_under",
    "share_mount",
    "unmount_all",
    "unmount_view",
    "views_available",
]

_MS_BIND = 4096
_MS_SHARED = 1 << 20
_MNT_DETACH = 2
# The kernel parses overlay options on these; the paths are Riverbeam's own, never a job's.
_UNSAFE = frozenset(",:\\\n")
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
# Per workspace root, for this process: whether views can be mounted there.
_AVAILABLE: dict[Path, bool] = {}

log = logging.getLogger(__name__)


class ViewUnavailable(Exception):
    """This worker cannot mount views (no privilege, no overlayfs): use a full checkout."""


def views_available(root: Path, mode: str) -> bool:
    """Whether job trees under ``root`` are views (``workspaces.views``: auto, always, never).

    Found out once per process by mounting a view of an empty directory under ``root``;
    where the kernel refuses, ``auto`` falls back to a checkout per job (said once) and
    ``always`` is BEM-342.
    """
    if mode == "never":
        return False
    if root not in _AVAILABLE:
        root.mkdir(parents=True, exist_ok=True, mode=0o711)
        probe = Path(tempfile.mkdtemp(prefix=".views-probe-", dir=root))
        try:
            layers = [probe / name for name in ("lower", "upper", "work", "view")]
            for path in layers:
                path.mkdir()
            mount_view(*layers)
            unmount_view(layers[3])
            _AVAILABLE[root] = True
        except ViewUnavailable as error:
            if mode == "always":
                raise BeamError(
                    "BEM-342",
                    f"workspaces.views is 'always' but this worker cannot mount views under "
                    f"{root} ({error}); run it as root on the engine's host, or set 'auto'",
                ) from None
            log.info("job trees under %s are checkouts, not views: %s", root, error)
            _AVAILABLE[root] = False
        finally:
            shutil.rmtree(probe, ignore_errors=True)
    return _AVAILABLE[root]


def mount_view(lower: Path, upper: Path, work: Path, target: Path) -> None:
    """Mount the overlay of ``upper`` on ``lower`` at ``target`` (``work``: overlayfs' own).

    ``ViewUnavailable`` when the kernel refuses for want of privilege or support; BEM-342
    for any other failure.
    """
    for path in (lower, upper, work):
        if _UNSAFE & set(str(path)):
            raise BeamError("BEM-342", f"{path} cannot be an overlay layer: ',', ':' or '\\'")
    # index=off and redirect_dir=off: nothing persists between mounts of a view but its files.
    options = f"lowerdir={lower},upperdir={upper},workdir={work},index=off,redirect_dir=off"
    code = _libc.mount(b"overlay", os.fsencode(target), b"overlay", 0, options.encode())
    if code != 0:
        number = ctypes.get_errno()
        if number in (errno.EPERM, errno.ENODEV, errno.EACCES):
            raise ViewUnavailable(os.strerror(number))
        raise BeamError(
            "BEM-342", f"mounting the job's view at {target} failed: {os.strerror(number)}"
        )


def unmount_view(target: Path) -> None:
    """Detach the view at ``target``; nothing when nothing is mounted there."""
    if _libc.umount2(os.fsencode(target), _MNT_DETACH) != 0:
        number = ctypes.get_errno()
        if number not in (errno.EINVAL, errno.ENOENT):
            raise BeamError(
                "BEM-342", f"unmounting the job's view at {target} failed: {os.strerror(number)}"
            )


def is_mounted(target: Path) -> bool:
    """Whether something is mounted at ``target`` (a view, after a reboot: nothing); from the
    mount table, which also shows a directory bound onto itself."""
    return os.path.realpath(target) in _mount_points()


def share_mount(path: Path) -> None:
    """Make the directory ``path`` a shared mount of its own (a bind of itself), so that a
    view mounted on it later reaches a container that binds it ``rslave`` now (a spare's).
    ``ViewUnavailable`` when this process may not mount."""
    name = os.fsencode(path)
    if _libc.mount(name, name, None, _MS_BIND, None) != 0:
        raise ViewUnavailable(os.strerror(ctypes.get_errno()))
    if _libc.mount(None, name, None, _MS_SHARED, None) != 0:
        number = ctypes.get_errno()
        _libc.umount2(name, _MNT_DETACH)
        raise ViewUnavailable(os.strerror(number))


def unmount_all(target: Path) -> None:
    """Detach every mount at ``target``, the view and a spare's bind under it."""
    for _ in range(_mount_points().count(os.path.realpath(target))):
        unmount_view(target)


def detach_under(top: Path) -> list[Path]:
    """Detach every mount at or below ``top``, deepest first; returns where they were (a
    directory about to be deleted whole: the demo's, a test's)."""
    found = mounts_under(top)
    for point in sorted(found, key=lambda path: len(path.parts), reverse=True):
        unmount_view(point)
    return found


def mounts_under(top: Path) -> list[Path]:
    """The mount points at or below ``top``, from the kernel's mount table."""
    prefix = os.path.realpath(top)
    points = _mount_points()
    return [Path(point) for point in points if os.path.commonpath([point, prefix]) == prefix]


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as table:
        return [_unescape(line.split()[4]) for line in table]


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field
