"""What a probe target's durable state says, read at the moment a restarted process would first see it.

The runner (``python -m chaos.probe.run --inspect DIR [--sqlite PATH]… [--reader JSON-ARGV] …``) calls
``inspect_state`` first thing in every restart of a probe case, before it installs the probe and runs the program,
and writes the record to ``DIR/<pid>.json``: nothing runs between a kill and the restart, so what it reads is the
durable state the kill left. The harness calls ``inspect_state`` itself for the final state.

The record: ``{"integrity": {path: "ok" | "absent" | problem}, "reader": {"done": [...], "result": ...,
"complete": bool} | null, "reader_error": str | null}``. ``integrity``: ``PRAGMA integrity_check`` of each SQLite
file (opened read-write, as any reader would: it may replay and checkpoint the WAL; the logical content does not
change). ``reader``: the target's own reader command (with the framework's API), run without ``CHAOS_CONTROL``,
printing one JSON object: which effects the state records as done, the program's result, whether it finished.

Invariant protected: an inspection never announces a barrier (it runs before the probe is installed, and its reader
gets no ``CHAOS_CONTROL``) and never writes the program's state beyond what opening it does. Not here: judging
(``chaos.properties``). Stdlib only.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Mapping, Sequence

READER_SECONDS = 60.0


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


def read(reader: Sequence[str], env: Mapping[str, str], cwd: str | None = None) -> tuple[dict | None, str | None]:
    """Run the target's reader; ``(its JSON object, None)`` or ``(None, the problem)``."""
    env = {k: v for k, v in env.items() if k != "CHAOS_CONTROL"}  # a reader is not a launch: no barrier channel
    try:
        proc = subprocess.run(list(reader), env=env, cwd=cwd, capture_output=True, timeout=READER_SECONDS,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"reader {list(reader)} could not run: {exc}"
    if proc.returncode != 0:
        tail = (proc.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
        return None, f"reader exited {proc.returncode}: {tail}"
    try:
        answer = json.loads(proc.stdout)
    except ValueError:
        return None, "reader did not print JSON"
    if not isinstance(answer, dict) or not isinstance(answer.get("done", []), list):
        return None, "reader must print an object with a list 'done'"
    return answer, None


def inspect_state(sqlite_paths: Sequence[str], reader: Sequence[str] | None, env: Mapping[str, str],
                  cwd: str | None = None) -> dict:
    """The inspection record (module docstring) of the state as it is now."""
    answer, problem = read(reader, env, cwd) if reader else (None, None)
    return {"integrity": {p: integrity(p) for p in sqlite_paths}, "reader": answer, "reader_error": problem}
