"""Review tests of the recovery planner (SPEC §14) and plan materialisation (§15.2) on REAL reductions.

Every state here is built by committing facts through ``SessionStore`` (real file, real fsync, real validation) and
reducing the file with ``reduce_session``; each test asserts the exact plan JSON of §14.2 (exact members, fixed
strings, error objects) or the exact facts of §15.2. The hand-built-state tests live in test_planner.py.
"""

from __future__ import annotations

import copy
import json

import pytest

from agent.session.digests import configuration_digest, definition_digest
from agent.session.materialize import (
    assistant_answer,
    outcome_transaction,
    tool_result,
    transactions_for_plan,
)
from agent.session.planner import plan_recovery, plan_rule
from agent.session.reducer import reduce_session
from agent.session.store import SessionStore

ENV = "env-A"
ZERO = "sha256:" + "0" * 64
INTERRUPTED = "Operation interrupted after execution status became unknown; the tool was not replayed."
ABORTED = "Operation aborted before execution."
TRUNCATED = "Error: Tool call arguments were truncated by the model token limit; the tool was not executed."
UNKNOWN = "Error: Unknown tool; the tool was not executed."
INVALID = "Error: Tool arguments were invalid; the tool was not executed."
READ_KEY = "builtin:read:v1"


def tool_element(name: str, description: str = "d") -> dict:
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": {"type": "object", "properties": {}}}}


def snapshot(*names: str, model: str = "m", changed: str | None = None) -> dict:
    """A valid §8.2 snapshot offering ``names``; ``changed`` gets a different definition digest."""
    return {
        "model": model,
        "systemPromptDigest": ZERO,
        "tools": [{"name": n, "definitionDigest": definition_digest(tool_element(n, "x" if n == changed else "d"))}
                  for n in names],
        "adapterIdentity": "openai:chat-completions:v1",
        "routingIdentity": f"openai:{model}",
        "outputOptionsDigest": ZERO,
    }


def current(*names: str, env: str = ENV, model: str = "m", changed: str | None = None,
            replay: dict | None = None) -> dict:
    """A CurrentConfiguration (+ snapshot) offering ``names``; read is safe, others never, unless ``replay``."""
    snap = snapshot(*names, model=model, changed=changed)
    decl = {"read": ("safe", READ_KEY)}
    decl.update(replay or {})
    tools = []
    for item in snap["tools"]:
        policy, key = decl.get(item["name"], ("never", f"builtin:{item['name']}:v1"))
        tools.append({"name": item["name"], "definitionDigest": item["definitionDigest"], "replay": policy,
                      "replayKey": key})
    return {"configurationDigest": configuration_digest(snap), "environmentIdentity": env, "tools": tools,
            "snapshot": snap}


def call(call_id: str, name: str = "read", arguments: str = '{"path":"a.txt"}') -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class Log:
    """A real session file, written fact by fact through SessionStore; ``state()`` reduces the file from disk."""

    def __init__(self, tmp_path, env: str = ENV):
        self.store = SessionStore.create(tmp_path / "sessions", cwd="/w", provider="openai", model="m",
                                         environment_identity=env)
        self.op = None
        self.step_id = None
        self.attempt_id = None
        self.assistant_id = None
        self.calls: list[dict] = []
        self.started: dict[int, dict] = {}
        self.last_message = None

    def new(self) -> str:
        return self.store.allocate_id()

    def commit(self, facts: list[dict]) -> list[dict]:
        return self.store.commit(facts)

    def state(self):
        return reduce_session(self.store.path.read_bytes())

    def run(self, prompt: str = "go") -> "Log":
        user = self.new()
        self.op = self.new()
        self.commit([{"kind": "entry", "id": user, "entry": {"type": "message",
                                                              "message": {"role": "user", "content": prompt}}},
                     {"kind": "record", "id": self.new(), "record": {"type": "runStarted", "operationId": self.op,
                                                                     "operationKind": "run", "inputEntryId": user}}])
        self.last_message = user
        return self

    def attempt(self, cur: dict, *, attempt: int = 1, kind: str = "assistant", context: str | None = None) -> "Log":
        if attempt == 1:
            self.step_id = self.new()
        self.attempt_id = self.new()
        self.commit([{"kind": "record", "id": self.new(), "record": {
            "type": "stepAttempt", "operationId": self.op, "stepId": self.step_id, "attemptId": self.attempt_id,
            "stepKind": kind, "attempt": attempt, "contextThroughEntryId": context or self.last_message,
            "configurationSnapshot": copy.deepcopy(cur["snapshot"]),
            "configurationDigest": cur["configurationDigest"]}}])
        return self

    def answer(self, stop: str, content: str | None = None, calls: tuple = ()) -> "Log":
        message = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = list(calls)
        self.assistant_id = self.new()
        self.calls = list(calls)
        self.started = {}
        self.commit([{"kind": "entry", "id": self.assistant_id, "entry": {
            "type": "message", "stepId": self.step_id, "attemptId": self.attempt_id, "stopReason": stop,
            "message": message}}])
        self.last_message = self.assistant_id
        return self

    def failed(self, code: str = "server_error") -> "Log":
        self.commit([{"kind": "record", "id": self.new(), "record": {
            "type": "stepFailed", "operationId": self.op, "stepId": self.step_id, "attemptId": self.attempt_id,
            "error": {"code": code, "message": "boom"}}}])
        return self

    def start(self, index: int, *, arguments: dict | None = None, replay: str = "safe", key: str = READ_KEY,
              env: str = ENV) -> dict:
        c = self.calls[index]
        record = {"type": "toolStarted", "operationId": self.op, "stepId": self.step_id,
                  "assistantEntryId": self.assistant_id, "toolIndex": index, "toolCallId": c["id"],
                  "toolName": c["function"]["name"],
                  "arguments": arguments if arguments is not None else json.loads(c["function"]["arguments"]),
                  "replay": replay, "replayKey": key, "environmentIdentity": env, "resultEntryId": self.new()}
        fact_id = self.new()
        self.commit([{"kind": "record", "id": fact_id, "record": record}])
        self.started[index] = dict(record, toolStartedId=fact_id)
        return self.started[index]

    def result(self, index: int, content: str = "out") -> "Log":
        s = self.started[index]
        self.commit([{"kind": "entry", "id": s["resultEntryId"], "entry": {
            "type": "message", "stepId": self.step_id, "toolStartedId": s["toolStartedId"], "toolName": s["toolName"],
            "message": {"role": "tool", "tool_call_id": s["toolCallId"], "content": content},
            "result": {"type": "success"}}}])
        self.last_message = s["resultEntryId"]
        return self

    def synthetic(self, index: int, reason: str, content: str) -> str:
        c = self.calls[index]
        fact_id = self.new()
        self.commit([{"kind": "entry", "id": fact_id, "entry": {
            "type": "message", "stepId": self.step_id, "assistantEntryId": self.assistant_id, "toolIndex": index,
            "toolName": c["function"]["name"],
            "message": {"role": "tool", "tool_call_id": c["id"], "content": content},
            "result": {"type": "synthetic", "reason": reason}}}])
        self.last_message = fact_id
        return fact_id

    def abort(self, phase: str = "model", **extra) -> "Log":
        self.commit([{"kind": "record", "id": self.new(), "record": {
            "type": "abortRequested", "operationId": self.op, "operationKind": "run", "phase": phase, **extra,
            "reason": "escape"}}])
        return self

    def finish(self, **members) -> "Log":
        self.commit([{"kind": "record", "id": self.new(), "record": {
            "type": "operationFinished", "operationId": self.op, "operationKind": "run", **members}}])
        return self

    def execute(self, plan: dict, cur: dict, outcome=None) -> None:
        """Commit the §15.2 facts of ``plan`` (with ``outcome`` for the two-transaction plans)."""
        state = self.state()
        txns = transactions_for_plan(state, plan, cur, self.new)
        committed = None
        for facts in txns:
            committed = self.commit(facts)
        if outcome is not None:
            intent = committed if plan["type"] != "startTool" or plan["mode"] == "start" else None
            self.commit(outcome_transaction(self.state(), plan, intent, outcome, self.new))
        step = self.state()["operation"].get("step")
        if step is not None:  # keep the builder's view in step with what the plan committed
            self.step_id, self.attempt_id = step["stepId"], step["attemptId"]
            if step.get("settledEntryId") and step["settledEntryId"] != self.assistant_id:
                self.assistant_id = step["settledEntryId"]
                last = [m for m in self.state()["transcript"] if m["role"] == "assistant"][-1]
                self.calls, self.started = list(last.get("tool_calls") or ()), {}


def plan(log: Log, cur: dict) -> dict:
    return plan_recovery(log.state(), cur)


def tool_use(tmp_path, *calls, cur=None, content=None) -> tuple[Log, dict]:
    cur = cur or current("read", "bash")
    log = Log(tmp_path).run().attempt(cur).answer("toolUse", content, calls)
    return log, cur


# ------------------------------------------------------------------------------------------------ P0-P4


def test_p0_idle_plan_exact_and_appends_nothing(tmp_path):
    """An idle session (fresh, or after a finished run) plans the bare idle no-op finish, and executing it appends nothing."""
    cur = current("read")
    log = Log(tmp_path)
    assert plan(log, cur) == {"type": "finish", "outcome": "completed", "completion": "normal"}
    log.run().attempt(cur).answer("stop", "done").finish(outcome="completed", completion="normal",
                                                         finalEntryId=log.assistant_id)
    size = log.store.path.stat().st_size
    p = plan(log, cur)
    assert p == {"type": "finish", "outcome": "completed", "completion": "normal"}
    assert transactions_for_plan(log.state(), p, cur, log.new) == []
    assert log.store.path.stat().st_size == size


def test_p2_first_step_cites_input_entry(tmp_path):
    """A run without a step plans attempt 1 at the run's input entry with exactly four members."""
    cur = current("read")
    log = Log(tmp_path).run()
    assert plan(log, cur) == {"type": "startStep", "stepKind": "assistant", "attempt": 1,
                              "contextThroughEntryId": log.last_message}


def test_p3_gate_order_configuration_before_environment_before_retry(tmp_path):
    """An attempting step checks configuration, then header environment, then retries attempt 1 with stepId."""
    cur = current("read")
    log = Log(tmp_path).run().attempt(cur)
    other_model = current("read", model="m2")
    other_env = current("read", env="env-B")
    both = current("read", model="m2", env="env-B")
    assert plan(log, both) == {"type": "blocked", "reason": "configuration_changed"}
    assert plan(log, other_model) == {"type": "blocked", "reason": "configuration_changed"}
    assert plan(log, other_env) == {"type": "blocked", "reason": "environment_changed"}
    assert plan(log, cur) == {"type": "startStep", "stepKind": "assistant", "attempt": 2, "stepId": log.step_id,
                              "contextThroughEntryId": log.last_message}


def test_p3_attempt_two_exhausted_after_gates(tmp_path):
    """Attempt 2 still attempting is attempts_exhausted only when both gates pass; gates win otherwise."""
    cur = current("read")
    log = Log(tmp_path).run().attempt(cur).attempt(cur, attempt=2)
    assert plan(log, cur) == {"type": "blocked", "reason": "attempts_exhausted"}
    assert plan(log, current("read", model="x")) == {"type": "blocked", "reason": "configuration_changed"}
    assert plan(log, current("read", env="e2")) == {"type": "blocked", "reason": "environment_changed"}


def test_p3_failed_step_gated_then_model_error(tmp_path):
    """A failed step passes both gates before finishing failed with the fixed model_error object."""
    cur = current("read")
    log = Log(tmp_path).run().attempt(cur).failed()
    assert plan(log, current("read", model="x")) == {"type": "blocked", "reason": "configuration_changed"}
    assert plan(log, current("read", env="e2")) == {"type": "blocked", "reason": "environment_changed"}
    assert plan(log, cur) == {"type": "finish", "outcome": "failed",
                              "error": {"code": "model_error", "message": "provider request failed"}}


def test_p3_2_uses_header_environment_not_tool_intent(tmp_path):
    """P3.2 compares the HEADER environment, even when the run's tools recorded a different identity."""
    cur = current("read")
    log, _ = tool_use(tmp_path, call("c1"), cur=cur)
    log.start(0, env="env-B")
    log.result(0)
    log.attempt(cur)  # the next step is attempting
    assert plan(log, current("read", env="env-B")) == {"type": "blocked", "reason": "environment_changed"}
    assert plan(log, cur)["type"] == "startStep"


def test_p4_settled_compaction_finishes_without_completion(tmp_path):
    """A settled compaction plans finish completed with finalEntryId = resultEntryId and NO completion member."""
    from agent.session.digests import source_digest

    cur = current("read")
    log = Log(tmp_path).run("first").attempt(cur).answer("stop", "a1")
    log.finish(outcome="completed", completion="normal", finalEntryId=log.assistant_id)
    log.run("second").attempt(cur).answer("stop", "a2")
    log.finish(outcome="completed", completion="normal", finalEntryId=log.assistant_id)
    data = [json.loads(line) for line in log.store.path.read_text().splitlines()[1:]]
    facts = [f for line in data for f in (line if isinstance(line, list) else [line])]
    entries = [(f["id"], f["entry"]["message"]) for f in facts if f["kind"] == "entry"]
    ids = [i for i, _ in entries]
    op, result = log.new(), log.new()
    log.commit([{"kind": "record", "id": log.new(), "record": {
        "type": "compactionStarted", "operationId": op, "operationKind": "compaction", "inputThroughEntryId": ids[-1],
        "resultEntryId": result, "compactedEntryIds": ids[:2], "retainedEntryIds": ids[2:],
        "sourceDigest": source_digest([{"sourceEntryId": i, "message": m} for i, m in entries])}}])
    log.op = op
    assert plan(log, cur) == {"type": "startStep", "stepKind": "compaction", "attempt": 1,
                              "contextThroughEntryId": ids[-1]}
    log.attempt(cur, kind="compaction", context=ids[-1])
    assert plan(log, cur) == {"type": "startStep", "stepKind": "compaction", "attempt": 2, "stepId": log.step_id,
                              "contextThroughEntryId": ids[-1]}
    state = log.state()
    assert state.compaction_started["compactedEntryIds"] == ids[:2]  # carried out of band by the reducer
    p = plan_recovery(state, cur)
    [intent] = transactions_for_plan(state, p, cur, log.new)
    committed = log.commit(intent)
    out = outcome_transaction(state, p, committed, {"summary": "sum", "usage": None}, log.new)
    assert out[0]["id"] == result and out[0]["entry"]["compactedThroughEntryId"] == ids[1]
    log.commit(out)
    assert plan(log, cur) == {"type": "finish", "outcome": "completed", "finalEntryId": result}


# ------------------------------------------------------------------------------------------------ P1


def test_p1_1_close_attempt_exact(tmp_path):
    """Abort with an attempting step closes the attempt with the fixed aborted error, skipping every gate."""
    cur = current("read")
    log = Log(tmp_path).run().attempt(cur).abort()
    expected = {"type": "closeAttempt", "error": {"code": "aborted", "message": "Operation aborted"}}
    assert plan(log, current("read", model="x", env="y")) == expected
    assert plan(log, cur) == expected


def test_p1_2_mixed_pending_untouched_resolved_ascending(tmp_path):
    """Abort on a toolUse answer lists interrupted (with ids) for pending and aborted for untouched, ascending, skipping resolved."""
    cur = current("read", "bash")
    calls = (call("c0"), call("c1", "bash", '{"command":"true"}'), call("c2"), call("c3", "ghost"))
    log, _ = tool_use(tmp_path, *calls, cur=cur)
    log.start(0)
    log.result(0)
    s1 = log.start(1, arguments={"command": "true"}, replay="never", key="builtin:bash:v1")
    log.abort("tool", toolCallId="c1")
    p = plan(log, current("x", env="other"))
    assert p == {"type": "appendSynthetic", "results": [
        {"assistantEntryId": log.assistant_id, "toolIndex": 1, "toolCallId": "c1", "toolName": "bash",
         "toolStartedId": s1["toolStartedId"], "resultEntryId": s1["resultEntryId"], "reason": "interrupted",
         "content": INTERRUPTED},
        {"assistantEntryId": log.assistant_id, "toolIndex": 2, "toolCallId": "c2", "toolName": "read",
         "reason": "aborted", "content": ABORTED},
        {"assistantEntryId": log.assistant_id, "toolIndex": 3, "toolCallId": "c3", "toolName": "ghost",
         "reason": "aborted", "content": ABORTED},
    ]}
    log.execute(p, cur)
    state = log.state()
    assert state["transcript"][-3]["content"] == INTERRUPTED
    assert plan(log, cur) == {"type": "finish", "outcome": "aborted"}
    log.execute({"type": "finish", "outcome": "aborted"}, cur)
    assert log.state()["operation"] == {"kind": "idle"}


def test_p1_2_length_answer_calls_resolve_as_aborted(tmp_path):
    """Under abort a length answer's unresolved calls are aborted, not truncated."""
    cur = current("read")
    log = Log(tmp_path).run().attempt(cur).answer("length", "part", (call("c0"), call("c1")))
    log.synthetic(0, "truncated", TRUNCATED)
    log.abort()
    assert plan(log, cur) == {"type": "appendSynthetic", "results": [
        {"assistantEntryId": log.assistant_id, "toolIndex": 1, "toolCallId": "c1", "toolName": "read",
         "reason": "aborted", "content": ABORTED}]}


@pytest.mark.parametrize("shape", ["no-step", "failed", "all-resolved", "stop"])
def test_p1_3_finish_aborted_exact(tmp_path, shape):
    """Abort with nothing left to resolve plans exactly {"type":"finish","outcome":"aborted"}."""
    cur = current("read")
    log = Log(tmp_path).run()
    if shape == "failed":
        log.attempt(cur).failed()
    elif shape == "all-resolved":
        log.attempt(cur).answer("toolUse", None, (call("c0"), call("c1", "ghost")))
        log.start(0)
        log.result(0)
        log.synthetic(1, "unknownTool", UNKNOWN)
    elif shape == "stop":
        log.attempt(cur).answer("stop", "  ")
    log.abort()
    assert plan(log, cur) == {"type": "finish", "outcome": "aborted"}


# ------------------------------------------------------------------------------------------------ P5, P6


@pytest.mark.parametrize("content", [None, "", "   ", "\t\n", "\u3000", "\u00a0\u2003\u2028", "\x1c\x1d\x1e\x1f",
                                     "\x85"])
def test_p5_1_blank_is_python_strip(tmp_path, content):
    """Null or str.strip()-blank content (unicode spaces and separators included) finishes failed empty_response."""
    cur = current("read")
    log = Log(tmp_path).run().attempt(cur).answer("stop", content)
    assert plan(log, cur) == {"type": "finish", "outcome": "failed",
                              "error": {"code": "empty_response", "message": "model returned an empty final answer"}}


@pytest.mark.parametrize("content", ["x", " x ", "\u200b", "\ufeff"])
def test_p5_2_non_blank_completes_normal(tmp_path, content):
    """Content with anything str.strip() keeps (zero-width space, BOM) completes normal with the settled entry."""
    cur = current("read")
    log = Log(tmp_path).run().attempt(cur).answer("stop", content)
    assert plan(log, cur) == {"type": "finish", "outcome": "completed", "completion": "normal",
                              "finalEntryId": log.assistant_id}


def test_p5_after_tool_step_ignores_stale_calls(tmp_path):
    """A stop answer after a tool step finishes normally; the earlier assistant's calls are never used (§16.1 a)."""
    cur = current("read")
    log, _ = tool_use(tmp_path, call("c0"), cur=cur)
    log.start(0)
    log.result(0)
    log.attempt(cur).answer("stop", "final")
    assert plan(log, cur) == {"type": "finish", "outcome": "completed", "completion": "normal",
                              "finalEntryId": log.assistant_id}


def test_p6_1_length_without_calls(tmp_path):
    """A length answer without calls finishes failed with the fixed truncated_response object."""
    cur = current("read")
    log = Log(tmp_path).run().attempt(cur).answer("length", "cut")
    assert plan(log, cur) == {"type": "finish", "outcome": "failed", "error": {
        "code": "truncated_response", "message": "model response was cut off by the output token limit"}}


def test_p6_2_lists_every_unresolved_call_then_p6_3(tmp_path):
    """A length answer lists truncated results for every unresolved call in one plan; afterwards it completes truncated."""
    cur = current("read")
    log = Log(tmp_path).run().attempt(cur).answer("length", None, (call("c0"), call("c1", "ghost"), call("c2")))
    log.synthetic(1, "truncated", TRUNCATED)
    p = plan(log, cur)
    assert p == {"type": "appendSynthetic", "results": [
        {"assistantEntryId": log.assistant_id, "toolIndex": 0, "toolCallId": "c0", "toolName": "read",
         "reason": "truncated", "content": TRUNCATED},
        {"assistantEntryId": log.assistant_id, "toolIndex": 2, "toolCallId": "c2", "toolName": "read",
         "reason": "truncated", "content": TRUNCATED}]}
    before = log.state()["repairedLength"]
    log.execute(p, cur)
    lines = log.store.path.read_bytes()[before:].splitlines()
    assert len(lines) == 1 and len(json.loads(lines[0])) == 2  # one transaction, two entries
    assert plan(log, cur) == {"type": "finish", "outcome": "completed", "completion": "truncated",
                              "finalEntryId": log.assistant_id}


# ------------------------------------------------------------------------------------------------ P7.1


def test_p7_1_lowest_pending_first_and_before_untouched(tmp_path):
    """With several pending calls and a lower untouched call, the lowest-index PENDING call is decided first."""
    cur = current("read", "bash")
    calls = (call("c0"), call("c1", "bash", '{"command":"a"}'), call("c2"))
    log, _ = tool_use(tmp_path, *calls, cur=cur)
    s2 = log.start(2, arguments={"path": "eff"})
    s1 = log.start(1, arguments={"command": "a"}, replay="never", key="builtin:bash:v1")
    assert plan(log, cur) == {"type": "appendSynthetic", "results": [
        {"assistantEntryId": log.assistant_id, "toolIndex": 1, "toolCallId": "c1", "toolName": "bash",
         "toolStartedId": s1["toolStartedId"], "resultEntryId": s1["resultEntryId"], "reason": "interrupted",
         "content": INTERRUPTED}]}
    log.execute(plan(log, cur), cur)
    assert plan(log, cur) == {"type": "startTool", "mode": "replay", "assistantEntryId": log.assistant_id,
                              "toolIndex": 2, "toolStartedId": s2["toolStartedId"], "toolName": "read",
                              "arguments": {"path": "eff"}}


def test_p7_1_gate_order_environment_definition_replay_configuration(tmp_path):
    """A pending safe call checks intent environment, then definition, then replay declaration, then configuration digest."""
    cur = current("read", "bash")
    log, _ = tool_use(tmp_path, call("c0"), cur=cur)
    log.start(0)
    env_b = current("read", "bash", env="env-B")
    assert plan(log, env_b) == {"type": "blocked", "reason": "environment_changed"}
    # The intent's environment, not the header's: header env-A, intent env-A, current env-B blocks; the
    # definition change is checked after the environment.
    assert plan(log, current("read", "bash", env="env-B", changed="read")) == {
        "type": "blocked", "reason": "environment_changed"}
    assert plan(log, current("read", "bash", changed="read")) == {"type": "blocked", "reason": "configuration_changed"}
    assert plan(log, current("bash")) == {"type": "blocked", "reason": "configuration_changed"}
    assert plan(log, current("read", "bash", replay={"read": ("never", READ_KEY)})) == {
        "type": "blocked", "reason": "replay_declaration_changed"}
    assert plan(log, current("read", "bash", replay={"read": ("safe", "other:key")})) == {
        "type": "blocked", "reason": "replay_declaration_changed"}
    # Same definitions, same replay declaration, other configuration (model): P7.1.3.2.
    assert plan(log, current("read", "bash", model="m2")) == {"type": "blocked", "reason": "configuration_changed"}
    assert plan_rule(log.state(), current("read", "bash", model="m2")) == "P7.1.3.2"


def test_p7_1_1_intent_environment_not_header(tmp_path):
    """P7.1.1 compares the identity recorded in toolStarted, so a header/current mismatch alone does not block a replay."""
    cur_b = current("read", env="env-B")
    log = Log(tmp_path).run().attempt(cur_b).answer("toolUse", None, (call("c0"),))
    s0 = log.start(0, env="env-B")
    assert plan(log, cur_b) == {"type": "startTool", "mode": "replay", "assistantEntryId": log.assistant_id,
                                "toolIndex": 0, "toolStartedId": s0["toolStartedId"], "toolName": "read",
                                "arguments": {"path": "a.txt"}}
    assert plan(log, current("read")) == {"type": "blocked", "reason": "environment_changed"}


def test_p7_1_4_never_tool_interrupted_even_if_configuration_changed(tmp_path):
    """A pending never tool is interrupted (exactly one result) when its definition is unchanged, whatever the digest."""
    cur = current("read", "bash")
    log, _ = tool_use(tmp_path, call("c0", "bash", '{"command":"x"}'), call("c1", "bash", '{"command":"y"}'),
                      cur=cur)
    s0 = log.start(0, arguments={"command": "x"}, replay="never", key="builtin:bash:v1")
    log.start(1, arguments={"command": "y"}, replay="never", key="builtin:bash:v1")
    p = plan(log, current("read", "bash", model="m2"))
    assert p == {"type": "appendSynthetic", "results": [
        {"assistantEntryId": log.assistant_id, "toolIndex": 0, "toolCallId": "c0", "toolName": "bash",
         "toolStartedId": s0["toolStartedId"], "resultEntryId": s0["resultEntryId"], "reason": "interrupted",
         "content": INTERRUPTED}]}


def test_replay_materialises_into_recorded_result_without_new_intent(tmp_path):
    """Executing a replay writes no toolStarted and commits the result with id = recorded resultEntryId."""
    cur = current("read")
    log, _ = tool_use(tmp_path, call("c0"), cur=cur)
    s0 = log.start(0, arguments={"path": "effective"})
    p = plan(log, cur)
    assert transactions_for_plan(log.state(), p, cur, log.new) == []
    before = log.state()["repairedLength"]
    log.execute(p, cur, tool_result("data"))
    [line] = log.store.path.read_bytes()[before:].splitlines()
    fact = json.loads(line)
    assert fact["id"] == s0["resultEntryId"]
    assert fact["entry"]["toolStartedId"] == s0["toolStartedId"]
    assert fact["entry"]["message"] == {"role": "tool", "tool_call_id": "c0", "content": "data"}


def test_interrupted_materialises_with_recorded_result_id(tmp_path):
    """An interrupted synthetic is the started-tool variant whose id is the recorded resultEntryId."""
    cur = current("bash")
    log, _ = tool_use(tmp_path, call("c0", "bash", '{"command":"x"}'), cur=cur)
    s0 = log.start(0, arguments={"command": "x"}, replay="never", key="builtin:bash:v1")
    [[fact]] = transactions_for_plan(log.state(), plan(log, cur), cur, log.new)
    assert fact == {"kind": "entry", "id": s0["resultEntryId"], "entry": {
        "type": "message", "stepId": log.step_id, "toolStartedId": s0["toolStartedId"], "toolName": "bash",
        "message": {"role": "tool", "tool_call_id": "c0", "content": INTERRUPTED},
        "result": {"type": "synthetic", "reason": "interrupted"}}}


# ------------------------------------------------------------------------------------------------ P7.2, P7.3


def test_p7_2_1_unknown_even_when_current_declares_it(tmp_path):
    """A call naming a tool absent from the attempt's snapshot is unknownTool even if the current configuration has it."""
    old = current("read")
    log, _ = tool_use(tmp_path, call("c0", "bash", '{"command":"x"}'), cur=old)
    now = current("read", "bash")
    assert plan(log, now) == {"type": "appendSynthetic", "results": [
        {"assistantEntryId": log.assistant_id, "toolIndex": 0, "toolCallId": "c0", "toolName": "bash",
         "reason": "unknownTool", "content": UNKNOWN}]}


def test_p7_2_1_unknown_before_invalid_arguments(tmp_path):
    """An unknown tool with invalid arguments is unknownTool (P7.2.1 precedes P7.2.2)."""
    cur = current("read")
    log, _ = tool_use(tmp_path, call("c0", "ghost", "not json"), cur=cur)
    assert plan(log, cur)["results"][0]["reason"] == "unknownTool"


@pytest.mark.parametrize("text", ["", "null", "[]", "1", '"s"', '{"a":1,"a":2}', '{"a":NaN}', '{"a":1e400}',
                                  '{"a":"\\ud800"}', "{" * 1 + '"a":' + "[" * 64 + "]" * 64 + "}", " {} x",
                                  '{"a":Infinity}'])
def test_p7_2_2_invalid_arguments_strict(tmp_path, text):
    """Argument text that is not a strict, finite, depth<=64 JSON object is invalidArguments, before any definition gate."""
    cur = current("read")
    log, _ = tool_use(tmp_path, call("c0", "read", text), cur=cur)
    expected = {"type": "appendSynthetic", "results": [
        {"assistantEntryId": log.assistant_id, "toolIndex": 0, "toolCallId": "c0", "toolName": "read",
         "reason": "invalidArguments", "content": INVALID}]}
    assert plan(log, cur) == expected
    assert plan(log, current("read", changed="read")) == expected  # P7.2.2 precedes P7.2.3


@pytest.mark.parametrize("text", ['{"a":' + "[" * 63 + "]" * 63 + "}", ' \n{"a": 1.5e3}\t'])
def test_p7_2_4_valid_arguments_parsed(tmp_path, text):
    """Depth 64 and surrounding JSON whitespace are valid; startTool carries the parsed object."""
    cur = current("read")
    log, _ = tool_use(tmp_path, call("c0", "read", text), cur=cur)
    assert plan(log, cur) == {"type": "startTool", "mode": "start", "assistantEntryId": log.assistant_id,
                              "toolIndex": 0, "toolName": "read", "arguments": json.loads(text)}


def test_p7_2_3_definition_changed_or_removed_blocks(tmp_path):
    """An untouched call whose tool changed definition or was removed blocks configuration_changed."""
    cur = current("read", "bash")
    log, _ = tool_use(tmp_path, call("c0"), cur=cur)
    assert plan(log, current("read", "bash", changed="read")) == {"type": "blocked", "reason": "configuration_changed"}
    assert plan(log, current("bash")) == {"type": "blocked", "reason": "configuration_changed"}
    # Only the model changed: starting an untouched call has no digest or environment gate (P7.2.4).
    assert plan(log, current("read", "bash", model="m9", env="e9"))["type"] == "startTool"


def test_p7_3_boundary_after_pre_execution_synthetic(tmp_path):
    """When the step's last result is a pre-execution synthetic, the next step cites that synthetic's id."""
    cur = current("read")
    log, _ = tool_use(tmp_path, call("c0"), call("c1", "ghost"), cur=cur)
    log.start(0)
    log.result(0)
    synthetic_id = log.synthetic(1, "unknownTool", UNKNOWN)
    assert plan(log, cur) == {"type": "startStep", "stepKind": "assistant", "attempt": 1,
                              "contextThroughEntryId": synthetic_id}
    log.execute(plan(log, cur), cur)
    assert log.state()["operation"]["step"]["contextThroughEntryId"] == synthetic_id


def test_p7_3_after_synthetic_then_next_call_started(tmp_path):
    """After call 0 is resolved by a synthetic, call 1 is started next (the synthetic is never planned again)."""
    cur = current("read")
    log, _ = tool_use(tmp_path, call("c0", "read", "bad"), call("c1"), cur=cur)
    log.execute(plan(log, cur), cur)
    assert plan(log, cur) == {"type": "startTool", "mode": "start", "assistantEntryId": log.assistant_id,
                              "toolIndex": 1, "toolName": "read", "arguments": {"path": "a.txt"}}


# ------------------------------------------------------------------------------------------------ finish copies


@pytest.mark.parametrize("shape", ["normal", "truncated", "failed", "aborted"])
def test_finish_copies_exactly_the_plans_optional_members(tmp_path, shape):
    """operationFinished carries exactly the plan's optional members (completion, finalEntryId, error) and no others."""
    cur = current("read")
    log = Log(tmp_path).run().attempt(cur)
    if shape == "normal":
        log.answer("stop", "ok")
    elif shape == "truncated":
        log.answer("length", None, (call("c0"),))
        log.synthetic(0, "truncated", TRUNCATED)
    elif shape == "failed":
        log.answer("length", "cut")
    else:
        log.answer("stop", "ok").abort()
    p = plan(log, cur)
    [[fact]] = transactions_for_plan(log.state(), p, cur, log.new)
    expected = {"type": "operationFinished", "operationId": log.op, "operationKind": "run"}
    expected.update({k: v for k, v in p.items() if k != "type"})
    assert fact["record"] == expected
    log.commit([fact])
    assert log.state()["operation"] == {"kind": "idle"}


def test_start_tool_intent_copies_declaration_and_environment(tmp_path):
    """toolStarted copies plan arguments, the current declaration's replay/replayKey and the current environment."""
    cur = current("read", replay={"read": ("safe", "custom:key")}, env=ENV)
    log, _ = tool_use(tmp_path, call("c7", "read", '{"path":"p"}'), cur=cur)
    p = plan(log, cur)
    [[fact]] = transactions_for_plan(log.state(), p, cur, log.new)
    record = fact["record"]
    assert {k: record[k] for k in ("toolCallId", "toolName", "arguments", "replay", "replayKey",
                                   "environmentIdentity", "stepId", "assistantEntryId", "toolIndex")} == {
        "toolCallId": "c7", "toolName": "read", "arguments": {"path": "p"}, "replay": "safe",
        "replayKey": "custom:key", "environmentIdentity": ENV, "stepId": log.step_id,
        "assistantEntryId": log.assistant_id, "toolIndex": 0}
    assert record["resultEntryId"] != fact["id"]


def test_usage_fact_omitted_when_ledger_would_overflow(tmp_path):
    """A model usage fact that would push the ledger over 2^53-1 is omitted; the answer is still committed."""
    cur = current("read")
    log = Log(tmp_path).run()
    p = plan(log, cur)
    big = {"input": 2**53 - 1, "output": 0, "cacheRead": 0, "cacheWrite": 0}
    log.execute(p, cur, assistant_answer({"role": "assistant", "content": None, "tool_calls": [call("c0")]},
                                         "toolUse", big))
    assert log.state()["usage"]["input"] == 2**53 - 1
    log.start(0)
    log.result(0)
    before = log.state()["repairedLength"]
    log.execute(plan(log, cur), cur, assistant_answer({"role": "assistant", "content": "x"}, "stop",
                                                     {"input": 1, "output": 5, "cacheRead": 0, "cacheWrite": 0}))
    lines = log.store.path.read_bytes()[before:].splitlines()
    last = json.loads(lines[-1])
    assert isinstance(last, dict) and last["kind"] == "entry"  # no usage fact in the outcome transaction
    assert log.state()["usage"]["output"] == 0


def test_sanitized_lone_surrogates_in_answer_and_tool_output(tmp_path):
    """Lone surrogates in provider text and tool output become U+FFFD, so the store accepts the facts."""
    cur = current("read")
    log = Log(tmp_path).run()
    log.execute(plan(log, cur), cur, assistant_answer(
        {"role": "assistant", "content": "a\ud800b",
         "tool_calls": [{"id": "c\udc00", "type": "function",
                         "function": {"name": "read", "arguments": '{"path":"x"}'}}]}, "toolUse"))
    state = log.state()
    assert state["transcript"][-1]["content"] == "a\ufffdb"
    assert state["transcript"][-1]["tool_calls"][0]["id"] == "c\ufffd"
    p = plan(log, cur)
    log.execute(p, cur, tool_result("out\udfff"))
    assert log.state()["transcript"][-1] == {"role": "tool", "tool_call_id": "c\ufffd", "content": "out\ufffd"}
