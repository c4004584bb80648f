"""The shape of a RecoveryPlan (SPEC §14.2, ``schemas/recovery-plan.schema.json``), checked with the standard library.

What it is for. A plan that comes from outside the process — a foreign planner command (``agent.planner_cmd``) — is
checked against the spec's closed schema before the executor sees it (and the harness asks the same of a foreign
planner before it runs any case, ``chaos.preflight``: the shape is the contract's, so it lives in its package). A
value that is not a plan at all is the planner command's failure (exit 8), reported with the member that is wrong;
it must never reach the executor as a ``KeyError`` or a traceback.

Invariant it protects: ``plan_problem(value)`` is None exactly when ``value`` matches the schema: one of the six plan
types, its required members present, no other members, enums and types as written there. Integers follow SPEC §2.5/
§2.6: a JSON integer literal (``1``, not ``1.0``), and a boolean is never an integer.

What it does not do: judge whether a well-formed plan is right for the state. A plan naming an entry that does not
exist, or a call that is not pending, is executed as usual and refused by the materializer or the store (exit 70),
as a wrong plan of the bundled planner would be. Identifier formats are not checked here either (the schema does not
constrain them; the store does).
"""

from __future__ import annotations

from collections.abc import Mapping

PLAN_TYPES = ("finish", "startStep", "startTool", "appendSynthetic", "closeAttempt", "blocked")

# type -> (required members, optional members); every member's check is in _MEMBERS.
_PLANS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "finish": (("type", "outcome"), ("completion", "finalEntryId", "error")),
    "startStep": (("type", "stepKind", "attempt", "contextThroughEntryId"), ("stepId",)),
    "startTool": (("type", "mode", "assistantEntryId", "toolIndex", "toolName", "arguments"), ("toolStartedId",)),
    "appendSynthetic": (("type", "results"), ()),
    "closeAttempt": (("type", "error"), ()),
    "blocked": (("type", "reason"), ()),
}
_PRE_EXECUTION = ("assistantEntryId", "toolIndex", "toolCallId", "toolName", "reason", "content")
_INTERRUPTED = ("assistantEntryId", "toolIndex", "toolCallId", "toolName", "toolStartedId", "resultEntryId",
                "reason", "content")


def _string(value: object) -> str | None:
    return None if isinstance(value, str) else "must be a string"


def _object(value: object) -> str | None:
    return None if isinstance(value, Mapping) else "must be an object"


def _index(value: object) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return None if ok else "must be a non-negative integer"


def _one_of(*allowed: object):
    def check(value: object) -> str | None:
        # `type(value) is ...` keeps True from matching 1 and 1.0 from matching 1 (SPEC §2.5 integer literals).
        if any(type(value) is type(option) and value == option for option in allowed):
            return None
        return "must be one of " + ", ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in allowed)
    return check


_MEMBERS = {
    "outcome": _one_of("completed", "aborted", "failed"),
    "completion": _one_of("normal", "truncated"),
    "finalEntryId": _string,
    "error": _object,
    "stepKind": _one_of("assistant", "compaction"),
    "attempt": _one_of(1, 2),
    "stepId": _string,
    "contextThroughEntryId": _string,
    "mode": _one_of("start", "replay"),
    "assistantEntryId": _string,
    "toolIndex": _index,
    "toolStartedId": _string,
    "toolName": _string,
    "arguments": _object,
    "reason": _one_of("configuration_changed", "environment_changed", "replay_declaration_changed",
                      "attempts_exhausted"),
    "toolCallId": _string,
    "resultEntryId": _string,
    "content": _string,
}
_SYNTHETIC_MEMBERS = {
    **_MEMBERS,
    "reason": _one_of("invalidArguments", "unknownTool", "truncated", "aborted", "interrupted"),
}


def plan_problem(value: object) -> str | None:
    """None if ``value`` is a RecoveryPlan of SPEC §14.2; else what is wrong, naming the member (one short phrase)."""
    if not isinstance(value, Mapping):
        return "not a JSON object"
    kind = value.get("type")
    if not isinstance(kind, str) or kind not in _PLANS:
        return f"type {kind!r} is not a plan type ({', '.join(PLAN_TYPES)})"
    required, optional = _PLANS[kind]
    problem = _members(kind, value, required, optional, _MEMBERS, skip=("type", "results"))
    if problem or kind != "appendSynthetic":
        return problem
    results = value["results"]
    if not isinstance(results, list) or not results:
        return "appendSynthetic: results must be a non-empty array"
    for index, result in enumerate(results):
        where = f"appendSynthetic: results[{index}]"
        if not isinstance(result, Mapping):
            return f"{where} must be an object"
        # The two forms of §14.2 differ in their reason: "interrupted" has the started tool's ids, the others not.
        members = _INTERRUPTED if result.get("reason") == "interrupted" else _PRE_EXECUTION
        problem = _members(where, result, members, (), _SYNTHETIC_MEMBERS)
        if problem:
            return problem
    return None


def _members(where: str, value: Mapping, required, optional, checks, skip=()) -> str | None:
    for name in required:
        if name not in value:
            return f"{where}: required member {name!r} is missing"
    extra = sorted(set(value) - set(required) - set(optional), key=str)
    if extra:
        return f"{where}: unknown member {extra[0]!r}"
    for name in (*required, *optional):
        if name in value and name not in skip:
            problem = checks[name](value[name])
            if problem:
                return f"{where}: {name} {problem}"
    return None
