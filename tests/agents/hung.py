"""A hung fake agent: (optionally) says hello and announces one barrier, starts a grandchild, then sleeps forever.

    hung.py [--silent] [--barrier] [--escape] --pidfile FILE

The grandchild (``sleep``) runs in its own process group but in the agent's session, like the real bash tool, and its
pid is written to FILE so a test can prove the supervisor killed it too. ``--silent`` never connects.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from _protocol import Channel

ap = argparse.ArgumentParser()
ap.add_argument("--silent", action="store_true")
ap.add_argument("--barrier", action="store_true")
ap.add_argument("--pidfile", required=True)
ap.add_argument("--escape", action="store_true", help="the grandchild calls setsid: only its parentage ties it to us")
args = ap.parse_args()
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a hung agent that does not listen to anything but SIGKILL
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if args.escape:
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
else:
    child = subprocess.Popen(["sleep", "300"], process_group=0)
with open(args.pidfile, "w") as f:
    f.write(str(child.pid))
if not args.silent:
    chan = Channel()
    path = os.path.abspath("hung.jsonl")
    open(path, "wb").close()
    chan.hello(path)
    if args.barrier:
        chan.checkpoint("before-write", ["user", "runStarted"], 1, 0, 0)
while True:
    time.sleep(3600)
sys.exit(0)
