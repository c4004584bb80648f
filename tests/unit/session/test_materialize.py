"""Unit tests of plan materialisation (SPEC §15.2): the exact facts each plan appends, with and without outcome.

States are hand-built in the §10 shape (builders shared with test_planner). Whether the reducer accepts these facts
is checked on real reductions by tests/property/test_convergence.py.
"""

from __future__ import annotations

import copy
import itertools

import pytest

from agent.session.materialize import (
    MaterializeError,
    assistant_answer,
    compaction_summary,
    outcome_transaction,
    step_failure,
    tool_result,
    transactions_for_plan,
)
from agent.session.planner import SYNTHETIC_CONTENT
from tests.unit.session.test_planner import (
    ASSISTANT,
    ATTEMPT,
    CURRENT,
    DIGEST,
    ID,
    OP,
    SNAPSHOT,
    STEP,
    USER,
    _state,
    assistant,
    call,
    compaction_state,
    interrupted,
    pre,
    run_state,
    started,
    step,
    tool_use_state,
)

CUR = dict(copy.deepcopy(CURRENT), snapshot=copy.deepcopy(SNAPSHOT))
USAGE = {"input": 10, "output": 2, "cacheRead": 3, "cacheWrite": 0}


def ids_from(start: int = 0x1000):
    """A deterministic allocator: ID(start), ID(start + 1), …"""
    counter = itertools.count(start)
    return lambda: ID(next(counter))


def build(state, plan, outcome=None, cur=CUR):
    return transactions_for_plan(state, plan, cur, ids_from(), outcome=outcome)


START_STEP = {"type": "startStep", "stepKind": "assistant", "attempt": 1, "contextThroughEntryId": USER}


class TestNothingAppended:
    def test_blocked_appends_nothing(self):
        """A blocked plan materialises to no transaction."""
        assert build(run_state(), {"type": "blocked", "reason": "attempts_exhausted"}) == []

    def test_idle_no_op_appends_nothing(self):
        """The idle no-op finish materialises to no transaction."""
        plan = {"type": "finish", "outcome": "completed", "completion": "normal"}
        assert build(_state([], {"kind": "idle"}, "fixture"), plan) == []


class TestFinish:
    @pytest.mark.parametrize(
        "plan, extra",
        [
            ({"type": "finish", "outcome": "completed", "completion": "normal", "finalEntryId": ASSISTANT},
             {"completion": "normal", "finalEntryId": ASSISTANT}),
            ({"type": "finish", "outcome": "aborted"}, {}),
            ({"type": "finish", "outcome": "failed", "error": {"code": "model_error", "message": "m"}},
             {"error": {"code": "model_error", "message": "m"}}),
        ],
        ids=["completed", "aborted", "failed"],
    )
    def test_run_finish_copies_optional_members(self, plan, extra):
        """A finish writes operationFinished with exactly the optional members the plan has."""
        assert build(run_state(step_state=step("settled", stop_reason="stop")), plan) == [[{
            "kind": "record", "id": ID(0x1000),
            "record": {"type": "operationFinished", "operationId": OP, "operationKind": "run",
                       "outcome": plan["outcome"], **extra}}]]

    def test_compaction_finish_has_its_kind(self):
        """A compaction finish names operationKind compaction and has no completion."""
        plan = {"type": "finish", "outcome": "completed", "finalEntryId": ID(0x17)}
        [[fact]] = build(compaction_state(step_state=step("settled", kind="compaction")), plan)
        assert fact["record"] == {"type": "operationFinished", "operationId": OP, "operationKind": "compaction",
                                  "outcome": "completed", "finalEntryId": ID(0x17)}


class TestCloseAttempt:
    def test_close_attempt_fails_the_current_attempt(self):
        """closeAttempt writes stepFailed for the step's current attempt with the plan's error."""
        plan = {"type": "closeAttempt", "error": {"code": "aborted", "message": "Operation aborted"}}
        assert build(run_state(step_state=step("attempting"), abort=True), plan) == [[{
            "kind": "record", "id": ID(0x1000),
            "record": {"type": "stepFailed", "operationId": OP, "stepId": STEP, "attemptId": ATTEMPT,
                       "error": {"code": "aborted", "message": "Operation aborted"}}}]]


class TestAppendSynthetic:
    def test_all_results_in_one_transaction_in_plan_order(self):
        """Interrupted and pre-execution results go into one transaction, interrupted reusing its reserved id."""
        plan = {"type": "appendSynthetic", "results": [interrupted(0, "c0"), pre(2, "c2", "bash", "aborted")]}
        state = tool_use_state([call("c0"), call("c1"), call("c2", "bash", "{}")], tool_calls=[started(0, "c0")])
        assert build(state, plan) == [[
            {"kind": "entry", "id": ID(0x200), "entry": {
                "type": "message", "stepId": STEP, "toolStartedId": ID(0x100), "toolName": "read",
                "message": {"role": "tool", "tool_call_id": "c0", "content": SYNTHETIC_CONTENT["interrupted"]},
                "result": {"type": "synthetic", "reason": "interrupted"}}},
            {"kind": "entry", "id": ID(0x1000), "entry": {
                "type": "message", "stepId": STEP, "assistantEntryId": ASSISTANT, "toolIndex": 2, "toolName": "bash",
                "message": {"role": "tool", "tool_call_id": "c2", "content": SYNTHETIC_CONTENT["aborted"]},
                "result": {"type": "synthetic", "reason": "aborted"}}},
        ]]


class TestStartStep:
    def test_intent_only_without_outcome(self):
        """Without an outcome, startStep attempt 1 is the stepAttempt alone, with fresh fact, step and attempt ids."""
        assert build(run_state(), START_STEP) == [[{
            "kind": "record", "id": ID(0x1000),
            "record": {"type": "stepAttempt", "operationId": OP, "stepId": ID(0x1001), "attemptId": ID(0x1002),
                       "stepKind": "assistant", "attempt": 1, "contextThroughEntryId": USER,
                       "configurationSnapshot": SNAPSHOT, "configurationDigest": DIGEST}}]]

    def test_snapshot_is_copied_not_shared(self):
        """The fact's snapshot is a copy: mutating it leaves the caller's current configuration intact."""
        [[fact]] = build(run_state(), START_STEP)
        fact["record"]["configurationSnapshot"]["tools"].clear()
        assert CUR["snapshot"]["tools"]

    def test_retry_names_the_existing_step(self):
        """An attempt-2 retry cites plan.stepId and allocates only the fact and attempt ids."""
        plan = {"type": "startStep", "stepKind": "assistant", "attempt": 2, "stepId": STEP,
                "contextThroughEntryId": USER}
        [[fact]] = build(run_state(step_state=step("attempting")), plan)
        assert (fact["id"], fact["record"]["stepId"], fact["record"]["attemptId"], fact["record"]["attempt"]) == (
            ID(0x1000), STEP, ID(0x1001), 2)

    def test_missing_snapshot_is_an_error(self):
        """A current configuration without its snapshot cannot materialise a stepAttempt."""
        with pytest.raises(MaterializeError, match="snapshot"):
            build(run_state(), START_STEP, cur=CURRENT)

    def test_answer_with_usage(self):
        """An assistant answer becomes [assistant entry, usage] owned by the new attempt."""
        message = {"role": "assistant", "content": None, "tool_calls": [call("c0")]}
        intent, outcome = build(run_state(), START_STEP, assistant_answer(message, "toolUse", USAGE))
        assert outcome == [
            {"kind": "entry", "id": ID(0x1003), "entry": {
                "type": "message", "stepId": ID(0x1001), "attemptId": ID(0x1002), "stopReason": "toolUse",
                "message": message}},
            {"kind": "usage", "id": ID(0x1004), "operationId": OP, "attemptId": ID(0x1002), "usage": USAGE},
        ]

    def test_answer_message_is_normalised(self):
        """A missing content becomes null and an empty tool_calls list is dropped (§5.1)."""
        _, outcome = build(run_state(), START_STEP, assistant_answer({"role": "assistant", "tool_calls": []}, "length"))
        assert outcome == [{"kind": "entry", "id": ID(0x1003), "entry": {
            "type": "message", "stepId": ID(0x1001), "attemptId": ID(0x1002), "stopReason": "length",
            "message": {"role": "assistant", "content": None}}}]

    @pytest.mark.parametrize(
        "usage",
        [None, {"input": True}, {"input": -1}, {"input": 2**53}, {"input": 1.0}, {"tokens": 3}],
        ids=["none", "bool", "negative", "too-big", "float", "unknown-member"],
    )
    def test_unusable_usage_is_omitted(self, usage):
        """No usage fact is written when the outcome has none or its counters are not valid integers."""
        _, outcome = build(run_state(), START_STEP, assistant_answer(assistant(content="hi"), "stop", usage))
        assert [f["kind"] for f in outcome] == ["entry"]

    def test_usage_overflowing_the_ledger_is_omitted(self):
        """A usage fact that would push a ledger total above 2^53−1 is omitted (§7 writer rule)."""
        state = run_state()
        state["usage"]["output"] = 2**53 - 2
        _, outcome = build(state, START_STEP, assistant_answer(assistant(content="hi"), "stop", {"output": 2}))
        assert [f["kind"] for f in outcome] == ["entry"]

    def test_missing_counters_count_zero(self):
        """Counters absent from an outcome's usage are written as 0."""
        _, outcome = build(run_state(), START_STEP, assistant_answer(assistant(content="hi"), "stop", {"input": 4}))
        assert outcome[1]["usage"] == {"input": 4, "output": 0, "cacheRead": 0, "cacheWrite": 0}

    def test_failure_becomes_step_failed_with_usage(self):
        """A provider failure becomes [stepFailed, usage] for the new attempt."""
        _, outcome = build(run_state(), START_STEP, step_failure("server_error", "HTTP 503", USAGE))
        assert outcome == [
            {"kind": "record", "id": ID(0x1003), "record": {
                "type": "stepFailed", "operationId": OP, "stepId": ID(0x1001), "attemptId": ID(0x1002),
                "error": {"code": "server_error", "message": "HTTP 503"}}},
            {"kind": "usage", "id": ID(0x1004), "operationId": OP, "attemptId": ID(0x1002), "usage": USAGE},
        ]

    def test_lone_surrogates_are_sanitised(self):
        """Lone surrogates in provider text become U+FFFD, so the store can serialise the fact (§13.3)."""
        message = {"role": "assistant", "content": "a\ud800b",
                   "tool_calls": [call("c\udc00", "read", '{"p":"\ud83d"}')]}
        _, outcome = build(run_state(), START_STEP, assistant_answer(message, "toolUse"))
        written = outcome[0]["entry"]["message"]
        assert written["content"] == "a\ufffdb"
        assert written["tool_calls"][0]["id"] == "c\ufffd"
        assert written["tool_calls"][0]["function"]["arguments"] == '{"p":"\ufffd"}'

    @pytest.mark.parametrize(
        "outcome",
        [tool_result("x"), compaction_summary("s"), {"message": assistant(content="x"), "stopReason": "end"},
         step_failure("", "m"), "not a mapping"],
        ids=["tool-result", "summary-on-assistant", "bad-stop-reason", "empty-code", "not-mapping"],
    )
    def test_wrong_outcome_is_refused(self, outcome):
        """An outcome that does not fit an assistant step raises MaterializeError."""
        with pytest.raises(MaterializeError):
            build(run_state(), START_STEP, outcome)


class ReductionWithCompaction(dict):
    """A reduction carrying the out-of-band compactionStarted record, as the reducer exposes it."""

    boundary = None
    compaction_started = None


def compaction_reduction() -> ReductionWithCompaction:
    transcript = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                  {"role": "user", "content": "three"}, {"role": "assistant", "content": "four"}]
    state = compaction_state()
    state["transcript"] = transcript
    out = ReductionWithCompaction(state)
    out.compaction_started = {
        "type": "compactionStarted", "operationId": OP, "operationKind": "compaction",
        "inputThroughEntryId": ID(0x33), "resultEntryId": ID(0x17),
        "compactedEntryIds": [ID(0x30), ID(0x31)], "retainedEntryIds": [ID(0x32), ID(0x33)],
        "sourceDigest": "sha256:" + "a" * 64}
    return out


class TestCompaction:
    PLAN = {"type": "startStep", "stepKind": "compaction", "attempt": 1, "contextThroughEntryId": ID(0x33)}

    def test_summary_becomes_the_compaction_entry(self):
        """A summary becomes the compaction entry with the reserved id, the last compacted id and the retained tail."""
        _, outcome = build(compaction_reduction(), self.PLAN, compaction_summary("sum", USAGE))
        assert outcome[0] == {"kind": "entry", "id": ID(0x17), "entry": {
            "type": "compaction", "operationId": OP, "summary": "sum", "compactedThroughEntryId": ID(0x31),
            "retainedTail": [
                {"sourceEntryId": ID(0x32), "message": {"role": "user", "content": "three"}},
                {"sourceEntryId": ID(0x33), "message": {"role": "assistant", "content": "four"}}]}}
        assert outcome[1]["attemptId"] == ID(0x1002)

    def test_compaction_failure(self):
        """A failed summarisation becomes stepFailed, like an assistant step."""
        _, outcome = build(compaction_reduction(), self.PLAN, step_failure("timeout", "t"))
        assert outcome[0]["record"]["type"] == "stepFailed"

    def test_summary_needs_the_compaction_record(self):
        """Without the out-of-band compactionStarted record a compaction entry cannot be built."""
        with pytest.raises(MaterializeError, match="compaction_started"):
            build(compaction_state(), self.PLAN, compaction_summary("sum"))


class TestStartTool:
    PLAN = {"type": "startTool", "mode": "start", "assistantEntryId": ASSISTANT, "toolIndex": 1,
            "toolName": "bash", "arguments": {"command": "ls"}}

    def state(self):
        return tool_use_state([call("c0"), call("c1", "bash", '{"command":"ls"}')],
                              tool_calls=[started(0, "c0", status="completed")])

    def test_intent_copies_declaration_and_environment(self):
        """toolStarted takes the call id from A, replay and replayKey from the current declaration, the current
        environment, and reserves a fresh result entry id."""
        cur = dict(CUR, environmentIdentity="now")
        assert build(self.state(), self.PLAN, cur=cur) == [[{
            "kind": "record", "id": ID(0x1000), "record": {
                "type": "toolStarted", "operationId": OP, "stepId": STEP, "assistantEntryId": ASSISTANT,
                "toolIndex": 1, "toolCallId": "c1", "toolName": "bash", "arguments": {"command": "ls"},
                "replay": "never", "replayKey": "builtin:bash:v1", "environmentIdentity": "now",
                "resultEntryId": ID(0x1001)}}]]

    def test_result_after_the_intent(self):
        """A tool result becomes the result entry with the reserved id, plus tool usage when reported."""
        intent, outcome = build(self.state(), self.PLAN, tool_result("out", error=True, usage=USAGE))
        assert outcome == [
            {"kind": "entry", "id": ID(0x1001), "entry": {
                "type": "message", "stepId": STEP, "toolStartedId": ID(0x1000), "toolName": "bash",
                "message": {"role": "tool", "tool_call_id": "c1", "content": "out"}, "result": {"type": "error"}}},
            {"kind": "usage", "id": ID(0x1002), "operationId": OP, "toolStartedId": ID(0x1000), "usage": USAGE},
        ]

    def test_outcome_from_the_committed_intent(self):
        """outcome_transaction builds the same result from the intent as the store returned it (with seq)."""
        ids = ids_from()
        [intent] = transactions_for_plan(self.state(), self.PLAN, CUR, ids)
        committed = [dict(intent[0], seq=9, timestamp=1)]
        outcome = outcome_transaction(self.state(), self.PLAN, committed, tool_result("out"), ids)
        assert outcome[0]["id"] == intent[0]["record"]["resultEntryId"]
        assert outcome[0]["entry"]["toolStartedId"] == intent[0]["id"]

    def test_missing_declaration_is_an_error(self):
        """A start plan for an undeclared tool cannot be materialised."""
        with pytest.raises(MaterializeError, match="declaration"):
            build(self.state(), self.PLAN, cur=dict(CUR, tools=[]))

    def test_stale_plan_takes_the_stale_call(self):
        """A stale-calls plan against a stop answer takes the older message's call, as upstream would write it."""
        transcript = [{"role": "user", "content": "x"}, assistant(call("old")), {"role": "tool", "content": "r",
                      "tool_call_id": "old"}, assistant(content="done")]
        state = run_state(transcript, step_state=step("settled", stop_reason="stop"))
        plan = {"type": "startTool", "mode": "start", "assistantEntryId": ASSISTANT, "toolIndex": 0,
                "toolName": "read", "arguments": {}}
        [[fact]] = build(state, plan)
        assert fact["record"]["toolCallId"] == "old"


class TestReplay:
    PLAN = {"type": "startTool", "mode": "replay", "assistantEntryId": ASSISTANT, "toolIndex": 0,
            "toolStartedId": ID(0x100), "toolName": "read", "arguments": {"path": "recorded"}}

    def test_no_intent_is_written(self):
        """A replay writes no new toolStarted: without an outcome it appends nothing."""
        assert build(tool_use_state([call("c0")], tool_calls=[started(0, "c0")]), self.PLAN) == []

    def test_result_uses_the_recorded_ids(self):
        """The replay's result consumes the recorded resultEntryId of the recorded toolStarted."""
        state = tool_use_state([call("c0")], tool_calls=[started(0, "c0")])
        [[entry]] = build(state, self.PLAN, tool_result("text"))
        assert entry == {"kind": "entry", "id": ID(0x200), "entry": {
            "type": "message", "stepId": STEP, "toolStartedId": ID(0x100), "toolName": "read",
            "message": {"role": "tool", "tool_call_id": "c0", "content": "text"}, "result": {"type": "success"}}}
