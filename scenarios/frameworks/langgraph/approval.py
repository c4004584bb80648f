"""Human-in-the-loop with LangGraph ``interrupt()`` + ``Command(resume=...)`` on ``SqliteSaver``, as the docs show.

``python approval.py STATE_DIR`` runs the graph ``draft -> approve -> confirm`` on thread ``wire-7`` with its
checkpoints in ``STATE_DIR/checkpoints.sqlite``. ``approve`` asks a human with ``interrupt()``; once it gets the
answer it performs the external effect, a wire transfer (one line ``{"effect": "transfer", "pid": PID}`` appended to
``$CHAOS_WITNESS``, outside the state), after the interrupt, in the same node — the docs' "approve, then act" shape.

How the program knows what to do, from the checkpointer alone (``graph.get_state(config)``):

- no checkpoint for the thread: start it with the input (``graph.invoke(input, config)``); it parks at the interrupt;
- the thread has a pending interrupt (``snapshot.interrupts``): it is parked, so it is a resume — the human's answer
  goes in with ``graph.invoke(Command(resume="approve"), config)`` (the human is this program: it always approves);
- a checkpoint without a pending interrupt (a crash between steps, or finished): ``graph.invoke(None, config)``,
  which resumes from the last checkpoint (and does nothing on a finished thread). Not decided by
  ``snapshot.next``: after a crash between a step's stored writes and the next checkpoint it is ``()`` although
  nodes are left to run (README.md, finding 3).

After the first ``invoke`` returns with the interrupt pending, the program passes the named point ``parked`` (a
no-op without the harness's probe): the kill point of a parked thread whatever order the background saves took.
Then, while an interrupt is pending, it answers; so one launch goes from start through the park to the end, and a launch
that finds the thread parked resumes it. Exit 0 when finished. k such launches started together on a parked thread
are k concurrent resumes of one interrupt (consume-once).

``python approval.py --read STATE_DIR`` is the reader (the framework's API: ``get_state_history`` and the newest
checkpoint's tasks with stored writes): ``{"done": [nodes recorded done, and "transfer" once "approve" is],
"result": final values or null, "complete": bool}``; a task parked at its interrupt is not done. It never creates
the SQLite file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

try:  # the harness's named kill point (a no-op without the probe): "the thread is parked at its interrupt"
    from chaos.probe import point
except ImportError:
    def point(name: str) -> None:
        return None

THREAD = "wire-7"
NODES = ("draft", "approve", "confirm")
CONFIG = {"configurable": {"thread_id": THREAD}}


class Wire(TypedDict):
    amount: int
    memo: str
    status: str


def witness(effect: str) -> None:
    """The harness's evidence that the effect ran (one line per execution, in this process)."""
    with open(os.environ["CHAOS_WITNESS"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"effect": effect, "pid": os.getpid()}) + "\n")
        f.flush()


def draft(state: Wire) -> dict:
    return {"memo": f"wire {state['amount']} EUR to ACME", "status": "drafted"}


def approve(state: Wire) -> dict:
    # The node re-executes from its start on resume; interrupt() then returns the resume value.
    decision = interrupt({"question": "send this wire?", "memo": state["memo"]})
    if decision != "approve":
        return {"status": "rejected"}
    witness("transfer")  # the external effect, after the human's answer
    return {"status": "sent"}


def confirm(state: Wire) -> dict:
    return {"status": f"{state['status']}+confirmed"}


def build() -> StateGraph:
    builder = StateGraph(Wire)
    builder.add_node("draft", draft)
    builder.add_node("approve", approve)
    builder.add_node("confirm", confirm)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "approve")
    builder.add_edge("approve", "confirm")
    builder.add_edge("confirm", END)
    return builder


def run(state: Path) -> int:
    state.mkdir(parents=True, exist_ok=True)
    with SqliteSaver.from_conn_string(str(state / "checkpoints.sqlite")) as saver:
        graph = build().compile(checkpointer=saver)
        if not graph.get_state(CONFIG).created_at:  # no checkpoint for the thread yet: start it
            graph.invoke({"amount": 250, "memo": "", "status": "new"}, CONFIG)
            if graph.get_state(CONFIG).interrupts:
                point("parked")  # invoke returned: the interrupt and its checkpoint are durable
        elif not graph.get_state(CONFIG).interrupts:
            # A crash left the thread between steps (or it is finished: then this does nothing). Not decided by
            # snapshot.next: after a crash in the window between a step's stored writes and the next checkpoint,
            # get_state(config).next is () although the graph has nodes left to run (README.md, finding 3).
            graph.invoke(None, CONFIG)
        for _ in range(3):  # parked at the interrupt: the human answers (bounded: never loops forever)
            if not graph.get_state(CONFIG).interrupts:
                break
            graph.invoke(Command(resume="approve"), CONFIG)
        snap = graph.get_state(CONFIG)
        return 0 if not snap.next and not snap.interrupts else 1


def read(state: Path) -> dict:
    db = state / "checkpoints.sqlite"
    if not db.exists():
        return {"done": [], "result": None, "complete": False}
    conn = sqlite3.connect(str(db), check_same_thread=False)
    try:
        graph = build().compile(checkpointer=SqliteSaver(conn))
        history = list(graph.get_state_history(CONFIG))  # newest first
        done: set[str] = set()
        for i, snap in enumerate(history):
            for task in snap.tasks:
                if task.name in NODES and (i > 0 or (task.result is not None and not task.interrupts)):
                    done.add(task.name)
        if "approve" in done:
            done.add("transfer")  # the effect key: its node's completion is recorded
        complete = bool(history) and not history[0].next
        result = dict(history[0].values) if complete else None
        return {"done": sorted(done), "result": result, "complete": complete}
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--read":
        print(json.dumps(read(Path(argv[1]))))
        return 0
    if len(argv) != 1:
        sys.stderr.write("usage: approval.py STATE_DIR | approval.py --read STATE_DIR\n")
        return 2
    return run(Path(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
