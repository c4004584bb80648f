"""A CrewAI Flow with ``@persist`` on SQLite: prepare → deploy (the effect) → announce. No LLM.

``python app.py STATE_DIR`` runs the flow ``DeployFlow`` (structured state, three methods chained by ``@start`` and
``@listen``), decorated at class level with ``@persist(SQLiteFlowPersistence(STATE_DIR/flows.sqlite))``, so that the
engine saves the state after each method completes. ``deploy`` is the effect-bearing step: each execution appends
``{"effect": "deploy", "pid": PID}`` to ``$CHAOS_WITNESS`` (a real deploy must never be replayed). Each method also
records its own name in ``state.steps`` (persisted with the state after the method completes).

Resume (the same argv): the way CrewAI's docs show for a ``@persist`` flow — ``kickoff(inputs={"id": FLOW_ID})``
loads the latest state saved under that id ("resume: writes land under the supplied id, extending the same
flow_uuid history", docs "Migrating from inputs.id to restore_from_state_id"). The first launch uses the same call
with the same fixed id: with nothing stored yet, kickoff starts from scratch under that id. When the stored state
says the flow finished, the program exits 0 without a kickoff (a finished flow has nothing left to do).
``restore_from_state_id`` is not used: the docs call it a *fork* (it writes under a fresh id), not a resume.

``python app.py --read STATE_DIR`` is the reader (CrewAI's own ``SQLiteFlowPersistence.load_state``):
``{"done": state.steps (methods whose completion the saved state records), "result": state.result,
"complete": state.finished}``.

Telemetry is off the documented way (``CREWAI_DISABLE_TELEMETRY``, ``CREWAI_DISABLE_TRACKING``,
``OTEL_SDK_DISABLED``, ``CREWAI_DISABLE_VERSION_CHECK`` in the scenario's env): ``import crewai`` otherwise starts an
OpenTelemetry span-exporter thread and phones home. CrewAI's own storage directory goes beside the state
(``CREWAI_STORAGE_DIR``, see ``_storage_beside``), not into ``~/.local/share/<cwd name>``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

FLOW_ID = "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"  # fixed: the same argv must find the same persisted flow
DB_NAME = "flows.sqlite"


def _effect(key: str) -> None:
    with open(os.environ["CHAOS_WITNESS"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"effect": key, "pid": os.getpid()}) + "\n")
        f.flush()


def make_flow(db_path: Path):
    """The flow class, persisted to ``db_path`` (the path is known only at run time, hence a factory)."""
    from crewai.flow.flow import Flow, listen, start
    from crewai.flow.persistence import SQLiteFlowPersistence, persist
    from pydantic import BaseModel

    class DeployState(BaseModel):
        id: str = ""
        release: str = ""
        steps: list[str] = []
        result: str | None = None
        finished: bool = False

    @persist(SQLiteFlowPersistence(str(db_path)))
    class DeployFlow(Flow[DeployState]):
        @start()
        def prepare(self):
            self.state.release = "v1.2.3"
            self.state.steps.append("prepare")
            return self.state.release

        @listen(prepare)
        def deploy(self, release):
            _effect("deploy")
            self.state.steps.append("deploy")
            return f"{release}@prod"

        @listen(deploy)
        def announce(self, where):
            self.state.steps.append("announce")
            self.state.result = f"deployed {where}"
            self.state.finished = True
            return self.state.result

    return DeployFlow


def _storage_beside(state: Path) -> None:
    """Keep CrewAI's own files beside the state. Its storage directory is appdirs.user_data_dir($CREWAI_STORAGE_DIR
    or the cwd's name), i.e. ~/.local/share/<dir>/, made by ``import crewai`` itself and holding its user data
    (.crewai_user.json: trace consent) and memory; an absolute CREWAI_STORAGE_DIR replaces the whole path. Set
    before the first CrewAI import; a user's own setting wins."""
    os.environ.setdefault("CREWAI_STORAGE_DIR", str(state.resolve().parent / "crewai-storage"))


def read(state: Path) -> dict:
    _storage_beside(state)
    if not (state / DB_NAME).exists():
        return {"done": [], "result": None, "complete": False}
    from crewai.flow.persistence import SQLiteFlowPersistence

    stored = SQLiteFlowPersistence(str(state / DB_NAME)).load_state(FLOW_ID) or {}
    return {"done": sorted(set(stored.get("steps", []))), "result": stored.get("result"),
            "complete": bool(stored.get("finished"))}


def main(state: Path) -> int:
    state.mkdir(parents=True, exist_ok=True)
    if read(state)["complete"]:
        return 0
    flow = make_flow(state / DB_NAME)()
    print(flow.kickoff(inputs={"id": FLOW_ID}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--read":
        print(json.dumps(read(Path(sys.argv[2]))))
    elif len(sys.argv) == 2:
        sys.exit(main(Path(sys.argv[1])))
    else:
        sys.stderr.write("usage: app.py STATE_DIR | app.py --read STATE_DIR\n")
        sys.exit(2)
