"""A module the zygote tests launch (``python -m tests.agents.fresh MODE``): it reports what a fresh process sees.

Modes: ``report`` prints one JSON object (argv, the variables named in FRESH_VARS, cwd, open descriptors, signal
dispositions, the signal mask, threads, session, parent-death signal, a random draw); ``exit N``; ``raise``;
``interrupt`` (an uncaught KeyboardInterrupt); ``sleep S`` (with a grandchild that sleeps too, in its own process
group, as a bash tool would).
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
        "signals": {s.name: names.get(signal.getsignal(s), "other") for s in
                    (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGUSR2)},
        "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "threads": threading.active_count(),
        "session_leader": os.getsid(0) == os.getpid(),
        "pdeathsig": pdeath.value,
        "random": random.random(),
        "stdin_empty": sys.stdin.read() == "",
    }


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
    if mode == "sleep":
        subprocess.Popen(["sleep", argv[1]], start_new_session=False, process_group=0)
        sys.stdout.write(f"{os.getpid()}\n")
        sys.stdout.flush()
        time.sleep(float(argv[1]))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
