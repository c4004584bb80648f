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

Pure core (``describe_plan``, ``signature``, ``compare``) over plans and states; ``first_divergence`` runs the
implementation's ``plan`` command as a real subprocess per kill (failing cases only: a few per campaign).
Not here: judging (``chaos.oracle``), conformance over a corpus (``chaos.conformance``, which uses the same words).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PLAN_TIMEOUT = 30.0  # seconds for one `plan` of the implementation
# The CurrentConfiguration members of SPEC §8.7 (the harness's copy also carries `snapshot`, which `plan` refuses).
CURRENT_KEYS = ("configurationDigest", "environmentIdentity", "tools")


def describe_plan(state: Mapping | None, plan: Any) -> str:
    """A plan in a few words, relative to ``state`` (e.g. ``startTool read#0 of an earlier assistant message``)."""
    if not isinstance(plan, Mapping):
        return "no plan"
    kind = plan.get("type")
    if kind == "finish":
        words = f"finish {plan.get('outcome')}"
        if plan.get("completion") not in (None, "normal"):
            words += f" ({plan['completion']})"
        error = plan.get("error")
        if isinstance(error, Mapping) and error.get("code"):
            words += f" {error['code']}"
        return words
    if kind == "startStep":
        return f"startStep {plan.get('stepKind')} attempt {plan.get('attempt')}"
    if kind == "startTool":
        words = f"startTool {plan.get('toolName')}#{plan.get('toolIndex')}"
        if plan.get("mode") == "replay":
            words += " (replay)"
        where = _which_assistant(state, plan.get("assistantEntryId"))
        return words + (where or _foreign_call(state, plan.get("toolIndex"), plan.get("toolName")))
    if kind == "appendSynthetic":
        results = [r for r in plan.get("results") or () if isinstance(r, Mapping)]
        parts = [f"{r.get('reason')} {r.get('toolName')}#{r.get('toolIndex')}" for r in results]
        ids = {r.get("assistantEntryId") for r in results}
        where = _which_assistant(state, ids.pop()) if len(ids) == 1 else ""
        return "appendSynthetic " + ", ".join(parts) + where
    if kind == "closeAttempt":
        error = plan.get("error")
        return "closeAttempt" + (f" {error['code']}" if isinstance(error, Mapping) and error.get("code") else "")
    if kind == "blocked":
        return f"blocked {plan.get('reason')}"
    return f"{kind or 'unknown'} plan"


def _which_assistant(state: Mapping | None, entry_id: Any) -> str:
    """" of an earlier assistant message" when ``entry_id`` is not the current step's settled assistant entry."""
    step = ((state or {}).get("operation") or {}).get("step") or {}
    current = step.get("settledEntryId")
    if current is None or entry_id == current:
        return ""
    return " of an earlier assistant message"


def _foreign_call(state: Mapping | None, index: Any, name: Any) -> str:
    """", not a call of the current assistant message (it has none)" when the current assistant message (the last
    one of the transcript, SPEC §14.3 (a)) has no call ``index`` named ``name``: a stale call from an earlier turn."""
    transcript = (state or {}).get("transcript") or []
    current = next((m for m in reversed(transcript) if m.get("role") == "assistant"), None)
    if current is None:
        return ""
    calls = current.get("tool_calls") or []
    if isinstance(index, int) and 0 <= index < len(calls) and (calls[index].get("function") or {}).get("name") == name:
        return ""
    count = {0: "none", 1: "one call"}.get(len(calls), f"{len(calls)} calls")
    return f", not a call of the current assistant message (it has {count})"


def signature(state: Mapping | None, reference_rule: str, reference: Any, implementation: Any,
              failure: str | None = None) -> str:
    """``reference P5.2 finish completed; implementation startTool read#0 of an earlier assistant message``."""
    theirs = describe_plan(state, implementation) if failure is None else failure
    return f"reference {reference_rule} {describe_plan(state, reference)}; implementation {theirs}"


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
            kill: int = 1, fault: str = "") -> Divergence | None:
    """The divergence of one decision, or None when the implementation's plan equals the reference plan."""
    from agent.session.planner import plan_recovery, plan_rule

    rule = plan_rule(state, current)
    reference = plan_recovery(state, current)
    if failure is None and implementation == reference:
        return None
    return Divergence(kill, fault, rule, reference, implementation, failure,
                      signature(state, rule, reference, implementation, failure))


def ask_plan(argv_template: Sequence[str], log: bytes, current: Mapping, env: Mapping[str, str],
             timeout: float = PLAN_TIMEOUT) -> tuple[Any, str | None]:
    """Run ``CMD plan LOG CURRENT`` on these bytes; (the plan, None) or (None, why there is none)."""
    with tempfile.TemporaryDirectory(prefix="killpoint-plan-") as tmp:
        log_path, current_path = Path(tmp) / "session.jsonl", Path(tmp) / "current.json"
        log_path.write_bytes(log)
        current_path.write_text(json.dumps({k: current[k] for k in CURRENT_KEYS if k in current}), encoding="utf-8")
        argv = [w.replace("{log}", str(log_path)).replace("{current}", str(current_path)) for w in argv_template]
        try:
            proc = subprocess.run(argv, env=dict(env), capture_output=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        except subprocess.TimeoutExpired:
            return None, f"no plan (`{shlex.join(argv[:3])}…` timed out after {timeout:g}s)"
        except OSError as exc:
            return None, f"no plan (`{argv[0]}` could not run: {exc.strerror or exc})"
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return None, f"no plan (exit {proc.returncode}: {tail[0][:200]})".replace(": )", ")")
    try:
        return json.loads(proc.stdout), None
    except ValueError:
        return None, "no plan (its output is not JSON)"


def first_divergence(target: Any, evidence: Any) -> Divergence | None:
    """The first kill of ``evidence`` (``chaos.oracle.Evidence``) whose restart decision the implementation of
    ``target`` (``chaos.target.Target``) takes otherwise than the reference planner; None when every decision
    agrees, or when the target offers no ``plan`` command, or no restart configuration is known."""
    from agent.session.errors import CorruptionError
    from agent.session.reducer import reduce_session

    template = target.planner_argv()
    if not template or evidence is None:
        return None
    env = {**os.environ, **target.environment()}
    env.pop("CHAOS_CONTROL", None)
    env.pop("AGENT_PLANNER_CMD", None)  # asked directly: the command *is* the planner under test
    for n, kill in enumerate(evidence.kills, start=1):
        after = [launch for launch in evidence.launches if launch.index > kill.launch]
        current = after[0].current if after else None
        if not kill.snapshot or not isinstance(current, Mapping):
            continue
        try:
            state = reduce_session(kill.snapshot)
        except CorruptionError:
            continue  # a prefix that does not reduce: log-reduces reports it with its own evidence
        plan, failure = ask_plan(template, kill.snapshot, current, env)
        try:
            found = compare(state, current, plan, failure=failure, kill=n, fault=kill.fault)
        except ValueError:  # the reference planner cannot plan this state (PlannerInputError)
            continue
        if found is not None:
            return found
    return None
