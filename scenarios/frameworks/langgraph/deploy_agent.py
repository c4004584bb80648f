"""A LangGraph tool-calling agent with a never-replay tool, on ``SqliteSaver``, as the LangChain/LangGraph docs show.

``python deploy_agent.py STATE_DIR`` asks the agent (LangChain's ``create_agent``, the docs' current replacement
for ``langgraph.prebuilt.create_react_agent``, a LangGraph graph of the nodes ``model`` and ``tools``) to deploy
the release. Its chat model is ``langchain_openai.ChatOpenAI`` pointed at ``$OPENAI_BASE_URL`` (the harness's
scripted chat-completions server) with ``$OPENAI_API_KEY``. The tool ``deploy`` is the never-replay effect: each
execution appends one line ``{"effect": "deploy", "pid": PID}`` to ``$CHAOS_WITNESS`` (outside the state).
Checkpoints go to ``STATE_DIR/checkpoints.sqlite`` on thread ``release-42``; when the thread has a checkpoint, the
same command resumes it with ``agent.invoke(None, config)`` (a no-op on a finished thread). Exit 0 when
the agent has answered.

``python deploy_agent.py --read STATE_DIR`` is the reader, with the framework's API (``get_state``: the messages of
the newest checkpoint and the writes stored for its tasks): ``{"done": ["deploy"] once a ``ToolMessage`` of the
deploy call is recorded, "result": the final answer or null, "complete": bool}``. It makes no model call (the
model object is built with a placeholder address) and never creates the SQLite file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver

PROMPT = "Deploy release 42 to prod, then tell me when it is live."
CONFIG = {"configurable": {"thread_id": "release-42"}}


@tool
def deploy(target: str) -> str:
    """Deploy the current release to the target environment (never run it twice: it is not idempotent)."""
    with open(os.environ["CHAOS_WITNESS"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"effect": "deploy", "pid": os.getpid()}) + "\n")
        f.flush()
    return f"release 42 is live on {target}"


def build(saver: SqliteSaver, base_url: str, api_key: str):
    model = ChatOpenAI(base_url=base_url, api_key=api_key, model="gpt-4o-mini")
    return create_agent(model, tools=[deploy], checkpointer=saver)


def run(state: Path) -> int:
    state.mkdir(parents=True, exist_ok=True)
    with SqliteSaver.from_conn_string(str(state / "checkpoints.sqlite")) as saver:
        agent = build(saver, os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"])
        snap = agent.get_state(CONFIG)
        if not snap.created_at:  # no checkpoint for the thread: start the conversation
            agent.invoke({"messages": [{"role": "user", "content": PROMPT}]}, CONFIG)
        else:  # a checkpoint exists: resume from it (a no-op on a finished thread). Not decided by snap.next,
            agent.invoke(None, CONFIG)  # which a crash can leave () with nodes still to run (README.md, finding 3)
        return 0 if not agent.get_state(CONFIG).next else 1


def read(state: Path) -> dict:
    db = state / "checkpoints.sqlite"
    if not db.exists():
        return {"done": [], "result": None, "complete": False}
    conn = sqlite3.connect(str(db), check_same_thread=False)
    try:
        agent = build(SqliteSaver(conn), "http://127.0.0.1:9/v1", "unused")  # never called: reading only
        snap = agent.get_state(CONFIG)
        messages = list(snap.values.get("messages", [])) if snap.created_at else []
        for task in snap.tasks:  # writes stored for the newest checkpoint's tasks (not yet in a checkpoint)
            if task.result and not task.interrupts:
                messages += list(task.result.get("messages", []))
        done = sorted({"deploy" for m in messages if isinstance(m, ToolMessage) and m.name == "deploy"})
        newest = next(iter(agent.get_state_history(CONFIG)), None)  # not "live": its next is the step's tasks
        complete = newest is not None and not newest.next
        final = snap.values["messages"][-1] if complete and snap.values.get("messages") else None
        result = final.content if isinstance(final, AIMessage) else None
        return {"done": done, "result": result, "complete": complete}
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--read":
        print(json.dumps(read(Path(argv[1]))))
        return 0
    if len(argv) != 1:
        sys.stderr.write("usage: deploy_agent.py STATE_DIR | deploy_agent.py --read STATE_DIR\n")
        return 2
    return run(Path(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
