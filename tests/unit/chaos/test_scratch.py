"""Tests of chaos.scratch: a case directory is a link into a RAM-backed scratch root while it runs; a kept case comes
back under its name as a plain directory, any other leaves nothing; roots of processes that are gone are removed."""

from __future__ import annotations

import os
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
    return base


def mine(base: Path) -> Path:
    return base / f"killpoint-{os.getuid()}"


def test_a_case_directory_is_a_link_into_this_processs_scratch_root(shm, tmp_path):
    """The name under the work directory is a link; the files live under <base>/killpoint-<uid>/<pid>-<start>."""
    case = fresh_dir(tmp_path / "work", "case", make=scratch.make)
    assert case == tmp_path / "work" / "case" and case.is_symlink()
    real = Path(os.readlink(case))
    assert real.parent == scratch.root() and real.parent.parent == mine(shm)
    assert real.parent.name.startswith(f"{os.getpid()}-")
    (case / "sessions").mkdir()
    (case / "sessions" / "s.jsonl").write_text("x\n")
    assert (real / "sessions" / "s.jsonl").read_text() == "x\n"
    again = fresh_dir(tmp_path / "work", "case", make=scratch.make)  # the name is taken: a new one, never reused
    assert again.name == "case-2" and again.is_symlink()


def test_a_case_that_is_not_kept_leaves_nothing_in_either_place(shm, tmp_path):
    """Settled without keeping: the link and the scratch directory are both gone."""
    case = fresh_dir(tmp_path / "work", "case", make=scratch.make)
    real = Path(os.readlink(case))
    (case / "log").write_text("data")
    scratch.settle(case, keep=False)
    assert not os.path.lexists(case) and not real.exists()
    assert list(scratch.root().iterdir()) == []


def test_a_kept_case_comes_back_as_a_plain_directory_under_its_name(shm, tmp_path):
    """Settled to keep: a real directory with every file and link (not a socket's inode), the scratch copy gone."""
    case = fresh_dir(tmp_path / "work", "case", make=scratch.make)
    real = Path(os.readlink(case))
    (case / "launches").mkdir()
    (case / "launches" / "00-step.stderr").write_text("agent: plan\n")
    (case / "result.json").write_text("{}")
    os.symlink("result.json", case / "link")
    os.mkfifo(case / "fifo")
    scratch.settle(case, keep=True)
    assert case.is_dir() and not case.is_symlink()
    assert (case / "launches" / "00-step.stderr").read_text() == "agent: plan\n"
    assert (case / "result.json").read_text() == "{}" and os.readlink(case / "link") == "result.json"
    assert not os.path.lexists(case / "fifo")
    assert not real.exists() and not (tmp_path / "work" / "case.copying").exists()
    scratch.settle(case, keep=True)  # a plain directory: settling it again changes nothing
    assert (case / "result.json").read_text() == "{}"


@pytest.mark.parametrize("value", ["off", "OFF", "0", "none"])
def test_off_runs_cases_in_the_work_directory(monkeypatch, tmp_path, value):
    """KILLPOINT_SCRATCH=off: a plain directory, and settling it removes it as before."""
    monkeypatch.setenv(scratch.ENV, value)
    assert scratch.base() is None and scratch.root() is None
    case = fresh_dir(tmp_path, "case", make=scratch.make)
    assert case.is_dir() and not case.is_symlink()
    scratch.settle(case, keep=False)
    assert not case.exists()


def test_too_little_free_space_or_a_missing_base_means_no_scratch(shm, monkeypatch, tmp_path):
    """Under MIN_FREE free (a container's 64 MiB /dev/shm) or a base that does not exist: the work directory."""
    assert scratch.base() == shm
    monkeypatch.setattr(scratch, "MIN_FREE", 1 << 62)
    assert scratch.base() is None
    monkeypatch.undo()
    monkeypatch.setenv(scratch.ENV, str(tmp_path / "absent"))
    assert scratch.base() is None


def test_the_roots_of_processes_that_are_gone_are_removed(shm):
    """A root whose pid is gone, or now names a process started at another time, is removed; a live one stays."""
    parent = mine(shm)
    parent.mkdir(mode=0o700)
    with open("/proc/1/stat", "rb") as f:
        init_start = f.read().rsplit(b")", 1)[1].split()[19].decode()
    gone, reused, alive = parent / "4194399-123", parent / f"{os.getpid()}-1", parent / f"1-{init_start}"
    for d in (gone, reused, alive):
        (d / "case.x").mkdir(parents=True)
    root = scratch.root()
    assert root is not None and root.is_dir()
    assert not gone.exists() and not reused.exists() and alive.is_dir()


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
    """At exit the root goes; a child forked from the process inherits the handler and leaves the root alone."""
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from chaos import scratch\n"
        "from chaos.case import fresh_dir\n"
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
    assert not Path(root).exists()
