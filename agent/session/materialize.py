"""Plan materialisation: the facts a RecoveryPlan appends (SPEC §15.2), as pure data.

What it is for. The executor (live loop and `resume`, one machine, §15.1) asks the planner for a plan and asks this
module for the transactions that carry it out. It commits them through the store, which adds `seq` and `timestamp`
(§13.3); the facts built here carry everything else, with fresh IDs drawn from the `ids()` callable in a fixed
order (so a deterministic allocator gives deterministic facts).

Invariant it protects: acceptance (§14.5 law 1). For every plan the planner returns from a well-formed prefix, every
transaction built here is accepted by the reducer, and so are the outcome transactions built from a model answer or
a tool result. Values the plan or the state determines are copied, never invented (§15.1).

Two-transaction plans. `startStep` and `startTool start` append an intent and then an outcome, with the external
effect (the provider request, the tool run) in between. A crash between the two leaves only the intent, which is what
`transactions_for_plan(..., outcome=None)` returns. `startTool replay` writes no new intent (§15.2): without an
outcome it returns no transaction at all. The executor uses it like this::

    txns = transactions_for_plan(state, plan, current, store.allocate_id)     # [intent] (or [] for a replay)
    intent = store.commit(txns[0]) if txns else None                          # durable BEFORE the effect
    answer = ...                                                              # provider request / tool run
    store.commit(outcome_transaction(state, plan, intent, answer, store.allocate_id))

`transactions_for_plan(..., outcome=X)` returns both at once, [intent, outcome] (tests, simulation).

Outcome values (plain dicts; the helpers `assistant_answer`, `step_failure`, `compaction_summary`, `tool_result`
build them):

* startStep, assistant step, settled answer:
  ``{"message": {"role": "assistant", "content": str | None, "tool_calls"?: [{"id", "type": "function",
  "function": {"name", "arguments"}}]}, "stopReason": "stop" | "toolUse" | "length", "usage": USAGE | None}``
  -> ``[assistant entry, usage?]``. The stopReason is the §15.4 mapping; it is not re-derived here.
* startStep, compaction step, summary: ``{"summary": str, "usage": USAGE | None}``
  -> ``[compaction entry (id = resultEntryId), usage?]``.
* startStep, either kind, provider failure: ``{"error": {"code": str, "message": str}, "usage": USAGE | None}``
  -> ``[stepFailed, usage?]``.
* startTool (start or replay): ``{"content": str, "type": "success" | "error", "usage": USAGE | None}``
  -> ``[tool result entry (id = the reserved resultEntryId), usage?]``.

USAGE is ``{"input", "output", "cacheRead", "cacheWrite"}`` (missing counters count 0, §7 mapping). A usage fact is
omitted when the outcome has none, when a counter is not an integer in 0..2^53−1, or when it would overflow the
ledger: the writer never commits a transaction that the ledger rule rejects (§7 writer rules).

External text in outcomes (contents, call ids, names, argument texts, error strings, summaries) is sanitised here as
a last line of defence (§13.3 step 3): lone surrogates become U+FFFD, so a provider's ``"\\ud800"`` escape cannot make
the store reject the transaction.

Compaction success needs the `compactionStarted` ID lists, which the exported SessionState (§10) does not carry. They
are read from the reduction's out-of-band attribute ``compaction_started`` (the `compactionStarted` record of the
current operation, like ``.boundary`` not part of the JSON form); the retained messages are read from the transcript,
whose first |compacted| + |retained| messages are exactly those entries (§6.2 step 8).

What it does not do: no I/O, no commits, no clock, no decisions (the planner decides; a plan that the state cannot
support raises `MaterializeError`), no request building for the provider.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any

from agent.errors import AgentError

MAX_COUNTER = 2**53 - 1  # §2.6/§7: usage counters and ledger totals
USAGE_COUNTERS = ("input", "output", "cacheRead", "cacheWrite")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class MaterializeError(AgentError, ValueError):
    """A plan or outcome cannot be turned into facts (wrong outcome kind, missing declaration, missing state)."""


# --------------------------------------------------------------------------------------------------------------
# Outcome constructors (the executor's side of the contract).
# --------------------------------------------------------------------------------------------------------------


def assistant_answer(message: Mapping, stop_reason: str, usage: Mapping | None = None) -> dict:
    """The outcome of a settled assistant step: the message, its §15.4 stopReason and the model usage."""
    return {"message": dict(message), "stopReason": stop_reason, "usage": usage}


def step_failure(code: str, message: str, usage: Mapping | None = None) -> dict:
    """The outcome of a failed provider request (§15.4 live error codes), with usage when the provider sent some."""
    return {"error": {"code": code, "message": message}, "usage": usage}


def compaction_summary(summary: str, usage: Mapping | None = None) -> dict:
    """The outcome of a successful compaction step: the summary text (may be empty) and the model usage."""
    return {"summary": summary, "usage": usage}


def tool_result(content: str, *, error: bool = False, usage: Mapping | None = None) -> dict:
    """The outcome of running a tool: its output text, `error` when it failed or refused (§15.2), tool usage."""
    return {"content": content, "type": "error" if error else "success", "usage": usage}


# --------------------------------------------------------------------------------------------------------------
# The plan -> transactions mapping, §15.2.
# --------------------------------------------------------------------------------------------------------------


def transactions_for_plan(
    reduction: Mapping,
    plan: Mapping,
    current: Mapping,
    ids: Callable[[], str],
    *,
    outcome: object = None,
) -> list[list[dict]]:
    """The transactions (facts without seq/timestamp) that executing `plan` appends, in commit order (§15.2)."""
    kind = plan["type"]
    op = reduction["operation"]
    if kind == "blocked":
        return []  # §15.2: blocked appends nothing
    if kind == "finish":
        if op["kind"] == "idle":
            return []  # P0: the idle no-op appends nothing
        return [[_operation_finished(op, plan, ids)]]
    if kind == "closeAttempt":
        return [[_close_attempt(op, plan, ids)]]
    if kind == "appendSynthetic":
        return [_synthetics(op, plan, ids)]
    if kind == "startStep":
        intent = [_step_attempt(op, plan, current, ids)]
    elif kind == "startTool" and plan["mode"] == "start":
        intent = [_tool_started(reduction, op, plan, current, ids)]
    elif kind == "startTool" and plan["mode"] == "replay":
        intent = None  # §15.2: a replay writes no new toolStarted
    else:
        raise MaterializeError(f"unknown plan type {kind!r}")
    out = [intent] if intent is not None else []
    if outcome is not None:
        out.append(outcome_transaction(reduction, plan, intent, outcome, ids))
    return out


def outcome_transaction(
    reduction: Mapping,
    plan: Mapping,
    intent: list[dict] | None,
    outcome: object,
    ids: Callable[[], str],
) -> list[dict]:
    """The one outcome transaction of a startStep/startTool plan, after its `intent` (the committed intent facts;
    None for a replay). `reduction` may be the state before or after the intent: both carry what is needed."""
    if not isinstance(outcome, Mapping):
        raise MaterializeError("an outcome must be a mapping (see the module docstring)")
    op = reduction["operation"]
    if plan["type"] == "startStep":
        if not intent:
            raise MaterializeError("a startStep outcome needs its stepAttempt intent")
        return _step_outcome(reduction, op, plan, intent[0]["record"], outcome, ids)
    if plan["type"] == "startTool":
        if plan["mode"] == "start":
            if not intent:
                raise MaterializeError("a startTool start outcome needs its toolStarted intent")
            record = intent[0]
            started = dict(record["record"], toolStartedId=record["id"])
        else:
            started = _tool_call_state(op, plan["toolStartedId"])
        return _tool_outcome(reduction, op, started, outcome, ids)
    raise MaterializeError(f"plan {plan['type']!r} has no outcome")


# --------------------------------------------------------------------------------------------------------------
# Single-transaction plans.
# --------------------------------------------------------------------------------------------------------------


def _operation_finished(op: Mapping, plan: Mapping, ids: Callable[[], str]) -> dict:
    record = {
        "type": "operationFinished",
        "operationId": op["operationId"],
        "operationKind": op["kind"],
        "outcome": plan["outcome"],
    }
    # §15.2: copy exactly the optional members the plan has.
    for member in ("completion", "finalEntryId", "error"):
        if member in plan:
            record[member] = copy.deepcopy(plan[member])
    return {"kind": "record", "id": ids(), "record": record}


def _close_attempt(op: Mapping, plan: Mapping, ids: Callable[[], str]) -> dict:
    step = _step(op)
    return {
        "kind": "record",
        "id": ids(),
        "record": {
            "type": "stepFailed",
            "operationId": op["operationId"],
            "stepId": step["stepId"],
            "attemptId": step["attemptId"],
            "error": copy.deepcopy(plan["error"]),
        },
    }


def _synthetics(op: Mapping, plan: Mapping, ids: Callable[[], str]) -> list[dict]:
    # §15.2: all results in ONE transaction, in plan order (P1.2 and P6.2 may carry several).
    step_id = _step(op)["stepId"]
    facts = []
    for r in plan["results"]:
        message = {"role": "tool", "tool_call_id": r["toolCallId"], "content": r["content"]}
        result = {"type": "synthetic", "reason": r["reason"]}
        if r["reason"] == "interrupted":
            # §5.4: the started-tool variant consumes the tool's reserved resultEntryId.
            entry = {
                "type": "message",
                "stepId": step_id,
                "toolStartedId": r["toolStartedId"],
                "toolName": r["toolName"],
                "message": message,
                "result": result,
            }
            facts.append({"kind": "entry", "id": r["resultEntryId"], "entry": entry})
        else:
            # §5.5: the pre-execution variant is an ordinary new ID.
            entry = {
                "type": "message",
                "stepId": step_id,
                "assistantEntryId": r["assistantEntryId"],
                "toolIndex": r["toolIndex"],
                "toolName": r["toolName"],
                "message": message,
                "result": result,
            }
            facts.append({"kind": "entry", "id": ids(), "entry": entry})
    return facts


# --------------------------------------------------------------------------------------------------------------
# Intents.
# --------------------------------------------------------------------------------------------------------------


def _step_attempt(op: Mapping, plan: Mapping, current: Mapping, ids: Callable[[], str]) -> dict:
    if "snapshot" not in current:
        raise MaterializeError("startStep needs current['snapshot'], the configurationSnapshot behind its digest")
    fact_id = ids()
    # §6.3/§15.2: attempt 1 reserves a NEW step id; attempt 2 names the existing step.
    step_id = ids() if plan["attempt"] == 1 else plan["stepId"]
    return {
        "kind": "record",
        "id": fact_id,
        "record": {
            "type": "stepAttempt",
            "operationId": op["operationId"],
            "stepId": step_id,
            "attemptId": ids(),
            "stepKind": plan["stepKind"],
            "attempt": plan["attempt"],
            "contextThroughEntryId": plan["contextThroughEntryId"],
            "configurationSnapshot": copy.deepcopy(current["snapshot"]),
            "configurationDigest": current["configurationDigest"],
        },
    }


def _tool_started(reduction: Mapping, op: Mapping, plan: Mapping, current: Mapping, ids: Callable[[], str]) -> dict:
    declaration = next((t for t in current["tools"] if t["name"] == plan["toolName"]), None)
    if declaration is None:
        # P7.2.3 blocks before this can happen; a plan without a declaration is not executable.
        raise MaterializeError(f"no current declaration for tool {plan['toolName']!r}")
    call = _call_of(reduction["transcript"], plan["toolIndex"])
    fact_id = ids()
    return {
        "kind": "record",
        "id": fact_id,
        "record": {
            "type": "toolStarted",
            "operationId": op["operationId"],
            "stepId": _step(op)["stepId"],
            "assistantEntryId": plan["assistantEntryId"],
            "toolIndex": plan["toolIndex"],
            "toolCallId": call["id"],
            "toolName": plan["toolName"],
            "arguments": copy.deepcopy(plan["arguments"]),
            # §8.6/§12: replay and replayKey are copied from the declaration in force when the intent is written.
            "replay": declaration["replay"],
            "replayKey": declaration["replayKey"],
            "environmentIdentity": current["environmentIdentity"],
            "resultEntryId": ids(),
        },
    }


# --------------------------------------------------------------------------------------------------------------
# Outcomes.
# --------------------------------------------------------------------------------------------------------------


def _step_outcome(
    reduction: Mapping, op: Mapping, plan: Mapping, attempt: Mapping, outcome: Mapping, ids: Callable[[], str]
) -> list[dict]:
    operation_id = op["operationId"]
    if "error" in outcome:
        error = outcome["error"]
        if not isinstance(error, Mapping) or not _nonempty(error.get("code")) or not _nonempty(error.get("message")):
            raise MaterializeError("a step failure needs error.code and error.message, non-empty strings")
        fact = {
            "kind": "record",
            "id": ids(),
            "record": {
                "type": "stepFailed",
                "operationId": operation_id,
                "stepId": attempt["stepId"],
                "attemptId": attempt["attemptId"],
                "error": {"code": _clean(error["code"]), "message": _clean(error["message"])},
            },
        }
    elif plan["stepKind"] == "assistant" and "message" in outcome:
        stop_reason = outcome.get("stopReason")
        if stop_reason not in ("stop", "toolUse", "length"):
            raise MaterializeError(f"an assistant answer needs stopReason stop|toolUse|length, not {stop_reason!r}")
        fact = {
            "kind": "entry",
            "id": ids(),
            "entry": {
                "type": "message",
                "stepId": attempt["stepId"],
                "attemptId": attempt["attemptId"],
                "stopReason": stop_reason,
                "message": _assistant_message(outcome["message"]),
            },
        }
    elif plan["stepKind"] == "compaction" and "summary" in outcome:
        fact = _compaction_entry(reduction, op, outcome)
    else:
        raise MaterializeError(f"outcome does not fit a {plan['stepKind']} step (see the module docstring)")
    facts = [fact]
    usage = _usage_fact(reduction, outcome, ids, operation_id, "attemptId", attempt["attemptId"])
    if usage is not None:
        facts.append(usage)  # §7: model usage goes in the same transaction as the attempt's outcome
    return facts


def _compaction_entry(reduction: Mapping, op: Mapping, outcome: Mapping) -> dict:
    started = getattr(reduction, "compaction_started", None)
    if not started or started.get("operationId") != op["operationId"]:
        raise MaterializeError(
            "compaction success needs the current compactionStarted record (reduction.compaction_started)"
        )
    compacted = list(started["compactedEntryIds"])
    retained = list(started["retainedEntryIds"])
    transcript = reduction["transcript"]
    # §6.2 step 8: compacted + retained is exactly the ordered list of message entries through inputThroughEntryId,
    # and the transcript holds every message entry in commit order, so position k of that list is transcript[k].
    tail = [
        {"sourceEntryId": entry_id, "message": copy.deepcopy(transcript[len(compacted) + k])}
        for k, entry_id in enumerate(retained)
    ]
    summary = outcome["summary"]
    if not isinstance(summary, str):
        raise MaterializeError("a compaction summary must be a string")
    return {
        "kind": "entry",
        "id": op["resultEntryId"],  # §5.7: consumes the compaction-result reservation
        "entry": {
            "type": "compaction",
            "operationId": op["operationId"],
            "summary": _clean(summary),
            # §12 writer obligation: the last compacted entry, and the retained IDs with their stored messages.
            "compactedThroughEntryId": compacted[-1],
            "retainedTail": tail,
        },
    }


def _tool_outcome(
    reduction: Mapping, op: Mapping, started: Mapping, outcome: Mapping, ids: Callable[[], str]
) -> list[dict]:
    result_type = outcome.get("type")
    content = outcome.get("content")
    if result_type not in ("success", "error") or not isinstance(content, str):
        raise MaterializeError("a tool result needs content (str) and type success|error")
    facts = [
        {
            "kind": "entry",
            "id": started["resultEntryId"],  # §5.4: consumes the tool-result reservation
            "entry": {
                "type": "message",
                "stepId": started["stepId"],
                "toolStartedId": started["toolStartedId"],
                "toolName": started["toolName"],
                "message": {"role": "tool", "tool_call_id": started["toolCallId"], "content": _clean(content)},
                "result": {"type": result_type},
            },
        }
    ]
    usage = _usage_fact(reduction, outcome, ids, op["operationId"], "toolStartedId", started["toolStartedId"])
    if usage is not None:
        facts.append(usage)
    return facts


def _usage_fact(
    reduction: Mapping, outcome: Mapping, ids: Callable[[], str], operation_id: str, owner: str, owner_id: str
) -> dict | None:
    usage = outcome.get("usage")
    if usage is None or not isinstance(usage, Mapping) or set(usage) - set(USAGE_COUNTERS):
        return None
    counters = {}
    ledger = reduction["usage"]
    for name in USAGE_COUNTERS:
        value = usage.get(name, 0)
        if type(value) is not int or not 0 <= value <= MAX_COUNTER:
            return None
        # §7 writer rule: a fact that would overflow the ledger is omitted, never committed and rejected.
        if ledger[name] + value > MAX_COUNTER:
            return None
        counters[name] = value
    return {"kind": "usage", "id": ids(), "operationId": operation_id, owner: owner_id, "usage": counters}


# --------------------------------------------------------------------------------------------------------------
# Small helpers.
# --------------------------------------------------------------------------------------------------------------


def _step(op: Mapping) -> Mapping:
    step = op.get("step")
    if step is None:
        raise MaterializeError("the plan needs a current step, and the operation has none")
    return step


def _tool_call_state(op: Mapping, tool_started_id: str) -> Mapping:
    for item in op.get("toolCalls", ()):
        if item["toolStartedId"] == tool_started_id:
            return item
    raise MaterializeError(f"no started tool {tool_started_id} in the current operation")


def _call_of(transcript: list, index: int) -> Mapping:
    """Call `index` of the assistant message the plan refers to.

    For every correct plan that is A, the last assistant message (§14.3). A plan built from stale calls (the
    `stale-assistant-calls` defect) refers to an older message: the call is taken from the latest assistant that has
    one at `index`, exactly the value upstream would write, and the reducer rejects the resulting `toolStarted`.
    """
    for message in reversed(transcript):
        if message["role"] == "assistant":
            calls = message.get("tool_calls") or []
            if index < len(calls):
                return calls[index]
    raise MaterializeError(f"no assistant message has a tool call at index {index}")


def _assistant_message(message: object) -> dict:
    # §5.1/§15.4: content MUST be present (null allowed); tool_calls only when non-empty; each call exactly
    # {id, type:"function", function:{name, arguments}}.
    if not isinstance(message, Mapping):
        raise MaterializeError("an assistant answer's message must be a mapping")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise MaterializeError("assistant content must be a string or None")
    out: dict[str, Any] = {"role": "assistant", "content": None if content is None else _clean(content)}
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            {
                "id": _clean(call["id"]),
                "type": "function",
                "function": {
                    "name": _clean(call["function"]["name"]),
                    "arguments": _clean(call["function"]["arguments"]),
                },
            }
            for call in calls
        ]
    return out


def _nonempty(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _clean(text: str) -> str:
    # §13.3 step 3: JSON escapes can deliver lone surrogates; they cannot be written as UTF-8, so replace them.
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)
