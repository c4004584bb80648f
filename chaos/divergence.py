"""First divergence: the implementation's recovery plan beside the reference planner's, for the same durable state.

What it is for. A failing case says *that* an invariant broke; an engineer wants the defect class. For a target that
writes the session contract, every restart began with one recovery decision on a durable state the harness kept
(the log as the restart found it) under a known CurrentConfiguration. Asking the implementation's planner (its
``plan`` command, or the foreign ``--planner-cmd``) and the reference planner (``agent.session.planner``) for that
decision, kill by kill, finds the first state where they disagree, e.g.

    reference P5.2 finish completed; implementation startTool read#0 of an earlier assistant message

which names the rule the implementation should have followed and what it did instead. Failures are deduplicated
by (reference rule, this signature), so two cases that broke different invariants through the same wrong decision
are one finding.

Pure core (``describe_plan``, ``describe_divergence``, ``compare``) over plans and states — one vocabulary, also
used by ``chaos conformance``; ``first_divergence`` runs the implementation's ``plan`` command as a real subprocess
per kill (failing cases only: a few per campaign). Not here: judging (``chaos.oracle``), conformance over a corpus
(``chaos.conformance``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from chaos.process import run_bounded

PLAN_TIMEOUT = 30.0  # seconds for one `plan` of a target's own plan template (a planner command: the agent's bound)
# The CurrentConfiguration members of SPEC §8.7 (the harness's copy also carries `snapshot`, which `plan` refuses).
CURRENT_KEYS = ("configurationDigest", "environmentIdentity", "tools")


def entry_kinds(data: bytes) -> dict[str, str]:
    """Entry/record id → what it is (``assistant``, ``user``, ``tool``, ``compaction`` or a record type), read from
    the committed lines of a log; lenient (a line that is not JSON is skipped). Pure."""
    out: dict[str, str] = {}
    end = data.rfind(b"\n")
    for raw in data[: end + 1].split(b"\n")[1:]:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: a line nested deeper than json parses
            continue
        for fact in value if isinstance(value, list) else [value]:
            if not isinstance(fact, dict) or not isinstance(fact.get("id"), str):
                continue
            if fact.get("kind") == "entry" and isinstance(fact.get("entry"), dict):
                entry = fact["entry"]
                message = entry.get("message")
                role = message.get("role") if isinstance(message, dict) else None
                out[fact["id"]] = role if entry.get("type") == "message" and role else str(entry.get("type"))
            elif fact.get("kind") == "record" and isinstance(fact.get("record"), dict):
                out[fact["id"]] = str(fact["record"].get("type"))
    return out


def _current_assistant_id(state: Mapping[str, Any]) -> str | None:
    op = state.get("operation") or {}
    step = op.get("step") or {}
    if op.get("kind") == "run" and step.get("status") == "settled":
        return step.get("settledEntryId")
    return None


def _relation(state: Mapping[str, Any], entry_id: Any, entries: Mapping[str, str] | None) -> str:
    """'' when ``entry_id`` is the current (last) assistant message, else what it is: ' of an earlier assistant
    message', ' of a user message', ' of an unknown entry' …"""
    if not isinstance(entry_id, str):
        return " without an entry id"
    if entry_id == _current_assistant_id(state):
        return ""
    op = state.get("operation") or {}
    earlier = {t.get("assistantEntryId") for t in op.get("toolCalls") or ()}
    kind = (entries or {}).get(entry_id)
    if kind == "assistant" or entry_id in earlier:
        return " of an earlier assistant message"
    if kind is not None:
        return f" of a {kind} entry" if kind not in ("user", "tool") else f" of a {kind} message"
    if _current_assistant_id(state) is None:
        return " with no settled assistant message"
    return " of an unknown entry" if entries is not None else " of another entry"


def _foreign_call(state: Mapping[str, Any], index: Any, name: Any) -> str:
    """', not a call of the current assistant message (it has none)' when the current assistant message (the last
    one of the transcript, SPEC §14.3 (a)) has no call ``index`` named ``name``: a stale call from an earlier turn."""
    transcript = state.get("transcript") or []
    current = next((m for m in reversed(transcript) if isinstance(m, Mapping) and m.get("role") == "assistant"), None)
    if current is None:
        return ""
    calls = current.get("tool_calls") or []
    if isinstance(index, int) and 0 <= index < len(calls) and (calls[index].get("function") or {}).get("name") == name:
        return ""
    count = {0: "none", 1: "one call"}.get(len(calls), f"{len(calls)} calls")
    return f", not a call of the current assistant message (it has {count})"


def describe_plan(state: Mapping[str, Any], plan: Any, *, entries: Mapping[str, str] | None = None) -> str:
    """A short, ID-free description of ``plan`` relative to ``state``: its type, tool name and index, whether it
    refers to the current (last) assistant message or an earlier one, the outcome of a finish, the reason of a
    blocked. ``entries`` (``entry_kinds`` of the log) lets it say what a foreign ID is. Pure; ``chaos conformance``
    and the campaign verdicts use the same words."""
    if not isinstance(plan, Mapping):
        return "no plan"
    kind = plan.get("type")
    if kind == "finish":
        outcome = plan.get("outcome")
        text = f"finish {outcome}"
        if outcome == "completed":
            if plan.get("completion") not in (None, "normal"):
                text += f" ({plan.get('completion')})"
            if "finalEntryId" not in plan:
                text += " (idle no-op)" if "completion" in plan else " without finalEntryId"
            elif (state.get("operation") or {}).get("kind") == "run":
                text += _relation(state, plan["finalEntryId"], entries).replace(" of ", " with the final entry of ")
        elif outcome == "failed":
            error = plan.get("error")
            text += f" {error.get('code')}" if isinstance(error, Mapping) else " (no error)"
        return text
    if kind == "startStep":
        text = f"startStep {plan.get('stepKind')} attempt {plan.get('attempt')}"
        boundary = getattr(state, "boundary", None)
        if plan.get("attempt") == 1 and boundary is not None and plan.get("contextThroughEntryId") != boundary:
            text += " citing an entry other than the context boundary"
        return text
    if kind == "startTool":
        mode = "" if plan.get("mode") in ("start", None) else f" ({plan.get('mode')})"
        where = _relation(state, plan.get("assistantEntryId"), entries)
        return (f"startTool {plan.get('toolName')}#{plan.get('toolIndex')}{mode}"
                + (where or _foreign_call(state, plan.get("toolIndex"), plan.get("toolName"))))
    if kind == "appendSynthetic":
        results = plan.get("results") if isinstance(plan.get("results"), list) else []
        parts = [f"{r.get('reason')} {r.get('toolName')}#{r.get('toolIndex')}" for r in results if isinstance(r, Mapping)]
        relations = {_relation(state, r.get("assistantEntryId"), entries)
                     or _foreign_call(state, r.get("toolIndex"), r.get("toolName"))
                     for r in results if isinstance(r, Mapping)}
        return "appendSynthetic " + (", ".join(parts) or "(no results)") + "".join(sorted(relations))
    if kind == "closeAttempt":
        error = plan.get("error")
        return "closeAttempt" + (f" {error.get('code')}" if isinstance(error, Mapping) else "")
    if kind == "blocked":
        return f"blocked {plan.get('reason')}"
    return f"{kind or 'unknown'} plan"


def describe_divergence(state: Mapping[str, Any], reference_plan: Mapping[str, Any], reference_rule: str,
                        implementation_plan: Any, *, entries: Mapping[str, str] | None = None) -> str:
    """``reference P5.2 finish completed; implementation startTool read#0 of an earlier assistant message``.

    When both plans read the same, the members that differ are named (``… (differs in arguments)``). Pure; the
    campaign verdicts use it too."""
    ref = describe_plan(state, reference_plan, entries=entries)
    imp = describe_plan(state, implementation_plan, entries=entries)
    if ref == imp and isinstance(implementation_plan, Mapping):
        members = sorted(k for k in set(reference_plan) | set(implementation_plan)
                         if _json(reference_plan.get(k)) != _json(implementation_plan.get(k)))
        imp += f" (differs in {', '.join(members)})" if members else ""
    return f"reference {reference_rule} {ref}; implementation {imp}"


def _json(value: Any) -> str:
    """A canonical text of a JSON value, for "which members differ" (``True`` and ``1`` are different JSON)."""
    return json.dumps(value, sort_keys=True)


@dataclass
class Divergence:
    """Where the implementation first decided otherwise than the reference planner."""

    kill: int  # 1-based: the n-th kill of the case
    fault: str
    reference_rule: str
    reference: Any
    implementation: Any  # the plan it printed, or None when it gave none
    failure: str | None  # why it gave none (exit code, not JSON, timeout)
    signature: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> Divergence | None:
        if not value:
            return None
        return cls(**{k: value.get(k) for k in cls.__dataclass_fields__})


def compare(state: Mapping, current: Mapping, implementation: Any, *, failure: str | None = None,
            kill: int = 1, fault: str = "", entries: Mapping[str, str] | None = None) -> Divergence | None:
    """The divergence of one decision, or None when the implementation's plan equals the reference plan."""
    from agent.session.planner import plan_recovery, plan_rule

    rule = plan_rule(state, current)
    reference = plan_recovery(state, current)
    if failure is None and _json(implementation) == _json(reference):
        return None
    if failure is not None:
        text = f"reference {rule} {describe_plan(state, reference, entries=entries)}; implementation {failure}"
    else:
        text = describe_divergence(state, reference, rule, implementation, entries=entries)
    return Divergence(kill, fault, rule, reference, implementation, failure, text)


def telling_line(stderr: str) -> str:
    """The line of a failed command's stderr that says why: the last one naming an error (a runtime's stack trace
    ends with its version or a frame, e.g. Node's ``Node.js v20``, below ``Error: Cannot find module …``), else the
    last line; "" when there is none."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    # A line that *starts* with an error's name (Error: …, ModuleNotFoundError: …, error: …, fatal: …), not a stack
    # frame that mentions one (Node's "at new NodeError (node:internal/errors…)").
    named = [line for line in lines if _ERROR_LINE.match(line) or "no such file" in line.lower()]
    return (named or lines or [""])[-1]


_ERROR_LINE = re.compile(r"^([\w.$]*(Error|Exception)|error|fatal)\b", re.IGNORECASE)


def planner_environment(target: Any) -> dict[str, str]:
    """The environment the implementation's planner of ``target`` is asked in: what the agent would give a foreign
    planner command (this process's, the target's, minus the checkpoint channel), and never the command itself (it
    *is* the planner asked)."""
    env = {**os.environ, **target.environment()}
    env.pop("CHAOS_CONTROL", None)
    env.pop("AGENT_PLANNER_CMD", None)
    return env


def planner_timeout(env: Mapping[str, str]) -> float | None:
    """Seconds the agent gives a planner command under ``env`` (its ``AGENT_PLANNER_TIMEOUT``, unset or empty: 30),
    or None where the agent would refuse the value (exit 2 at every launch): the harness asks the command within the
    same bound, so a plan the agent timed out on is not found in the harness's own question."""
    from chaos.target import AGENT_PLANNER_SECONDS, TIMEOUT_VAR, planner_seconds

    return planner_seconds(env[TIMEOUT_VAR]) if env.get(TIMEOUT_VAR) else AGENT_PLANNER_SECONDS


def ask_plan(argv_template: Sequence[str], log: bytes, current: Mapping, env: Mapping[str, str],
             timeout: float = PLAN_TIMEOUT, cwd: str | None = None) -> tuple[Any, str | None]:
    """Run ``CMD plan LOG CURRENT`` on these bytes (in ``cwd``: a foreign planner command runs where it was
    written, ``Target.planner_dir``); (the plan, None) or (None, why there is none)."""
    with tempfile.TemporaryDirectory(prefix="killpoint-plan-") as tmp:
        log_path, current_path = Path(tmp) / "session.jsonl", Path(tmp) / "current.json"
        log_path.write_bytes(log)
        current_path.write_text(json.dumps({k: current[k] for k in CURRENT_KEYS if k in current}), encoding="utf-8")
        argv = [w.replace("{log}", str(log_path)).replace("{current}", str(current_path)) for w in argv_template]
        try:
            proc = run_bounded(argv, env, timeout, cwd=cwd)
        except subprocess.TimeoutExpired:
            return None, f"no plan (`{shlex.join(argv[:3])}…` timed out after {timeout:g}s)"
        except OSError as exc:
            return None, f"no plan (`{argv[0]}` could not run: {exc.strerror or exc})"
    if proc.returncode != 0:
        why = telling_line(proc.stderr.decode(errors="replace"))
        return None, f"no plan (exit {proc.returncode}: {why[:200]})".replace(": )", ")")
    try:
        return json.loads(proc.stdout), None
    except ValueError:
        shown = proc.stdout[:60].decode(errors="replace")
        return None, f"no plan (its output is not JSON: {'nothing' if not shown else 'it starts ' + repr(shown)})"


def first_divergence(target: Any, evidence: Any) -> Divergence | None:
    """The first kill of ``evidence`` (``chaos.oracle.Evidence``) whose restart decision the implementation of
    ``target`` (``chaos.target.Target``) takes otherwise than the reference planner; None when every decision
    agrees, or when the target offers no ``plan`` command, or no restart configuration is known."""
    from agent.session.errors import CorruptionError
    from agent.session.reducer import reduce_session

    template = target.planner_argv()
    if not template or evidence is None:
        return None
    env = planner_environment(target)
    cwd = target.planner_dir if target.planner_command else None
    # The agent's bound for a foreign planner command (a refused value: every launch said so already, exit 2); a
    # target's own `plan` command is no agent's planner: the harness's own bound.
    timeout = (planner_timeout(env) or PLAN_TIMEOUT) if target.planner_command else PLAN_TIMEOUT
    for n, kill in enumerate(evidence.kills, start=1):
        after = [launch for launch in evidence.launches if launch.index > kill.launch]
        current = after[0].current if after else None
        if not kill.snapshot or not isinstance(current, Mapping):
            continue
        try:
            state = reduce_session(kill.snapshot)
        except CorruptionError:
            continue  # a prefix that does not reduce: log-reduces reports it with its own evidence
        plan, failure = ask_plan(template, kill.snapshot, current, env, timeout=timeout, cwd=cwd)
        try:
            found = compare(state, current, plan, failure=failure, kill=n, fault=kill.fault,
                            entries=entry_kinds(kill.snapshot))
        except ValueError:  # the reference planner cannot plan this state (PlannerInputError)
            continue
        if found is not None:
            return found
    return None
