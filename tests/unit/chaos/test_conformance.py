"""Unit tests of chaos.conformance's pure parts: JSON equality, reduce comparison, plan descriptions and divergence
signatures, closed-loop convergence driven by in-process planners, and failure grouping (no processes)."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest

from agent.session.planner import plan_recovery, plan_rule
from agent.session.reducer import reduce_session
from chaos.conformance import (
    Failure,
    closed_loop,
    describe_divergence,
    describe_plan,
    entry_kinds,
    first_difference,
    group_by_rule,
    group_by_signature,
    json_equal,
    plan_shape_problem,
    reduce_problem,
    scripted_outcome,
)


def fixture(corpus, planner_case: str) -> tuple[bytes, dict, dict]:
    """(session bytes, current, expected plan) of a planner fixture of the contract corpus."""
    case = json.loads((corpus / "planner-fixtures" / f"{planner_case}.json").read_text())
    expected = json.loads((corpus / "planner-fixtures" / f"{planner_case}.expected.json").read_text())
    return (corpus / "fixtures" / case["sessionFile"]).read_bytes(), case["current"], expected


def reference_asker(current: dict, bugs: frozenset = frozenset()):
    """A closed-loop `ask` callback backed by the in-process reference planner (optionally with bug switches)."""
    return lambda log: (plan_recovery(reduce_session(log), current, bugs=bugs), None)


class TestJsonEqual:
    def test_member_order_is_irrelevant(self):
        """Objects with the same members in another order are equal."""
        assert json_equal({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1})

    def test_array_order_matters(self):
        """Arrays with the same items in another order differ, and the path names the index."""
        assert not json_equal([1, 2], [2, 1])
        assert first_difference({"x": [1, 2]}, {"x": [2, 1]}) == "x[0]: expected 1, got 2"

    def test_integers_compare_as_integers(self):
        """An expected integer needs an integer; a boolean is never a number; null is not absent."""
        assert not json_equal({"n": 1}, {"n": 1.0})
        assert json_equal({"n": 1.0}, {"n": 1})
        assert not json_equal({"n": 1}, {"n": True})
        assert not json_equal({"n": None}, {})
        assert first_difference({"n": None}, {}) == "n: missing"

    def test_extra_member_is_named(self):
        """A member the expected value lacks is reported as unexpected."""
        assert first_difference({"a": 1}, {"a": 1, "b": 2}) == "b: unexpected member (2)"


class TestReduceProblem:
    STATE: ClassVar[dict] = {"ok": True, "state": {"operation": {"kind": "idle"}, "transcript": [{"role": "user"}]}}

    def test_agreement(self):
        """An equal state is no problem."""
        assert reduce_problem(self.STATE, json.loads(json.dumps(self.STATE))) is None

    def test_state_difference_groups_by_generic_path(self):
        """A different transcript item is reported with its path, indices dropped from the signature."""
        actual = {"ok": True, "state": {"operation": {"kind": "idle"}, "transcript": [{"role": "tool"}]}}
        signature, detail = reduce_problem(self.STATE, actual)
        assert signature == "reduce: state differs at state.transcript[].role"
        assert detail == 'state.transcript[0].role: expected "user", got "tool"'

    @pytest.mark.parametrize(("actual", "words"), [
        ({"ok": False, "error": {"code": "INVALID_FACT", "line": 4, "seq": 3}}, "error line differs"),
        ({"ok": False, "error": {"code": "DUPLICATE_ID", "line": 3, "seq": 3}}, "error code differs"),
        ({"ok": False, "error": {"code": "INVALID_FACT", "line": 3}}, "error seq differs"),
        ({"ok": True, "state": {}}, "accepts a log the reference rejects"),
    ])
    def test_error_must_match_code_line_and_seq(self, actual, words):
        """An expected error matches on code and line, and on seq exactly when the expected error has one."""
        expected = {"ok": False, "error": {"code": "INVALID_FACT", "line": 3, "seq": 3}}
        assert words in reduce_problem(expected, actual)[0]

    def test_unexpected_seq_is_a_difference(self):
        """An implementation may not report a seq the reference error does not have."""
        expected = {"ok": False, "error": {"code": "MISSING_HEADER", "line": 1}}
        assert "seq" in reduce_problem(expected, {"ok": False, "error": {"code": "MISSING_HEADER", "line": 1,
                                                                          "seq": 1}})[0]


class TestDescriptions:
    def test_stale_calls_signature(self, corpus):
        """A stale call cited under the earlier assistant's id reads as a startTool of an earlier assistant message."""
        data, current, expected = fixture(corpus, "ours-stale-calls-same-run")
        state = reduce_session(data)
        stale = plan_recovery(state, current, bugs=frozenset({"stale-assistant-calls"}))
        kinds = entry_kinds(data)
        earlier = next(i for i, k in kinds.items() if k == "assistant" and i != expected["finalEntryId"])
        text = describe_divergence(state, expected, plan_rule(state, current), dict(stale, assistantEntryId=earlier),
                                   entries=kinds)
        assert text == "reference P5.2 finish completed; implementation startTool read#0 of an earlier assistant message"

    def test_stale_call_under_the_current_id(self, corpus):
        """The upstream defect's plan (current id, stale call) reads as a call the current message does not have."""
        data, current, expected = fixture(corpus, "ours-stale-calls-same-run")
        state = reduce_session(data)
        stale = plan_recovery(state, current, bugs=frozenset({"stale-assistant-calls"}))
        assert describe_divergence(state, expected, "P5.2", stale) == (
            "reference P5.2 finish completed; implementation startTool read#0, not a call of the current assistant "
            "message (it has none)")

    def test_without_entries_a_foreign_id_is_another_entry(self, corpus):
        """Without the log's entry kinds, a foreign assistantEntryId is only known not to be the current one."""
        data, current, _ = fixture(corpus, "ours-stale-calls-same-run")
        state = reduce_session(data)
        stale = dict(plan_recovery(state, current, bugs=frozenset({"stale-assistant-calls"})), assistantEntryId="x")
        assert describe_plan(state, stale) == "startTool read#0 of another entry"

    def test_same_description_names_the_differing_members(self, corpus):
        """When both plans read alike, the divergence names the members that differ."""
        data, _, expected = fixture(corpus, "ours-synthetic-then-next-call")
        state = reduce_session(data)
        wrong = dict(expected, arguments={"path": "elsewhere"})
        assert describe_divergence(state, expected, "P7.2.4", wrong).endswith("(differs in arguments)")

    @pytest.mark.parametrize(("plan", "text"), [
        ({"type": "finish", "outcome": "completed", "completion": "normal"}, "finish completed (idle no-op)"),
        ({"type": "finish", "outcome": "aborted"}, "finish aborted"),
        ({"type": "finish", "outcome": "failed", "error": {"code": "model_error", "message": "m"}},
         "finish failed model_error"),
        ({"type": "blocked", "reason": "environment_changed"}, "blocked environment_changed"),
        ({"type": "closeAttempt", "error": {"code": "aborted", "message": "Operation aborted"}},
         "closeAttempt aborted"),
        ({"type": "startStep", "stepKind": "assistant", "attempt": 2, "stepId": "s", "contextThroughEntryId": "c"},
         "startStep assistant attempt 2"),
        ({"type": "jump"}, "jump plan"),
        ([1], "no plan"),
    ])
    def test_plan_words(self, plan, text):
        """Each plan type reads as its type and the few members that identify it."""
        assert describe_plan({"operation": {"kind": "idle"}}, plan) == text

    def test_start_step_off_the_boundary_is_named(self, corpus):
        """An attempt-1 startStep that cites anything but the context boundary says so."""
        data, _, expected = fixture(corpus, "ours-synthetic-then-next-step")
        state = reduce_session(data)
        assert describe_plan(state, expected) == "startStep assistant attempt 1"
        wrong = dict(expected, contextThroughEntryId=state["operation"]["step"]["settledEntryId"])
        assert describe_plan(state, wrong).endswith("citing an entry other than the context boundary")

    def test_synthetic_results_are_listed(self, corpus):
        """An appendSynthetic lists reason, tool and index of every result."""
        data, _, expected = fixture(corpus, "abort-pending-tool")
        state = reduce_session(data)
        assert describe_plan(state, expected).startswith("appendSynthetic interrupted read#0")

    def test_entry_kinds_reads_roles_and_record_types(self, corpus):
        """entry_kinds maps entry ids to message roles and record ids to record types."""
        data, _, _ = fixture(corpus, "ours-stale-calls-same-run")
        kinds = entry_kinds(data)
        assert {"user", "assistant", "tool", "runStarted", "stepAttempt"} <= set(kinds.values())

    def test_malformed_plans_are_described_not_raised(self, corpus):
        """Members of the wrong type still give a description (a foreign planner's output is untrusted)."""
        data, _, _ = fixture(corpus, "ours-synthetic-then-next-call")
        state = reduce_session(data)
        assert describe_plan(state, {"type": "startTool", "assistantEntryId": [1], "toolIndex": "x"}) == \
            "startTool None#x without an entry id"
        assert describe_plan(state, {"type": "appendSynthetic", "results": "all"}) == "appendSynthetic (no results)"

    def test_plan_shape(self):
        """Only objects with one of the six plan types look like plans."""
        assert plan_shape_problem({"type": "finish"}) is None
        assert plan_shape_problem({"type": "retry"}).startswith("unknown plan type")
        assert plan_shape_problem("finish").startswith("not a JSON object")


class TestClosedLoop:
    def test_reference_planner_converges_on_every_planner_fixture(self, corpus):
        """The reference planner's plans reach idle or blocked from every planner fixture (or skip without a snapshot)."""
        for path in sorted((corpus / "planner-fixtures").glob("*.expected.json")):
            name = path.name[: -len(".expected.json")]
            data, current, expected = fixture(corpus, name)
            result = closed_loop(data, current, None, expected, reference_asker(current))
            assert result.status in ("pass", "skipped"), (name, result)
            if name != "start-run-step":  # run-accepted has no stepAttempt, hence no snapshot behind the digest
                assert result.status == "pass", (name, result)

    def test_retry_runs_to_idle_with_scripted_answers(self, corpus):
        """From an open attempt: retry, the scripted stop answer, finish, idle; the trace names each plan."""
        data, current, expected = fixture(corpus, "retry-attempt")
        result = closed_loop(data, current, None, expected, reference_asker(current))
        assert (result.status, result.end, result.steps) == ("pass", "idle", 2)
        assert result.trace == ["startStep assistant attempt 2", "finish completed"]

    def test_store_rejects_the_stale_plan(self, corpus):
        """A stale startTool is rejected by the reference store at step 0, with the plan and the code."""
        data, current, _ = fixture(corpus, "ours-stale-calls-same-run")
        bugs = frozenset({"stale-assistant-calls"})
        first = plan_recovery(reduce_session(data), current, bugs=bugs)
        result = closed_loop(data, current, None, first, reference_asker(current, bugs))
        assert (result.status, result.step, result.plan) == ("fail", 0, first)
        assert "rejected by the reference store (INVALID_REFERENCE)" in result.signature

    def test_repeated_plan_is_a_cycle(self, corpus):
        """A planner that returns the replay it already executed is caught as a cycle at step 1."""
        data, current, expected = fixture(corpus, "replay-safe-tool")
        result = closed_loop(data, current, None, expected, lambda log: (expected, None))
        assert (result.status, result.step) == ("fail", 1)
        assert result.signature == "closed loop: cycle, startTool read#0 (replay) returned again after it was executed"

    def test_bound(self, corpus):
        """A loop that needs more plans than the bound fails with the bound in its signature."""
        data, current, expected = fixture(corpus, "retry-attempt")
        result = closed_loop(data, current, None, expected, reference_asker(current), bound=1)
        assert result.status == "fail"
        assert result.signature == "closed loop: no idle or blocked state within 1 plans"

    def test_implementation_failure_mid_loop(self, corpus):
        """When the implementation gives no plan for a grown log, the loop fails with its reason."""
        data, current, expected = fixture(corpus, "retry-attempt")
        result = closed_loop(data, current, None, expected, lambda log: (None, "timeout after 1s"))
        assert (result.status, result.step) == ("fail", 1)
        assert result.signature == "closed loop: implementation failed (timeout after 1s)"

    def test_materialiser_refusal(self, corpus):
        """A plan the reference materialiser cannot execute fails the loop at that step."""
        data, current, _ = fixture(corpus, "retry-attempt")
        wrong = {"type": "startTool", "mode": "replay", "assistantEntryId": "x", "toolIndex": 0,
                 "toolStartedId": "nope", "toolName": "read", "arguments": {}}
        result = closed_loop(data, current, None, wrong, reference_asker(current))
        assert result.status == "fail" and "cannot be executed by the reference materialiser" in result.signature

    def test_empty_transaction_is_rejected(self, corpus):
        """An appendSynthetic without results is an empty transaction, which the reference store rejects."""
        data, current, _ = fixture(corpus, "ours-synthetic-then-next-call")
        empty = {"type": "appendSynthetic", "results": []}
        result = closed_loop(data, current, None, empty, reference_asker(current))
        assert result.signature == ("closed loop: appendSynthetic (no results) rejected by the reference store "
                                    "(EMPTY_TRANSACTION)")

    def test_blocked_is_an_end(self, corpus):
        """A blocked plan ends the loop as a pass (blocked is a fixed point)."""
        data, current, expected = fixture(corpus, "configuration-changed")
        result = closed_loop(data, current, None, expected, reference_asker(current))
        assert (result.status, result.end) == ("pass", "blocked configuration_changed")

    def test_torn_tail_is_repaired_before_appending(self, corpus):
        """A prefix with a torn tail is executed from its committed bytes, as the store's open repairs it."""
        data = (corpus / "fixtures" / "torn-tail.jsonl").read_bytes()
        _, current, _ = fixture(corpus, "retry-attempt")
        state = reduce_session(data)
        assert state["repairedLength"] < len(data)
        first = plan_recovery(state, current)
        result = closed_loop(data, current, None, first, reference_asker(current))
        assert result.status in ("pass", "skipped")

    def test_scripted_outcomes(self):
        """Model steps answer stop, compactions summarize, tools succeed; other plans have no outcome."""
        answer = scripted_outcome({"type": "startStep", "stepKind": "assistant"})
        assert answer["stopReason"] == "stop" and answer["message"]["content"]
        assert "summary" in scripted_outcome({"type": "startStep", "stepKind": "compaction"})
        assert scripted_outcome({"type": "startTool", "mode": "start"})["type"] == "success"
        assert scripted_outcome({"type": "finish"}) is None


class TestGrouping:
    FAILURES: ClassVar[list[Failure]] = [
        Failure("plan", "c", "p1", "s::a", "P5.2", "sig A", "d"),
        Failure("closed-loop", "c", "p1", "s::a", "P5.2", "sig B", "d", step=0),
        Failure("plan", "c", "p2", "t::b", "P5.2", "sig A", "d"),
        Failure("reduce", "c", "p3", "u::c", "reduce", "sig C", "d"),
        Failure("plan", "c", "p4", "v::d", "P1.1", "sig D", "d"),
    ]

    def test_by_rule_in_spec_order(self):
        """Failures group by reference rule in SPEC order, reduce failures last, with signature counts."""
        groups = group_by_rule(self.FAILURES)
        assert list(groups) == ["P1.1", "P5.2", "reduce"]
        assert groups["P5.2"] == {"count": 3, "kinds": {"plan": 2, "closed-loop": 1},
                                  "signatures": {"sig A": 2, "sig B": 1}}

    def test_by_signature_most_frequent_first(self):
        """Failures group by signature, most frequent first, with their rules and examples."""
        groups = group_by_signature(self.FAILURES)
        assert next(iter(groups)) == "sig A"
        assert groups["sig A"]["count"] == 2 and groups["sig A"]["rules"] == ["P5.2"]
        assert [e["origin"] for e in groups["sig A"]["examples"]] == ["s::a", "t::b"]
        assert groups["sig B"]["examples"][0]["step"] == 0
