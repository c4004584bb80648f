"""Pre-flight of a foreign planner command: one plan asked for before any case runs.

What it is for. With ``--planner-cmd CMD`` (or a target file's ``planner_command``) the bundled agent runs ``CMD plan
LOG CURRENT.json`` at each recovery decision, and a command that cannot answer at all — a missing script, a typo,
a runtime that is not installed — stops the agent with exit 8 in every case: a campaign of identical failures that
took its whole time to say one thing. So the front ends (``chaos run``, ``campaign``, ``mutants``, ``repro``, the
pytest plugin) first ask the command for the plan of the simplest state a recovery decision meets — a run that has
just started, its user message durable and nothing else (SPEC §14.4, P2) — as the agent would ask it: in the
directory it runs in (``Target.planner_dir``; an empty one for a record from before there was one, as an agent
would run it in its fresh workspace), with the harness's and the target's environment minus the checkpoint channel,
within the agent's ``AGENT_PLANNER_TIMEOUT``; a case's own variables (its model server, its witness file) do not
exist yet. It refuses to start in one line when the command gives no plan.

Invariant it protects: a command whose answer there is one well-formed plan (``agent.session.plan_shape``, the
agent's own check) is never refused, whatever the plan says: a *wrong* plan is what the cases are for (they judge
it under real kills, and the first divergence names it), not a reason to run none.

Not here: comparing plans (``chaos.divergence``), conformance over a corpus (``chaos.conformance``).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from agent.session.plan_shape import plan_problem
from chaos.divergence import ask_plan, planner_environment, planner_timeout
from chaos.target import AGENT_PLANNER_SECONDS

# A session whose first run has just started: the header, then the user message and runStarted in one transaction.
# The reference planner's answer is P2's `startStep assistant` (tests/unit/chaos/test_preflight.py checks it).
_HEADER = {"createdAt": 1796135141407, "cwd": "/workspace", "environmentIdentity": "chaos:preflight",
           "id": "01a231ff-401f-7142-8f04-3278c7674c34", "kind": "header", "model": "scripted/model",
           "provider": "openai", "version": 2}
_USER = "01a231ff-4028-7701-806b-cac0819614b7"
_STARTED = [
    {"entry": {"message": {"content": "Say hello.", "role": "user"}, "type": "message"}, "id": _USER,
     "kind": "entry", "seq": 1, "timestamp": 1796135141416},
    {"id": "01a231ff-4028-7701-806b-cac1d820d675", "kind": "record",
     "record": {"inputEntryId": _USER, "operationId": "01a231ff-4028-7701-806b-cac200bf34b1", "operationKind": "run",
                "type": "runStarted"}, "seq": 2, "timestamp": 1796135141416},
]


def _line(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode() + b"\n"


LOG = _line(_HEADER) + _line(_STARTED)
CURRENT = {"configurationDigest": "sha256:" + "0" * 64, "environmentIdentity": "chaos:preflight", "tools": []}


def planner_problem(target: Any) -> str | None:
    """One line saying why the foreign planner command of ``target`` (``chaos.target.Target``) gave no plan for a
    run that has just started; None when it gave a well-formed one, or when the target has no such command."""
    command, where = target.planner_command, target.planner_dir
    if not command:
        return None
    name = f"planner command {command!r}" + (f" (run in {where})" if where else "")
    if where and not os.path.isdir(where):
        return f"{name}: its directory " + ("does not exist" if not os.path.exists(where) else "is not a directory")
    try:
        argv = target.planner_argv()
    except ValueError as exc:  # shlex: an unterminated quote (a file read back; a command line is checked earlier)
        return f"{name}: cannot be split into words: {exc}"
    env = planner_environment(target)
    timeout = planner_timeout(env)
    if timeout is None:
        return f"{name}: AGENT_PLANNER_TIMEOUT={env['AGENT_PLANNER_TIMEOUT']!r} is not a positive number of seconds"
    with tempfile.TemporaryDirectory(prefix="killpoint-preflight-") as empty:
        plan, failure = ask_plan(argv, LOG, CURRENT, env, timeout=timeout, cwd=where or empty)
    if failure is None:
        problem = plan_problem(plan)
        failure = f"an answer that is not a plan ({problem})" if problem is not None else None
    if failure is None:
        return None
    bound = ""
    if "timed out after" in failure:  # ask_plan's words for a timeout: say where the bound came from
        bound = (f"; the bound of {timeout:g} s is --planner-timeout, else the target file's or this environment's "
                 f"AGENT_PLANNER_TIMEOUT, else the agent's {AGENT_PLANNER_SECONDS:g} s")
    return f"{name} gave {failure} for a run that has just started (SPEC §14.4 P2){bound}"
