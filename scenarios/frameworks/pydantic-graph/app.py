"""A four-node pydantic-graph 1.x order workflow on ``FileStatePersistence``, run node by node as its docs show.

``python app.py STATE_DIR`` runs Plan → Charge → Receipt → Ship → End. ``Charge`` is the effect-bearing node: each
execution appends one JSON line ``{"effect": "charge", "pid": PID}`` to ``$CHAOS_WITNESS`` (the harness's evidence,
outside the state) and then passes the named kill point ``charged`` (``chaos.probe.point``; a no-op without the
probe): a kill there is a crash in the middle of a node, with no persistence write or lock in flight. The persistence file is ``STATE_DIR/order.json``; pydantic-graph writes it with
``Path.write_bytes`` (no fsync, no rename) under a lock file ``order.json.pydantic-graph-persistence-lock`` beside it.

The run follows the "State Persistence" example of the pydantic-graph docs (``count_down_from_persistence.py``):
``graph.initialize(first_node, persistence, state=…)`` once, then, one node per step,
``async with graph.iter_from_persistence(persistence) as run: await run.next()`` until a node returns ``End``.
The same argv resumes: when the persistence file exists, the run is not initialised again; when it already holds an
``EndSnapshot`` the program has nothing left to do. Exit 0 when the graph has ended.

``python app.py --read STATE_DIR`` is the reader, with the framework's API only (``FileStatePersistence.load_all``,
which reads without taking the lock): ``{"done": ["charge"] if the Charge snapshot's status is 'success',
"result": the End's data, "complete": an EndSnapshot exists, "statuses": [[node id, status], …]}``. An unreadable
file makes the reader fail (its traceback's last line is the evidence).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic_graph import BaseNode, End, GraphRunContext
from pydantic_graph.graph import Graph  # the canonical module: the top-level re-export warns (deprecated in 1.107)
from pydantic_graph.persistence import EndSnapshot, NodeSnapshot
from pydantic_graph.persistence.file import FileStatePersistence

try:
    from chaos.probe import point
except ImportError:  # run without the probe: the named kill point is a no-op
    def point(name: str) -> None:
        return None

PERSISTENCE_FILE = "order.json"
EFFECT = "charge"


@dataclass
class Order:
    """The graph's state, snapshotted before every node."""

    amount: int = 0
    charge_id: str | None = None
    receipt: str | None = None


@dataclass
class Plan(BaseNode[Order]):
    async def run(self, ctx: GraphRunContext[Order]) -> Charge:
        ctx.state.amount = 42
        return Charge()


@dataclass
class Charge(BaseNode[Order]):
    async def run(self, ctx: GraphRunContext[Order]) -> Receipt:
        # The side effect: in a real app a payment call; here the witness line the harness counts.
        with open(os.environ["CHAOS_WITNESS"], "a", encoding="utf-8") as f:
            f.write(json.dumps({"effect": EFFECT, "pid": os.getpid()}) + "\n")
            f.flush()
        # A kill point in the middle of a node (no persistence write, no lock held): the paper's "mid-node crash".
        point("charged")
        ctx.state.charge_id = f"ch-{ctx.state.amount}"
        return Receipt()


@dataclass
class Receipt(BaseNode[Order]):
    async def run(self, ctx: GraphRunContext[Order]) -> Ship:
        ctx.state.receipt = f"receipt:{ctx.state.charge_id}"
        return Ship()


@dataclass
class Ship(BaseNode[Order, None, str]):
    async def run(self, ctx: GraphRunContext[Order]) -> End[str]:
        return End(f"shipped:{ctx.state.receipt}")


order_graph = Graph(nodes=(Plan, Charge, Receipt, Ship), name="order_graph")


def persistence_for(state_dir: Path) -> FileStatePersistence:
    persistence = FileStatePersistence(state_dir / PERSISTENCE_FILE)
    persistence.set_graph_types(order_graph)
    return persistence


async def run_node(state_dir: Path) -> bool:
    """One node, restored from persistence (the docs' ``run_node``); True when the graph has ended."""
    persistence = persistence_for(state_dir)
    async with order_graph.iter_from_persistence(persistence) as run:
        node_or_end = await run.next()
    return isinstance(node_or_end, End)


async def main(state_dir: Path) -> int:
    state_dir.mkdir(parents=True, exist_ok=True)
    persistence = persistence_for(state_dir)
    if not (state_dir / PERSISTENCE_FILE).exists():
        await order_graph.initialize(Plan(), persistence, state=Order())
    elif any(isinstance(s, EndSnapshot) for s in await persistence.load_all()):
        return 0  # the run ended before: nothing left to do
    while not await run_node(state_dir):
        pass
    return 0


async def read(state_dir: Path) -> dict:
    if not (state_dir / PERSISTENCE_FILE).exists():
        return {"done": [], "result": None, "complete": False, "statuses": []}
    snapshots = await persistence_for(state_dir).load_all()
    statuses = [[s.node.get_node_id(), s.status] if isinstance(s, NodeSnapshot) else ["End", "end"]
                for s in snapshots]
    done = [EFFECT] if ["Charge", "success"] in statuses else []
    end = next((s for s in snapshots if isinstance(s, EndSnapshot)), None)
    return {"done": done, "result": end.result.data if end else None, "complete": end is not None,
            "statuses": statuses}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--read"] and len(sys.argv) == 3:
        print(json.dumps(asyncio.run(read(Path(sys.argv[2])))))
    elif len(sys.argv) == 2:
        sys.exit(asyncio.run(main(Path(sys.argv[1]))))
    else:
        sys.exit("usage: app.py STATE_DIR | app.py --read STATE_DIR")
