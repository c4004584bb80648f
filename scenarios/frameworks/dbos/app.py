"""A DBOS durable workflow with three steps on DBOS's SQLite system database; the same argv starts and resumes it.

``python app.py STATE_DIR`` configures DBOS with its system database at ``sqlite:///STATE_DIR/orders.sqlite`` (the
form of DBOS's default ``sqlite:///<name>.sqlite``, placed under the state directory), launches it and runs the
workflow ``place_order`` with the fixed workflow ID ``order-1`` (``SetWorkflowID``): the steps ``reserve_stock``,
``charge_card`` and ``send_receipt``. ``charge_card`` is the effect-bearing step: each execution appends one JSON
line ``{"effect": "charge_card", "pid": PID}`` to ``$CHAOS_WITNESS`` (the harness's evidence, outside the state).

Resume, the documented way: ``DBOS.launch()`` recovers this executor's PENDING workflows by itself, in a background
thread. So a restarted program does not start the workflow again: it looks the ID up
(``DBOS.get_workflow_status``) and, when it exists, waits for it with ``DBOS.retrieve_workflow(ID).get_result()``
(polling the system database, every 0.1 s, until the recovered execution has recorded its outcome); only when no workflow with
that ID exists does it start one under ``SetWorkflowID``. It exits 0 once the workflow's result is recorded, after
``DBOS.destroy()``.

Telemetry: OTLP is off unless ``enable_otlp`` is set (``dbos._dbos_config``: ``disable_otlp = True if enable_otlp is
None``) and Conductor connects only with a ``conductor_key``; the config says ``enable_otlp: False`` and gives no key.

``python app.py --read STATE_DIR`` is the reader: the system database through ``DBOSClient`` (DBOS's documented
client: it never launches, recovers or migrates), ``{"done": [steps with a recorded output], "result": the
workflow's recorded output, "complete": its status is SUCCESS, "status": …}``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

from dbos import DBOS, DBOSClient, DBOSConfig, SetWorkflowID

APP_NAME = "orders"
WORKFLOW_ID = "order-1"
EFFECT = "charge_card"


def database_url(state_dir: Path) -> str:
    return f"sqlite:///{state_dir.resolve() / (APP_NAME + '.sqlite')}"


@DBOS.step()
def reserve_stock(order_id: str) -> dict:
    return {"order": order_id, "sku": "book-7", "amount": 42}


@DBOS.step()
def charge_card(amount: int) -> str:
    # The side effect: in a real app a payment call; here the witness line the harness counts.
    with open(os.environ["CHAOS_WITNESS"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"effect": EFFECT, "pid": os.getpid()}) + "\n")
        f.flush()
    return f"ch-{amount}"


@DBOS.step()
def send_receipt(charge_id: str) -> str:
    return f"receipt:{charge_id}"


@DBOS.workflow()
def place_order(order_id: str) -> str:
    reservation = reserve_stock(order_id)
    charge_id = charge_card(reservation["amount"])
    return f"shipped:{send_receipt(charge_id)}"


def main(state_dir: Path) -> int:
    state_dir.mkdir(parents=True, exist_ok=True)
    config: DBOSConfig = {"name": APP_NAME, "system_database_url": database_url(state_dir), "enable_otlp": False}
    DBOS(config=config)
    DBOS.launch()  # recovers this executor's PENDING workflows in the background
    try:
        if DBOS.get_workflow_status(WORKFLOW_ID) is None:
            with SetWorkflowID(WORKFLOW_ID):
                handle = DBOS.start_workflow(place_order, "order-1")
        else:
            handle = DBOS.retrieve_workflow(WORKFLOW_ID)  # the recovered (or finished) execution
        # Poll the recorded outcome every 0.1 s rather than the default 1 s (a documented parameter of get_result).
        print(handle.get_result(polling_interval_sec=0.1))
    finally:
        DBOS.destroy()
    return 0


def schema_exists(path: Path) -> bool:
    """Whether DBOS's migrations have committed (a kill before that leaves an empty file, which DBOS migrates at the
    next launch but ``DBOSClient`` refuses: the client never migrates)."""
    if not path.exists():
        return False
    conn = sqlite3.connect(path)  # read-write, as DBOS opens it: a hot journal is rolled back, as any opener does
    try:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'workflow_status'").fetchone() is not None
    finally:
        conn.close()


def read(state_dir: Path) -> dict:
    if not schema_exists(state_dir / f"{APP_NAME}.sqlite"):
        return {"done": [], "result": None, "complete": False, "status": None}
    client = DBOSClient(system_database_url=database_url(state_dir))
    try:
        workflows = client.list_workflows(workflow_ids=[WORKFLOW_ID])
        if not workflows:
            return {"done": [], "result": None, "complete": False, "status": None}
        steps = client.list_workflow_steps(WORKFLOW_ID)
        done = [s["function_name"] for s in steps if s["error"] is None and s.get("completed_at_epoch_ms")]
        status = workflows[0].status
        return {"done": done, "result": workflows[0].output if status == "SUCCESS" else None,
                "complete": status == "SUCCESS", "status": status}
    finally:
        client.destroy()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--read"] and len(sys.argv) == 3:
        print(json.dumps(read(Path(sys.argv[2]))))
    elif len(sys.argv) == 2:
        sys.exit(main(Path(sys.argv[1])))
    else:
        sys.exit("usage: app.py STATE_DIR | app.py --read STATE_DIR")
