"""An OpenAI Agents SDK agent with a never-replay tool, its conversation kept in a ``SQLiteSession``.

``python app.py STATE_DIR`` runs the agent ``deployer`` (model: ``OpenAIChatCompletionsModel`` on an
``AsyncOpenAI`` client pointed at ``$OPENAI_BASE_URL``, the scripted chat-completions server) with
``Runner.run_sync`` and ``SQLiteSession(SESSION_ID, db_path=STATE_DIR/agents.sqlite)``. The scripted model calls the
tool ``deploy`` once, then answers. ``deploy`` is the effect: each execution appends ``{"effect": "deploy", "pid":
PID}`` to ``$CHAOS_WITNESS`` (a real deploy must never be replayed).

Resume (the same argv): the SDK's session *is* the conversation history, and a run with a session prepends the
stored items to the run's input ("Sessions", SDK docs; ``Runner.run`` docstring: "A session for automatic
conversation history management"). So a restart looks at the stored items: none → start the run with the prompt;
the final answer stored → finished, nothing to do; otherwise → continue the stored conversation with an empty new
input (``Runner.run_sync(agent, [], session=session)``), so that the model sees what the session recorded
(``deploy``'s call and output, if stored) and the prompt is not sent twice. The SDK ships no crash-resume API for
a plain run (``RunState`` is the pause/resume boundary for human-in-the-loop interruptions only).

``python app.py --read STATE_DIR`` is the reader (the SDK's own ``SQLiteSession.get_items``):
``{"done": ["deploy"] if a ``function_call_output`` of deploy is stored, "result": final answer text | null,
"complete": the final answer is stored}``.

Tracing is switched off the documented way (``set_tracing_disabled(True)``, and ``OPENAI_AGENTS_DISABLE_TRACING=1``
in the scenario's env): by default the SDK exports traces to the vendor.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

PROMPT = "Deploy the service to prod, then tell me it is done."
SESSION_ID = "deploy-prod"
DB_NAME = "agents.sqlite"


def _session(state: Path):
    from agents import SQLiteSession

    return SQLiteSession(SESSION_ID, db_path=str(state / DB_NAME))


def _summary(items: list) -> dict:
    """What the stored conversation records: deploy's output stored, the final answer (an assistant message after
    the last tool output)."""
    calls = {i.get("call_id"): i.get("name") for i in items if i.get("type") == "function_call"}
    done = sorted({calls.get(i.get("call_id"), "?") for i in items if i.get("type") == "function_call_output"})
    result = None
    last = items[-1] if items else None
    if last and last.get("role") == "assistant" and last.get("type", "message") == "message":
        content = last.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        result = content if "deploy" in done else None
    return {"done": done, "result": result, "complete": result is not None}


def read(state: Path) -> dict:
    if not (state / DB_NAME).exists():
        return {"done": [], "result": None, "complete": False}
    session = _session(state)
    try:
        return _summary(asyncio.run(session.get_items()))
    finally:
        session.close()


def main(state: Path) -> int:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # the SDK exports traces to the vendor by default

    @function_tool
    def deploy(target: str) -> str:
        """Deploy the service to the given target environment."""
        with open(os.environ["CHAOS_WITNESS"], "a", encoding="utf-8") as f:
            f.write(json.dumps({"effect": "deploy", "pid": os.getpid()}) + "\n")
            f.flush()
        return f"deployed to {target}"

    model = OpenAIChatCompletionsModel(
        model="gpt-4o-mini",
        openai_client=AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]))
    agent = Agent(name="deployer", instructions="You deploy services with the deploy tool.", tools=[deploy],
                  model=model)
    state.mkdir(parents=True, exist_ok=True)
    session = _session(state)
    try:
        items = asyncio.run(session.get_items())
        if _summary(items)["complete"]:
            return 0
        run_input = PROMPT if not items else []  # stored items are the history: do not send the prompt twice
        result = Runner.run_sync(agent, run_input, session=session)
        print(result.final_output)
    finally:
        session.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--read":
        print(json.dumps(read(Path(sys.argv[2]))))
    elif len(sys.argv) == 2:
        sys.exit(main(Path(sys.argv[1])))
    else:
        sys.stderr.write("usage: app.py STATE_DIR | app.py --read STATE_DIR\n")
        sys.exit(2)
