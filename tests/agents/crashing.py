"""A crashing fake agent: says hello, announces one barrier, then dies by a signal or exits with a code.

    crashing.py --signal SIGSEGV | --exit N  [--no-wait]

``--no-wait``: the barrier is only reported (no answer awaited, whatever the hello's answer asked), so the agent dies
right after sending it: a fault at that barrier finds it dead. It says so on stderr first (``past the hello``), so a
test can wait for that end before the supervisor acts.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from _protocol import Channel

ap = argparse.ArgumentParser()
ap.add_argument("--signal")
ap.add_argument("--exit", type=int)
ap.add_argument("--no-wait", action="store_true")
args = ap.parse_args()
chan = Channel()
path = os.path.abspath("crash.jsonl")
open(path, "wb").close()
chan.hello(path)
if args.no_wait:
    chan.wait = []  # every barrier reported only
    print("past the hello: reporting the barrier, then ending", file=sys.stderr, flush=True)  # a test's marker
chan.checkpoint("before-write", ["user", "runStarted"], 1, 0, 0)
if args.signal:
    signal.signal(getattr(signal, args.signal), signal.SIG_DFL)
    os.kill(os.getpid(), getattr(signal, args.signal))
print("Traceback (most recent call last): pretend", file=sys.stderr)
sys.exit(args.exit if args.exit is not None else 1)
