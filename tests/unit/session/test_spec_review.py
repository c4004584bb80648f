"""Spec review of the reducer's reading side: one mutated corpus log per rule of SPEC §2-§11, exact {code, line, seq}.

Each case starts from a valid fixture (``completed-tool-run``, ``completed-compaction``), changes one thing, and
reduces the raw bytes through ``reduce_session``, so framing, strict JSON and the reducer are exercised together.
The point is the cases the corpus does not hold: check order inside a fact, seq presence, booleans and ``1.0`` as
integers, overflowing literals, reserved IDs, attempt 2, the usage ledger edge, compaction tails and exports.
"""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from agent.session.errors import CorruptionError
from agent.session.framing import parse_arguments
from agent.session.reducer import reduce_session


def _fixture(corpus, name: str) -> list:
    text = (corpus / "fixtures" / name).read_bytes().decode()
    return [json.loads(line) for line in text.split("\n")[:-1]]


@pytest.fixture
def run(corpus) -> list:
    """completed-tool-run: 0 header, 1 [user #02, runStarted], 2 stepAttempt, 3 assistant #08, 4 toolStarted #09,
    5 result #0a, 6 stepAttempt, 7 assistant #0e, 8 operationFinished, 9 usage (seq = index + 1 from line 2 on)."""
    return _fixture(corpus, "completed-tool-run.jsonl")


@pytest.fixture
def compaction(corpus) -> list:
    """completed-compaction: the run above, then 10 compactionStarted, 11 stepAttempt, 12 entry #17, 13 finish."""
    return _fixture(corpus, "completed-compaction.jsonl")


def i(n: int) -> str:
    return f"018f0000-0000-7000-8000-{n:012x}"


def dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def data(lines: list) -> bytes:
    return ("\n".join(line if isinstance(line, str) else dumps(line) for line in lines) + "\n").encode()


def error(lines: list) -> tuple:
    try:
        reduce_session(data(lines))
    except CorruptionError as exc:
        return exc.code, exc.line, exc.seq
    raise AssertionError("the log reduced without error")


def record(seq: int, n: int, body: dict) -> dict:
    return {"kind": "record", "seq": seq, "id": i(n), "timestamp": 1, "record": body}


def entry(seq: int, n: int, body: dict) -> dict:
    return {"kind": "entry", "seq": seq, "id": i(n), "timestamp": 1, "entry": body}


def user(seq: int, n: int, content: str = "x") -> dict:
    return entry(seq, n, {"type": "message", "message": {"role": "user", "content": content}})


def attempt2(run: list, seq: int, n: int, attempt_id: int, **changes) -> dict:
    body = copy.deepcopy(run[2]["record"])
    body.update(attempt=2, attemptId=i(attempt_id))
    body.update(changes)
    return record(seq, n, body)


def synthetic(seq: int, n: int, reason: str = "aborted", content: str = "Operation aborted before execution.") -> dict:
    body = {
        "type": "message",
        "stepId": i(5),
        "assistantEntryId": i(8),
        "toolIndex": 0,
        "toolName": "read",
        "message": {"role": "tool", "tool_call_id": "call_1", "content": content},
        "result": {"type": "synthetic", "reason": reason},
    }
    return entry(seq, n, body)


# ------------------------------------------------------------------------------------------- §2.5 / §2.6 numbers


@pytest.mark.parametrize("value", [1.0, True, 0, 2**53, "1", None])
def test_bad_seq_is_invalid_fact_without_seq(run, value):
    """A seq that is 1.0, a boolean, 0, 2^53, a string or null is INVALID_FACT without a seq (§4.2 step 2)."""
    run[1][0]["seq"] = value
    assert error(run) == ("INVALID_FACT", 2, None)


def test_negative_zero_seq_is_zero(run):
    """The integer literal -0 denotes 0, which is below 1: INVALID_FACT without a seq (§2.5, §4.2)."""
    lines = [dumps(x) for x in run]
    lines[1] = lines[1].replace('"seq":1,', '"seq":-0,', 1)
    assert error(lines) == ("INVALID_FACT", 2, None)


@pytest.mark.parametrize("value", [1.0, True, -1, 2**53, None])
def test_bad_timestamp_is_invalid_fact_with_seq(run, value):
    """A timestamp that is not an integer literal in 0..2^53-1 is INVALID_FACT with the fact's seq (§4.2 step 5)."""
    run[2]["timestamp"] = value
    assert error(run) == ("INVALID_FACT", 3, 3)


def test_timestamp_at_max_safe_integer_is_valid(run):
    """A timestamp of exactly 2^53-1 is accepted (§2.6)."""
    run[2]["timestamp"] = 2**53 - 1
    reduce_session(data(run))


def test_integer_literal_overflowing_binary64_in_arguments_is_invalid_fact(run):
    """An integer literal whose value overflows binary64 (10^400) in toolStarted.arguments is INVALID_FACT (§2.5, §6.5 step 10)."""
    lines = [dumps(x) for x in run[:5]]
    lines[4] = lines[4].replace('"arguments":{"path":"README.md"}', '"arguments":{"path":"README.md","n":1' + "0" * 400 + "}")
    assert error(lines) == ("INVALID_FACT", 5, 5)


def test_negative_integer_literal_overflowing_binary64_in_arguments_is_invalid_fact(run):
    """A nested negative integer literal below -(2^1024-2^970) is non-finite as a double: INVALID_FACT (§6.5 step 10)."""
    lines = [dumps(x) for x in run[:5]]
    huge = str(2**1024 - 2**970)
    lines[4] = lines[4].replace('"arguments":{"path":"README.md"}', '"arguments":{"path":"README.md","n":[-' + huge + "]}")
    assert error(lines) == ("INVALID_FACT", 5, 5)


def test_largest_integer_rounding_to_a_finite_double_is_accepted_in_arguments(run):
    """2^1024-2^970-1 rounds to the largest finite double, so it is a finite number in arguments (§6.5 step 10)."""
    lines = [dumps(x) for x in run[:5]]
    big = str(2**1024 - 2**970 - 1)
    lines[4] = lines[4].replace('"arguments":{"path":"README.md"}', '"arguments":{"path":"README.md","n":' + big + "}")
    state = reduce_session(data(lines))
    assert state["operation"]["toolCalls"][0]["arguments"]["n"] == 2**1024 - 2**970 - 1


def test_float_literal_1e400_in_arguments_is_invalid_fact(run):
    """1e400 parses but overflows binary64: INVALID_FACT at the field that receives it (§2.5, §6.5 step 10)."""
    lines = [dumps(x) for x in run[:5]]
    lines[4] = lines[4].replace('"arguments":{"path":"README.md"}', '"arguments":{"path":"README.md","n":1e400}')
    assert error(lines) == ("INVALID_FACT", 5, 5)


def test_argument_text_with_overflowing_integer_is_invalid_for_the_planner():
    """parse_arguments rejects an integer literal that is not finite as a double, like 1e400 (§14.3)."""
    assert parse_arguments('{"n":1' + "0" * 400 + "}") is None
    assert parse_arguments('{"n":1e400}') is None
    assert parse_arguments('{"n":' + str(2**1024 - 2**970 - 1) + "}") == {"n": 2**1024 - 2**970 - 1}


@pytest.mark.parametrize("value", [0.0, False])
def test_tool_index_must_be_an_integer_literal(run, value):
    """toolIndex 0.0 or false is INVALID_FACT (§2.6, §6.5 step 6)."""
    run[4]["record"]["toolIndex"] = value
    assert error(run[:5]) == ("INVALID_FACT", 5, 5)


@pytest.mark.parametrize("value", [2.0, True])
def test_attempt_must_be_an_integer_literal(run, value):
    """stepAttempt attempt 2.0 or true is INVALID_FACT (§2.6, §6.3 step 3)."""
    assert error(run[:3] + [attempt2(run, 4, 0x20, 0x21, attempt=value)]) == ("INVALID_FACT", 4, 4)


def test_header_version_2_0_is_accepted_but_true_is_not(run):
    """The header version is compared numerically (2.0 passes), and a boolean is not a number (§3)."""
    lines = [dumps(x) for x in run]
    reduce_session(data([lines[0].replace('"version":2', '"version":2.0')] + lines[1:]))
    run[0]["version"] = True
    assert error(run) == ("UNSUPPORTED_VERSION", 1, None)


# ---------------------------------------------------------------------------------------------- §2.4/§2.5 lines


def test_cr_between_tokens_mid_line_is_whitespace(run):
    """A raw CR between tokens inside a line is JSON whitespace; only a CR as the last character is an error (§2.4)."""
    lines = [dumps(x) for x in run]
    lines[2] = lines[2].replace('"kind":', '"kind":\r', 1)
    reduce_session(data(lines))
    lines[2] += "\r"
    assert error(lines) == ("CRLF_NOT_ALLOWED", 3, None)


def test_line_separators_inside_strings_are_ordinary_characters(run):
    """U+2028, U+2029 and U+0085 inside a string neither split the line nor break it (§2.1, §16.3)."""
    run[7]["entry"]["message"]["content"] = "a\u2028b\u2029c\u0085d"
    state = reduce_session(data(run))
    assert state["transcript"][-1]["content"] == "a\u2028b\u2029c\u0085d"


def test_bom_inside_a_string_is_legal_and_outside_is_malformed(run):
    """U+FEFF is an ordinary character inside a string, and MALFORMED_JSON anywhere outside one (§2.5)."""
    run[7]["entry"]["message"]["content"] = "\ufeffdone"
    reduce_session(data(run))
    lines = [dumps(x) for x in run]
    lines[3] = "\ufeff" + lines[3]
    assert error(lines) == ("MALFORMED_JSON", 4, None)


def test_duplicate_member_after_unescaping_in_a_nested_object_is_malformed(run):
    """A duplicate name hidden by an escape, deep inside a fact, is MALFORMED_JSON (§2.5)."""
    lines = [dumps(x) for x in run]
    lines[4] = lines[4].replace('{"path":"README.md"}', '{"path":"README.md","\\u0070ath":"x"}')
    assert error(lines) == ("MALFORMED_JSON", 5, None)


def test_escaped_surrogate_pair_is_fine_and_reversed_pair_is_malformed(run):
    """\\ud83d\\ude00 is one character; \\ude00\\ud83d is two lone surrogates (§2.5)."""
    lines = [dumps(x) for x in run]
    reduce_session(data(lines[:7] + [lines[7].replace('"done"', '"\\ud83d\\ude00"')] + lines[8:]))
    assert error(lines[:7] + [lines[7].replace('"done"', '"\\ude00\\ud83d"')]) == ("MALFORMED_JSON", 8, None)


def test_nesting_depth_128_is_legal_and_129_is_malformed(run):
    """Depth counts the enclosing containers: total depth 128 passes, 129 is MALFORMED_JSON (§2.5)."""
    lines = [dumps(x) for x in run[:5]]
    # The fact is depth 1, "record" depth 2, "arguments" depth 3, and "n" adds k arrays: total depth 3 + k.
    ok = lines[4].replace('{"path":"README.md"}', '{"path":"README.md","n":' + "[" * 125 + "]" * 125 + "}")
    reduce_session(data(lines[:4] + [ok]))
    bad = lines[4].replace('{"path":"README.md"}', '{"path":"README.md","n":' + "[" * 126 + "]" * 126 + "}")
    assert error(lines[:4] + [bad]) == ("MALFORMED_JSON", 5, None)


def test_integer_literal_of_4300_digits_parses_and_4301_is_malformed(run):
    """4300 digits is the limit for an integer literal; the next digit makes the line MALFORMED_JSON (§2.5)."""
    lines = [dumps(x) for x in run]
    at_limit = lines[2].replace('"timestamp":1710000000003', '"timestamp":' + "9" * 4300)
    assert error(lines[:2] + [at_limit]) == ("INVALID_FACT", 3, 3)  # parses, then fails the timestamp range
    over = lines[2].replace('"timestamp":1710000000003', '"timestamp":' + "9" * 4301)
    assert error(lines[:2] + [over]) == ("MALFORMED_JSON", 3, None)


def test_raw_surrogate_on_a_later_line_wins_over_an_earlier_blank_line(run):
    """The raw-surrogate scan runs over all committed bytes before any line is processed (§2.3 step 2)."""
    raw = data(run[:3]) + b"\n" + data(run[3:])[:-1].replace(b'"done"', b'"\xed\xa0\x80"') + b"\n"
    with pytest.raises(CorruptionError) as caught:
        reduce_session(raw)
    assert (caught.value.code, caught.value.line, caught.value.seq) == ("MALFORMED_JSON", 9, None)


# ------------------------------------------------------------------------------------------------ §4 and §4.4


def test_run_started_kind_check_precedes_operation_id_format(run):
    """operationKind != run is INVALID_TRANSITION even when operationId is malformed (§6.1 step 2 before 3)."""
    run[1][1]["record"].update(operationKind="compaction", operationId="bad")
    assert error(run) == ("INVALID_TRANSITION", 2, 2)


def test_fact_id_equal_to_a_reserved_operation_id_is_duplicate(run):
    """A record whose own id is a reserved operationId is DUPLICATE_ID (§4.2 step 8)."""
    run[2]["id"] = i(4)
    assert error(run) == ("DUPLICATE_ID", 3, 3)


def test_user_entry_id_equal_to_a_reserved_step_id_is_duplicate(run):
    """A user entry whose id is a reserved stepId is DUPLICATE_ID (§5.2 step 1)."""
    assert error(run[:3] + [user(4, 5)]) == ("DUPLICATE_ID", 4, 4)


def test_started_result_with_a_plain_reserved_id_is_invalid_reference(run):
    """A started-tool result whose id is a plain (step) reservation, not a tool-result one, is INVALID_REFERENCE (§4.4)."""
    run[5]["id"] = i(5)
    assert error(run[:6]) == ("INVALID_REFERENCE", 6, 6)


def test_started_result_with_an_unreserved_id_is_invalid_reference(run):
    """A started-tool result must consume a tool-result reservation (§5.4 step 1)."""
    run[5]["id"] = i(0x40)
    assert error(run[:6]) == ("INVALID_REFERENCE", 6, 6)


def test_tool_result_reservation_equal_to_the_operation_id_is_duplicate(run):
    """Reserving a resultEntryId that is already reserved is DUPLICATE_ID (§4.4, §6.5 step 14)."""
    run[4]["record"]["resultEntryId"] = i(4)
    assert error(run[:5]) == ("DUPLICATE_ID", 5, 5)


def test_tool_result_reservation_equal_to_its_own_fact_id_is_duplicate(run):
    """A toolStarted that reserves its own fact id fails step 8 of §4.2 with DUPLICATE_ID."""
    run[4]["record"]["resultEntryId"] = i(9)
    assert error(run[:5]) == ("DUPLICATE_ID", 5, 5)


def test_synthetic_whose_id_is_reserved_is_duplicate_after_its_own_checks(run):
    """A pre-execution synthetic consumes nothing: a reserved id is DUPLICATE_ID, but only after §5.5's checks."""
    assert error(run[:4] + [synthetic(5, 6)]) == ("DUPLICATE_ID", 5, 5)
    assert error(run[:4] + [synthetic(5, 6, content="wrong")]) == ("INVALID_TRANSCRIPT", 5, 5)


def test_duplicate_id_inside_one_array(run):
    """A fact id repeated later in the same array is DUPLICATE_ID with the second fact's seq (§4.2 step 6)."""
    assert error(run[:4] + [[synthetic(5, 0x41), user(6, 0x41)]]) == ("DUPLICATE_ID", 5, 6)


def test_invalid_transcript_reports_the_last_seq_of_the_transaction(run):
    """The end-of-transaction transcript check reports the transaction's last seq, not the offender's (§4.5)."""
    usage = {
        "kind": "usage",
        "seq": 6,
        "id": i(0x43),
        "timestamp": 1,
        "operationId": i(4),
        "attemptId": i(6),
        "usage": {"input": 1, "output": 0, "cacheRead": 0, "cacheWrite": 0},
    }
    assert error(run[:4] + [[user(5, 0x41), usage]]) == ("INVALID_TRANSCRIPT", 5, 6)


# -------------------------------------------------------------------------------------------------------- §6.3


def test_attempt_2_supersedes_and_a_late_answer_to_attempt_1_is_invalid_reference(run):
    """After attempt 2 the exported step is attempt 2, and attempt 1's answer is INVALID_REFERENCE (§5.3 step 5)."""
    state = reduce_session(data(run[:3] + [attempt2(run, 4, 0x20, 0x21)]))
    assert state["operation"]["step"]["attempt"] == 2
    assert state["operation"]["step"]["attemptId"] == i(0x21)
    late = copy.deepcopy(run[3])
    late["seq"] = 5
    assert error(run[:3] + [attempt2(run, 4, 0x20, 0x21), late]) == ("INVALID_REFERENCE", 5, 5)


def test_attempt_3_is_invalid_fact_and_a_second_attempt_2_is_invalid_transition(run):
    """attempt > 2 is INVALID_FACT (step 6); another attempt 2 of the same step is INVALID_TRANSITION (step 13)."""
    first = attempt2(run, 4, 0x20, 0x21)
    assert error(run[:3] + [first, attempt2(run, 5, 0x22, 0x23, attempt=3)]) == ("INVALID_FACT", 5, 5)
    assert error(run[:3] + [first, attempt2(run, 5, 0x22, 0x23)]) == ("INVALID_TRANSITION", 5, 5)


def test_attempt_2_after_step_failed_is_invalid_transition(run):
    """A retry after stepFailed is rejected (§6.3 step 13)."""
    failed = record(4, 0x20, {"type": "stepFailed", "operationId": i(4), "stepId": i(5), "attemptId": i(6),
                              "error": {"code": "x", "message": "y"}})
    assert error(run[:3] + [failed, attempt2(run, 5, 0x22, 0x23)]) == ("INVALID_TRANSITION", 5, 5)


def test_failed_step_exports_no_settled_fields(run):
    """A failed step has status failed and neither settledEntryId nor stopReason (§10.2)."""
    failed = record(4, 0x20, {"type": "stepFailed", "operationId": i(4), "stepId": i(5), "attemptId": i(6),
                              "error": {"code": "x", "message": "y"}})
    step = reduce_session(data(run[:3] + [failed]))["operation"]["step"]
    assert step["status"] == "failed"
    assert "settledEntryId" not in step and "stopReason" not in step


# -------------------------------------------------------------------------------------------------------- §6.5


def _without_read_in_snapshot(run: list) -> list:
    from agent.session.digests import configuration_digest

    lines = copy.deepcopy(run[:5])
    lines[2]["record"]["configurationSnapshot"]["tools"] = []
    lines[2]["record"]["configurationDigest"] = configuration_digest(lines[2]["record"]["configurationSnapshot"])
    return lines


def test_tool_started_replay_and_environment_checks_precede_the_snapshot_check(run):
    """Steps 11-12 of §6.5 (INVALID_FACT) come before step 13 (INVALID_TRANSITION), as pinned in §16.3."""
    assert error(_without_read_in_snapshot(run)) == ("INVALID_TRANSITION", 5, 5)
    lines = _without_read_in_snapshot(run)
    lines[4]["record"]["replay"] = "maybe"
    assert error(lines) == ("INVALID_FACT", 5, 5)
    lines = _without_read_in_snapshot(run)
    lines[4]["record"]["environmentIdentity"] = ""
    assert error(lines) == ("INVALID_FACT", 5, 5)


def test_tool_started_snapshot_check_precedes_the_result_reservation(run):
    """Step 13 (INVALID_TRANSITION) comes before reserving resultEntryId (step 14)."""
    lines = _without_read_in_snapshot(run)
    lines[4]["record"]["resultEntryId"] = i(4)
    assert error(lines) == ("INVALID_TRANSITION", 5, 5)


# -------------------------------------------------------------------------------------------------------- §6.7


def _finish(body: dict) -> dict:
    return record(9, 0x20, {"type": "operationFinished", "operationId": i(4), "operationKind": "run", **body})


def test_aborted_with_final_entry_is_invalid_fact_before_the_abort_preconditions(run):
    """finalEntryId on an aborted outcome is INVALID_FACT even without an abortRequested (§6.7 step 6 before 7)."""
    assert error(run[:8] + [_finish({"outcome": "aborted", "finalEntryId": i(0xE)})]) == ("INVALID_FACT", 9, 9)


def test_aborted_with_completion_fails_the_abort_preconditions_first(run):
    """Without an abortRequested, aborted+completion is INVALID_TRANSITION (§6.7 step 7 before 8)."""
    assert error(run[:8] + [_finish({"outcome": "aborted", "completion": "normal"})]) == ("INVALID_TRANSITION", 9, 9)


def test_completed_with_error_member_is_invalid_fact(run):
    """Any outcome other than failed with an error member is INVALID_FACT (§6.7 step 9)."""
    run[8]["record"]["error"] = {"code": "x", "message": "y"}
    assert error(run) == ("INVALID_FACT", 9, 9)


# ---------------------------------------------------------------------------------------------------------- §7


def test_usage_ledger_reaching_exactly_max_safe_is_accepted_and_one_more_overflows(run):
    """A running total of exactly 2^53-1 is legal; adding 1 more is INVALID_FACT (§7 step 6)."""
    run[9]["usage"]["input"] = 2**53 - 1
    more = copy.deepcopy(run[9])
    more.update(seq=11, id=i(0x30), usage={"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0})
    assert reduce_session(data(run + [more]))["usage"]["input"] == 2**53 - 1
    more["usage"]["input"] = 1
    assert error(run + [more]) == ("INVALID_FACT", 11, 11)


def test_usage_for_a_finished_operation_by_tool_owner_is_accepted(run):
    """Usage after operationFinished is legal, and a toolStartedId owner of that operation is fine (§7)."""
    del run[9]["attemptId"]
    run[9]["toolStartedId"] = i(9)
    assert reduce_session(data(run))["usage"]["input"] == 10


@pytest.mark.parametrize("value", [1.0, True])
def test_usage_counter_must_be_an_integer_literal(run, value):
    """A usage counter written 1.0 or true is INVALID_FACT (§2.6, §7 step 6)."""
    run[9]["usage"]["output"] = value
    assert error(run) == ("INVALID_FACT", 10, 10)


# ---------------------------------------------------------------------------------------------------- §5.7/§8.3


def test_retained_tail_with_permuted_member_order_is_structurally_equal(compaction):
    """Retained messages compare structurally: member order, also inside tool_calls, is irrelevant (§5.7 step 9)."""
    item = compaction[12]["entry"]["retainedTail"][0]
    item["message"] = dict(reversed(list(item["message"].items())))
    item["message"]["tool_calls"][0] = dict(reversed(list(item["message"]["tool_calls"][0].items())))
    compaction[12]["entry"]["retainedTail"][0] = dict(reversed(list(item.items())))
    state = reduce_session(data(compaction))
    assert state["activeContext"][0] == {"role": "user", "content": "[Compacted history]\nsummary"}
    assert len(state["activeContext"]) == 4


def test_retained_tail_starting_inside_a_tool_call_group_is_invalid_transcript(compaction):
    """A tail that starts at a tool message (its assistant compacted away) is INVALID_TRANSCRIPT (§5.7 step 11)."""
    body = compaction[12]["entry"]
    body["compactedThroughEntryId"] = i(8)
    body["retainedTail"] = body["retainedTail"][1:]
    assert error(compaction) == ("INVALID_TRANSCRIPT", 13, 13)


def test_compaction_entry_with_a_plain_reserved_id_is_invalid_reference(compaction):
    """A compaction entry whose id is the (plain) operation ID, not its result reservation, is INVALID_REFERENCE."""
    compaction[12]["id"] = i(0x11)
    assert error(compaction) == ("INVALID_REFERENCE", 13, 13)


def test_active_context_after_compaction_and_a_later_run(compaction):
    """Later messages follow the compacted context, and the boundary is the new user entry (§5.7, §10.4)."""
    later = [user(15, 0x50, "next"), record(16, 0x51, {"type": "runStarted", "operationId": i(0x52),
                                                        "operationKind": "run", "inputEntryId": i(0x50)})]
    state = reduce_session(data(compaction + [later]))
    assert [m["content"] for m in state["activeContext"]] == ["[Compacted history]\nsummary", None, "contents",
                                                               "done", "next"]
    assert len(state["transcript"]) == 5
    assert state.boundary == i(0x50)
    assert "step" not in state["operation"]


def test_source_digest_over_non_bmp_content_is_independent_sha256(compaction):
    """sourceDigest hashes canonical JSON with raw UTF-8 for astral characters (§8.1, §8.3), recomputed here by hand."""
    compaction[1][0]["entry"]["message"]["content"] = "\U0001f600\uffff\u2028"
    items = []
    for line in compaction[1:10]:
        for fact in line if isinstance(line, list) else [line]:
            if fact["kind"] == "entry" and fact["entry"]["type"] == "message":
                items.append({"message": fact["entry"]["message"], "sourceEntryId": fact["id"]})

    def canon(value):  # every member name here is ASCII, so code-point order is UTF-16 order
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    expected = "sha256:" + hashlib.sha256(canon(items).encode()).hexdigest()
    compaction[10]["record"]["sourceDigest"] = expected
    reduce_session(data(compaction))
    compaction[10]["record"]["sourceDigest"] = "sha256:" + "0" * 64
    assert error(compaction) == ("INVALID_REFERENCE", 11, 11)
