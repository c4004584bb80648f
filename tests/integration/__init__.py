"""Integration tests: real processes, sockets and files. ``until`` is their one way to wait for something the OS
does on its own time (a reaping, a spare forked after an answer)."""

from __future__ import annotations

import time


def until(predicate, seconds: float = 10.0) -> bool:
    """True as soon as ``predicate()`` is; False after ``seconds`` of polling every 10 ms."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs: absent, or a zombie not reaped yet (one read: a process reaped between two
    psutil calls would make the second raise)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return True
