"""A fake agent that breaks the checkpoint protocol in one chosen way, then waits for its answer.

    rude.py MODE      MODE: garbage | deep | version | order | pid | seq | nohello | toolong | oneway | nul
"""

from __future__ import annotations

import json
import os
import sys

from _protocol import Channel

mode = sys.argv[1]
chan = Channel()
path = os.path.abspath("rude.jsonl")
open(path, "wb").close()
hello = {"hello": {"pid": os.getpid(), "session": path, "protocol": 1}}
if mode == "garbage":
    chan.hello(path)
    chan.send_raw(b"{not json\n")
elif mode == "deep":  # valid JSON nested deeper than the json module parses (it raises RecursionError)
    chan.hello(path)
    chan.send_raw(b"[" * 100_000 + b"]" * 100_000 + b"\n")
elif mode == "version":
    hello["hello"]["protocol"] = 2
    chan.send(hello)
elif mode == "pid":
    hello["hello"]["pid"] = os.getpid() + 1
    chan.send(hello)
elif mode == "order":
    chan.hello(path)
    chan.checkpoint("after-sync", ["user"], 1, 10, 10)
elif mode == "seq":
    chan.hello(path)
    chan.send({"checkpoint": {"phase": "before-write", "facts": ["user", "runStarted"], "seqFirst": 1, "seqLast": 5,
                              "offset": 0, "syncedOffset": 0}})
elif mode == "nohello":
    chan.checkpoint("before-write", ["user"], 1, 0, 0)
elif mode == "oneway":
    hello["hello"]["oneway"] = "yes"
    chan.send(hello)
elif mode == "nul":  # a session path no file can have; the checkpoint after it makes the harness read the file
    hello["hello"]["session"] = path + "\0x"
    chan.send(hello)
    chan.checkpoint("before-write", ["user"], 1, 0, 0)
elif mode == "toolong":
    chan.hello(path)
    chan.send_raw(json.dumps({"checkpoint": "x" * (1 << 21)}).encode())
sys.exit(0)
