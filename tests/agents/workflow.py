"""A three-step durable workflow (stdlib only) for the probe's tests: progress in SQLite, a status file, effects.

``python workflow.py STATE_DIR`` runs steps a, b, c. Each step not yet recorded as done performs its effect (one
JSON line ``{"effect": STEP, "pid": PID}`` appended to ``$CHAOS_WITNESS``, outside the state), passes the named
point ``effected``, then records the step in one SQLite transaction (``progress`` row and the carried ``cursor``
value) and rewrites ``status.json`` atomically (temporary file, fsync, ``os.replace``). Running it again resumes.
The correct program's effects are at-least-once: a kill between an effect and its record repeats that effect once.
Result: ``cursor.value`` = 123.

``python workflow.py --read STATE_DIR`` is its reader: ``{"done": [...], "result": value, "complete": bool}``.

Planted defects, ``WORKFLOW_BUGS`` (comma-separated), one per property of chaos.properties:

- ``rerun-recorded`` — a restarted run ignores the record and redoes every step (``recorded-not-redone``);
- ``retry-effect`` — a restarted run performs an unrecorded step's effect twice (``effects-bounded``);
- ``no-transaction`` — the two writes of a record are committed separately (``matches-baseline``);
- ``write-in-place`` — ``status.json`` is rewritten in place (``Path.write_text``: truncate, then write), and a
  restart parses it (``state-loads``);
- ``stop-early`` — a restarted run stops after one step, exit 0 (``completes``);
- ``random-resume`` — a restarted run carries a random value instead of the recorded one
  (``recovery-deterministic``: two recoveries of one durable state end differently);
- ``no-lock`` — runs do not take the workflow's lock, so processes resuming one state at once each redo the
  unrecorded step (``consume-once``).

``WORKFLOW_LATE_SIBLINGS=SECONDS`` (a timing condition, not a defect): a restarted run that is not the first restarted
run to start (an ``O_EXCL`` marker beside ``$CHAOS_WITNESS``) spins the CPU this long before it reads the state — a
concurrent resume that is slow to be scheduled, made certain. Without the supervisor's dresume lockstep the first
resume would finish alone and ``no-lock`` would go unseen.

A run holds an exclusive lock (``flock`` on ``STATE_DIR/wf.lock``, opened with ``os.open``, which the probe does not
announce) for its whole work: concurrent resumes take turns, and the ones that come later find the steps done.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

try:
    from chaos.probe import point
except ImportError:  # run without killpoint installed: the named point is a no-op
    def point(name: str) -> None:
        return None

STEPS = ("a", "b", "c")


def open_db(state: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(state / "wf.db")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS progress (step TEXT PRIMARY KEY, value INTEGER)")
    conn.execute("CREATE TABLE IF NOT EXISTS cursor (id INTEGER PRIMARY KEY CHECK (id = 0), value INTEGER)")
    conn.commit()
    return conn


def read(state: Path) -> dict:
    if not (state / "wf.db").exists():
        return {"done": [], "result": None, "complete": False}
    conn = sqlite3.connect(state / "wf.db")
    try:
        done = [r[0] for r in conn.execute("SELECT step FROM progress ORDER BY step")]
        row = conn.execute("SELECT value FROM cursor WHERE id = 0").fetchone()
    except sqlite3.OperationalError:  # the tables were never created
        return {"done": [], "result": None, "complete": False}
    finally:
        conn.close()
    return {"done": done, "result": row[0] if row else None, "complete": set(done) == set(STEPS)}


def effect(step: str) -> None:
    with open(os.environ["CHAOS_WITNESS"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"effect": step, "pid": os.getpid()}) + "\n")


def write_status(state: Path, last: str, bugs: set[str]) -> None:
    text = json.dumps({"last": last})
    if "write-in-place" in bugs:
        (state / "status.json").write_text(text)
        return
    tmp = state / "status.json.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, state / "status.json")


def main(state: Path) -> int:
    bugs = {b for b in os.environ.get("WORKFLOW_BUGS", "").split(",") if b}
    state.mkdir(parents=True, exist_ok=True)
    if "no-lock" not in bugs:
        lock = os.open(state / "wf.lock", os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel when this process ends, killed or not
    status = state / "status.json"
    restarted = status.exists() or (state / "wf.db").exists()
    late = float(os.environ.get("WORKFLOW_LATE_SIBLINGS", "0"))
    if restarted and late:
        try:
            os.close(os.open(os.environ["CHAOS_WITNESS"] + ".first", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:  # a sibling started first: be the slow one (runnable all along, never asleep)
            end = time.monotonic() + late
            while time.monotonic() < end:
                pass
    if status.exists():
        json.loads(status.read_text())  # a torn status file makes a restart fail here
    conn = open_db(state)
    done = {r[0] for r in conn.execute("SELECT step FROM progress")}
    row = conn.execute("SELECT value FROM cursor WHERE id = 0").fetchone()
    value = row[0] if row else 0
    if restarted and "random-resume" in bugs:
        value = int.from_bytes(os.urandom(4), "big")
    ran = 0
    for step in STEPS:
        if step in done and "rerun-recorded" not in bugs:
            continue
        if restarted and ran and "stop-early" in bugs:
            return 0
        effect(step)
        if restarted and "retry-effect" in bugs:
            effect(step)
        point("effected")
        value = value * 10 + STEPS.index(step) + 1
        conn.execute("INSERT OR REPLACE INTO progress (step, value) VALUES (?, ?)", (step, value))
        if "no-transaction" in bugs:
            conn.commit()
        conn.execute("INSERT OR REPLACE INTO cursor (id, value) VALUES (0, ?)", (value,))
        conn.commit()
        write_status(state, step, bugs)
        ran += 1
    conn.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--read":
        print(json.dumps(read(Path(sys.argv[2]))))
    elif len(sys.argv) == 2:
        sys.exit(main(Path(sys.argv[1])))
    else:
        sys.stderr.write("usage: workflow.py STATE_DIR | workflow.py --read STATE_DIR\n")
        sys.exit(2)
