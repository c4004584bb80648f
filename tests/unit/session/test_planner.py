"""Unit tests of the recovery planner: every §14.4 rule, every gate order, every §16 difference, every bug switch.

States are built by hand in the exported SessionState shape (§10); the boundary is passed explicitly (§14.1). The
corpus runner (tests/integration/test_planner_corpus.py) covers the same planner on real reductions.
"""

from __future__ import annotations

import copy

import pytest

from agent.session.planner import (
    PLANNER_BUGS,
    SYNTHETIC_CONTENT,
    PlannerInputError,
    plan_recovery,
    plan_rule,
)


def ID(n: int) -> str:
    return f"018f0000-0000-7000-8000-{n:012x}"


ZERO = "sha256:" + "0" * 64
ONE = "sha256:" + "1" * 64
DIGEST = "sha256:83d5da8892d877c5f94a6ff60ea8babcd1138107dcb80ed8f747372346bb5f75"
OTHER_DIGEST = "sha256:" + "f" * 64
SNAPSHOT = {
    "model": "test/model",
    "systemPromptDigest": ZERO,
    "tools": [{"name": "read", "definitionDigest": ZERO}, {"name": "bash", "definitionDigest": ONE}],
    "adapterIdentity": "openrouter:chat-completions:v1",
    "routingIdentity": "openrouter:test/model",
    "outputOptionsDigest": ZERO,
}
READ = {"name": "read", "definitionDigest": ZERO, "replay": "safe", "replayKey": "builtin:read:v1"}
BASH = {"name": "bash", "definitionDigest": ONE, "replay": "never", "replayKey": "builtin:bash:v1"}
CURRENT = {"configurationDigest": DIGEST, "environmentIdentity": "fixture", "tools": [READ, BASH]}

OP, USER, STEP, ATTEMPT, ASSISTANT = ID(4), ID(2), ID(5), ID(6), ID(8)
BOUNDARY = ID(0x40)


def current(**changes) -> dict:
    out = copy.deepcopy(CURRENT)
    out.update(changes)
    return out


def tools(*items) -> list[dict]:
    return [dict(item) for item in items]


def call(call_id: str, name: str = "read", arguments: str = '{"path":"README.md"}') -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant(*calls, content=None) -> dict:
    msg = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = list(calls)
    return msg


def tool_msg(call_id: str, content: str = "ok") -> dict:
    return {"role": "tool", "content": content, "tool_call_id": call_id}


def step(status: str, *, attempt: int = 1, stop_reason: str | None = None, kind: str = "assistant", **extra) -> dict:
    out = {
        "operationId": OP,
        "stepId": STEP,
        "attemptId": ATTEMPT,
        "attempt": attempt,
        "stepKind": kind,
        "status": status,
        "contextThroughEntryId": USER,
        "configurationSnapshot": copy.deepcopy(SNAPSHOT),
        "configurationDigest": DIGEST,
    }
    if status == "settled":
        out["settledEntryId"] = ASSISTANT if kind == "assistant" else ID(0x17)
        if kind == "assistant":
            out["stopReason"] = stop_reason
    out.update(extra)
    return out


def started(index: int, call_id: str, *, name: str = "read", status: str = "pending", **extra) -> dict:
    safe = name == "read"
    out = {
        "operationId": OP,
        "toolStartedId": ID(0x100 + index),
        "stepId": STEP,
        "assistantEntryId": ASSISTANT,
        "toolIndex": index,
        "toolCallId": call_id,
        "toolName": name,
        "arguments": {"path": "recorded"},
        "replay": "safe" if safe else "never",
        "replayKey": "builtin:read:v1" if safe else "builtin:bash:v1",
        "environmentIdentity": "fixture",
        "resultEntryId": ID(0x200 + index),
        "status": status,
    }
    out.update(extra)
    return out


def run_state(transcript=None, *, step_state=None, tool_calls=(), abort=False, env="fixture") -> dict:
    op = {"kind": "run", "operationId": OP, "inputEntryId": USER, "toolCalls": list(tool_calls),
          "abortRequested": abort}
    if step_state is not None:
        op["step"] = step_state
    return _state(transcript or [{"role": "user", "content": "inspect"}], op, env)


def compaction_state(*, step_state=None, abort=False) -> dict:
    op = {
        "kind": "compaction",
        "operationId": OP,
        "inputThroughEntryId": USER,
        "resultEntryId": ID(0x17),
        "abortRequested": abort,
    }
    if step_state is not None:
        op["step"] = step_state
    return _state([{"role": "user", "content": "inspect"}], op, "fixture")


def _state(transcript, op, env) -> dict:
    return {
        "header": {
            "id": ID(1),
            "createdAt": 1710000000000,
            "cwd": "/workspace",
            "provider": "openrouter",
            "model": "test/model",
            "environmentIdentity": env,
        },
        "transcript": transcript,
        "activeContext": list(transcript),
        "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        "operation": op,
        "repairedLength": 1000,
    }


def tool_use_state(calls, *, tool_calls=(), after=(), abort=False, before=()) -> dict:
    transcript = [{"role": "user", "content": "inspect"}, *before, assistant(*calls), *after]
    return run_state(
        transcript, step_state=step("settled", stop_reason="toolUse"), tool_calls=tool_calls, abort=abort
    )


def decide(state, cur=CURRENT, bugs=frozenset()):
    """(rule, plan) for a state; both public functions must agree."""
    return plan_rule(state, cur, boundary=BOUNDARY, bugs=bugs), plan_recovery(state, cur, boundary=BOUNDARY, bugs=bugs)


def pre(index: int, call_id: str, name: str, reason: str) -> dict:
    return {
        "assistantEntryId": ASSISTANT,
        "toolIndex": index,
        "toolCallId": call_id,
        "toolName": name,
        "reason": reason,
        "content": SYNTHETIC_CONTENT[reason],
    }


def interrupted(index: int, call_id: str, name: str = "read") -> dict:
    return {
        "assistantEntryId": ASSISTANT,
        "toolIndex": index,
        "toolCallId": call_id,
        "toolName": name,
        "toolStartedId": ID(0x100 + index),
        "resultEntryId": ID(0x200 + index),
        "reason": "interrupted",
        "content": SYNTHETIC_CONTENT["interrupted"],
    }


BLOCKED = {r: {"type": "blocked", "reason": r} for r in (
    "configuration_changed", "environment_changed", "replay_declaration_changed", "attempts_exhausted")}


class TestP0Idle:
    def test_idle_is_the_no_op_finish(self):
        """An idle state plans the idle no-op finish without a finalEntryId."""
        state = _state([], {"kind": "idle"}, "fixture")
        assert decide(state) == ("P0", {"type": "finish", "outcome": "completed", "completion": "normal"})


class TestP1Abort:
    def test_attempting_step_is_closed(self):
        """An abort with an attempting step closes the attempt with the fixed aborted error, before any gate."""
        state = run_state(step_state=step("attempting", attempt=2), abort=True)
        cur = current(configurationDigest=OTHER_DIGEST, environmentIdentity="elsewhere")
        assert decide(state, cur) == (
            "P1.1", {"type": "closeAttempt", "error": {"code": "aborted", "message": "Operation aborted"}})

    def test_pending_becomes_interrupted_and_untouched_aborted(self):
        """Under abort, pending calls get interrupted and untouched calls aborted, resolved ones nothing, by index."""
        calls = [call("c0"), call("c1"), call("c2", "bash", "{}")]
        state = tool_use_state(
            calls, tool_calls=[started(0, "c0"), started(1, "c1", status="completed")],
            after=[tool_msg("c1")], abort=True)
        assert decide(state, current(environmentIdentity="elsewhere")) == (
            "P1.2", {"type": "appendSynthetic", "results": [interrupted(0, "c0"), pre(2, "c2", "bash", "aborted")]})

    def test_length_calls_are_aborted_not_truncated(self):
        """Under abort even the unresolved calls of a length answer resolve as aborted."""
        state = run_state(
            [{"role": "user", "content": "x"}, assistant(call("c0"))],
            step_state=step("settled", stop_reason="length"), abort=True)
        assert decide(state) == ("P1.2", {"type": "appendSynthetic", "results": [pre(0, "c0", "read", "aborted")]})

    @pytest.mark.parametrize(
        "state",
        [
            run_state(abort=True),
            run_state(step_state=step("failed"), abort=True),
            compaction_state(step_state=step("settled", kind="compaction"), abort=True),
            run_state([{"role": "user", "content": "x"}, assistant(content="done")],
                      step_state=step("settled", stop_reason="stop"), abort=True),
        ],
        ids=["no-step", "failed-step", "settled-compaction", "stop-answer"],
    )
    def test_nothing_left_finishes_aborted(self, state):
        """An abort with no open attempt and no unresolved call finishes aborted."""
        assert decide(state) == ("P1.3", {"type": "finish", "outcome": "aborted"})

    def test_all_resolved_by_synthetic_finishes_aborted(self):
        """(f) Calls resolved by a pre-execution synthetic are not re-emitted under abort: the run finishes aborted."""
        calls = [call("c0", "missing", "{}"), call("c1")]
        state = tool_use_state(
            calls, tool_calls=[started(1, "c1", status="completed")],
            after=[tool_msg("c0", SYNTHETIC_CONTENT["unknownTool"]), tool_msg("c1")], abort=True)
        assert decide(state) == ("P1.3", {"type": "finish", "outcome": "aborted"})


class TestP2NoStep:
    def test_run_starts_an_assistant_step_at_the_boundary(self):
        """A run without a step starts attempt 1 of an assistant step citing the context boundary."""
        assert decide(run_state()) == (
            "P2", {"type": "startStep", "stepKind": "assistant", "attempt": 1, "contextThroughEntryId": BOUNDARY})

    def test_compaction_starts_a_compaction_step(self):
        """A compaction without a step starts attempt 1 of a compaction step."""
        assert decide(compaction_state()) == (
            "P2", {"type": "startStep", "stepKind": "compaction", "attempt": 1, "contextThroughEntryId": BOUNDARY})

    def test_boundary_is_read_from_the_reduction(self):
        """Without an explicit boundary the planner reads the reduction's out-of-band `.boundary` attribute."""

        class Reduction(dict):
            boundary = ID(0x99)

        plan = plan_recovery(Reduction(run_state()), CURRENT)
        assert plan["contextThroughEntryId"] == ID(0x99)

    def test_missing_boundary_is_a_clear_error(self):
        """A bare dict has no boundary; planning a new step from it raises PlannerInputError, not a KeyError."""
        with pytest.raises(PlannerInputError, match="boundary"):
            plan_recovery(run_state(), CURRENT)


class TestP3AttemptingOrFailed:
    def test_configuration_gate_comes_first(self):
        """A changed configuration digest blocks configuration_changed, even when the environment also changed."""
        state = run_state(step_state=step("attempting"))
        cur = current(configurationDigest=OTHER_DIGEST, environmentIdentity="elsewhere")
        assert decide(state, cur) == ("P3.1", BLOCKED["configuration_changed"])

    def test_failed_step_is_gated_too(self):
        """(i) A failed step is gated by the configuration before it finishes failed."""
        state = run_state(step_state=step("failed"))
        assert decide(state, current(configurationDigest=OTHER_DIGEST)) == ("P3.1", BLOCKED["configuration_changed"])

    def test_environment_gate_uses_the_header(self):
        """A header environment different from the current one blocks environment_changed."""
        state = run_state(step_state=step("failed"))
        assert decide(state, current(environmentIdentity="elsewhere")) == ("P3.2", BLOCKED["environment_changed"])

    def test_attempt_one_is_retried(self):
        """A crash-unknown attempt 1 is retried as attempt 2 of the same step with the same context."""
        state = run_state(step_state=step("attempting"))
        assert decide(state) == ("P3.3", {
            "type": "startStep", "stepKind": "assistant", "attempt": 2, "stepId": STEP, "contextThroughEntryId": USER})

    def test_compaction_attempt_is_retried_as_compaction(self):
        """A crash-unknown compaction attempt is retried with stepKind compaction."""
        state = compaction_state(step_state=step("attempting", kind="compaction"))
        assert decide(state)[1]["stepKind"] == "compaction"

    def test_attempt_two_is_exhausted(self):
        """A crash-unknown attempt 2 blocks attempts_exhausted: there is no attempt 3."""
        state = run_state(step_state=step("attempting", attempt=2))
        assert decide(state) == ("P3.4", BLOCKED["attempts_exhausted"])

    def test_failed_step_finishes_failed(self):
        """A failed step finishes the operation failed with the fixed model_error."""
        state = run_state(step_state=step("failed"))
        assert decide(state) == ("P3.5", {
            "type": "finish", "outcome": "failed",
            "error": {"code": "model_error", "message": "provider request failed"}})


class TestP4Compaction:
    def test_settled_compaction_finishes_with_its_result_entry(self):
        """A settled compaction finishes completed with finalEntryId = resultEntryId and no completion."""
        state = compaction_state(step_state=step("settled", kind="compaction"))
        assert decide(state) == ("P4", {"type": "finish", "outcome": "completed", "finalEntryId": ID(0x17)})


class TestP5Stop:
    @pytest.mark.parametrize("content", [None, "", "  \n\t", "\u2003\u3000"])
    def test_blank_answer_finishes_failed(self, content):
        """(g) A stop answer with blank content (null or str.strip() empty) finishes failed with empty_response."""
        state = run_state([{"role": "user", "content": "x"}, assistant(content=content)],
                          step_state=step("settled", stop_reason="stop"))
        assert decide(state) == ("P5.1", {"type": "finish", "outcome": "failed", "error": {
            "code": "empty_response", "message": "model returned an empty final answer"}})

    def test_answer_completes_normally(self):
        """A stop answer with content finishes completed normal with the settled entry."""
        state = run_state([{"role": "user", "content": "x"}, assistant(content=" done ")],
                          step_state=step("settled", stop_reason="stop"))
        assert decide(state) == ("P5.2", {
            "type": "finish", "outcome": "completed", "completion": "normal", "finalEntryId": ASSISTANT})

    def test_stale_calls_of_an_earlier_step_are_ignored(self):
        """(a) An earlier assistant's tool calls are never used: a later stop answer completes the run."""
        transcript = [{"role": "user", "content": "x"}, assistant(call("c0")), tool_msg("c0"),
                      assistant(content="done")]
        state = run_state(transcript, step_state=step("settled", stop_reason="stop"))
        assert decide(state)[0] == "P5.2"

    def test_no_gate_applies_to_a_settled_stop(self):
        """A settled answer finishes even under a changed configuration and environment (no effect is repeated)."""
        state = run_state([{"role": "user", "content": "x"}, assistant(content="done")],
                          step_state=step("settled", stop_reason="stop"))
        assert decide(state, current(configurationDigest=OTHER_DIGEST, environmentIdentity="e", tools=[]))[0] == "P5.2"


class TestP6Length:
    def test_length_without_calls_finishes_failed(self):
        """(g) A length answer without calls finishes failed with truncated_response."""
        state = run_state([{"role": "user", "content": "x"}, assistant(content="cut")],
                          step_state=step("settled", stop_reason="length"))
        assert decide(state) == ("P6.1", {"type": "finish", "outcome": "failed", "error": {
            "code": "truncated_response", "message": "model response was cut off by the output token limit"}})

    def test_every_unresolved_call_gets_truncated(self):
        """Unresolved calls of a length answer all get truncated results in one plan, skipping resolved ones."""
        calls = [call("c0"), call("c1", "missing", '{"x":'), call("c2")]
        transcript = [{"role": "user", "content": "x"}, assistant(*calls),
                      tool_msg("c1", SYNTHETIC_CONTENT["truncated"])]
        state = run_state(transcript, step_state=step("settled", stop_reason="length"))
        assert decide(state) == ("P6.2", {"type": "appendSynthetic", "results": [
            pre(0, "c0", "read", "truncated"), pre(2, "c2", "read", "truncated")]})

    def test_all_resolved_completes_truncated(self):
        """(c) Once every call has its truncated result the run completes truncated with the settled entry."""
        calls = [call("c0"), call("c1")]
        transcript = [{"role": "user", "content": "x"}, assistant(*calls),
                      tool_msg("c0", SYNTHETIC_CONTENT["truncated"]), tool_msg("c1", SYNTHETIC_CONTENT["truncated"])]
        state = run_state(transcript, step_state=step("settled", stop_reason="length"))
        assert decide(state) == ("P6.3", {
            "type": "finish", "outcome": "completed", "completion": "truncated", "finalEntryId": ASSISTANT})


class TestP7PendingCalls:
    def test_environment_gate_uses_the_intent_and_comes_first(self):
        """A pending call recorded under another environment blocks environment_changed before the definition gate."""
        state = tool_use_state([call("c0")], tool_calls=[started(0, "c0", environmentIdentity="old")])
        cur = current(tools=[dict(READ, definitionDigest=ONE)])
        assert decide(state, cur) == ("P7.1.1", BLOCKED["environment_changed"])

    def test_missing_declaration_blocks_configuration_changed(self):
        """A pending call whose tool is no longer declared blocks configuration_changed."""
        state = tool_use_state([call("c0")], tool_calls=[started(0, "c0")])
        assert decide(state, current(tools=tools(BASH))) == ("P7.1.2", BLOCKED["configuration_changed"])

    def test_definition_gate_before_replay_declaration(self):
        """A changed definition blocks configuration_changed even when the replay declaration changed too."""
        state = tool_use_state([call("c0")], tool_calls=[started(0, "c0")])
        cur = current(tools=[dict(READ, definitionDigest=ONE, replay="never")])
        assert decide(state, cur) == ("P7.1.2", BLOCKED["configuration_changed"])

    @pytest.mark.parametrize("change", [{"replay": "never"}, {"replayKey": "builtin:read:v2"}])
    def test_replay_declaration_change_blocks(self, change):
        """A safe pending call whose declaration is no longer safe with the same key blocks replay_declaration_changed,
        before the configuration digest gate."""
        state = tool_use_state([call("c0")], tool_calls=[started(0, "c0")])
        cur = current(configurationDigest=OTHER_DIGEST, tools=[dict(READ, **change)])
        assert decide(state, cur) == ("P7.1.3.1", BLOCKED["replay_declaration_changed"])

    def test_replay_needs_the_same_configuration(self):
        """(d) A safe replay under a changed configuration digest blocks configuration_changed."""
        state = tool_use_state([call("c0")], tool_calls=[started(0, "c0")])
        cur = current(configurationDigest=OTHER_DIGEST)
        assert decide(state, cur) == ("P7.1.3.2", BLOCKED["configuration_changed"])

    def test_safe_pending_is_replayed_with_recorded_arguments(self):
        """A safe pending call passing every gate is replayed with the recorded effective arguments."""
        state = tool_use_state([call("c0", arguments='{"path":"text"}')], tool_calls=[started(0, "c0")])
        rule, plan = decide(state)
        assert (rule, plan) == ("P7.1.3.3", {
            "type": "startTool", "mode": "replay", "assistantEntryId": ASSISTANT, "toolIndex": 0,
            "toolStartedId": ID(0x100), "toolName": "read", "arguments": {"path": "recorded"}})
        plan["arguments"]["path"] = "mutated"
        assert state["operation"]["toolCalls"][0]["arguments"] == {"path": "recorded"}

    def test_never_pending_is_interrupted(self):
        """A never pending call gets exactly one interrupted result, even under a changed configuration digest."""
        state = tool_use_state([call("c0", "bash", "{}")], tool_calls=[started(0, "c0", name="bash")])
        cur = current(configurationDigest=OTHER_DIGEST)
        assert decide(state, cur) == ("P7.1.4", {"type": "appendSynthetic", "results": [interrupted(0, "c0", "bash")]})

    def test_never_pending_still_gated_by_environment(self):
        """A never pending call recorded under another environment blocks environment_changed."""
        state = tool_use_state([call("c0", "bash", "{}")],
                               tool_calls=[started(0, "c0", name="bash", environmentIdentity="old")])
        assert decide(state) == ("P7.1.1", BLOCKED["environment_changed"])

    def test_pending_before_untouched(self):
        """(e) A pending call is resolved before a lower-index untouched call is started."""
        state = tool_use_state([call("c0"), call("c1", "bash", "{}")], tool_calls=[started(1, "c1", name="bash")])
        assert decide(state) == ("P7.1.4", {"type": "appendSynthetic", "results": [interrupted(1, "c1", "bash")]})

    def test_lowest_pending_first(self):
        """Of several pending calls the lowest index is handled first, one result per plan."""
        state = tool_use_state([call("c0", "bash", "{}"), call("c1", "bash", "{}")],
                               tool_calls=[started(0, "c0", name="bash"), started(1, "c1", name="bash")])
        assert decide(state)[1]["results"] == [interrupted(0, "c0", "bash")]


class TestP7UntouchedCalls:
    def test_unknown_to_the_attempt_even_if_declared_now(self):
        """(h) A name absent from the attempt's snapshot is unknownTool even when the current configuration has it."""
        state = tool_use_state([call("c0", "missing", "{}")])
        cur = current(tools=[READ, {"name": "missing", "definitionDigest": ZERO, "replay": "never", "replayKey": "k"}])
        assert decide(state, cur) == ("P7.2.1", {"type": "appendSynthetic", "results": [
            pre(0, "c0", "missing", "unknownTool")]})

    def test_unknown_tool_before_invalid_arguments(self):
        """An unknown name with invalid arguments is unknownTool: that gate comes first."""
        state = tool_use_state([call("c0", "missing", "not json")])
        assert decide(state)[0] == "P7.2.1"

    @pytest.mark.parametrize(
        "text",
        ["", "null", "[]", "1", '"s"', '{"a":1,"a":2}', '{"a":NaN}', '{"a":Infinity}', '{"a":1e400}',
         '{"a":"\\ud800"}', '{"path":', "{} {}", "[" * 64 + "]" * 64, '{"a":' + "[" * 64 + "]" * 64 + "}"],
        ids=["empty", "null", "array", "number", "string", "duplicate", "nan", "infinity", "overflow",
             "lone-surrogate", "truncated", "two-values", "array-depth", "depth-65"],
    )
    def test_invalid_arguments(self, text):
        """(j) Argument text that is not a strict-JSON object within depth 64 gets invalidArguments."""
        state = tool_use_state([call("c0", "read", text)])
        assert decide(state) == ("P7.2.2", {"type": "appendSynthetic", "results": [
            pre(0, "c0", "read", "invalidArguments")]})

    def test_depth_64_is_valid(self):
        """Arguments nested exactly 64 deep are valid and start the tool."""
        text = '{"a":' + "[" * 63 + "]" * 63 + "}"
        assert decide(tool_use_state([call("c0", "read", text)]))[0] == "P7.2.4"

    @pytest.mark.parametrize("declared", [[BASH], [dict(READ, definitionDigest=ONE), BASH]],
                             ids=["removed", "definition-changed"])
    def test_tool_the_model_saw_must_still_exist(self, declared):
        """(l) An untouched call whose tool was removed or redefined since the attempt blocks configuration_changed."""
        state = tool_use_state([call("c0")])
        assert decide(state, current(tools=declared)) == ("P7.2.3", BLOCKED["configuration_changed"])

    def test_untouched_call_starts_with_parsed_arguments(self):
        """An untouched valid call starts with its parsed arguments, with no environment or digest gate."""
        state = tool_use_state([call("c0", arguments='{"path":"README.md","n":[1,2.5]}')])
        cur = current(configurationDigest=OTHER_DIGEST, environmentIdentity="elsewhere")
        assert decide(state, cur) == ("P7.2.4", {
            "type": "startTool", "mode": "start", "assistantEntryId": ASSISTANT, "toolIndex": 0,
            "toolName": "read", "arguments": {"path": "README.md", "n": [1, 2.5]}})

    def test_call_resolved_by_synthetic_is_skipped(self):
        """(b) A call answered by a tool message after A (a pre-execution synthetic) is resolved; the next starts."""
        state = tool_use_state([call("c0", "missing", "{}"), call("c1")],
                               after=[tool_msg("c0", SYNTHETIC_CONTENT["unknownTool"])])
        assert decide(state)[1]["toolIndex"] == 1

    def test_tool_message_before_a_does_not_resolve(self):
        """A tool message before A with a reused call id does not resolve A's call."""
        state = tool_use_state([call("c0")], before=[assistant(call("c0")), tool_msg("c0")])
        assert decide(state)[0] == "P7.2.4"


class TestP7NextStep:
    def test_all_resolved_starts_the_next_step_at_the_boundary(self):
        """(k) When every call is resolved the next step starts at the boundary, which may be a synthetic entry."""
        state = tool_use_state([call("c0", "read", "null")],
                               after=[tool_msg("c0", SYNTHETIC_CONTENT["invalidArguments"])])
        assert decide(state) == (
            "P7.3", {"type": "startStep", "stepKind": "assistant", "attempt": 1, "contextThroughEntryId": BOUNDARY})

    def test_completed_started_tools_resolve(self):
        """Calls completed through toolStarted and a result are resolved."""
        state = tool_use_state([call("c0")], tool_calls=[started(0, "c0", status="completed")], after=[tool_msg("c0")])
        assert decide(state)[0] == "P7.3"


class TestPurity:
    def test_state_and_current_are_not_mutated(self):
        """Planning leaves its inputs unchanged."""
        state = tool_use_state([call("c0"), call("c1", "bash", "{}")], tool_calls=[started(1, "c1", name="bash")])
        before = (copy.deepcopy(state), copy.deepcopy(CURRENT))
        decide(state)
        assert (state, CURRENT) == before


def stale_same_run_state() -> dict:
    transcript = [{"role": "user", "content": "x"}, assistant(call("c0")), tool_msg("c0"), assistant(content="done")]
    older = started(0, "c0", status="completed", assistantEntryId=ID(0x7), stepId=ID(0x77))
    return run_state(transcript, step_state=step("settled", stop_reason="stop"), tool_calls=[older])


class TestBugSwitches:
    def test_names(self):
        """The planner exports exactly its seven known-bug switch names."""
        assert PLANNER_BUGS == {
            "stale-assistant-calls", "pre-exec-synthetic-repeat", "replay-never-tools", "unbounded-retry",
            "ignore-configuration-change", "replay-ignores-environment", "start-untouched-while-pending"}

    def test_unknown_switch_is_refused(self):
        """An unknown bug name raises PlannerInputError instead of being silently ignored."""
        with pytest.raises(PlannerInputError, match="no-such-bug"):
            plan_recovery(run_state(), CURRENT, boundary=BOUNDARY, bugs=frozenset({"no-such-bug"}))

    def test_stale_assistant_calls(self):
        """stale-assistant-calls plans the previous step's call against the stop answer, the upstream defect."""
        state = stale_same_run_state()
        assert decide(state)[0] == "P5.2"
        assert decide(state, bugs=frozenset({"stale-assistant-calls"}))[1] == {
            "type": "startTool", "mode": "start", "assistantEntryId": ASSISTANT, "toolIndex": 0,
            "toolName": "read", "arguments": {"path": "README.md"}}

    def test_stale_assistant_calls_on_length(self):
        """stale-assistant-calls plans stale truncated synthetics for a length answer without calls."""
        transcript = [{"role": "user", "content": "x"}, assistant(call("c0")), tool_msg("c0"), assistant(content="c")]
        state = run_state(transcript, step_state=step("settled", stop_reason="length"),
                          tool_calls=[started(0, "c0", status="completed", assistantEntryId=ID(7))])
        assert decide(state)[0] == "P6.1"
        assert decide(state, bugs=frozenset({"stale-assistant-calls"})) == (
            "P6.2", {"type": "appendSynthetic", "results": [pre(0, "c0", "read", "truncated")]})

    def test_pre_exec_synthetic_repeat(self):
        """pre-exec-synthetic-repeat plans the same unknownTool synthetic again after it was appended."""
        state = tool_use_state([call("c0", "missing", "{}")], after=[tool_msg("c0", SYNTHETIC_CONTENT["unknownTool"])])
        assert decide(state)[0] == "P7.3"
        assert decide(state, bugs=frozenset({"pre-exec-synthetic-repeat"}))[1] == {
            "type": "appendSynthetic", "results": [pre(0, "c0", "missing", "unknownTool")]}

    def test_replay_never_tools(self):
        """replay-never-tools replays a pending never tool instead of interrupting it."""
        state = tool_use_state([call("c0", "bash", "{}")], tool_calls=[started(0, "c0", name="bash")])
        rule, plan = decide(state, bugs=frozenset({"replay-never-tools"}))
        assert (rule, plan["type"], plan["mode"], plan["toolStartedId"]) == ("P7.1.4", "startTool", "replay", ID(0x100))

    def test_unbounded_retry(self):
        """unbounded-retry retries an attempting attempt 2 again (attempt 3) instead of attempts_exhausted."""
        state = run_state(step_state=step("attempting", attempt=2))
        assert decide(state, bugs=frozenset({"unbounded-retry"}))[1] == {
            "type": "startStep", "stepKind": "assistant", "attempt": 3, "stepId": STEP, "contextThroughEntryId": USER}

    def test_ignore_configuration_change(self):
        """ignore-configuration-change retries an attempting step under a changed digest; a failed step still blocks."""
        cur = current(configurationDigest=OTHER_DIGEST)
        bugs = frozenset({"ignore-configuration-change"})
        assert decide(run_state(step_state=step("attempting")), cur, bugs)[0] == "P3.3"
        assert decide(run_state(step_state=step("failed")), cur, bugs)[1] == BLOCKED["configuration_changed"]

    def test_replay_ignores_environment(self):
        """replay-ignores-environment replays a safe read recorded elsewhere; a never tool still blocks."""
        bugs = frozenset({"replay-ignores-environment"})
        safe = tool_use_state([call("c0")], tool_calls=[started(0, "c0", environmentIdentity="old")])
        never = tool_use_state([call("c0", "bash", "{}")],
                               tool_calls=[started(0, "c0", name="bash", environmentIdentity="old")])
        assert decide(safe)[1] == BLOCKED["environment_changed"]
        assert decide(safe, bugs=bugs)[0] == "P7.1.3.3"
        assert decide(never, bugs=bugs)[1] == BLOCKED["environment_changed"]

    def test_start_untouched_while_pending(self):
        """start-untouched-while-pending starts the untouched call while an earlier one is pending, then resolves it."""
        bugs = frozenset({"start-untouched-while-pending"})
        calls = [call("c0"), call("c1", "bash", '{"command":"true"}')]
        state = tool_use_state(calls, tool_calls=[started(0, "c0")])
        assert decide(state)[0] == "P7.1.3.3"
        assert decide(state, bugs=bugs) == ("P7.2.4", {
            "type": "startTool", "mode": "start", "assistantEntryId": ASSISTANT, "toolIndex": 1,
            "toolName": "bash", "arguments": {"command": "true"}})
        # Nothing untouched is left: the pending call is handled as P7.1 says (replayed, never skipped).
        done = tool_use_state(calls, tool_calls=[started(0, "c0"), started(1, "c1", name="bash", status="completed")],
                              after=[tool_msg("c1")])
        assert decide(done, bugs=bugs) == decide(done)
        assert decide(done)[0] == "P7.1.3.3"
