"""Tests of chaos.scratch: a case directory is a link into a RAM-backed scratch root while it runs; a kept case comes
back under its name as a plain directory, any other leaves nothing under its name; settled scratch directories wait
in the root's trash, emptied in batches (sooner when it holds much); roots whose lock nobody holds are removed, a
locked one never; a name another process holds is never touched."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import scratch
from chaos.case import fresh_dir


@pytest.fixture
def shm(tmp_path, monkeypatch) -> Path:
    """A scratch base of this test's own (instead of /dev/shm)."""
    base = tmp_path / "shm"
    base.mkdir()
    monkeypatch.setenv(scratch.ENV, str(base))
    # Whatever file system the temporary directory is on (a small tmpfs, say): its size is not what is tested here.
    monkeypatch.setattr(scratch, "MIN_SIZE", 0)
    monkeypatch.setattr(scratch, "MIN_FREE", 0)
    return base


def mine(base: Path) -> Path:
    return base / f"killpoint-{os.getuid()}"


def test_a_case_directory_is_a_link_into_this_processs_scratch_root(shm, tmp_path):
    """The name under the work directory is a link; the files live under <base>/killpoint-<uid>/<pid>-<random>,
    beside that root's lock, which this process holds."""
    case = fresh_dir(tmp_path / "work", "case", make=scratch.make)
    assert case == tmp_path / "work" / "case" and case.is_symlink()
    real = Path(os.readlink(case))
    assert real.parent == scratch.root() and real.parent.parent == mine(shm)
    assert real.parent.name.startswith(f"{os.getpid()}-")
    lock = os.open(real.parent.with_name(real.parent.name + ".lock"), os.O_RDWR)
    with pytest.raises(BlockingIOError):
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(lock)
    (case / "sessions").mkdir()
    (case / "sessions" / "s.jsonl").write_text("x\n")
    assert (real / "sessions" / "s.jsonl").read_text() == "x\n"
    again = fresh_dir(tmp_path / "work", "case", make=scratch.make)  # the name is taken: a new one, never reused
    assert again.name == "case-2" and again.is_symlink()


def trash() -> list[str]:
    """The names in this process's trash (none when there is no trash)."""
    where = scratch.root() / scratch.TRASH
    return sorted(os.listdir(where)) if where.is_dir() else []


def test_a_case_that_is_not_kept_leaves_nothing_in_either_place(shm, tmp_path, monkeypatch):
    """Settled without keeping: the link and the scratch directory are gone at once, the files by the time
    TRASH_BATCH cases were settled (they wait in the root's trash until then)."""
    monkeypatch.setattr(scratch, "TRASH_MAX_BYTES", 1 << 62)  # whatever other processes do to the free space
    monkeypatch.setattr(scratch, "TRASH_BATCH", 3)
    reals = []
    for n in range(3):
        case = fresh_dir(tmp_path / "work", f"case{n}", make=scratch.make)
        reals.append(Path(os.readlink(case)))
        (case / "sessions").mkdir()
        (case / "sessions" / "log").write_text("data")
        (case / "sessions").chmod(0o555)  # a tree the system under test made read-only goes too
        scratch.settle(case, keep=False)
        assert not os.path.lexists(case) and not reals[-1].exists()
        assert trash() == (sorted(r.name for r in reals) if n < 2 else [])
    assert [p.name for p in scratch.root().iterdir() if p.name != scratch.TRASH] == []


def test_the_trash_is_emptied_at_once_when_its_file_system_runs_short(shm, tmp_path, monkeypatch):
    """With less than MIN_FREE bytes free, a settled case's files are removed right away."""
    case = fresh_dir(tmp_path / "work", "case", make=scratch.make)
    (case / "big").write_bytes(b"x" * 4096)
    monkeypatch.setattr(scratch, "MIN_FREE", 1 << 62)  # (after the root was chosen: it asks for MIN_FREE too)
    scratch.settle(case, keep=False)
    assert trash() == []


def test_the_trash_is_emptied_once_it_holds_more_than_its_bytes(shm, tmp_path, monkeypatch):
    """A case that leaves large files empties the trash: it never holds TRASH_MAX_BYTES more than when emptied."""
    monkeypatch.setattr(scratch, "TRASH_MAX_BYTES", 8 << 20)

    def free(path):  # the file system's free space falls by what the trash holds, whatever other processes do
        return (1 << 40) - sum(f.stat().st_size for f in (scratch.root() / scratch.TRASH).rglob("*") if f.is_file())

    monkeypatch.setattr(scratch, "_free", free)
    small = fresh_dir(tmp_path / "work", "small", make=scratch.make)
    scratch.settle(small, keep=False)
    assert len(trash()) == 1
    large = fresh_dir(tmp_path / "work", "large", make=scratch.make)
    with open(large / "big", "wb") as f:
        f.write(os.urandom(32 << 20))
        os.fsync(f.fileno())
    scratch.settle(large, keep=False)
    assert trash() == []


def test_a_scratch_directory_that_cannot_go_to_the_trash_is_removed_at_once(shm, tmp_path):
    """Where the rename fails (here the trash's name holds a file), the directory is removed as before."""
    case = fresh_dir(tmp_path / "work", "case", make=scratch.make)
    real = Path(os.readlink(case))
    (scratch.root() / scratch.TRASH).write_text("not a directory")
    scratch.settle(case, keep=False)
    assert not os.path.lexists(case) and not real.exists()


def test_a_kept_case_comes_back_as_a_plain_directory_under_its_name(shm, tmp_path):
    """Settled to keep: a real directory (mode as a plain one's) with every file and link (not a FIFO's inode), the
    scratch copy and the copying directory gone."""
    case = fresh_dir(tmp_path / "work", "case", make=scratch.make)
    real = Path(os.readlink(case))
    (case / "launches").mkdir()
    (case / "launches" / "00-step.stderr").write_text("agent: plan\n")
    (case / "result.json").write_text("{}")
    os.symlink("result.json", case / "link")
    os.mkfifo(case / "fifo")
    scratch.settle(case, keep=True)
    assert case.is_dir() and not case.is_symlink()
    umask = os.umask(0)
    os.umask(umask)
    assert case.stat().st_mode & 0o777 == 0o777 & ~umask
    assert (case / "launches" / "00-step.stderr").read_text() == "agent: plan\n"
    assert (case / "result.json").read_text() == "{}" and os.readlink(case / "link") == "result.json"
    assert not os.path.lexists(case / "fifo") and not (case / "scratch-copy-errors.txt").exists()
    assert not real.exists() and sorted(p.name for p in (tmp_path / "work").iterdir()) == ["case"]
    scratch.settle(case, keep=True)  # a plain directory: settling it again changes nothing
    assert (case / "result.json").read_text() == "{}"


def test_files_that_cannot_be_copied_are_named_and_the_rest_kept(shm, tmp_path, monkeypatch):
    """A file the copy fails on (unreadable, say) does not lose the case: the others are kept, it is listed."""
    case = fresh_dir(tmp_path / "work", "case", make=scratch.make)
    (case / "good.txt").write_text("kept")
    (case / "bad.txt").write_text("unreadable")
    copy2 = shutil.copy2

    def failing(src, dst, **kw):
        if src.endswith("bad.txt"):
            raise PermissionError(13, "Permission denied", src)
        return copy2(src, dst, **kw)

    monkeypatch.setattr(shutil, "copy2", failing)
    scratch.settle(case, keep=True)
    assert case.is_dir() and not case.is_symlink() and (case / "good.txt").read_text() == "kept"
    assert "bad.txt: " in (case / "scratch-copy-errors.txt").read_text()
    assert not (case / "bad.txt").exists()


def test_a_name_that_holds_another_processs_link_is_never_touched(shm, tmp_path):
    """Settling a name whose link points outside this process's root (another case took the name) changes
    nothing: neither that link nor what it points to."""
    elsewhere = tmp_path / "other-case"
    elsewhere.mkdir()
    (elsewhere / "log").write_text("theirs")
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(elsewhere, work / "case")
    scratch.root()
    for keep in (True, False):
        scratch.settle(work / "case", keep=keep)
        assert os.readlink(work / "case") == str(elsewhere) and (elsewhere / "log").read_text() == "theirs"
    assert sorted(p.name for p in work.iterdir()) == ["case"]


def test_a_root_removed_behind_the_processs_back_is_made_again(shm, tmp_path):
    """A root that vanished (removed from outside) is replaced on the next case, not a traceback for every case."""
    first = scratch.root()
    shutil.rmtree(first)
    case = fresh_dir(tmp_path / "work", "case", make=scratch.make)
    assert case.is_symlink() and Path(os.readlink(case)).parent == scratch.root() != first


def test_a_work_directory_that_cannot_hold_links_gets_plain_directories(shm, tmp_path, monkeypatch):
    """Where a link cannot be made (vfat, some network file systems) the case runs in the work directory."""
    def refuse(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "symlink", refuse)
    case = fresh_dir(tmp_path / "work", "case", make=scratch.make)
    assert case.is_dir() and not case.is_symlink()
    assert list(scratch.root().iterdir()) == []


@pytest.mark.parametrize("value", ["off", "OFF", "0", "none"])
def test_off_runs_cases_in_the_work_directory(monkeypatch, tmp_path, value):
    """KILLPOINT_SCRATCH=off: a plain directory, and settling it removes it as before."""
    monkeypatch.setenv(scratch.ENV, value)
    assert scratch.base() is None and scratch.root() is None
    case = fresh_dir(tmp_path, "case", make=scratch.make)
    assert case.is_dir() and not case.is_symlink()
    scratch.settle(case, keep=False)
    assert not case.exists()


def test_a_small_full_read_only_or_noexec_file_system_means_no_scratch(shm, monkeypatch, tmp_path):
    """Under MIN_SIZE (a container's 64 MiB /dev/shm), under MIN_FREE free, read-only, noexec, or missing: the work
    directory."""
    assert scratch.base() == shm
    statvfs = os.statvfs
    monkeypatch.setattr(scratch, "MIN_SIZE", 256 << 20)
    monkeypatch.setattr(scratch, "MIN_FREE", 64 << 20)
    real = os.statvfs(shm)
    real = os.statvfs_result(tuple(max(getattr(real, n), (1 << 40) // real.f_frsize) if n in ("f_blocks", "f_bavail")
                                   else getattr(real, n) for n in ("f_bsize", "f_frsize", "f_blocks", "f_bfree",
                                                                   "f_bavail", "f_files", "f_ffree", "f_favail",
                                                                   "f_flag", "f_namemax")))
    for field, value in (("f_blocks", (64 << 20) // real.f_frsize), ("f_bavail", (32 << 20) // real.f_frsize),
                         ("f_flag", real.f_flag | os.ST_NOEXEC), ("f_flag", real.f_flag | os.ST_RDONLY)):
        fake = os.statvfs_result(tuple(value if name == field else getattr(real, name)
                                       for name in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                    "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")))
        monkeypatch.setattr(os, "statvfs", lambda path, fake=fake: fake)
        assert scratch.base() is None, field
    monkeypatch.setattr(os, "statvfs", lambda path: real)
    assert scratch.base() == shm  # the same figures without the defect: usable
    monkeypatch.setattr(os, "statvfs", statvfs)
    monkeypatch.setenv(scratch.ENV, str(tmp_path / "absent"))
    assert scratch.base() is None


def test_a_relative_or_on_setting_names_an_absolute_directory(shm, monkeypatch):
    """KILLPOINT_SCRATCH=on is the default base; a relative path is taken from the current directory, made
    absolute (a relative link target would dangle from the work directory)."""
    monkeypatch.setenv(scratch.ENV, "on")
    assert scratch.base() == Path(scratch.DEFAULT_BASE) or scratch.base() is None
    monkeypatch.chdir(shm.parent)
    monkeypatch.setenv(scratch.ENV, shm.name)
    assert scratch.base() == shm and scratch.base().is_absolute()


def test_the_roots_whose_lock_nobody_holds_are_removed_and_held_ones_kept(shm):
    """An unlocked root (its process is gone, in any PID namespace) goes; a root whose lock is held stays, whatever
    its name says about a pid."""
    parent = mine(shm)
    parent.mkdir(mode=0o700)
    gone, alive = parent / "4194399-dead", parent / "1-alive"
    for d in (gone, alive):
        (d / "case.x").mkdir(parents=True)
        (parent / f"{d.name}.lock").touch()
    holder = os.open(parent / "1-alive.lock", os.O_RDWR)  # another open file description: as another process's
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        root = scratch.root()
        assert root is not None and root.is_dir()
        assert not gone.exists() and not (parent / "4194399-dead.lock").exists()
        assert (alive / "case.x").is_dir() and (parent / "1-alive.lock").exists()
    finally:
        os.close(holder)


def test_links_of_cases_cut_short_elsewhere_are_removed_and_no_other(shm, tmp_path):
    """A case link whose scratch directory is gone, or lies in a root nobody holds (its worker was killed), goes;
    a live case's link, a held root's, a link elsewhere and a plain directory stay."""
    work = tmp_path / "work"
    work.mkdir()
    live = fresh_dir(work, "live", make=scratch.make)
    gone_dir = fresh_dir(work, "gone", make=scratch.make)
    shutil.rmtree(os.readlink(gone_dir))
    parent = mine(shm)
    dead, held = parent / "4194399-dead", parent / "1-held"
    for d in (dead, held):
        (d / "case.x").mkdir(parents=True)
        (parent / f"{d.name}.lock").touch()
        os.symlink(d / "case.x", work / f"in-{d.name}")
    os.symlink(tmp_path, work / "elsewhere")
    (work / "plain").mkdir()
    holder = os.open(parent / "1-held.lock", os.O_RDWR)  # as another live process's
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        assert scratch.remove_dangling(work) == 2
    finally:
        os.close(holder)
    assert sorted(p.name for p in work.iterdir()) == sorted([live.name, "in-1-held", "elsewhere", "plain"])


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to hand the directory to another user")
def test_a_root_directory_owned_by_another_user_is_never_used(shm):
    """/dev/shm is shared: a killpoint-<uid> someone else made is neither written nor cleaned."""
    parent = mine(shm)
    parent.mkdir()
    (parent / "4194399-1").mkdir()
    os.chown(parent, 65534, 65534)
    assert scratch.root() is None
    assert (parent / "4194399-1").is_dir()


def test_a_process_removes_its_own_root_at_exit_but_not_a_forked_child(shm, tmp_path):
    """At exit the root and its lock go; a child forked from the process inherits the handler and leaves them."""
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from chaos import scratch\n"
        "from chaos.case import fresh_dir\n"
        "scratch.MIN_SIZE = scratch.MIN_FREE = 0\n"
        f"case = fresh_dir(Path({str(tmp_path / 'work')!r}), 'case', make=scratch.make)\n"
        "root = scratch.root()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    sys.exit(0)\n"  # a normal exit: atexit handlers run in the child
        "os.waitpid(pid, 0)\n"
        "print(root, root.is_dir(), flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(scratch.__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    root, alive_after_child = out.stdout.split()
    assert alive_after_child == "True"
    assert not Path(root).exists() and not Path(root + ".lock").exists()


def test_drop_removes_the_roots_of_a_process_that_exits_past_atexit(shm, tmp_path):
    """A campaign worker told to stop exits by os._exit: drop() first leaves nothing of it in scratch."""
    code = (
        "import os\n"
        "from pathlib import Path\n"
        "from chaos import scratch\n"
        "from chaos.case import fresh_dir\n"
        "scratch.MIN_SIZE = scratch.MIN_FREE = 0\n"
        f"case = fresh_dir(Path({str(tmp_path / 'work')!r}), 'case', make=scratch.make)\n"
        "scratch.settle(case, keep=False)\n"  # its files wait in the trash: they go with the root
        f"fresh_dir(Path({str(tmp_path / 'work')!r}), 'case', make=scratch.make)\n"
        "assert os.listdir(scratch.root() / scratch.TRASH)\n"
        "scratch.drop()\n"
        "os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(scratch.__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
    assert list(mine(shm).iterdir()) == []
