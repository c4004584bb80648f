"""A three-node LangGraph ``StateGraph`` on ``SqliteSaver``, written the way LangGraph's persistence docs show.

``python checkout.py [--durability sync|async|exit] STATE_DIR`` runs the graph ``reserve -> charge -> ship`` on
thread ``order-1001`` with its checkpoints in ``STATE_DIR/checkpoints.sqlite``. When the checkpointer already holds a
checkpoint for the thread, the same command resumes it the documented way, ``graph.invoke(None, config)``; else it
starts the thread with the order as input. Each node's execution appends one line
``{"effect": NODE, "pid": PID}`` to ``$CHAOS_WITNESS`` (outside the state): ``charge`` is the external effect
(a payment), ``reserve`` and ``ship`` are witnessed too so that a re-run of *any* node is visible.

``python checkout.py --read STATE_DIR`` is the reader: with the framework's own API (``get_state``,
``get_state_history``: a checkpoint's tasks are done when a later checkpoint exists, the newest checkpoint's tasks
when their pending writes are stored, i.e. ``task.result`` is set) it prints
``{"done": [nodes recorded as done], "result": final values or null, "complete": bool}``.
It reads the SQLite file only if it exists (it never creates one).
"""

from __future__ import annotations

import json
import operator
import os
import sqlite3
import sys
from pathlib import Path
from typing import Annotated, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

THREAD = "order-1001"
NODES = ("reserve", "charge", "ship")


class Order(TypedDict):
    order: str
    steps: Annotated[list[str], operator.add]  # a reducer: a node re-run on recorded state would show here twice
    receipt: str


def witness(node: str) -> None:
    """The harness's evidence that a node body ran (one line per execution, in this process)."""
    with open(os.environ["CHAOS_WITNESS"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"effect": node, "pid": os.getpid()}) + "\n")
        f.flush()


def reserve(state: Order) -> dict:
    witness("reserve")
    return {"steps": ["reserve"]}


def charge(state: Order) -> dict:
    witness("charge")  # the external effect: a payment that must not be taken twice
    return {"steps": ["charge"], "receipt": f"paid:{state['order']}"}


def ship(state: Order) -> dict:
    witness("ship")
    return {"steps": ["ship"]}


def build() -> StateGraph:
    builder = StateGraph(Order)
    builder.add_node("reserve", reserve)
    builder.add_node("charge", charge)
    builder.add_node("ship", ship)
    builder.add_edge(START, "reserve")
    builder.add_edge("reserve", "charge")
    builder.add_edge("charge", "ship")
    builder.add_edge("ship", END)
    return builder


CONFIG = {"configurable": {"thread_id": THREAD}}


def run(state: Path, durability: str) -> int:
    state.mkdir(parents=True, exist_ok=True)
    with SqliteSaver.from_conn_string(str(state / "checkpoints.sqlite")) as saver:
        graph = build().compile(checkpointer=saver)
        if saver.get_tuple(CONFIG) is None:
            graph.invoke({"order": "A-1001", "steps": [], "receipt": ""}, CONFIG, durability=durability)
        else:
            graph.invoke(None, CONFIG, durability=durability)  # resume from the last checkpoint
        return 0 if not graph.get_state(CONFIG).next else 1


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
                # a later checkpoint exists: the step's tasks completed; else only tasks whose writes are stored
                if task.name in NODES and (i > 0 or task.result is not None):
                    done.add(task.name)
        complete = bool(history) and not history[0].next
        result = {k: history[0].values.get(k) for k in ("steps", "receipt")} if complete else None
        return {"done": sorted(done), "result": result, "complete": complete}
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--read":
        print(json.dumps(read(Path(argv[1]))))
        return 0
    durability = "async"  # LangGraph's default
    if len(argv) == 3 and argv[0] == "--durability" and argv[1] in ("sync", "async", "exit"):
        durability, argv = argv[1], argv[2:]
    if len(argv) != 1:
        sys.stderr.write("usage: checkout.py [--durability sync|async|exit] STATE_DIR | checkout.py --read STATE_DIR\n")
        return 2
    return run(Path(argv[0]), durability)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
