"""Where a case's files live while it runs: a directory on the RAM file system (``/dev/shm``) when there is one.

Why it is safe: killpoint kills processes (SIGKILL); it does not cut the power. What a process wrote survives its
SIGKILL in the page cache whatever the file system, and a lost power is simulated by truncating a file to its last
synced offset (chaos.supervisor), so a disk's fsync latency is not part of what a case tests. Why it matters: a case of
the bundled agent makes 10-20 fsyncs; on this machine's virtio disk one costs 0.4-0.6 ms, on tmpfs 0.15 ms, and
making and removing the case's files costs less too (bench/campaign.py, README "Performance").

The case directory keeps its name under the work directory: while the case runs it is a symbolic link to its
scratch directory, so every path a launch, a record or a report names stays valid. A case that is kept is copied
back under that name (the copy is made beside it, then put in the link's place); any other is removed from both.

``KILLPOINT_SCRATCH``: a directory to use instead of ``/dev/shm``, or ``off`` (cases run in the work directory: a
target whose files need a real disk, O_DIRECT say, which tmpfs refuses). With too little free space (under 64 MiB:
a container's default ``/dev/shm``) cases run in the work directory too.

A process's scratch directories sit under ``<base>/killpoint-<uid>/<pid>-<start time>``; a process that finds such
a directory of a process that is gone (a campaign SIGKILLed mid-case) removes it, so a killed campaign does not
keep RAM.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from pathlib import Path

ENV = "KILLPOINT_SCRATCH"
DEFAULT_BASE = "/dev/shm"
MIN_FREE = 64 << 20

_roots: dict[tuple[int, Path], Path | None] = {}  # (pid, base) -> this process's root there: forked children differ


def base() -> Path | None:
    """The directory scratch roots go under: ``KILLPOINT_SCRATCH``, else ``/dev/shm``; None when off or unusable."""
    chosen = os.environ.get(ENV, "").strip()
    if chosen.lower() in ("off", "0", "no", "none", "false"):
        return None
    path = Path(chosen or DEFAULT_BASE)
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    if st.f_bavail * st.f_frsize < MIN_FREE or not os.access(path, os.W_OK | os.X_OK):
        return None
    return path


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot; /proc/PID/stat field 22), None when it is gone:
    with the pid it names one process, whatever pid reuse does later."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].split()[19].decode()


def root() -> Path | None:
    """This process's scratch root (made on first use, after removing those of processes that are gone); None when
    cases run in the work directory."""
    where = base()
    if where is None:
        return None
    key = (os.getpid(), where)
    if key not in _roots:
        _roots[key] = _make_root(where)
    return _roots[key]


def _make_root(where: Path) -> Path | None:
    mine = where / f"killpoint-{os.getuid()}"
    try:
        mine.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(mine)
        # A directory someone else made (/dev/shm is shared by every user): never ours to write or to clean.
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return None
        _remove_orphans(mine)
        found = mine / f"{os.getpid()}-{_start_time(os.getpid())}"
        found.mkdir(exist_ok=True)
    except OSError:
        return None
    atexit.register(_drop, found, os.getpid())
    return found


def _drop(path: Path, owner: int) -> None:
    """At exit: this process's scratch root goes (its cases are settled by now). Not in a forked child, which
    inherits the handler but not the root."""
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def _remove_orphans(parent: Path) -> None:
    """Remove the scratch roots of processes that are gone (their cases were cut short: nothing there is kept)."""
    for entry in os.scandir(parent):
        pid, _, started = entry.name.partition("-")
        if pid.isdigit() and _start_time(int(pid)) != started:
            shutil.rmtree(entry.path, ignore_errors=True)


def make(path: Path) -> None:
    """Create the case directory ``path`` (FileExistsError when the name is taken): a link to a new scratch
    directory, or a plain directory when there is no scratch."""
    where = root()
    if where is None:
        path.mkdir()
        return
    real = tempfile.mkdtemp(dir=where, prefix=path.name[:40] + ".")
    try:
        os.symlink(real, path, target_is_directory=True)
    except BaseException:
        os.rmdir(real)
        raise


def settle(case_dir: Path, keep: bool) -> None:
    """After a case: keep its directory under its name in the work directory (copied out of scratch), or remove it
    from both places."""
    try:
        real = os.readlink(case_dir)
    except OSError:  # a plain directory (no scratch), or already gone
        if not keep:
            shutil.rmtree(case_dir, ignore_errors=True)
        return
    if keep:
        part = case_dir.with_name(case_dir.name + ".copying")
        shutil.rmtree(part, ignore_errors=True)
        # Regular files, directories and links: a socket or FIFO a launch left has no content to keep.
        shutil.copytree(real, part, symlinks=True, copy_function=_copy_regular)
        os.unlink(case_dir)
        os.rename(part, case_dir)
    else:
        os.unlink(case_dir)
    shutil.rmtree(real, ignore_errors=True)


def _copy_regular(src: str, dst: str) -> None:
    if stat.S_ISREG(os.lstat(src).st_mode):
        shutil.copy2(src, dst)
