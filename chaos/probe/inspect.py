"""What a probe target's durable state says, read at the moment a restarted process would first see it.

The runner (``python -m chaos.probe.run --inspect DIR --case CASE [--copy PATH]… [--sqlite PATH]… [--reader
JSON-ARGV] …``) calls ``inspect_state`` first thing in every restart of a probe case, before it installs the probe
and runs the program, and writes the record to ``DIR/<pid>.json``: nothing runs between a kill and the restart, so
what it reads is the durable state the kill left. The final state of a case is inspected the same way by a launch
with ``--only`` (inspect, do not run the program).

It reads a **copy**: the declared state paths (``--copy``, relative to the case directory) are copied to
``DIR/<pid>.case.read/`` at the same relative places, where the integrity checks and the reader run; with ``--keep``
they are first copied to ``DIR/<pid>.case/``, kept untouched (a second recovery starts from it: the target's
``recovery-deterministic``), and ``.case.read`` is made from that copy. Why: opening
an SQLite file in WAL mode read-write may checkpoint the WAL into the main file and a framework's reader may write
(migrations, a lock table); the program that restarts must find the bytes the kill left, not what the inspection
made of them. Nothing else runs while the copy is made (the restart has not started its program yet), so the copy of
a database and its ``-wal`` file is consistent.

The reader is the target's own program (``PROGRAM ARGS`` or ``-m MODULE ARGS``, the word ``{case}`` standing for the
copy's case directory), run in a **forked child** of the runner with ``runpy``: under the zygote the framework is
already imported, so a reader costs a fork instead of an interpreter start and a framework import (seconds). The
child runs without ``CHAOS_CONTROL`` and before the probe is installed (no barrier of its own), its standard output
goes to a file, and it is killed after ``READER_SECONDS``.

The record: ``{"integrity": {path: "ok" | "absent" | problem}, "reader": {"done": [...], "result": ...,
"complete": bool} | null, "reader_error": str | null}`` (``path`` as declared, relative to the case directory).

Invariant protected: an inspection never announces a barrier and never changes the program's state. Not here:
judging (``chaos.properties``). Stdlib only: it runs inside the target's own interpreter environment.
"""

from __future__ import annotations

import json
import os
import runpy
import select
import shutil
import signal
import sqlite3
import sys
import time
import traceback
from collections.abc import Sequence

# Below the supervisor's default silence limit (30 s, counted from the launch): a reader that hangs is reported as
# the reader's failure, not as a hang of the program.
READER_SECONDS = 25.0


def integrity(path: str) -> str:
    """``"ok"``, ``"absent"`` (no file: nothing was made durable yet) or the problem, one line."""
    if not os.path.exists(path):
        return "absent"
    try:
        conn = sqlite3.connect(path, timeout=10)
        try:
            rows = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return f"cannot open: {exc}"
    return "ok" if rows == ["ok"] else "; ".join(map(str, rows))[:500]


def exception_line(lines: Sequence[str]) -> str | None:
    """The exception's own line of a traceback's text: the last unindented line (some exceptions, pydantic's, add
    indented lines after it)."""
    filled = [line for line in lines if line.strip()]
    return ([line for line in filled if not line[0].isspace()] or filled or [None])[-1]


def copy_state(case: str, paths: Sequence[str], into: str) -> None:
    """Copy each declared state path (relative to ``case``) to the same relative place under ``into``; an SQLite
    file's ``-wal``/``-journal`` companions go with it (they hold committed transactions not yet in the file)."""
    for rel in paths:
        src, dst = os.path.join(case, rel), os.path.join(into, rel)
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        if os.path.isdir(src):
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
        elif os.path.exists(src):
            shutil.copy2(src, dst)
            for suffix in ("-wal", "-journal"):
                if os.path.exists(src + suffix):
                    shutil.copy2(src + suffix, dst + suffix)


def read(reader: Sequence[str], case: str, out: str) -> tuple[dict | None, str | None]:
    """Run the reader (``{case}`` → ``case``) in a forked child; ``(its JSON object, None)`` or ``(None, problem)``.

    ``out`` is a file prefix for the child's standard output and error (kept beside the record)."""
    argv = [a.replace("{case}", case) for a in reader]
    if argv[0] != "-m" and not os.path.isfile(argv[0]):
        return None, f"reader program {argv[0]} does not exist"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: becomes the reader, never returns
        code = 1
        try:
            os.environ.pop("CHAOS_CONTROL", None)  # a reader is not a launch: no barrier channel
            os.environ.pop("CHAOS_WITNESS", None)  # ... and never an effect that counts
            for fd, suffix in ((1, ".out"), (2, ".err")):
                f = os.open(out + suffix, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(f, fd)
                os.close(f)
            os.chdir(case)
            if argv[0] == "-m":
                sys.argv = [argv[1], *argv[2:]]
                sys.path.insert(0, case)
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = list(argv)
                sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
                runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # the reader's own failure: its traceback is the evidence
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)  # not atexit, not the parent's buffers: this process only read
    deadline = time.monotonic() + READER_SECONDS
    try:  # a pidfd becomes readable when the child exits: no polling latency (Linux >= 5.3)
        exited: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        exited = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            left = deadline - time.monotonic()
            if left < 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None, f"reader did not finish within {READER_SECONDS:.0f} s"
            if exited is not None:
                select.select([exited], [], [], left)
            else:
                time.sleep(0.005)
    finally:
        if exited is not None:
            os.close(exited)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        try:
            with open(out + ".err", encoding="utf-8", errors="replace") as f:
                tail = exception_line(f.read().splitlines()) or ""
        except OSError:
            tail = ""
        return None, f"reader exited {code}: {tail}"
    try:
        with open(out + ".out", encoding="utf-8", errors="replace") as f:
            answer = json.loads(f.read())
    except (OSError, ValueError):
        return None, "reader did not print one JSON object"
    if (not isinstance(answer, dict) or not isinstance(answer.get("done"), list) or "result" not in answer
            or not isinstance(answer.get("complete"), bool)):
        # A misspelt key would otherwise read as "nothing done, not finished" and send the user to the program.
        return None, ("reader must print one object with 'done' (a list), 'result' and 'complete' (true or false), "
                      f"got {json.dumps(answer)[:120]}")
    return answer, None


def inspect_state(case: str, copy: Sequence[str], sqlite_paths: Sequence[str], reader: Sequence[str] | None,
                  into: str, keep: bool = False) -> dict:
    """The inspection record (module docstring) of ``case``'s state as it is now. The checks and the reader work
    on a copy, ``into`` + ``.read`` (closing an SQLite connection checkpoints its WAL; a reader may write); with
    ``keep``, ``into`` holds a second, untouched copy (what a second recovery starts from:
    chaos.probecase.recover_again)."""
    work = into.rstrip("/") + ".read"
    os.makedirs(work, exist_ok=True)  # also when nothing exists yet to copy: the reader runs in it
    if keep:
        os.makedirs(into, exist_ok=True)
        copy_state(case, copy, into)
        copy_state(into, copy, work)
    else:
        copy_state(case, copy, work)
    record: dict = {"integrity": {p: integrity(os.path.join(work, p)) for p in sqlite_paths}, "reader": None,
                    "reader_error": None}
    if reader:
        record["reader"], record["reader_error"] = read(reader, work, into.rstrip("/") + ".reader")
    return record
