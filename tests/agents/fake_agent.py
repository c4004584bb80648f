"""A well-behaved fake agent: appends planned transactions to a JSONL session file, announcing every barrier.

    fake_agent.py run  (--session-dir DIR | --session FILE) --plan PLAN [--exit-code N] [--leave-behind]
    fake_agent.py resume FILE [--exit-code N]
    fake_agent.py abort FILE

PLAN is ``fact+fact,fact,...`` (transactions separated by commas). Every line records the plan still to do
(``rest``), so ``resume`` continues from the last complete line after cutting a torn tail, like the real store.
One writer: an exclusive flock, else exit 6 before saying hello. SIGINT sets a flag; after the current transaction
the agent writes ``abortRequested+operationFinished`` and exits 130. A ``fail`` answer exits 4 (nothing written at
before-write; written but "unsynced" at after-write), printing the errno on stderr.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys

from _protocol import Channel

interrupted = False


def on_sigint(signum, frame):
    global interrupted
    interrupted = True
    print("SIGINT received", file=sys.stderr, flush=True)


def parse_plan(text: str) -> list[list[str]]:
    return [tx.split("+") for tx in text.split(",") if tx]


def open_session(path: str, create: bool) -> int:
    flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("session is locked by another process", file=sys.stderr)
        sys.exit(6)
    if create:
        os.write(fd, b'{"header":"fake"}\n')  # the header write is not a barrier
        os.fsync(fd)
    else:
        data = open(path, "rb").read()
        cut = data.rfind(b"\n") + 1
        if cut < len(data):  # torn tail: never committed; cut it (repair) before anything else
            os.ftruncate(fd, cut)
            os.fsync(fd)
    return fd


def last_line(path: str) -> dict | None:
    lines = open(path, "rb").read().split(b"\n")[1:-1]
    return json.loads(lines[-1]) if lines else None


def commit(chan: Channel, fd: int, facts: list[str], seq: int, rest: list[list[str]]) -> int:
    size = os.fstat(fd).st_size
    answer = chan.checkpoint("before-write", facts, seq, size, size)
    if answer.get("action") == "fail":
        print(f"write failed: {answer['errno']} (rolled back)", file=sys.stderr)
        sys.exit(4)
    # A multi-byte character in every line, so a torn write can cut inside one.
    line = json.dumps({"seq": seq, "facts": facts, "rest": ["+".join(t) for t in rest], "pad": "é" * 20},
                      ensure_ascii=False).encode() + b"\n"
    os.write(fd, line)
    end = os.fstat(fd).st_size
    answer = chan.checkpoint("after-write", facts, seq, end, size)
    if answer.get("action") == "fail":
        print(f"fsync failed: {answer['errno']} (store poisoned)", file=sys.stderr)
        sys.exit(4)
    os.fsync(fd)
    chan.checkpoint("after-sync", facts, seq, end, end)
    return seq + len(facts)


def work(chan: Channel, fd: int, plan: list[list[str]], seq: int) -> int:
    while plan:
        tx, plan = plan[0], plan[1:]
        seq = commit(chan, fd, tx, seq, plan)
        if interrupted:
            commit(chan, fd, ["abortRequested", "operationFinished"], seq, [])
            return 130
    return 0


def main() -> int:
    signal.signal(signal.SIGINT, on_sigint)
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["run", "resume", "abort"])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--session-dir")
    ap.add_argument("--session")
    ap.add_argument("--plan", default="")
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--leave-behind", action="store_true", help="start a background process and do not wait")
    ap.add_argument("--oneway", action="store_true", help="offer to wait only at the phases the supervisor names")
    ap.add_argument("--scribbler", action="store_true",
                    help="start a process in the session that keeps appending to the log, never through a barrier")
    args = ap.parse_args()
    if args.command == "run" and args.session_dir:
        os.makedirs(args.session_dir, exist_ok=True)
        path = os.path.join(args.session_dir, "session.jsonl")
        fd = open_session(path, create=True)
    else:
        path = args.session or args.file
        fd = open_session(path, create=False)
    chan = Channel(oneway=args.oneway)
    chan.hello(path)
    last = last_line(path)
    seq = last["seq"] + len(last["facts"]) if last else 1
    if args.leave_behind:
        subprocess.Popen(["sleep", "60"], process_group=0)
    if args.scribbler:  # a helper of a buggy agent: its writes are nobody's barrier, only the kill stops them
        subprocess.Popen(["sh", "-c", 'while :; do printf x >> "$1"; done', "sh", path])
    if args.command == "run":
        # recover first (finish the previous operation), then the new plan
        code = work(chan, fd, [t.split("+") for t in (last or {}).get("rest", [])], seq)
        last = last_line(path)
        seq = last["seq"] + len(last["facts"]) if last else 1
        code = code or work(chan, fd, parse_plan(args.plan), seq)
    elif args.command == "resume":
        code = work(chan, fd, [t.split("+") for t in (last or {}).get("rest", [])], seq)
    else:
        code = work(chan, fd, [["abortRequested", "operationFinished"]], seq)
    print(json.dumps({"done": args.command, "code": code}))
    return code or args.exit_code


if __name__ == "__main__":
    sys.exit(main())
