"""chaos.process on real processes: is_runnable (a spinning one, one blocked on a lock, one gone), proc_info read
from /proc as psutil reads it, and kill_session's ``meanwhile`` running between the SIGKILL and the wait."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from chaos.process import SubprocessLauncher, is_runnable, proc_info

REPO = Path(__file__).resolve().parents[2]

SPIN = "while True: pass"
# Blocks in flock on a file the test holds locked: asleep, like a concurrent resume waiting for a program's lock.
WAIT_FOR_LOCK = "import fcntl, sys; f = open(sys.argv[1], 'w'); print('ready', flush=True); fcntl.flock(f, fcntl.LOCK_EX)"


def _until(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_a_spinning_process_is_runnable():
    """A process burning CPU reads as runnable."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        assert _until(lambda: is_runnable(proc.pid))
    finally:
        proc.kill()
        proc.wait()


def test_a_process_blocked_on_a_lock_is_not_runnable(tmp_path):
    """A process waiting in flock for a lock someone else holds reads as not runnable."""
    path = tmp_path / "lock"
    with open(path, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.Popen([sys.executable, "-c", WAIT_FOR_LOCK, str(path)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline() == "ready\n"
            assert _until(lambda: not is_runnable(proc.pid))
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()


def test_a_reaped_process_is_not_runnable():
    """A pid whose process has ended and been reaped is not runnable."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not is_runnable(proc.pid)


def test_proc_info_reads_what_psutil_reads(tmp_path):
    """Name and command line from /proc equal psutil's, for a name the kernel cuts at 15 characters, arguments
    with spaces, a rewritten title, every process of the machine, and a process gone."""
    long_name = tmp_path / "a-rather-long-interpreter-name"
    long_name.symlink_to(sys.executable)
    proc = subprocess.Popen([str(long_name), "-c", "import time; time.sleep(30)", "two words", ""])
    # One argument with spaces, as a process that rewrote its title shows: psutil splits it at the spaces.
    titled = subprocess.Popen(["bash", "-c", 'exec -a "worker: a title" cat'], stdin=subprocess.PIPE)
    try:
        assert _until(lambda: len(psutil.Process(proc.pid).cmdline()) == 5)
        assert _until(lambda: psutil.Process(titled.pid).cmdline() == ["worker:", "a", "title"])
        for pid in (proc.pid, titled.pid, *psutil.pids()):
            try:
                p = psutil.Process(pid)
                expected = (p.name(), tuple(p.cmdline()))
            except psutil.Error:
                continue
            info = proc_info(pid)
            assert (info.name, info.cmdline) == expected, pid
        assert proc_info(proc.pid).name == long_name.name
    finally:
        for p in (proc, titled):
            p.kill()
            p.wait()
    assert proc_info(proc.pid).name == "?"


def _signalled_or_gone(pid: int) -> bool:
    """True when ``pid`` has a SIGKILL pending, is dying or dead: what is true at once after the kill is sent."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
    except OSError:
        return True
    pending = int(status["ShdPnd"], 16) | int(status["SigPnd"], 16)
    return status["State"][0] in "ZX" or bool(pending & (1 << (9 - 1)))


@pytest.mark.parametrize("kind", ["exec", "zygote"])
def test_kill_session_runs_meanwhile_after_the_kill_and_before_the_wait(kind, tmp_path):
    """``meanwhile`` runs once, when the leader's SIGKILL is already sent (the supervisor copies the log while the
    kernel tears the agent down), and kill_session still returns only when the leader is gone."""
    from chaos.zygote import ZygoteLauncher

    launcher = SubprocessLauncher() if kind == "exec" else ZygoteLauncher("tests.agents.fresh", ("json",))
    try:
        argv = [sys.executable, "-m", "tests.agents.fresh", "wait", "30"]
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
        proc = launcher.launch(argv, env, tmp_path, tmp_path / "out", tmp_path / "err")
        seen = []
        report = proc.kill_session(10, meanwhile=lambda: seen.append(_signalled_or_gone(proc.pid)))
        assert seen == [True]
        assert proc.poll() == -9 and not report.survivors
        assert [p.pid for p in report.killed] == [proc.pid] and report.killed[0].name.startswith("python")
        proc.close()
    finally:
        if kind == "zygote":
            launcher.close()


def test_a_zygote_launch_is_created_at_its_fork(tmp_path):
    """A zygote child's ``created`` is the fork the zygote reports, not the moment its answer arrives: with a
    preload that keeps the zygote 50 ms busy after each fork, the answer comes that much after ``created``."""
    from chaos.zygote import ZygoteLauncher

    from tests.agents.slow_parent_preload import DELAY

    launcher = ZygoteLauncher("tests.agents.fresh", ("tests.agents.slow_parent_preload",),
                              env={"PYTHONPATH": str(REPO)})
    try:
        assert launcher.fallback is None, launcher.fallback
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
        before = time.monotonic()
        proc = launcher.launch([sys.executable, "-m", "tests.agents.fresh", "exit", "0"], env, tmp_path,
                               tmp_path / "out", tmp_path / "err")
        after = time.monotonic()
        assert before <= proc.created and after - proc.created >= DELAY
        assert proc.wait(10) == 0
        proc.close()
    finally:
        launcher.close()
