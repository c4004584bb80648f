"""The pure recovery planner: (Reduction, CurrentConfiguration) -> the next safe action (SPEC §14).

What it is for. After a crash (and, because live and recovery are one machine, after every live commit too, SPEC
§15.1) the executor asks this module what to do next. The answer is one RecoveryPlan (§14.2): finish, startStep,
startTool, appendSynthetic, closeAttempt or blocked.

Invariant it protects: the convergence law (§14.5). From every well-formed prefix (§12) the plan's facts are
accepted by the reducer, a completed plan is never returned again, and repeated plan-and-execute reaches idle or
blocked in a bounded number of plans. Every rule of §14.4 is evaluated top-down in exactly the spec's order, in one
decision function (`_decide`) that returns both the rule id and the plan, so `plan_rule` and `plan_recovery` cannot
drift apart.

Where we deliberately differ from upstream (§16.1 a–i, §16.2 j–m) is marked at the line that does it: the current
assistant is the last assistant message (a), calls resolved by a pre-execution synthetic are read from the
transcript (b), truncated answers complete (c), replays check digests (d), pending before untouched (e), abort with
everything resolved finishes (f), dead-end answers fail with fixed errors (g), unknown means unknown to the
attempt's snapshot (h), Figure 5 gate order (i), strict argument parsing (j), the boundary is an input (k).

Known-bug switches. `bugs` re-introduces realistic planner defects, each a few lines behind one flag and off by
default, so the chaos harness can prove it detects them (issue [2/7]); `PLANNER_BUGS` lists their names.

What it does not do: no I/O, no clock, no ID allocation, no effects, no validation of the state (it trusts the
reducer's output), and no executor policy such as the step budget (issue [2/7] keeps that out of the planner).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from agent.errors import AgentError
from agent.session.framing import parse_arguments

PLANNER_BUGS: frozenset[str] = frozenset(
    {
        "stale-assistant-calls",
        "pre-exec-synthetic-repeat",
        "replay-never-tools",
        "unbounded-retry",
        "ignore-configuration-change",
        "replay-ignores-environment",
        "start-untouched-while-pending",
    }
)

# §5.6: fixed synthetic contents, part of the wire contract (byte for byte, never localized).
SYNTHETIC_CONTENT: dict[str, str] = {
    "invalidArguments": "Error: Tool arguments were invalid; the tool was not executed.",
    "unknownTool": "Error: Unknown tool; the tool was not executed.",
    "truncated": "Error: Tool call arguments were truncated by the model token limit; the tool was not executed.",
    "aborted": "Operation aborted before execution.",
    "interrupted": "Operation interrupted after execution status became unknown; the tool was not replayed.",
}

# §14.2: the fixed error objects of closeAttempt and of failed finishes.
ABORTED_ERROR = {"code": "aborted", "message": "Operation aborted"}
MODEL_ERROR = {"code": "model_error", "message": "provider request failed"}
TRUNCATED_RESPONSE_ERROR = {
    "code": "truncated_response",
    "message": "model response was cut off by the output token limit",
}
EMPTY_RESPONSE_ERROR = {"code": "empty_response", "message": "model returned an empty final answer"}

_FROM_STATE: Any = object()  # sentinel: "read the boundary from the state's out-of-band attribute"


class PlannerInputError(AgentError, ValueError):
    """The planner was given something that is not a reduction it can plan from (e.g. a bare dict without boundary)."""


def plan_recovery(
    state: Mapping,
    current: Mapping,
    *,
    boundary: str | None = _FROM_STATE,
    bugs: frozenset[str] = frozenset(),
) -> dict:
    """The next RecoveryPlan (§14.2) for `state` under `current`; `bugs` re-introduces known defects (default none)."""
    return _decide(state, current, _boundary_of(state, boundary), frozenset(bugs))[1]


def plan_rule(
    state: Mapping,
    current: Mapping,
    *,
    boundary: str | None = _FROM_STATE,
    bugs: frozenset[str] = frozenset(),
) -> str:
    """The id of the §14.4 rule that fires for `state` ("P0", "P1.1", …, "P7.3")."""
    return _decide(state, current, _boundary_of(state, boundary), frozenset(bugs))[0]


def _boundary_of(state: Mapping, boundary: str | None) -> str | None:
    # §10.4/§14.1: the boundary travels next to the exported state, never inside its JSON form.
    if boundary is _FROM_STATE:
        return getattr(state, "boundary", None)
    return boundary


# --------------------------------------------------------------------------------------------------------------
# The decision order, §14.4. One function, top-down, first rule wins.
# --------------------------------------------------------------------------------------------------------------


def _decide(state: Mapping, current: Mapping, boundary: str | None, bugs: frozenset[str]) -> tuple[str, dict]:
    unknown = bugs - PLANNER_BUGS
    if unknown:
        raise PlannerInputError(f"unknown planner bug switch(es): {', '.join(sorted(unknown))}")
    op = state["operation"]
    kind = op["kind"]

    # P0. Idle: the no-op finish (executing it appends nothing).
    if kind == "idle":
        return "P0", {"type": "finish", "outcome": "completed", "completion": "normal"}

    step = op.get("step")

    # P1. Abort wins over everything below, skipping every gate (Figure 5; P1 never blocks, §15.5).
    if op["abortRequested"]:
        if step is not None and step["status"] == "attempting":
            return "P1.1", {"type": "closeAttempt", "error": dict(ABORTED_ERROR)}
        if kind == "run" and step is not None and step["status"] == "settled":
            results = []
            for call in _classify(state, op, step, bugs):
                if call.status == "pending":
                    results.append(_interrupted(step, call))
                elif call.status == "untouched":
                    # Any stopReason: under abort even a `length` answer's calls resolve as `aborted`.
                    results.append(_pre_execution(step, call, "aborted"))
            if results:
                return "P1.2", {"type": "appendSynthetic", "results": results}
        # (f): every call already resolved (possibly by pre-execution synthetics) -> finish, never re-emit.
        return "P1.3", {"type": "finish", "outcome": "aborted"}

    # P2. No step yet: attempt 1 at the reducer's context boundary (k).
    if step is None:
        step_kind = "assistant" if kind == "run" else "compaction"
        return "P2", {
            "type": "startStep",
            "stepKind": step_kind,
            "attempt": 1,
            "contextThroughEntryId": _require_boundary(boundary),
        }

    status = step["status"]

    # P3. Attempting or failed: configuration gate, then environment gate, then retry / exhausted / failed (i).
    if status in ("attempting", "failed"):
        skip_digest_gate = "ignore-configuration-change" in bugs and status == "attempting"  # BUG switch
        if not skip_digest_gate and step["configurationDigest"] != current["configurationDigest"]:
            return "P3.1", _blocked("configuration_changed")
        if state["header"]["environmentIdentity"] != current["environmentIdentity"]:
            return "P3.2", _blocked("environment_changed")
        if status == "attempting" and step["attempt"] == 1:
            return "P3.3", _retry(step, 2)
        if status == "attempting":
            if "unbounded-retry" in bugs:  # BUG switch: the crash-unknown attempt is retried past attempt 2
                return "P3.4", _retry(step, step["attempt"] + 1)
            return "P3.4", _blocked("attempts_exhausted")
        return "P3.5", {"type": "finish", "outcome": "failed", "error": dict(MODEL_ERROR)}

    # P4. Settled compaction: finish with the reserved result entry.
    if kind == "compaction":
        return "P4", {"type": "finish", "outcome": "completed", "finalEntryId": op["resultEntryId"]}

    # From here: a run with a settled step and a current assistant A (§14.3).
    assistant = _current_assistant(state["transcript"])
    calls = _classify(state, op, step, bugs)
    stop_reason = step["stopReason"]
    if "stale-assistant-calls" in bugs and stop_reason == "stop" and any(c.status != "resolved" for c in calls):
        # BUG switch: upstream dispatches on the (stale) calls it found before looking at the stop reason.
        stop_reason = "toolUse"

    # P5. stop: a blank final answer is a dead end (g); otherwise complete normally.
    if stop_reason == "stop":
        if _blank(assistant.get("content")):
            return "P5.1", {"type": "finish", "outcome": "failed", "error": dict(EMPTY_RESPONSE_ERROR)}
        return "P5.2", {
            "type": "finish",
            "outcome": "completed",
            "completion": "normal",
            "finalEntryId": step["settledEntryId"],
        }

    # P6. length: no calls fails (g); unresolved calls get `truncated`; all resolved completes truncated (c).
    if stop_reason == "length":
        if not calls:
            return "P6.1", {"type": "finish", "outcome": "failed", "error": dict(TRUNCATED_RESPONSE_ERROR)}
        unresolved = [c for c in calls if c.status != "resolved"]
        if unresolved:
            # A `length` entry can never have a started tool, so every unresolved call is untouched.
            results = [_pre_execution(step, c, "truncated") for c in unresolved]
            return "P6.2", {"type": "appendSynthetic", "results": results}
        return "P6.3", {
            "type": "finish",
            "outcome": "completed",
            "completion": "truncated",
            "finalEntryId": step["settledEntryId"],
        }

    if stop_reason != "toolUse":
        raise PlannerInputError(f"settled step has an unknown stopReason {stop_reason!r}")

    snapshot_tools = {t["name"]: t for t in step["configurationSnapshot"]["tools"]}
    declared = {}
    for tool in current["tools"]:
        declared.setdefault(tool["name"], tool)

    # P7.1. Pending calls first, lowest index, before any untouched call is started (e).
    pending = [c for c in calls if c.status == "pending"]
    if "start-untouched-while-pending" in bugs and any(c.status == "untouched" for c in calls):
        # BUG switch: the rest of the batch is resumed ahead of the call whose outcome the crash made unknown.
        pending = []
    if pending:
        call = pending[0]
        started = call.started
        name = started["toolName"]
        safe = started["replay"] == "safe"
        skip_env_gate = "replay-ignores-environment" in bugs and safe  # BUG switch
        if not skip_env_gate and started["environmentIdentity"] != current["environmentIdentity"]:
            return "P7.1.1", _blocked("environment_changed")
        decl = declared.get(name)
        seen = snapshot_tools.get(name)
        if decl is None or seen is None or decl["definitionDigest"] != seen["definitionDigest"]:
            return "P7.1.2", _blocked("configuration_changed")
        if safe:
            if decl["replay"] != "safe" or decl["replayKey"] != started["replayKey"]:
                return "P7.1.3.1", _blocked("replay_declaration_changed")
            # (d): a replay re-sends the recorded arguments to the tool the attempt saw, under the same configuration.
            if step["configurationDigest"] != current["configurationDigest"]:
                return "P7.1.3.2", _blocked("configuration_changed")
            return "P7.1.3.3", _replay(step, call)
        if "replay-never-tools" in bugs:  # BUG switch: a never tool's unknown effect is re-run
            return "P7.1.4", _replay(step, call)
        return "P7.1.4", {"type": "appendSynthetic", "results": [_interrupted(step, call)]}

    # P7.2. Untouched calls, lowest index; unknownTool before invalidArguments.
    untouched = [c for c in calls if c.status == "untouched"]
    if untouched:
        call = untouched[0]
        name = call.name
        if name not in snapshot_tools:
            # (h): judged by the attempt's snapshot, even if the current configuration declares the name.
            return "P7.2.1", {"type": "appendSynthetic", "results": [_pre_execution(step, call, "unknownTool")]}
        arguments = parse_arguments(call.arguments_text)  # (j): strict JSON, finite numbers, depth <= 64
        if arguments is None:
            return "P7.2.2", {"type": "appendSynthetic", "results": [_pre_execution(step, call, "invalidArguments")]}
        decl = declared.get(name)
        if decl is None or decl["definitionDigest"] != snapshot_tools[name]["definitionDigest"]:
            # (l): the tool the model saw has been removed or changed since the attempt.
            return "P7.2.3", _blocked("configuration_changed")
        return "P7.2.4", {
            "type": "startTool",
            "mode": "start",
            "assistantEntryId": step["settledEntryId"],
            "toolIndex": call.index,
            "toolName": name,
            "arguments": arguments,
        }

    # P7.3. Every call resolved: the next step cites the boundary, which may be a pre-execution synthetic (k).
    return "P7.3", {
        "type": "startStep",
        "stepKind": "assistant",
        "attempt": 1,
        "contextThroughEntryId": _require_boundary(boundary),
    }


# --------------------------------------------------------------------------------------------------------------
# Derived notions, §14.3.
# --------------------------------------------------------------------------------------------------------------


class _Call:
    """One call of the current assistant A with its classification (§14.3)."""

    __slots__ = ("index", "call_id", "name", "arguments_text", "status", "started")

    def __init__(self, index: int, raw: Mapping, status: str, started: Mapping | None):
        self.index = index
        self.call_id = raw["id"]
        self.name = raw["function"]["name"]
        self.arguments_text = raw["function"]["arguments"]
        self.status = status  # "pending" | "resolved" | "untouched"
        self.started = started  # the ToolCallState T when one exists


def _last_assistant_index(transcript: list) -> int:
    for i in range(len(transcript) - 1, -1, -1):
        if transcript[i]["role"] == "assistant":
            return i
    raise PlannerInputError("a settled run step but no assistant message in the transcript")


def _current_assistant(transcript: list) -> Mapping:
    # (a): A is the LAST assistant message; it is always the current step's settled entry.
    return transcript[_last_assistant_index(transcript)]


def _classify(state: Mapping, op: Mapping, step: Mapping, bugs: frozenset[str]) -> list[_Call]:
    """A's calls in ascending index, each pending, resolved or untouched (§14.3)."""
    transcript = state["transcript"]
    a_index = _last_assistant_index(transcript)
    raw_calls = transcript[a_index].get("tool_calls") or []
    if "stale-assistant-calls" in bugs:  # BUG switch: the last assistant that EVER had tool_calls (upstream)
        for message in reversed(transcript):
            if message["role"] == "assistant" and message.get("tool_calls"):
                raw_calls = message["tool_calls"]
                break
    settled = step["settledEntryId"]
    started_by_index = {t["toolIndex"]: t for t in op.get("toolCalls", ()) if t["assistantEntryId"] == settled}
    # (b): a tool message after A resolves its call, which catches pre-execution synthetics (never in toolCalls).
    answered_after_a: set[str] = set()
    if "pre-exec-synthetic-repeat" not in bugs:  # BUG switch: upstream looked only at toolCalls
        answered_after_a = {m["tool_call_id"] for m in transcript[a_index + 1 :] if m["role"] == "tool"}
    out = []
    for index, raw in enumerate(raw_calls):
        started = started_by_index.get(index)
        if started is not None and started["status"] == "pending":
            status = "pending"
        elif (started is not None and started["status"] == "completed") or raw["id"] in answered_after_a:
            status = "resolved"
        else:
            status = "untouched"
        out.append(_Call(index, raw, status, started))
    return out


def _blank(content: object) -> bool:
    # §14.3: null, or nothing left after Python's str.strip() (the reducer uses the same predicate, §6.7).
    return content is None or (isinstance(content, str) and content.strip() == "")


def _require_boundary(boundary: str | None) -> str:
    if boundary is None:
        raise PlannerInputError(
            "the context boundary is required (SPEC §14.1): pass a Reduction from the reducer or boundary=..."
        )
    return boundary


# --------------------------------------------------------------------------------------------------------------
# Plan builders, exact §14.2 members.
# --------------------------------------------------------------------------------------------------------------


def _blocked(reason: str) -> dict:
    return {"type": "blocked", "reason": reason}


def _retry(step: Mapping, attempt: int) -> dict:
    # P3.3: same step, same context; the executor re-sends the same context (§15.2).
    return {
        "type": "startStep",
        "stepKind": step["stepKind"],
        "attempt": attempt,
        "stepId": step["stepId"],
        "contextThroughEntryId": step["contextThroughEntryId"],
    }


def _replay(step: Mapping, call: _Call) -> dict:
    started = call.started
    return {
        "type": "startTool",
        "mode": "replay",
        "assistantEntryId": step["settledEntryId"],
        "toolIndex": call.index,
        "toolStartedId": started["toolStartedId"],
        "toolName": started["toolName"],
        "arguments": copy.deepcopy(started["arguments"]),  # the recorded effective arguments, not the call text
    }


def _pre_execution(step: Mapping, call: _Call, reason: str) -> dict:
    return {
        "assistantEntryId": step["settledEntryId"],
        "toolIndex": call.index,
        "toolCallId": call.call_id,
        "toolName": call.name,
        "reason": reason,
        "content": SYNTHETIC_CONTENT[reason],
    }


def _interrupted(step: Mapping, call: _Call) -> dict:
    started = call.started
    return {
        "assistantEntryId": step["settledEntryId"],
        "toolIndex": call.index,
        "toolCallId": started["toolCallId"],
        "toolName": started["toolName"],
        "toolStartedId": started["toolStartedId"],
        "resultEntryId": started["resultEntryId"],
        "reason": "interrupted",
        "content": SYNTHETIC_CONTENT["interrupted"],
    }
