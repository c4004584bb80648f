"""chaos.process.is_runnable on real processes: a spinning one, one blocked on a lock, one gone."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time

from chaos.process import is_runnable

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
