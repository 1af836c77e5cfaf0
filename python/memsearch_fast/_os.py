"""Operating-system plumbing: files opened without following links, bounded
reads, private appends, atomic replacement, advisory locks, and giving heap back.

A project's ``.memsearch/`` folder arrives with the repository that holds it,
and git stores symbolic links: a clone can carry ``.memsearch/sessions``
pointing at ``~/.ssh`` or ``hooks.log`` pointing at ``~/.bashrc``. Everything
the hooks and the watcher open, write or delete there goes through these
helpers: the last component is never followed (``O_NOFOLLOW``, ``lstat``),
directory entries are reached from a verified directory fd (``openat``), the
file must be a regular file owned by the user, and reads are bounded.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from memsearch_fast.errors import MemsearchError

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnsafePathError(MemsearchError, OSError):
    """A path that must be a plain file or directory of the user's is a link,
    a device, a FIFO, or owned by someone else (one-line message)."""


def _check(st: os.stat_result, path: str | os.PathLike[str], want: int, single_link: bool = False) -> None:
    kind = stat.S_IFMT(st.st_mode)
    if kind != want:
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory" if want == stat.S_IFDIR else None
        raise UnsafePathError(f"{os.fspath(path)} is {what or 'not a regular file'}; refusing to use it")
    if st.st_uid != os.geteuid():
        raise UnsafePathError(f"{os.fspath(path)} is owned by another user (uid {st.st_uid}); refusing to use it")
    if single_link and st.st_nlink > 1:
        raise UnsafePathError(f"{os.fspath(path)} has {st.st_nlink} hard links; refusing to use it")


def _open(path: str | os.PathLike[str], flags: int, mode: int = 0o600, dir_fd: int | None = None) -> int:
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link at the end, or a file on the way
            shown = os.fspath(path)
            raise UnsafePathError(f"{shown} is a symbolic link or not a directory; refusing to use it") from None
        raise


def _exists_as(path: str | os.PathLike[str], kind: int) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    _check(st, path, kind)
    return True


def check_dir(path: str | os.PathLike[str]) -> bool:
    """Whether *path* exists; raises :class:`UnsafePathError` when it is not a
    real directory (a symlink, a file) owned by the user."""
    return _exists_as(path, stat.S_IFDIR)


def check_file(path: str | os.PathLike[str]) -> bool:
    """Whether *path* exists; raises when it is not a regular file of the user's."""
    return _exists_as(path, stat.S_IFREG)


def open_dir(path: str | os.PathLike[str], *, create: bool = False, mode: int = 0o700) -> int:
    """An fd of the directory *path* (created with *mode* when missing and
    *create*), refused when it is a link or another user's. The caller closes it."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, mode)
    fd = _open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _check(os.fstat(fd), path, stat.S_IFDIR)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private(
    name: str | os.PathLike[str],
    flags: int,
    *,
    dir_fd: int | None = None,
    mode: int = 0o600,
    shown: str = "",
    single_link: bool = True,
) -> int:
    """An fd of the regular file *name* (under *dir_fd* when given), opened
    without following a link and refused unless it is a plain file of the
    user's (with one link when *single_link*: an append must not reach
    another name). New files get *mode* (0600: memory can hold secrets)."""
    fd = _open(name, flags | os.O_NONBLOCK | os.O_NOCTTY, mode, dir_fd)
    try:
        _check(os.fstat(fd), shown or name, stat.S_IFREG, single_link)
        if flags & (os.O_WRONLY | os.O_RDWR):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], limit: int | None = None, *, tail: bool = False) -> bytes:
    """The bytes of the regular file *path* (not through a link at its last
    component, never a device or FIFO): at most *limit* bytes, its last ones
    when *tail*. A file that is not regular raises :class:`UnsafePathError`."""
    fd = _open(path, _READ)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{os.fspath(path)} is not a regular file; refusing to read it")
        size = st.st_size
        if limit is not None and size > limit:
            if tail:
                os.lseek(fd, size - limit, os.SEEK_SET)
            size = limit
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        left = size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def file_stamp(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> tuple[int, int, int] | None:
    """(inode, size, mtime in ns) of *path*, or None when it cannot be seen: a
    file replaced by a rename, or written in place, gets another stamp."""
    try:
        st = os.stat(path, follow_symlinks=follow_symlinks)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def append_private(folder: str | os.PathLike[str], name: str, data: bytes, *, max_bytes: int = 0) -> None:
    """Append *data* to ``folder/name`` (created 0600), the folder and the file
    reached without following links; past *max_bytes* the file is first cut
    to its newer half (written to a new file renamed over it)."""
    dfd = open_dir(folder, create=True)
    try:
        fd = open_private(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, dir_fd=dfd, shown=f"{os.fspath(folder)}/{name}")
        try:
            if max_bytes and os.fstat(fd).st_size > max_bytes:
                os.close(fd)
                fd = -1
                _cut_to_newer_half(dfd, name, max_bytes)
                fd = open_private(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, dir_fd=dfd)
            write_all(fd, data)
        finally:
            if fd >= 0:
                os.close(fd)
    finally:
        os.close(dfd)


def _cut_to_newer_half(dfd: int, name: str, max_bytes: int) -> None:
    fd = open_private(name, os.O_RDONLY, dir_fd=dfd)
    try:
        size = os.fstat(fd).st_size
        keep = max_bytes // 2
        data = os.pread(fd, keep, max(0, size - keep))
    finally:
        os.close(fd)
    data = data[data.find(b"\n") + 1 :]
    write_atomic(name, data, dir_fd=dfd, temp=f".{name}.{os.getpid()}.tmp", fsync=False)


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | Callable[[BinaryIO], None],
    *,
    mode: int = 0o600,
    fsync: bool = True,
    temp: str | os.PathLike[str] | None = None,
    dir_fd: int | None = None,
) -> None:
    """Replace *path* with *data*: a hidden temp file beside it (``O_EXCL``,
    never through a link, *mode*), synced, then renamed over *path*, so a
    crash leaves the old file or the new one and a link at *path* is
    replaced, never written through.

    *temp* names the temp file instead of a fresh random one, for a writer
    that alone uses that name (under a lock, or with its pid in it): a
    leftover of a killed writer, or a link planted there, is removed first
    (``unlink`` never follows it). With *dir_fd*, *path* and *temp* are names
    in that directory (then *temp* is required). *data* may be a function that
    writes to the open temp file, for contents too large to hold twice.
    """
    if temp is None:
        if dir_fd is not None:
            raise ValueError("write_atomic: dir_fd needs a temp name")
        import tempfile

        target = Path(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    else:
        tmp = os.fspath(temp)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            if mode != 0o600:
                os.fchmod(fd, mode)
            if callable(data):
                with open(fd, "wb", closefd=False) as f:
                    data(f)
            else:
                write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def open_lock(path: str | os.PathLike[str]) -> int:
    """An fd of the lock file *path* (created 0600), refused when it is a link
    or not a regular file of the user's (:func:`open_private`)."""
    return open_private(path, os.O_RDWR | os.O_CREAT, single_link=False)


@contextlib.contextmanager
def locked(
    path: str | os.PathLike[str],
    *,
    timeout: float | None = None,
    shared: bool = False,
    opener: Callable[[str], int] | None = None,
) -> Iterator[int]:
    """Hold an exclusive (or *shared*) ``flock`` on the lock file *path*; yields its fd.

    *timeout* None waits as long as it takes (in the kernel), 0 tries once,
    more polls until then; a lock not taken raises :class:`TimeoutError`.
    The file is opened by *opener* (default :func:`open_lock`: never through
    a link, only a regular file of the user's). The lock goes with the fd,
    so it is released when the block ends, or by the kernel when the process dies.

    ``filelock`` does not fit: it checks no owner, needs write access to the
    file (the broker lock may be read-only for this user), and by default
    removes its lock file on release (4.x), where these lock files stay.
    """
    import fcntl

    fd = (opener or open_lock)(os.fspath(path))
    try:
        kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        if timeout is None:
            fcntl.flock(fd, kind)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, kind | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(
                            errno.EWOULDBLOCK, f"lock {os.fspath(path)} is held by another process"
                        ) from None
                    time.sleep(0.02)
        try:
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def is_inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether the resolved *path* lies in (or is) the resolved *folder*."""
    real, top = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    return real == top or top in real.parents


def pid_alive(pid: object) -> bool:
    """Whether *pid* names a live process (a zombie is dead; another user's is alive)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


#: glibc's ``mallopt`` parameter that bounds its arenas (malloc.h's ``M_ARENA_MAX``).
_M_ARENA_MAX = -8


@functools.cache
def cap_heap_arenas() -> None:
    """Let glibc keep one heap arena a core (at least two) instead of eight: each
    thread that allocates gets an arena of its own by default, and the pages an
    index run frees stay scattered in them. At 50 MB of journals that was 130 MB
    of the run's 650 MB peak (docs/store.md). Called before a run starts its
    threads; glibc fixes the bound when a thread first needs a new arena."""
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, max(2, len(os.sched_getaffinity(0))))


def give_back_memory() -> None:
    """Return the heap freed so far to the system. glibc keeps freed pages of
    its arenas for reuse, so without this a long-lived process's RSS is that
    of its busiest moment, not of what it holds."""
    gc.collect()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
