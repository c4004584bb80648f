"""The convergence law (SPEC §14.5) over well-formed prefixes (§12): plan -> materialise -> reduce, repeatedly.

A small simulated executor (`drive`) plays the agent: it plans, materialises the plan (§15.2), commits each
transaction by serialising it and applying it to the real incremental `Reducer` (rejection = `CorruptionError` =
failure), and supplies the live outcomes from a stub model and stub tools. A crash is simulated by committing only
the intent of `startStep`/`startTool` (or nothing of a replay). Live inputs the planner does not decide (a new run or
compaction from idle, an abort request, a configuration change across a restart) are injected between plans.

Checked at every step, independently of the planner's code:

* acceptance: every materialised transaction and every live outcome is accepted by the reducer;
* no repetition: a plan whose facts were all appended is never returned again for the same operation;
* progress: Φ = a + 2u + p + t strictly decreases with every completed plan other than startStep (and by exactly 1
  when a crash cuts a tool start after its intent); per step at most 2k + 3 plans append something;
* closure: every prefix reached is well-formed;
* replay safety: a replay only ever re-runs a safe tool recorded in the current environment under the same
  configuration and definition (what P7.1 guarantees; two bug switches break exactly this);
* pending first: no untouched call of an answer starts while one of its calls is pending (P7.1);
* termination: idle or blocked within a bound; `blocked` is a fixed point; the final bytes reduce to the same state.

Inputs: every transaction-boundary prefix of every valid corpus fixture (deduplicated by bytes) under several current
configurations and crash/abort policies, and Hypothesis-generated sessions. The known-bug switches make `drive` fail.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.session.digests import configuration_digest, source_digest
from agent.session.errors import CorruptionError
from agent.session.framing import committed_lines, parse_line
from agent.session.ids import allocate_id
from agent.session.materialize import (
    assistant_answer,
    compaction_summary,
    outcome_transaction,
    step_failure,
    tool_result,
    transactions_for_plan,
)
from agent.session.planner import PLANNER_BUGS, plan_recovery, plan_rule
from agent.session.reducer import Reducer, reduce_session
from tests.conftest import CORPUS, reducer_manifest

ZERO = "sha256:" + "0" * 64
TOOL_DIGEST = {"read": ZERO, "bash": "sha256:" + "b" * 64}
DECLARATION = {
    "read": {"replay": "safe", "replayKey": "builtin:read:v1"},
    "bash": {"replay": "never", "replayKey": "builtin:bash:v1"},
}
MAX_PLANS = 400


# --------------------------------------------------------------------------------------------------------------
# Current configurations (§8.7) with the snapshot behind their digest (§15.2 CUR).
# --------------------------------------------------------------------------------------------------------------


def make_current(
    *,
    model: str = "test/model",
    adapter: str = "openrouter:chat-completions:v1",
    tools: tuple[str, ...] = ("read",),
    definitions: dict | None = None,
    declarations: dict | None = None,
    env: str = "fixture",
) -> dict:
    """A CurrentConfiguration plus `snapshot`; the defaults reproduce the corpus snapshot (digest 83d5…5f75)."""
    definitions = {**TOOL_DIGEST, **(definitions or {})}
    declarations = {**DECLARATION, **(declarations or {})}
    snapshot = {
        "model": model,
        "systemPromptDigest": ZERO,
        "tools": [{"name": name, "definitionDigest": definitions[name]} for name in tools],
        "adapterIdentity": adapter,
        "routingIdentity": f"openrouter:{model}",
        "outputOptionsDigest": ZERO,
    }
    return {
        "configurationDigest": configuration_digest(snapshot),
        "environmentIdentity": env,
        "tools": [{"name": n, "definitionDigest": definitions[n], **declarations[n]} for n in tools],
        "snapshot": snapshot,
    }


FIXTURE_BASE = make_current()
FIXTURE_CURRENTS = {
    "base": FIXTURE_BASE,
    "model-changed": make_current(model="other/model"),
    "environment-moved": make_current(env="moved"),
    "read-not-replayable": make_current(declarations={"read": {"replay": "never", "replayKey": "builtin:read:v1"}}),
    "read-redefined": make_current(definitions={"read": "sha256:" + "c" * 64}),
}
GEN_BASE = make_current(tools=("read", "bash"), env="env-a")
GEN_VARIANTS = [
    GEN_BASE,
    make_current(tools=("read", "bash"), env="env-a", model="other/model"),
    make_current(tools=("read", "bash"), env="env-a", definitions={"read": "sha256:" + "c" * 64}),
    make_current(tools=("read",), env="env-a"),
    make_current(tools=("read", "bash"), env="env-a",
                 declarations={"read": {"replay": "safe", "replayKey": "builtin:read:v2"}}),
    make_current(tools=("read", "bash"), env="env-b"),
]


def test_fixture_base_matches_the_corpus_digest():
    """The stub configuration reproduces the corpus snapshot digest, so fixture steps can be retried under it."""
    assert FIXTURE_BASE["configurationDigest"] == (
        "sha256:83d5da8892d877c5f94a6ff60ea8babcd1138107dcb80ed8f747372346bb5f75")


# --------------------------------------------------------------------------------------------------------------
# The simulated log: bytes plus the real incremental reducer.
# --------------------------------------------------------------------------------------------------------------


class _Reduction(dict):
    """Fallback carrier of the out-of-band values when the reducer's Reduction cannot take an attribute."""

    boundary = None
    compaction_started = None


class Session:
    """A session log being appended to like the store does (§13.3), validated by the real reducer."""

    def __init__(self, data: bytes):
        lines, repaired = committed_lines(data)
        self.data = data[:repaired]
        self.reducer = Reducer()
        self.reducer.apply_header(parse_line(lines[0], 1), 1)
        self.message_ids: list[str] = []
        self.compaction_record: dict | None = None
        self.clock = 1_800_000_000_000
        for number, text in enumerate(lines[1:], start=2):
            value = parse_line(text, number)
            self.reducer.apply(value, number)
            self._track(value)

    @classmethod
    def new(cls, env: str) -> "Session":
        header = {"kind": "header", "version": 2, "id": allocate_id(), "createdAt": 1_800_000_000_000,
                  "cwd": "/work", "provider": "openrouter", "model": "test/model", "environmentIdentity": env}
        return cls(_line(header))

    def _track(self, value: object) -> None:
        for fact in value if isinstance(value, list) else [value]:
            if fact["kind"] == "entry" and fact["entry"]["type"] == "message":
                self.message_ids.append(fact["id"])
            elif fact["kind"] == "record" and fact["record"]["type"] == "compactionStarted":
                self.compaction_record = fact["record"]

    def commit(self, facts: list[dict]) -> list[dict]:
        """Add seq and timestamp, serialise, strictly re-parse and apply; a rejection raises CorruptionError."""
        seq = self.reducer.next_seq
        full = []
        for k, fact in enumerate(facts):
            self.clock += 1
            full.append(dict(fact, seq=seq + k, timestamp=self.clock))
        value = full[0] if len(full) == 1 else full
        line = self.reducer.next_line
        raw = _line(value)
        parsed = parse_line(raw[:-1].decode("utf-8"), line)
        self.reducer.apply(parsed, line)
        self.data += raw
        self._track(parsed)
        return full

    def state(self):
        reduction = self.reducer.export(len(self.data))
        op = reduction["operation"]
        if op["kind"] == "compaction" and getattr(reduction, "compaction_started", None) is None:
            try:
                reduction.compaction_started = self.compaction_record
            except AttributeError:
                carrier = _Reduction(reduction)
                carrier.boundary = reduction.boundary
                carrier.compaction_started = self.compaction_record
                reduction = carrier
        return reduction


def _line(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


# --------------------------------------------------------------------------------------------------------------
# Independent oracles: Φ, well-formedness, plan shape, replay safety.
# --------------------------------------------------------------------------------------------------------------


def call_states(state) -> list[str]:
    """Status of each call of the last assistant message: pending / resolved / untouched (§14.3, written anew)."""
    op, transcript = state["operation"], state["transcript"]
    step = op.get("step")
    if op["kind"] != "run" or step is None or step["status"] != "settled":
        return []
    last = max(i for i, m in enumerate(transcript) if m["role"] == "assistant")
    answered = {m["tool_call_id"] for m in transcript[last + 1:] if m["role"] == "tool"}
    started = {t["toolIndex"]: t["status"] for t in op["toolCalls"] if t["assistantEntryId"] == step["settledEntryId"]}
    out = []
    for index, call in enumerate(transcript[last].get("tool_calls") or []):
        if started.get(index) == "pending":
            out.append("pending")
        elif started.get(index) == "completed" or call["id"] in answered:
            out.append("resolved")
        else:
            out.append("untouched")
    return out


def phi(state) -> int:
    """Φ = a + 2u + p + t of §14.5 (0 when idle)."""
    op = state["operation"]
    if op["kind"] == "idle":
        return 0
    step = op.get("step")
    a = 1 if step is not None and step["status"] == "attempting" else 0
    calls = call_states(state)
    return a + 2 * calls.count("untouched") + calls.count("pending") + 1


def well_formed(state) -> bool:
    """§12: every unresolved call belongs to the settled entry of the current step of the current run."""
    transcript = state["transcript"]
    assistants = [i for i, m in enumerate(transcript) if m["role"] == "assistant"]
    if not assistants:
        return True
    last = assistants[-1]
    answered = {m["tool_call_id"] for m in transcript[last + 1:] if m["role"] == "tool"}
    unresolved = [c for c in transcript[last].get("tool_calls") or [] if c["id"] not in answered]
    if not unresolved:
        return True
    op = state["operation"]
    return op["kind"] == "run" and op.get("step", {}).get("status") == "settled"


PLAN_MEMBERS = {
    "finish": ({"type", "outcome"}, {"completion", "finalEntryId", "error"}),
    "startStep": ({"type", "stepKind", "attempt", "contextThroughEntryId"}, {"stepId"}),
    "startTool": ({"type", "mode", "assistantEntryId", "toolIndex", "toolName", "arguments"}, {"toolStartedId"}),
    "appendSynthetic": ({"type", "results"}, set()),
    "closeAttempt": ({"type", "error"}, set()),
    "blocked": ({"type", "reason"}, set()),
}


def check_plan_shape(plan: dict) -> None:
    """The plan has exactly the §14.2 members of its variant."""
    required, optional = PLAN_MEMBERS[plan["type"]]
    assert required <= set(plan) <= required | optional, plan
    if plan["type"] == "startStep":
        assert plan["attempt"] in (1, 2) and ("stepId" in plan) == (plan["attempt"] == 2), plan


def check_replay_safety(state, plan: dict, current: dict) -> None:
    """A replay re-runs only a safe tool, in the recorded environment, the same configuration and definition."""
    if plan["type"] != "startTool" or plan["mode"] != "replay":
        return
    op = state["operation"]
    started = next(t for t in op["toolCalls"] if t["toolStartedId"] == plan["toolStartedId"])
    seen = {t["name"]: t for t in op["step"]["configurationSnapshot"]["tools"]}[started["toolName"]]
    declared = {t["name"]: t for t in current["tools"]}[started["toolName"]]
    assert started["replay"] == "safe", "a never tool was replayed"
    assert started["environmentIdentity"] == current["environmentIdentity"], "replayed in another environment"
    assert op["step"]["configurationDigest"] == current["configurationDigest"], "replayed under another configuration"
    assert (declared["definitionDigest"], declared["replay"], declared["replayKey"]) == (
        seen["definitionDigest"], "safe", started["replayKey"]), "replayed a changed tool"


def check_pending_first(state, plan: dict) -> None:
    """No untouched call of the current answer starts while one of its calls is pending (§14.4 P7.1)."""
    if plan["type"] != "startTool" or plan["mode"] != "start":
        return
    pending = [t["toolIndex"] for t in state["operation"]["toolCalls"]
               if t["status"] == "pending" and t["assistantEntryId"] == plan["assistantEntryId"]]
    assert not pending, f"call {plan['toolIndex']} started while call(s) {pending} of its answer are pending"


# --------------------------------------------------------------------------------------------------------------
# Choosers: what the model, the tools, crashes and the operator do. Fixed policies or Hypothesis draws.
# --------------------------------------------------------------------------------------------------------------


def message(content=None, calls=()) -> dict:
    out = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)
        ]
    return out


MIXED_CALLS = [("read", '{"path":"README.md"}'), ("bash", '{"command":"true"}'), ("missing", "{}"), ("read", "null")]


class FixedChooser:
    """A deterministic policy for the corpus sweep: 'plain', 'crash' (cut every two-transaction plan up to a budget)
    or 'abort' (request an abort as soon as an operation is open)."""

    def __init__(self, policy: str):
        self.policy = policy
        self.crashes = 3 if policy == "crash" else 0
        self.steps = 0
        self.compacted = False

    def request_abort(self, session) -> bool:
        return self.policy == "abort"

    def change_config(self, current):
        return None

    def model_answer(self, step_kind: str):
        self.steps += 1
        if step_kind == "compaction":
            return compaction_summary("summary of earlier turns", {"input": 5, "output": 1})
        script = [
            assistant_answer(message(calls=MIXED_CALLS), "toolUse", {"input": 10, "output": 3}),
            assistant_answer(message("partial", [("read", '{"path":')]), "length"),
        ]
        if self.steps <= len(script) and self.policy != "abort":
            return script[self.steps - 1]
        return assistant_answer(message("done"), "stop")

    def tool_output(self, plan):
        return tool_result(f"output of {plan['toolName']}")

    def crash_intent(self) -> bool:
        self.crashes -= 1
        return self.crashes >= 0

    def crash_replay(self) -> bool:
        return self.crash_intent()

    def after_blocked(self, restored: bool) -> str:
        return "abort" if self.policy == "crash" else "stop"

    def after_idle(self, session) -> str:
        # One compaction from each reached idle state exercises §15.2 compaction materialisation on real history.
        if self.policy == "plain" and not self.compacted:
            self.compacted = True
            return "compact"
        return "stop"


class DataChooser:
    """Hypothesis draws every live decision; budgets keep each generated session finite."""

    def __init__(self, data):
        self.data = data
        self.crashes = 4
        self.config_changes = 3
        self.operations = 0
        self.steps_in_run = 0

    def draw(self, strategy, label):
        return self.data.draw(strategy, label=label)

    def request_abort(self, session) -> bool:
        return self.draw(st.integers(0, 9), "abort?") == 0

    def change_config(self, current):
        if self.config_changes and self.draw(st.integers(0, 4), "change config?") == 0:
            self.config_changes -= 1
            return self.draw(st.sampled_from(GEN_VARIANTS), "new config")
        return None

    def model_answer(self, step_kind: str):
        usage = self.draw(st.none() | st.fixed_dictionaries({"input": st.integers(0, 100)}), "usage")
        if self.draw(st.integers(0, 9), "provider fails?") == 0:
            return step_failure("server_error", "HTTP 503", usage)
        if step_kind == "compaction":
            return compaction_summary(self.draw(st.sampled_from(["", "summary"]), "summary"), usage)
        self.steps_in_run += 1
        kinds = ["stop", "blank", "length", "length-calls", "tools", "tools", "tools"]
        kind = "stop" if self.steps_in_run > 4 else self.draw(st.sampled_from(kinds), "answer")
        call = st.sampled_from(
            [("read", '{"path":"a"}'), ("bash", '{"command":"x"}'), ("missing", "{}"), ("read", '{"path":'),
             ("bash", "[]"), ("read", '{"a":1,"a":2}')])
        if kind == "stop":
            return assistant_answer(message("done"), "stop", usage)
        if kind == "blank":
            return assistant_answer(message(self.draw(st.sampled_from([None, "", " \n"]), "blank")), "stop", usage)
        if kind == "length":
            return assistant_answer(message("cut"), "length", usage)
        calls = self.draw(st.lists(call, min_size=1, max_size=3), "calls")
        return assistant_answer(message(None, calls), "length" if kind == "length-calls" else "toolUse", usage)

    def tool_output(self, plan):
        error = self.draw(st.booleans(), "tool error?")
        usage = self.draw(st.none() | st.just({"output": 1}), "tool usage")
        return tool_result("out\ud800put", error=error, usage=usage)  # a lone surrogate to be sanitised

    def crash_intent(self) -> bool:
        if self.crashes and self.draw(st.integers(0, 3), "crash?") == 0:
            self.crashes -= 1
            return True
        return False

    def crash_replay(self) -> bool:
        return self.crash_intent()

    def after_blocked(self, restored: bool) -> str:
        options = ["stop", "abort"] if restored else ["stop", "abort", "restore"]
        return self.draw(st.sampled_from(options), "blocked -> ")

    def after_idle(self, session) -> str:
        if self.operations >= 3:
            return "stop"
        self.operations += 1
        self.steps_in_run = 0
        return self.draw(st.sampled_from(["run", "run", "compact", "stop"]), "next operation")


# --------------------------------------------------------------------------------------------------------------
# The driver.
# --------------------------------------------------------------------------------------------------------------


def start_run(session: Session) -> None:
    user = allocate_id()
    session.commit([
        {"kind": "entry", "id": user, "entry": {"type": "message", "message": {"role": "user", "content": "go"}}},
        {"kind": "record", "id": allocate_id(), "record": {
            "type": "runStarted", "operationId": allocate_id(), "operationKind": "run", "inputEntryId": user}},
    ])


def start_compaction(session: Session, state) -> bool:
    """§15.3 new compaction: retain at least the latest user turn; a tail never starts inside a tool-call group."""
    transcript, ids = state["transcript"], session.message_ids
    cuts = [k for k in range(1, len(transcript)) if transcript[k]["role"] == "user"]
    if not cuts:
        return False
    k = cuts[-1]
    items = [{"sourceEntryId": i, "message": m} for i, m in zip(ids, transcript)]
    session.commit([{"kind": "record", "id": allocate_id(), "record": {
        "type": "compactionStarted", "operationId": allocate_id(), "operationKind": "compaction",
        "inputThroughEntryId": ids[-1], "resultEntryId": allocate_id(), "compactedEntryIds": ids[:k],
        "retainedEntryIds": ids[k:], "sourceDigest": source_digest(items)}}])
    return True


def request_abort(session: Session, state) -> None:
    """§15.5 step 2: the live abortRequested with the true phase."""
    op = state["operation"]
    pending = [t for t in op.get("toolCalls", ()) if t["status"] == "pending"]
    record = {"type": "abortRequested", "operationId": op["operationId"], "operationKind": op["kind"],
              "reason": "escape", "phase": "model"}
    if op["kind"] == "compaction":
        record["phase"] = "compact"
    elif pending:
        record.update(phase="tool", toolCallId=pending[0]["toolCallId"])
    session.commit([{"kind": "record", "id": allocate_id(), "record": record}])


def drive(session: Session, current: dict, chooser, *, bugs=frozenset(), split: bool = True) -> str:
    """Plan and execute until idle or blocked (and the chooser stops); returns the final plan type."""
    base = current
    completed: set[tuple[str, str]] = set()
    segment, segment_calls = 0, 0
    restored = False
    for _ in range(MAX_PLANS):
        state = session.state()
        assert well_formed(state), "the prefix is not well-formed (§12 closure)"
        op = state["operation"]
        if op["kind"] != "idle" and not op["abortRequested"] and chooser.request_abort(session):
            request_abort(session, state)
            continue
        current = chooser.change_config(current) or current
        plan = plan_recovery(state, current, bugs=bugs)
        plan_rule(state, current, bugs=bugs)  # the rule function runs on every state the driver reaches
        check_plan_shape(plan)

        if plan["type"] == "blocked":
            assert plan_recovery(state, current, bugs=bugs) == plan  # a fixed point
            assert transactions_for_plan(state, plan, current, allocate_id) == []
            action = chooser.after_blocked(restored)
            if action == "stop":
                return "blocked"
            if action == "restore":
                current, restored = base, True
            else:
                request_abort(session, state)
            continue
        restored = False
        if op["kind"] == "idle":
            assert transactions_for_plan(state, plan, current, allocate_id) == []
            action = chooser.after_idle(session)
            if action == "run":
                start_run(session)
                continue
            if action == "compact" and start_compaction(session, state):
                continue
            assert reduce_session(session.data) == state  # the bytes we wrote reduce to the same state
            return "idle"

        key = (op["operationId"], json.dumps(plan, sort_keys=True))
        assert key not in completed, f"completed plan returned again: {plan}"
        check_replay_safety(state, plan, current)
        check_pending_first(state, plan)
        before = phi(state)
        appended, complete = execute(session, state, plan, current, chooser, split)
        after_state = session.state()
        if complete:
            completed.add(key)
            if plan["type"] != "startStep":
                assert phi(after_state) < before, f"Φ did not decrease after {plan}"
        elif plan["type"] == "startTool" and appended:
            assert phi(after_state) == before - 1, "a tool start cut after its intent must lower Φ by 1"

        # §14.5: within one step with k calls at most 2k + 3 plans complete before the step is left.
        if appended:
            segment += 1
            segment_calls = max(segment_calls, len(call_states(after_state)))
            leaves = plan["type"] == "finish" or (plan["type"] == "startStep" and plan["attempt"] == 1)
            if leaves:
                assert segment <= 2 * segment_calls + 3, f"{segment} plans for a step with {segment_calls} calls"
                segment, segment_calls = 0, 0
    raise AssertionError(f"no idle or blocked after {MAX_PLANS} plans")


def execute(session: Session, state, plan: dict, current: dict, chooser, split: bool) -> tuple[int, bool]:
    """Commit the plan's transactions; returns (transactions appended, all appended)."""
    kind = plan["type"]
    if kind == "startStep" or (kind == "startTool" and plan["mode"] == "start"):
        outcome = chooser.model_answer(plan["stepKind"]) if kind == "startStep" else chooser.tool_output(plan)
        crash = chooser.crash_intent()
        if split or crash:
            # The executor's path: intent durable first, then the effect, then the outcome (§15.2).
            [intent] = transactions_for_plan(state, plan, current, allocate_id)
            committed = session.commit(intent)
            if crash:
                return 1, False
            session.commit(outcome_transaction(session.state(), plan, committed, outcome, allocate_id))
            return 2, True
        intent, result = transactions_for_plan(state, plan, current, allocate_id, outcome=outcome)
        session.commit(intent)
        session.commit(result)
        return 2, True
    if kind == "startTool":  # replay: no new intent, the effect, then the result
        outcome = chooser.tool_output(plan)
        if chooser.crash_replay():
            assert transactions_for_plan(state, plan, current, allocate_id) == []
            return 0, False
        [result] = transactions_for_plan(state, plan, current, allocate_id, outcome=outcome)
        session.commit(result)
        return 1, True
    txns = transactions_for_plan(state, plan, current, allocate_id)
    assert len(txns) == 1, f"{kind} appends exactly one transaction"
    session.commit(txns[0])
    return 1, True


# --------------------------------------------------------------------------------------------------------------
# Inputs: corpus prefixes.
# --------------------------------------------------------------------------------------------------------------


def _valid_fixture_prefixes() -> list[tuple[str, bytes]]:
    """Every transaction-boundary prefix of every valid corpus fixture, deduplicated by bytes."""
    seen: dict[bytes, str] = {}
    for entry in reducer_manifest():
        expected = json.loads((CORPUS / "fixtures" / entry["expected"]).read_text())
        if not expected["ok"]:
            continue
        data = (CORPUS / "fixtures" / entry["file"]).read_bytes()
        cut = data.rfind(b"\n") + 1
        ends = [i + 1 for i in range(cut) if data[i] == 0x0A]
        for k, end in enumerate(ends):
            seen.setdefault(data[:end], f"{entry['name']}[:{k + 1}]")
    return [(name, prefix) for prefix, name in seen.items()]


PREFIXES = _valid_fixture_prefixes()


def test_corpus_prefixes_are_enumerated(corpus):
    """The sweep covers prefixes of the corpus (it fails instead of passing vacuously when the corpus is missing)."""
    assert len(PREFIXES) >= 30


@pytest.mark.parametrize("policy", ["plain", "crash", "abort"])
@pytest.mark.parametrize("config", sorted(FIXTURE_CURRENTS))
def test_corpus_prefixes_converge(corpus, config, policy):
    """From every well-formed transaction-boundary prefix of every valid fixture, plan-and-execute converges."""
    driven = 0
    for name, prefix in PREFIXES:
        session = Session(prefix)
        if not well_formed(session.state()):
            continue
        chooser = FixedChooser(policy)
        try:
            drive(session, copy.deepcopy(FIXTURE_CURRENTS[config]), chooser, split=policy != "plain")
        except (AssertionError, CorruptionError) as failure:
            raise AssertionError(f"{name} under {config}/{policy}: {failure!r}") from failure
        driven += 1
    assert driven >= 30


# --------------------------------------------------------------------------------------------------------------
# Inputs: generated sessions.
# --------------------------------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_generated_sessions_converge(data):
    """Sessions driven by stub model answers, stub tool results, crashes, aborts and configuration changes converge."""
    session = Session.new("env-a")
    start_run(session)
    drive(session, GEN_BASE, DataChooser(data), split=data.draw(st.booleans(), label="split"))


# --------------------------------------------------------------------------------------------------------------
# The property can fail: each planner bug switch breaks it.
# --------------------------------------------------------------------------------------------------------------

BUG_CASES = {
    "stale-assistant-calls": ("ours-stale-calls-same-run", FIXTURE_BASE),
    "pre-exec-synthetic-repeat": ("ours-synthetic-then-next-call", FIXTURE_BASE),
    "replay-never-tools": ("pending-never-tool", FIXTURE_BASE),
    "unbounded-retry": ("attempts-exhausted", FIXTURE_BASE),
    "ignore-configuration-change": ("open-attempt", FIXTURE_CURRENTS["model-changed"]),
    "replay-ignores-environment": ("pending-safe-tool", FIXTURE_CURRENTS["environment-moved"]),
    # The first 5 lines: call_1 pending, call_2 untouched, before the fixture's abortRequested.
    "start-untouched-while-pending": ("abort-mixed-tools-requested[:5]", FIXTURE_BASE),
}


def test_every_bug_switch_has_a_case():
    """Each planner bug switch has a convergence case below."""
    assert set(BUG_CASES) == PLANNER_BUGS


@pytest.mark.parametrize("bug", sorted(BUG_CASES))
def test_bug_switch_breaks_convergence(corpus, bug):
    """With one planner bug switched on, driving its fixture fails the property; switched off, it converges."""
    name, current = BUG_CASES[bug]
    name, _, lines = name.partition("[:")  # "fixture[:N]": its first N lines only
    data = (corpus / "fixtures" / f"{name}.jsonl").read_bytes()
    if lines:
        data = b"".join(data.splitlines(keepends=True)[: int(lines.rstrip("]"))])
    assert drive(Session(data), current, FixedChooser("plain")) in ("idle", "blocked")
    with pytest.raises((AssertionError, CorruptionError)):
        drive(Session(data), current, FixedChooser("plain"), bugs=frozenset({bug}))
