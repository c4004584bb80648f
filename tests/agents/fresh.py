"""A module the zygote tests launch (``python -m tests.agents.fresh MODE``): it reports what a fresh process sees.

Modes: ``report`` prints one JSON object (argv, the variables named in FRESH_VARS, cwd, open descriptors, every
signal's disposition, the signal mask, threads and whether a new one runs, session, parent-death signal, a random
draw, what the at-fork preload saw); ``exit N``; ``raise``; ``interrupt`` (an uncaught KeyboardInterrupt);
``sleep S`` (with a grandchild that sleeps too, in its own process group, as a bash tool would); ``wait S`` (sleeps,
then exits 0); ``mapodd DIR`` (maps a file whose name is not UTF-8, then exits 0).
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time


KEPT: list = []


def report() -> dict:
    libc = ctypes.CDLL(None, use_errno=True)
    pdeath = ctypes.c_int(0)
    libc.prctl(2, ctypes.byref(pdeath), 0, 0, 0)  # PR_GET_PDEATHSIG
    names = {signal.SIG_DFL: "default", signal.SIG_IGN: "ignore", signal.default_int_handler: "int-handler"}
    return {
        "argv": sys.argv[1:],
        "argv0": sys.argv[0],
        # What `python -m` makes of the module: the zygote runs code it compiled once, as runpy would run it.
        "main": {"name": __name__, "file": __file__, "package": __package__, "spec": __spec__.name,
                 "cached": __cached__, "loader": type(__loader__).__name__,
                 "registered": sys.modules["__main__"] is sys.modules.get(__name__)},
        "env": {k: os.environ.get(k) for k in os.environ.get("FRESH_VARS", "").split(",") if k},
        "cwd": os.getcwd(),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        "signals": {str(s): names.get(signal.getsignal(s), "other") for s in sorted(signal.valid_signals())
                    if s not in (signal.SIGKILL, signal.SIGSTOP) and s < signal.NSIG},
        "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "threads": threading.active_count(),
        "threading": {"current_is_main": threading.current_thread() is threading.main_thread(),
                      "main_ident": threading.main_thread().ident == threading.get_ident(),
                      "new_thread_runs": _thread_runs()},
        "at_fork": getattr(sys.modules.get("tests.agents.forky_preload"), "SAW", "not imported") == os.getpid(),
        "session_leader": os.getsid(0) == os.getpid(),
        "pid": os.getpid(),
        "pdeathsig": pdeath.value,
        "random": random.random(),
        "stdin_empty": sys.stdin.read() == "",
    }


def _thread_runs() -> bool:
    """A thread started here runs and is joined (the threading module's state is this process's own)."""
    ran = []
    thread = threading.Thread(target=ran.append, args=(True,))
    thread.start()
    thread.join(10)
    return ran == [True] and threading.active_count() == 1


def main(argv: list[str]) -> int:
    mode = argv[0] if argv else "report"
    if mode == "report":
        # fds listed before anything else opens one (the /proc listing itself is a transient descriptor)
        sys.stdout.write(json.dumps(report()) + "\n")
        sys.stderr.write("to stderr\n")
        return 0
    if mode == "exit":
        return int(argv[1])
    if mode == "raise":
        raise RuntimeError("boom")
    if mode == "interrupt":
        raise KeyboardInterrupt
    if mode == "wait":
        time.sleep(float(argv[1]))
        return 0
    if mode == "sleep":
        subprocess.Popen(["sleep", argv[1]], start_new_session=False, process_group=0)
        sys.stdout.write(f"{os.getpid()}\n")
        sys.stdout.flush()
        time.sleep(float(argv[1]))
        return 0
    if mode == "mapodd":
        import mmap

        path = os.path.join(os.fsencode(argv[1]), b"odd-\xff-name")
        with open(path, "wb") as f:
            f.write(b"x" * 4096)
        with open(path, "r+b") as f:
            mapped = mmap.mmap(f.fileno(), 4096, flags=mmap.MAP_PRIVATE)
        mapped[0] = 1  # a private writable page of a file named in /proc/self/maps with a byte that is not UTF-8
        KEPT.append(mapped)  # still mapped when the process exits (a local would be unmapped on return)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
