"""Where a case's files live while it runs: a directory on the RAM file system (``/dev/shm``) when there is one.

Why it is safe: killpoint kills processes (SIGKILL); it does not cut the power. What a process wrote survives its
SIGKILL in the page cache whatever the file system, and a lost power is simulated by truncating a file to its last
synced offset (chaos.supervisor), so a disk's fsync latency is not part of what a case tests. Why it matters: a case of
the bundled agent makes 10-20 fsyncs; bench/campaign.py's "fsync" (after-write -> after-sync barrier: the fsync and
one barrier answer) reads 0.4-0.6 ms on this machine's virtio disk, 0.12-0.16 ms on tmpfs (where the fsync itself
costs ~1 µs), and making and removing the case's files costs less too.

The case directory keeps its name under the work directory: while the case runs it is a symbolic link to its
scratch directory, so every path a launch, a record or a report names stays valid. A case that is kept is copied
back under that name (the copy is made beside it, then exchanged with the link in one ``renameat2``); any other
leaves nothing under its name, and its scratch directory is moved into the root's trash, removed with others in a
batch (``_discard``). Only a link that points into this process's own root is ever settled: a name another
process took meanwhile is never touched.

``KILLPOINT_SCRATCH``: a directory to use instead of ``/dev/shm``, or ``off`` (cases run in the work directory: a
target whose files need a real disk, O_DIRECT say, which tmpfs refuses). Cases run in the work directory too when
the file system there is smaller than 256 MiB (a container's default ``/dev/shm`` is 64 MiB) or has less than 64 MiB
free, is read-only or ``noexec`` (a target may run what it wrote), or the work directory cannot hold a link.

A process's scratch directories sit under ``<base>/killpoint-<uid>/<pid>-<random>``, beside a lock file of the same
name that the process holds (``flock``) for as long as it lives: the kernel drops the lock however it ends. A process
that finds an unlocked one (a harness SIGKILLed mid-case) removes that root; a locked one is alive, whatever PID
namespace it runs in (containers sharing ``/dev/shm``).
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import os
import shutil
import stat
import tempfile
from pathlib import Path

ENV = "KILLPOINT_SCRATCH"
DEFAULT_BASE = "/dev/shm"
MIN_SIZE = 256 << 20
MIN_FREE = 64 << 20
_OFF = frozenset({"off", "0", "no", "none", "false"})
_ON = frozenset({"", "on", "1", "yes", "true"})
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100

# The directory of a root that settled cases' scratch directories are moved to (see _discard), emptied every
# TRASH_BATCH of them, or sooner: once the file system's free space fell by TRASH_MAX_BYTES since it was last emptied
# (what the trash holds is RAM on /dev/shm: a target whose cases leave large files must not pile them up), or when
# under MIN_FREE is left. Not a case directory's name: those end in ".<12 hex digits>". Removed with its root (at
# exit, or as an orphan's).
TRASH = ".trash"
TRASH_BATCH = 32
TRASH_MAX_BYTES = 64 << 20
# trash -> (directories moved in since it was last emptied, free bytes then)
_trashed: dict[Path, tuple[int, int | None]] = {}
# (pid, KILLPOINT_SCRATCH as set) -> this process's root (None: cases run in the work directory), decided at the
# first case: the file system is not looked at again for every case. Forked children are other pids: their own.
_roots: dict[tuple[int, str], Path | None] = {}
_locks: dict[Path, int] = {}  # root -> the descriptor holding its lock (open for the process's life)


def base() -> Path | None:
    """The directory scratch roots go under: ``KILLPOINT_SCRATCH``, else ``/dev/shm``; None when off or unusable."""
    chosen = os.environ.get(ENV, "").strip()
    if chosen.lower() in _OFF:
        return None
    path = Path(os.path.abspath(Path(DEFAULT_BASE if chosen.lower() in _ON else chosen).expanduser()))
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_flag & (os.ST_RDONLY | os.ST_NOEXEC):
        return None
    if st.f_blocks * st.f_frsize < MIN_SIZE or st.f_bavail * st.f_frsize < MIN_FREE:
        return None
    return path if os.access(path, os.W_OK | os.X_OK) else None


def root() -> Path | None:
    """This process's scratch root (made on first use, after removing the roots of processes that are gone, and made
    again if it was removed behind our back); None when cases run in the work directory."""
    key = (os.getpid(), os.environ.get(ENV, ""))
    found = _roots.get(key)
    if key not in _roots or (found is not None and not found.is_dir()):
        where = base()
        found = _roots[key] = _make_root(where) if where is not None else None
    return found


def _make_root(where: Path) -> Path | None:
    mine = where / f"killpoint-{os.getuid()}"
    try:
        mine.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(mine)
        # A directory someone else made (/dev/shm is shared by every user): never ours to write or to clean.
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return None
        _remove_orphans(mine)
        for _ in range(16):
            name = f"{os.getpid()}-{os.urandom(6).hex()}"
            lock = mine / f"{name}.lock"
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Another process's clean-up may have taken and removed the lock between our open and flock: the lock
            # is ours only if the name still holds the file we locked.
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
            os.close(fd)
        else:
            return None
        found = mine / name
        found.mkdir(mode=0o700)
    except OSError:
        return None
    _locks[found] = fd
    atexit.register(_drop, found, os.getpid())
    return found


def _remove_orphans(parent: Path) -> None:
    """Remove the roots whose lock nobody holds: their process is gone (its cases were cut short: nothing there is
    kept)."""
    for entry in os.scandir(parent):
        if not entry.name.endswith(".lock"):
            continue
        try:
            fd = os.open(entry.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its process lives
            os.close(fd)
            continue
        try:
            gone = parent / entry.name[: -len(".lock")]
            _rmtree(gone)
            if not os.path.lexists(gone):
                os.unlink(entry.path)
        except OSError:
            pass
        finally:
            os.close(fd)


def remove_dangling(work: Path) -> int:
    """Remove the case links in ``work`` left by cases cut short in another process (a campaign worker stopped or
    killed mid-case, a harness SIGKILLed): links into a scratch root whose directory is gone, or whose root nobody
    holds any more (removed here first). What they named was never kept; left, they read as case directories that
    cannot be opened. Returns how many went. Only links into this user's scratch roots are looked at."""
    where = base()
    if where is None:
        return 0
    mine = where / f"killpoint-{os.getuid()}"
    try:
        _remove_orphans(mine)
        entries = list(os.scandir(work))
    except OSError:  # no scratch root was ever made, or no work directory
        return 0
    removed = 0
    for entry in entries:
        try:
            if not entry.is_symlink() or Path(os.readlink(entry.path)).parent.parent != mine:
                continue
            if not os.path.exists(entry.path):  # follows the link: its scratch directory is gone
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue
    return removed


def _drop(path: Path, owner: int) -> None:
    """At exit: this process's root goes (its cases are settled by now), then its lock. Not in a forked child, which
    inherits the handler but not the root."""
    if os.getpid() != owner:
        return
    _rmtree(path)
    fd = _locks.pop(path, None)
    if not os.path.lexists(path):
        try:
            os.unlink(path.with_name(path.name + ".lock"))
        except OSError:
            pass
    if fd is not None:
        os.close(fd)


def drop() -> None:
    """Remove this process's roots now (a campaign worker told to stop exits by ``os._exit``, past atexit)."""
    for (pid, _), found in list(_roots.items()):
        if pid == os.getpid() and found is not None:
            _drop(found, pid)


def make(path: Path) -> None:
    """Create the case directory ``path`` (FileExistsError when the name is taken): a link to a new scratch
    directory, or a plain directory when there is no scratch (or the work directory cannot hold a link)."""
    where = root()
    if where is None:
        path.mkdir()
        return
    while True:
        real = where / f"{path.name[:40]}.{os.urandom(6).hex()}"
        try:
            os.mkdir(real)  # 0o777 less the umask, as a plain case directory (a kept copy keeps the mode)
            break
        except FileExistsError:
            continue
        except OSError:  # the root went (removed from outside): this case runs in the work directory
            path.mkdir()
            return
    try:
        os.symlink(real, path, target_is_directory=True)
    except FileExistsError:
        os.rmdir(real)
        raise
    except OSError:  # a work directory that cannot hold links (vfat, some network file systems)
        os.rmdir(real)
        path.mkdir()
    except BaseException:
        os.rmdir(real)
        raise


def _ours(real: str) -> bool:
    parent = Path(real).parent
    return any(pid == os.getpid() and found == parent for (pid, _), found in _roots.items())


def settle(case_dir: Path, keep: bool) -> None:
    """After a case: keep its directory under its name in the work directory (copied out of scratch), or remove the
    name; either way its scratch directory goes (into the trash: ``_discard``). Files that could not be copied are
    listed in ``scratch-copy-errors.txt`` in the kept copy."""
    try:
        real = os.readlink(case_dir)
    except OSError:  # a plain directory (no scratch), or already gone
        if not keep:
            _rmtree(case_dir)
        return
    if not _ours(real):
        return  # not a link this process made: another process's case, never ours to touch
    if keep:
        holder = Path(tempfile.mkdtemp(dir=case_dir.parent, prefix=f".{case_dir.name[:40]}.copying-"))
        copy = holder / "case"
        try:
            shutil.copytree(real, copy, symlinks=True, copy_function=_copy_regular)
        except shutil.Error as exc:  # every other file was copied: keep them, and say which were not
            lines = [f"{src}: {why}" for src, _, why in exc.args[0]]
            (copy / "scratch-copy-errors.txt").write_text("\n".join(lines) + "\n", errors="replace")
        _exchange(copy, case_dir)
        _rmtree(holder)  # holds the link now
    else:
        os.unlink(case_dir)
    _discard(Path(real))


def _discard(real: Path) -> None:
    """Remove a settled case's scratch directory: moved into its root's trash (one rename), and the trash emptied
    every ``TRASH_BATCH`` directories or sooner (see ``TRASH``).

    Why: removing a case's ~20 files and directories right after the case costs ~0.48 ms, each operation paying for
    caches the agents' processes evicted meanwhile; a rename costs ~0.08 ms and removing 32 trees together ~0.24 ms
    a tree (measured on tmpfs with 4 MiB of other work between cases): ~0.16 ms less per case, and less time between
    two cases of a loop."""
    trash = real.parent / TRASH
    try:
        os.rename(real, trash / real.name)
    except FileNotFoundError:
        try:  # the trash is made at its first use (and again if removed behind our back)
            trash.mkdir(exist_ok=True)
            os.rename(real, trash / real.name)
        except OSError:
            _rmtree(real)
            return
    except OSError:  # EACCES: a top directory the target made read-only cannot get a new ".." (another parent)
        _rmtree(real)
        return
    count, free = _trashed.get(trash, (0, None))
    now = _free(trash)
    if free is None:
        free = now
    if count + 1 >= TRASH_BATCH or now is None or free - now > TRASH_MAX_BYTES or now < MIN_FREE:
        _empty(trash)
        _trashed[trash] = (0, _free(trash))
    else:
        _trashed[trash] = (count + 1, free)


def _free(path: Path) -> int | None:
    """Bytes free on the file system of ``path`` (None when it cannot be read)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _empty(trash: Path) -> None:
    """Remove what the trash holds, keeping the directory (the next case's rename needs it)."""
    try:
        entries = list(os.scandir(trash))
    except OSError:
        return
    for entry in entries:
        _rmtree(entry.path)


def _copy_regular(src: str, dst: str) -> None:
    # Regular files, directories and links: a socket or FIFO a launch left has no content to keep.
    if stat.S_ISREG(os.lstat(src).st_mode):
        shutil.copy2(src, dst)


def _exchange(directory: Path, link: Path) -> None:
    """Put ``directory`` at ``link``'s name and the link at ``directory``'s, atomically (renameat2 RENAME_EXCHANGE):
    the name is never free for another process's case. Where the kernel or libc lacks it: unlink, then rename."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.renameat2(_AT_FDCWD, os.fsencode(directory), _AT_FDCWD, os.fsencode(link), _RENAME_EXCHANGE) == 0:
            return
        err = ctypes.get_errno()
    except (OSError, AttributeError):
        err = errno.ENOSYS
    if err not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        raise OSError(err, os.strerror(err), str(link))
    os.unlink(link)
    os.rename(directory, link)


def _rmtree(path: Path | str) -> None:
    """Remove a tree, also one the system under test made read-only (a directory of mode 0555 refuses to lose its
    entries until it is writable again); what still fails stays."""
    top = os.fspath(path)
    if not os.path.lexists(top):
        return

    def writable(func, name, _exc) -> None:
        parent = os.path.dirname(name)
        if parent != top and not parent.startswith(top + os.sep):
            return  # never a directory above the tree (the top itself failing: a link, say)
        try:
            os.chmod(parent, 0o700)
            if os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, 0o700)
            func(name)
        except OSError:
            pass

    shutil.rmtree(path, onerror=writable)
