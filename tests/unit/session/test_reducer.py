"""Unit tests for agent.session.reducer: every rule of SPEC §3-§11, one behaviour per test.

Logs are built with the small builder below (IDs in the spec's ``#XX`` shorthand) and reduced from raw bytes, so
each test exercises framing, parsing and the reducer together, as ``reduce_session`` does.
"""

from __future__ import annotations

import json

import pytest

from agent.session.digests import source_digest
from agent.session.errors import CorruptionError
from agent.session.framing import committed_lines, parse_arguments, parse_line
from agent.session.reducer import Reducer, Reduction, reduce_session

# ---------------------------------------------------------------------------------------------------------- builder


ZERO = "sha256:" + "0" * 64
SNAPSHOT = {
    "adapterIdentity": "openrouter:chat-completions:v1",
    "model": "test/model",
    "outputOptionsDigest": ZERO,
    "routingIdentity": "openrouter:test/model",
    "systemPromptDigest": ZERO,
    "tools": [{"definitionDigest": ZERO, "name": "read"}],
}
DIGEST = "sha256:83d5da8892d877c5f94a6ff60ea8babcd1138107dcb80ed8f747372346bb5f75"
ARGS_TEXT = '{"path":"README.md"}'
INTERRUPTED = "Operation interrupted after execution status became unknown; the tool was not replayed."
UNKNOWN_TOOL = "Error: Unknown tool; the tool was not executed."
INVALID_ARGUMENTS = "Error: Tool arguments were invalid; the tool was not executed."
TRUNCATED = "Error: Tool call arguments were truncated by the model token limit; the tool was not executed."
ABORTED = "Operation aborted before execution."


def i(n: int) -> str:
    """The fixture-style UUIDv7 ``#n``."""
    return f"018f0000-0000-7000-8000-{n:012x}"


HEADER = {
    "createdAt": 1710000000000,
    "cwd": "/workspace",
    "environmentIdentity": "fixture",
    "id": i(1),
    "kind": "header",
    "model": "test/model",
    "provider": "openrouter",
    "version": 2,
}


def dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Log:
    """Lines of a session file; ``add`` fills ``seq`` and ``timestamp`` unless a fact already has them."""

    def __init__(self, header: object = HEADER):
        self.lines = [dumps(header)]
        self.seq = 1

    def add(self, *facts: dict, array: bool | None = None) -> int:
        """Append one transaction (an array when several facts or ``array=True``); return its line number."""
        for fact in facts:
            if isinstance(fact, dict):
                if "seq" not in fact:
                    fact["seq"] = self.seq
                fact.setdefault("timestamp", 1710000000000 + self.seq)
                self.seq += 1
        value = list(facts) if (array or len(facts) > 1) else facts[0]
        self.lines.append(dumps(value))
        return len(self.lines)

    def raw(self, text: str) -> int:
        self.lines.append(text)
        return len(self.lines)

    def data(self) -> bytes:
        return ("\n".join(self.lines) + "\n").encode()

    def reduce(self):
        return reduce_session(self.data())

    def error(self) -> tuple:
        """(code, line, seq) of the CorruptionError the log must raise."""
        try:
            reduce_session(self.data())
        except CorruptionError as exc:
            return exc.code, exc.line, exc.seq
        raise AssertionError("the log reduced without error")


def user(n: int, content: str = "inspect") -> dict:
    return {"kind": "entry", "id": i(n), "entry": {"type": "message", "message": {"role": "user", "content": content}}}


def run_started(n: int, op: int, input_entry: int) -> dict:
    record = {"type": "runStarted", "operationId": i(op), "operationKind": "run", "inputEntryId": i(input_entry)}
    return {"kind": "record", "id": i(n), "record": record}


def step_attempt(n, op, step, attempt, context, number=1, kind="assistant", snapshot=None, digest=DIGEST) -> dict:
    record = {
        "type": "stepAttempt",
        "operationId": i(op),
        "stepId": i(step),
        "attemptId": i(attempt),
        "stepKind": kind,
        "attempt": number,
        "contextThroughEntryId": i(context),
        "configurationSnapshot": SNAPSHOT if snapshot is None else snapshot,
        "configurationDigest": digest,
    }
    return {"kind": "record", "id": i(n), "record": record}


def call(call_id: str = "call_1", name: str = "read", arguments: str = ARGS_TEXT) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant(n, step, attempt, stop="toolUse", content=None, calls=None) -> dict:
    message = {"role": "assistant", "content": content}
    if calls is None and stop == "toolUse":
        calls = [call()]
    if calls:
        message["tool_calls"] = calls
    entry = {"type": "message", "stepId": i(step), "attemptId": i(attempt), "stopReason": stop, "message": message}
    return {"kind": "entry", "id": i(n), "entry": entry}


def tool_started(n, op, step, assistant_entry, result, index=0, call_id="call_1", name="read", **extra) -> dict:
    record = {
        "type": "toolStarted",
        "operationId": i(op),
        "stepId": i(step),
        "assistantEntryId": i(assistant_entry),
        "toolIndex": index,
        "toolCallId": call_id,
        "toolName": name,
        "arguments": {"path": "README.md"},
        "replay": "safe",
        "replayKey": "builtin:read:v1",
        "environmentIdentity": "fixture",
        "resultEntryId": i(result),
    }
    record.update(extra)
    return {"kind": "record", "id": i(n), "record": record}


def tool_result(n, step, started, call_id="call_1", name="read", content="contents", result=None) -> dict:
    entry = {
        "type": "message",
        "stepId": i(step),
        "toolStartedId": i(started),
        "toolName": name,
        "message": {"role": "tool", "tool_call_id": call_id, "content": content},
        "result": {"type": "success"} if result is None else result,
    }
    return {"kind": "entry", "id": i(n), "entry": entry}


def synthetic(n, step, assistant_entry, index, reason, content, call_id="call_1", name="read") -> dict:
    entry = {
        "type": "message",
        "stepId": i(step),
        "assistantEntryId": i(assistant_entry),
        "toolIndex": index,
        "toolName": name,
        "message": {"role": "tool", "tool_call_id": call_id, "content": content},
        "result": {"type": "synthetic", "reason": reason},
    }
    return {"kind": "entry", "id": i(n), "entry": entry}


def finished(n, op, outcome="completed", kind="run", **members) -> dict:
    record = {"type": "operationFinished", "operationId": i(op), "operationKind": kind, "outcome": outcome}
    record.update(members)
    return {"kind": "record", "id": i(n), "record": record}


def abort(n, op, kind="run", phase="model", **members) -> dict:
    record = {"type": "abortRequested", "operationId": i(op), "operationKind": kind, "phase": phase, "reason": "escape"}
    record.update(members)
    return {"kind": "record", "id": i(n), "record": record}


def step_failed(n, op, step, attempt, error=None) -> dict:
    record = {
        "type": "stepFailed",
        "operationId": i(op),
        "stepId": i(step),
        "attemptId": i(attempt),
        "error": {"code": "model_error", "message": "provider request failed"} if error is None else error,
    }
    return {"kind": "record", "id": i(n), "record": record}


def usage(n, op, counters=None, **owner) -> dict:
    fact = {"kind": "usage", "id": i(n), "operationId": i(op)}
    fact.update(owner)
    fact["usage"] = {"input": 10, "output": 2, "cacheRead": 3, "cacheWrite": 0} if counters is None else counters
    return fact


def compaction_started(n, op, through, result, compacted, retained, digest) -> dict:
    record = {
        "type": "compactionStarted",
        "operationId": i(op),
        "operationKind": "compaction",
        "inputThroughEntryId": i(through),
        "resultEntryId": i(result),
        "compactedEntryIds": [i(x) for x in compacted],
        "retainedEntryIds": [i(x) for x in retained],
        "sourceDigest": digest,
    }
    return {"kind": "record", "id": i(n), "record": record}


def compaction(n, op, through, tail, summary="summary") -> dict:
    entry = {
        "type": "compaction",
        "operationId": i(op),
        "summary": summary,
        "compactedThroughEntryId": i(through),
        "retainedTail": tail,
    }
    return {"kind": "entry", "id": i(n), "entry": entry}


def settled_tool_step(log: Log | None = None) -> Log:
    """Run #04 with step #05 (attempt #06) settled into #08, which calls read as call_1; boundary #08."""
    log = log or Log()
    log.add(user(0x02), run_started(0x03, 0x04, 0x02))
    log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
    log.add(assistant(0x08, 0x05, 0x06))
    return log


def completed_tool_step(log: Log | None = None) -> Log:
    """``settled_tool_step`` plus read started (#09) and completed (#0a); boundary #0a."""
    log = settled_tool_step(log)
    log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A))
    log.add(tool_result(0x0A, 0x05, 0x09))
    return log


def reorder(value: object) -> object:
    """The same JSON value with every object's members in reversed order (arrays keep their order)."""
    if isinstance(value, dict):
        return {key: reorder(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reorder(item) for item in value]
    return value


# ---------------------------------------------------------------------------------------------------------- header


class TestHeader:
    def test_header_only_state(self):
        """A header-only log reduces to an idle state whose header has no kind or version."""
        state = Log().reduce()
        assert state == {
            "header": {k: v for k, v in HEADER.items() if k not in ("kind", "version")},
            "transcript": [],
            "activeContext": [],
            "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            "operation": {"kind": "idle"},
            "repairedLength": len(Log().data()),
        }
        assert state.boundary is None

    def test_legacy_header_is_invalid_header(self):
        """A v1 header fails on its extra "type" member before its version is looked at."""
        assert Log({**HEADER, "type": "session", "version": 1}).error() == ("INVALID_HEADER", 1, None)

    @pytest.mark.parametrize("version", [2.0, 2e0])
    def test_version_compares_numerically(self, version):
        """version 2.0 and 2e0 are accepted."""
        assert Log({**HEADER, "version": version}).reduce()["operation"] == {"kind": "idle"}

    @pytest.mark.parametrize("version", [None, 1, 3, "2", True, [2]])
    def test_bad_version(self, version):
        """A missing or different version is UNSUPPORTED_VERSION, without seq."""
        header = {k: v for k, v in HEADER.items() if k != "version"}
        if version is not None:
            header["version"] = version
        assert Log(header).error() == ("UNSUPPORTED_VERSION", 1, None)

    def test_kind_is_checked_before_version(self):
        """A wrong kind wins over a wrong version."""
        assert Log({**HEADER, "kind": "session", "version": 1}).error() == ("INVALID_HEADER", 1, None)

    @pytest.mark.parametrize(
        ("member", "value"),
        [
            ("id", i(1).upper()),
            ("id", "00000000-0000-4000-8000-000000000001"),
            ("createdAt", 1.0),
            ("createdAt", True),
            ("createdAt", -1),
            ("createdAt", 2**53),
            ("cwd", ""),
            ("provider", None),
            ("model", 5),
            ("environmentIdentity", ""),
        ],
    )
    def test_bad_member(self, member, value):
        """Each header member is validated: a bad value is INVALID_HEADER without seq."""
        assert Log({**HEADER, member: value}).error() == ("INVALID_HEADER", 1, None)

    @pytest.mark.parametrize("value", [[], "header", None])
    def test_not_an_object(self, value):
        """A header that is not an object is INVALID_HEADER."""
        assert Log(value).error() == ("INVALID_HEADER", 1, None)

    def test_version_checked_before_other_members(self):
        """An unsupported version wins over a bad id (step 3 before step 4)."""
        assert Log({**HEADER, "version": 1, "id": "x"}).error() == ("UNSUPPORTED_VERSION", 1, None)

    def test_bom_before_header(self):
        """A UTF-8 BOM at the start of line 1 is MALFORMED_JSON (pinned, §16.3)."""
        data = b"\xef\xbb\xbf" + Log().data()
        with pytest.raises(CorruptionError) as info:
            reduce_session(data)
        assert (info.value.code, info.value.line, info.value.seq) == ("MALFORMED_JSON", 1, None)


# ---------------------------------------------------------------------------------------------------------- framing


class TestFramingThroughTheReducer:
    def test_raw_surrogate_on_line_9_wins_over_blank_line_3(self):
        """The raw-surrogate scan covers the whole committed range before line 3's blank line is seen."""
        log = completed_tool_step()
        log.lines.insert(2, "")
        while len(log.lines) < 8:
            log.lines.append("[]")
        log.lines.append('"\udfff"')
        data = ("\n".join(log.lines) + "\n").encode("utf-8", "surrogatepass")
        assert b"\xed\xbf\xbf" in data
        with pytest.raises(CorruptionError) as info:
            reduce_session(data)
        assert (info.value.code, info.value.line, info.value.seq) == ("MALFORMED_JSON", 9, None)

    def test_raw_surrogate_wins_over_earlier_semantic_error(self):
        """A raw surrogate on line 4 is reported even though line 2 is an invalid transaction."""
        data = Log().data() + b'[]\n[1]\n"\xed\xa0\x80"\n'
        with pytest.raises(CorruptionError) as info:
            reduce_session(data)
        assert (info.value.code, info.value.line, info.value.seq) == ("MALFORMED_JSON", 4, None)

    def test_raw_surrogate_in_header_string(self):
        """Raw ED A0 80 inside the header's cwd is MALFORMED_JSON on line 1 (the lost corpus case)."""
        line = dumps({**HEADER, "cwd": "@"}).encode().replace(b"@", b"\xed\xa0\x80")
        with pytest.raises(CorruptionError) as info:
            reduce_session(line + b"\n")
        assert (info.value.code, info.value.line, info.value.seq) == ("MALFORMED_JSON", 1, None)

    def test_invalid_utf8_is_line_1_even_when_the_bad_byte_is_later(self):
        """A bad byte on line 5 is INVALID_UTF8 at line 1, winning over an invalid fact on line 2."""
        log = Log()
        log.raw("[1]")
        log.raw("[]")
        log.raw("{}")
        data = log.data() + b'"\xc3\x28"\n'
        with pytest.raises(CorruptionError) as info:
            reduce_session(data)
        assert (info.value.code, info.value.line, info.value.seq) == ("INVALID_UTF8", 1, None)

    def test_lines_are_processed_in_order(self):
        """A malformed line is reported at its line, and an invalid transaction wins over a malformed later line."""
        log = settled_tool_step()
        log.raw("{")
        assert log.error() == ("MALFORMED_JSON", 5, None)
        log = settled_tool_step()
        log.add(finished(0x0F, 0x04, outcome="aborted"))
        log.raw("{")
        assert log.error() == ("INVALID_TRANSITION", 5, 5)

    def test_blank_then_crlf_then_json(self):
        """Per line, a blank line, a trailing CR and malformed JSON are reported at that line."""
        for text, code in [("", "BLANK_LINE"), ("{}\r", "CRLF_NOT_ALLOWED"), ("{\"a\":1,\"a\":1}", "MALFORMED_JSON")]:
            log = Log()
            log.raw(text)
            assert log.error() == (code, 2, None)

    def test_torn_tail_holding_a_valid_fact_is_ignored(self):
        """A complete fact after the last LF has no effect; repairedLength counts only committed bytes."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        committed = log.data()
        tail = dumps(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02) | {"seq": 3, "timestamp": 1}).encode()
        state = reduce_session(committed + tail)
        assert state == log.reduce() and state["repairedLength"] == len(committed)
        assert "step" not in state["operation"]

    def test_line_separators_in_content(self):
        """U+2028, U+2029 and U+0085 inside a message are ordinary characters of one line."""
        log = Log()
        log.add(user(0x02, "a\u2028b\u2029c\u0085d"), run_started(0x03, 0x04, 0x02))
        assert log.reduce()["transcript"] == [{"role": "user", "content": "a\u2028b\u2029c\u0085d"}]

    def test_duplicate_member_deep_inside_a_fact(self):
        """A duplicate member inside configurationSnapshot.tools[0] makes the line MALFORMED_JSON."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        text = dumps(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02) | {"seq": 3, "timestamp": 3})
        log.raw(text.replace('"name":"read"', '"name":"read","name":"read"'))
        assert log.error() == ("MALFORMED_JSON", 3, None)


# ---------------------------------------------------------------------------------------------------------- §4


class TestTransactions:
    def test_empty_array(self):
        """A line that is [] is EMPTY_TRANSACTION without seq."""
        log = Log()
        log.raw("[]")
        assert log.error() == ("EMPTY_TRANSACTION", 2, None)

    @pytest.mark.parametrize("text", ["1", '"x"', "null", "true", "[1]", "[[]]", '[{"kind":"usage"},2]'])
    def test_non_object_facts(self, text):
        """A scalar line, a non-object element or a nested array is INVALID_FACT without seq."""
        log = Log()
        log.raw(text)
        assert log.error() == ("INVALID_FACT", 2, None)

    def test_nested_array_after_a_valid_fact(self):
        """A nested array as the second element is INVALID_FACT without seq even after a valid first fact."""
        log = Log()
        log.add(user(0x02), ["x"])
        assert log.error() == ("INVALID_FACT", 2, None)

    @pytest.mark.parametrize("seq", [None, 1.0, True, 0, -1, 2**53, "1"])
    def test_bad_seq_has_no_seq(self, seq):
        """A missing or non-integer or out-of-range seq is INVALID_FACT without seq (§4.2 step 2)."""
        fact = user(0x02) | {"timestamp": 1}
        if seq is not None:
            fact["seq"] = seq
        log = Log()
        log.raw(dumps(fact))
        assert log.error() == ("INVALID_FACT", 2, None)

    def test_seq_mismatch_reports_found_value(self):
        """A seq other than the expected one is SEQ_MISMATCH carrying the value found."""
        log = Log()
        log.add(user(0x02) | {"seq": 5})
        assert log.error() == ("SEQ_MISMATCH", 2, 5)

    def test_skipped_seq_inside_array(self):
        """The second fact of an array must be the first's seq + 1."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02) | {"seq": 3})
        assert log.error() == ("SEQ_MISMATCH", 2, 3)

    def test_seq_checked_before_id(self):
        """A wrong seq wins over a malformed id."""
        log = Log()
        log.add({**user(0x02), "id": "nope", "seq": 2})
        assert log.error() == ("SEQ_MISMATCH", 2, 2)

    @pytest.mark.parametrize("fact_id", ["nope", i(2).upper(), "018f0000-0000-4000-8000-000000000002", 7, None])
    def test_bad_id(self, fact_id):
        """A fact id that is not a lowercase UUIDv7 is INVALID_FACT with the fact's seq."""
        log = Log()
        log.add({**user(0x02), "id": fact_id})
        assert log.error() == ("INVALID_FACT", 2, 1)

    @pytest.mark.parametrize("timestamp", [-1, 1.5, True, 2**53, "1"])
    def test_bad_timestamp(self, timestamp):
        """A timestamp that is not an integer in 0..2^53-1 is INVALID_FACT with seq."""
        log = Log()
        log.add(user(0x02) | {"timestamp": timestamp})
        assert log.error() == ("INVALID_FACT", 2, 1)

    def test_timestamps_need_not_increase(self):
        """Timestamps are never compared."""
        log = Log()
        log.add(user(0x02) | {"timestamp": 9}, run_started(0x03, 0x04, 0x02) | {"timestamp": 0})
        assert log.reduce()["operation"]["kind"] == "run"

    def test_duplicate_fact_id_across_lines_and_within_array(self):
        """A reused fact id is DUPLICATE_ID, on a later line or later in the same array."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        log.add(abort(0x03, 0x04))
        assert log.error() == ("DUPLICATE_ID", 3, 3)
        log = Log()
        log.add(user(0x02), run_started(0x02, 0x04, 0x02))
        assert log.error() == ("DUPLICATE_ID", 2, 2)

    @pytest.mark.parametrize("kind", [None, "Entry", "records", 1])
    def test_unknown_kind(self, kind):
        """A missing or unknown kind is INVALID_FACT with seq."""
        fact = user(0x02)
        if kind is None:
            del fact["kind"]
        else:
            fact["kind"] = kind
        log = Log()
        log.add(fact)
        assert log.error() == ("INVALID_FACT", 2, 1)

    def test_fact_id_equal_to_a_reservation(self):
        """A record whose id is a reserved operation ID is DUPLICATE_ID (§4.2 step 8)."""
        log = settled_tool_step()
        log.add(abort(0x04, 0x04))
        assert log.error() == ("DUPLICATE_ID", 5, 5)

    def test_user_entry_reuses_reservation_before_member_check(self):
        """A user entry with a reserved id is DUPLICATE_ID even when it also has an extra entry member."""
        log = settled_tool_step()
        fact = user(0x05)
        fact["entry"]["extra"] = 1
        log.add(fact)
        assert log.error() == ("DUPLICATE_ID", 5, 5)

    def test_record_reserving_its_own_id(self):
        """A runStarted whose operationId equals its own fact id is DUPLICATE_ID."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x03, 0x02))
        assert log.error() == ("DUPLICATE_ID", 2, 2)

    def test_reserved_ids_are_plain_forever(self):
        """A stepId can never become a fact ID, even after its step settled."""
        log = completed_tool_step()
        log.add(user(0x05))
        assert log.error() == ("DUPLICATE_ID", 7, 7)


class TestAtomicity:
    def test_failed_array_leaves_state_unchanged(self):
        """A transaction failing on its second fact changes neither state nor next seq."""
        log = settled_tool_step()
        lines, _ = committed_lines(log.data())
        reducer = Reducer()
        reducer.apply_header(parse_line(lines[0], 1))
        for number, text in enumerate(lines[1:], 2):
            reducer.apply(parse_line(text, number), number)
        before = json.dumps(reducer.export(1)), reducer.next_seq, reducer.next_line, reducer.boundary
        bad = [tool_started(0x09, 0x04, 0x05, 0x08, 0x0A) | {"seq": 5, "timestamp": 5}, user(0x22) | {"seq": 7}]
        with pytest.raises(CorruptionError) as info:
            reducer.apply(bad, 5)
        assert (info.value.code, info.value.line, info.value.seq) == ("SEQ_MISMATCH", 5, 7)
        assert (json.dumps(reducer.export(1)), reducer.next_seq, reducer.next_line, reducer.boundary) == before
        reducer.apply(bad[0], 5)  # the reservations of the rejected line did not leak
        assert reducer.export(1)["operation"]["toolCalls"][0]["status"] == "pending"

    def test_stage_does_not_mutate_and_adopt_applies(self):
        """stage validates without changing the state; adopt then makes it the state."""
        log = settled_tool_step()
        reducer = Reducer()
        lines, _ = committed_lines(log.data())
        reducer.apply_header(parse_line(lines[0], 1))
        for number, text in enumerate(lines[1:], 2):
            reducer.apply(parse_line(text, number), number)
        before = json.dumps(reducer.export(1))
        staged = reducer.stage(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A) | {"seq": 5, "timestamp": 5}, 5)
        assert (staged.seq_first, staged.seq_last) == (5, 5)
        assert json.dumps(reducer.export(1)) == before and reducer.next_seq == 5
        reducer.adopt(staged)
        assert reducer.next_seq == 6 and reducer.next_line == 6
        assert reducer.export(1)["operation"]["toolCalls"][0]["toolStartedId"] == i(0x09)

    def test_stale_staged_is_refused(self):
        """A Staged prepared before another transaction was adopted cannot be adopted."""
        reducer = Reducer()
        reducer.apply_header(HEADER)
        first = reducer.stage([user(0x02) | {"seq": 1, "timestamp": 1}], 2)
        second = reducer.stage([user(0x03) | {"seq": 1, "timestamp": 1}], 2)
        reducer.adopt(first)
        with pytest.raises(ValueError):
            reducer.adopt(second)

    def test_api_order(self):
        """stage before the header, and a second header, are programming errors (ValueError)."""
        reducer = Reducer()
        with pytest.raises(ValueError):
            reducer.stage(user(0x02), 2)
        reducer.apply_header(HEADER)
        with pytest.raises(ValueError):
            reducer.apply_header(HEADER)
        assert (reducer.next_seq, reducer.next_line, reducer.boundary) == (1, 2, None)

    def test_export_does_not_alias_later_state(self):
        """An exported Reduction does not change when later transactions are applied."""
        reducer = Reducer()
        reducer.apply_header(HEADER)
        reducer.apply(user(0x02) | {"seq": 1, "timestamp": 1}, 2)
        old = reducer.export(10)
        reducer.apply(user(0x03, "again") | {"seq": 2, "timestamp": 2}, 3)
        assert len(old["transcript"]) == 1 and len(old["activeContext"]) == 1
        assert old.boundary == i(0x02) and reducer.boundary == i(0x03)


class TestTranscript:
    def test_invalid_transcript_carries_the_last_seq(self):
        """A user entry while calls are pending fails at the end of its transaction, with the LAST seq."""
        log = settled_tool_step()
        log.add(user(0x20, "more"), abort(0x21, 0x04))
        assert log.error() == ("INVALID_TRANSCRIPT", 5, 6)

    def test_untouched_calls_break_the_next_assistant_entry(self):
        """A new step after untouched calls is accepted, but its answer fails the transcript check (§12)."""
        log = settled_tool_step()
        log.add(step_attempt(0x0D, 0x04, 0x0B, 0x0C, 0x08))
        assert log.reduce()["operation"]["step"]["status"] == "attempting"
        log.add(assistant(0x0E, 0x0B, 0x0C, "stop", "done"), usage(0x10, 0x04, attemptId=i(0x0C)))
        assert log.error() == ("INVALID_TRANSCRIPT", 6, 7)

    def test_duplicate_call_ids_carry_the_facts_own_seq(self):
        """Two calls with one id are INVALID_TRANSCRIPT at the assistant fact's seq, not the transaction's last."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        log.add(assistant(0x08, 0x05, 0x06, calls=[call(), call()]), usage(0x10, 0x04, attemptId=i(0x06)))
        assert log.error() == ("INVALID_TRANSCRIPT", 4, 4)

    def test_pending_set_survives_across_lines(self):
        """P is saved between transactions: a result on a later line resolves the call, an extra one fails."""
        log = completed_tool_step()
        state = log.reduce()
        assert [m["role"] for m in state["transcript"]] == ["user", "assistant", "tool"]
        log.add(synthetic(0x40, 0x05, 0x08, 0, "unknownTool", UNKNOWN_TOOL))
        assert log.error() == ("INVALID_TRANSITION", 7, 7)


# ---------------------------------------------------------------------------------------------------------- §5


class TestMessages:
    def test_assistant_without_content_member(self):
        """An assistant message with no content member is INVALID_FACT (pinned, §16.3)."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        fact = assistant(0x08, 0x05, 0x06, "stop", "x")
        del fact["entry"]["message"]["content"]
        log.add(fact)
        assert log.error() == ("INVALID_FACT", 4, 4)

    @pytest.mark.parametrize(
        "message",
        [
            {"role": "assistant", "content": 1},
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "assistant", "content": None, "tool_calls": [{**call(), "extra": 1}]},
            {"role": "assistant", "content": None, "tool_calls": [{**call(), "type": "tool"}]},
            {"role": "assistant", "content": None, "tool_calls": [{**call(), "id": ""}]},
            {"role": "assistant", "content": None, "tool_calls": [call(arguments={})]},
            {"role": "assistant", "content": None, "tool_calls": [call(name="")]},
            {"role": "assistant", "content": "x", "extra": 1},
            {"role": "system", "content": "x"},
            {"content": "x"},
            "text",
        ],
    )
    def test_invalid_assistant_shapes(self, message):
        """Every shape violation of §5.1 is INVALID_FACT."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        fact = assistant(0x08, 0x05, 0x06, "length")
        fact["entry"]["message"] = message
        log.add(fact)
        assert log.error() == ("INVALID_FACT", 4, 4)

    @pytest.mark.parametrize("content", ["", None, 5])
    def test_user_content_must_be_non_empty_string(self, content):
        """A user message needs non-empty string content."""
        log = Log()
        fact = user(0x02)
        fact["entry"]["message"]["content"] = content
        log.add(fact)
        assert log.error() == ("INVALID_FACT", 2, 1)

    def test_user_entry_accepted_without_run(self):
        """A lone user entry is accepted at any time the transcript allows."""
        log = Log()
        log.add(user(0x02))
        state = log.reduce()
        assert state["transcript"] == [{"role": "user", "content": "inspect"}] and state.boundary == i(0x02)

    def test_empty_tool_content_is_fine(self):
        """A tool message may have empty content."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A))
        log.add(tool_result(0x0A, 0x05, 0x09, content=""))
        assert log.reduce()["transcript"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": ""}

    @pytest.mark.parametrize("entry_type", ["Message", None, "summary"])
    def test_unknown_entry_type(self, entry_type):
        """An unknown entry type is INVALID_FACT."""
        fact = user(0x02)
        fact["entry"]["type"] = entry_type
        log = Log()
        log.add(fact)
        assert log.error() == ("INVALID_FACT", 2, 1)

    def test_entry_fact_extra_member(self):
        """An entry fact with a member outside kind/seq/id/timestamp/entry is INVALID_FACT."""
        log = Log()
        log.add(user(0x02) | {"record": {}})
        assert log.error() == ("INVALID_FACT", 2, 1)


class TestAssistantEntry:
    def base(self) -> Log:
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        return log

    def test_stop_reason_must_match_calls(self):
        """toolUse without calls and stop with calls are INVALID_TRANSCRIPT; length allows both."""
        for stop, calls, expected in [("toolUse", [], "INVALID_TRANSCRIPT"), ("stop", [call()], "INVALID_TRANSCRIPT")]:
            log = self.base()
            log.add(assistant(0x08, 0x05, 0x06, stop, "x", calls=calls))
            assert log.error() == (expected, 4, 4)
        for calls in ([], [call()]):
            log = self.base()
            log.add(assistant(0x08, 0x05, 0x06, "length", "x", calls=calls))
            assert log.reduce()["operation"]["step"]["stopReason"] == "length"

    @pytest.mark.parametrize("stop", ["end", None, ["stop"]])
    def test_bad_stop_reason(self, stop):
        """A stopReason outside stop/toolUse/length is INVALID_FACT."""
        log = self.base()
        fact = assistant(0x08, 0x05, 0x06, "stop", "x")
        fact["entry"]["stopReason"] = stop
        log.add(fact)
        assert log.error() == ("INVALID_FACT", 4, 4)

    def test_attempt_must_match_step(self):
        """An attemptId whose step differs from stepId is INVALID_REFERENCE."""
        log = self.base()
        log.add(assistant(0x08, 0x0B, 0x06, "stop", "x"))
        assert log.error() == ("INVALID_REFERENCE", 4, 4)

    def test_late_answer_to_superseded_attempt(self):
        """After attempt 2 starts, an answer to attempt 1 is INVALID_REFERENCE."""
        log = self.base()
        log.add(step_attempt(0x0D, 0x04, 0x05, 0x0C, 0x02, number=2))
        state = log.reduce()
        assert state["operation"]["step"]["attempt"] == 2 and state["operation"]["step"]["attemptId"] == i(0x0C)
        log.add(assistant(0x08, 0x05, 0x06, "stop", "x"))
        assert log.error() == ("INVALID_REFERENCE", 5, 5)

    def test_answer_after_operation_finished(self):
        """An answer to a still-open attempt of a finished run is INVALID_TRANSITION (no current run)."""
        log = self.base()
        log.add(finished(0x0F, 0x04, "failed", error={"code": "x", "message": "y"}))
        log.add(assistant(0x08, 0x05, 0x06, "stop", "x"))
        assert log.error() == ("INVALID_TRANSITION", 5, 5)

    def test_extra_entry_member(self):
        """An assistant entry with a member outside its set is INVALID_FACT."""
        log = self.base()
        fact = assistant(0x08, 0x05, 0x06, "stop", "x")
        fact["entry"]["toolName"] = "read"
        log.add(fact)
        assert log.error() == ("INVALID_FACT", 4, 4)

    def test_settled_step_is_exported(self):
        """Settling exports status settled, settledEntryId and stopReason; the boundary is the entry."""
        log = self.base()
        log.add(assistant(0x08, 0x05, 0x06, "stop", "done"))
        state = log.reduce()
        step = state["operation"]["step"]
        assert (step["status"], step["settledEntryId"], step["stopReason"]) == ("settled", i(0x08), "stop")
        assert state.boundary == i(0x08)


class TestToolResults:
    def test_result_needs_a_tool_result_reservation(self):
        """A started-tool result whose id was not reserved by toolStarted is INVALID_REFERENCE."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A))
        log.add(tool_result(0x0B, 0x05, 0x09))
        assert log.error() == ("INVALID_REFERENCE", 6, 6)

    def test_result_must_match_started_tool(self):
        """A result whose call id differs from the toolStarted record is INVALID_REFERENCE."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A))
        log.add(tool_result(0x0A, 0x05, 0x09, call_id="call_9"))
        assert log.error() == ("INVALID_REFERENCE", 6, 6)

    def test_success_with_reason(self):
        """A success result with a reason member is INVALID_FACT."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A))
        log.add(tool_result(0x0A, 0x05, 0x09, result={"type": "success", "reason": "x"}))
        assert log.error() == ("INVALID_FACT", 6, 6)

    def test_interrupted_result(self):
        """An interrupted synthetic completes the started tool; a wrong reason is INVALID_FACT."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A))
        interrupted = {"type": "synthetic", "reason": "interrupted"}
        log.add(tool_result(0x0A, 0x05, 0x09, content=INTERRUPTED, result=interrupted))
        assert log.reduce()["operation"]["toolCalls"][0]["status"] == "completed"
        log.lines[-1] = log.lines[-1].replace('"interrupted"}', '"aborted"}')
        assert log.error() == ("INVALID_FACT", 6, 6)

    def test_result_after_the_run_failed(self):
        """A started tool's result may arrive after its run finished failed (not checked, §5.4); state stays idle."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A))
        log.add(finished(0x0F, 0x04, "failed", error={"code": "c", "message": "m"}))
        log.add(tool_result(0x0A, 0x05, 0x09))
        state = log.reduce()
        assert state["operation"] == {"kind": "idle"} and state["transcript"][-1]["role"] == "tool"
        assert state.boundary == i(0x0A)

    def test_started_tool_stays_pending_and_blocks_next_step(self):
        """While a started tool is pending, a new step is INVALID_TRANSITION."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A))
        log.add(step_attempt(0x0D, 0x04, 0x0B, 0x0C, 0x08))
        assert log.error() == ("INVALID_TRANSITION", 6, 6)

    def test_synthetic_for_started_call_is_a_transition_error(self):
        """A pre-execution synthetic for a started call reuses the pair: INVALID_TRANSITION."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A))
        log.add(synthetic(0x40, 0x05, 0x08, 0, "aborted", ABORTED))
        assert log.error() == ("INVALID_TRANSITION", 6, 6)

    def test_synthetic_resolves_call_and_moves_boundary(self):
        """A pre-execution synthetic is appended, never enters toolCalls, and becomes the boundary."""
        log = settled_tool_step()
        log.add(synthetic(0x40, 0x05, 0x08, 0, "invalidArguments", INVALID_ARGUMENTS))
        state = log.reduce()
        assert state["operation"]["toolCalls"] == [] and state.boundary == i(0x40)
        assert state["transcript"][-1]["content"] == INVALID_ARGUMENTS
        log.add(synthetic(0x41, 0x05, 0x08, 0, "invalidArguments", INVALID_ARGUMENTS))
        assert log.error() == ("INVALID_TRANSITION", 6, 6)

    @pytest.mark.parametrize("index", [-1, 1.0, True, "0"])
    def test_synthetic_bad_index(self, index):
        """A toolIndex that is not an integer >= 0 is INVALID_FACT."""
        log = settled_tool_step()
        log.add(synthetic(0x40, 0x05, 0x08, index, "unknownTool", UNKNOWN_TOOL))
        assert log.error() == ("INVALID_FACT", 5, 5)

    def test_synthetic_index_out_of_range(self):
        """A toolIndex beyond the entry's calls is INVALID_REFERENCE."""
        log = settled_tool_step()
        log.add(synthetic(0x40, 0x05, 0x08, 1, "unknownTool", UNKNOWN_TOOL))
        assert log.error() == ("INVALID_REFERENCE", 5, 5)

    def test_synthetic_with_reserved_id(self):
        """A synthetic whose id is reserved consumes nothing: DUPLICATE_ID after its own checks."""
        log = settled_tool_step()
        log.add(synthetic(0x06, 0x05, 0x08, 0, "unknownTool", UNKNOWN_TOOL))
        assert log.error() == ("DUPLICATE_ID", 5, 5)

    def test_synthetic_wrong_content(self):
        """A synthetic whose content is not the fixed string of its reason is INVALID_TRANSCRIPT."""
        log = settled_tool_step()
        log.add(synthetic(0x40, 0x05, 0x08, 0, "truncated", UNKNOWN_TOOL))
        assert log.error() == ("INVALID_TRANSCRIPT", 5, 5)

    def test_synthetic_interrupted_reason_is_not_pre_execution(self):
        """"interrupted" is not a pre-execution reason: INVALID_FACT."""
        log = settled_tool_step()
        log.add(synthetic(0x40, 0x05, 0x08, 0, "interrupted", INTERRUPTED))
        assert log.error() == ("INVALID_FACT", 5, 5)

    def test_synthetic_not_in_current_run(self):
        """A synthetic for an entry of a finished run is INVALID_REFERENCE."""
        log = settled_tool_step()
        log.add(synthetic(0x40, 0x05, 0x08, 0, "aborted", ABORTED))
        log.add(abort(0x41, 0x04, phase="tool", toolCallId="call_1"))
        log.add(finished(0x42, 0x04, "aborted"))
        log.add(synthetic(0x43, 0x05, 0x08, 0, "aborted", ABORTED))
        assert log.error() == ("INVALID_REFERENCE", 8, 8)


# ---------------------------------------------------------------------------------------------------------- §6


class TestRunStarted:
    def test_not_idle(self):
        """runStarted while a run is open is INVALID_TRANSITION."""
        log = settled_tool_step()
        log.add(user(0x20), run_started(0x21, 0x22, 0x20))
        assert log.error() == ("INVALID_TRANSITION", 5, 6)

    def test_kind_checked_before_operation_id(self):
        """A wrong operationKind wins over a malformed operationId."""
        log = Log()
        fact = run_started(0x03, 0x04, 0x02)
        fact["record"].update(operationKind="compaction", operationId="bad")
        log.add(user(0x02), fact)
        assert log.error() == ("INVALID_TRANSITION", 2, 2)

    def test_input_must_be_user_entry(self):
        """inputEntryId naming a missing entry is INVALID_REFERENCE."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x09))
        assert log.error() == ("INVALID_REFERENCE", 2, 2)

    def test_extra_member(self):
        """An extra record member is INVALID_FACT (pinned, §16.3)."""
        log = Log()
        fact = run_started(0x03, 0x04, 0x02)
        fact["record"]["stepId"] = i(5)
        log.add(user(0x02), fact)
        assert log.error() == ("INVALID_FACT", 2, 2)

    @pytest.mark.parametrize("record", [None, [], "runStarted"])
    def test_record_not_object(self, record):
        """A record member that is not an object is INVALID_FACT."""
        log = Log()
        log.add({"kind": "record", "id": i(3), "record": record})
        assert log.error() == ("INVALID_FACT", 2, 1)

    def test_unknown_record_type(self):
        """An unknown record type is INVALID_FACT."""
        log = Log()
        log.add({"kind": "record", "id": i(3), "record": {"type": "runStopped"}})
        assert log.error() == ("INVALID_FACT", 2, 1)


class TestStepAttempt:
    def base(self) -> Log:
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        return log

    @pytest.mark.parametrize("number", [0, 3, True, 1.0, "1"])
    def test_bad_attempt_number(self, number):
        """attempt must be an integer 1 or 2: 0, 3, true, 1.0 are INVALID_FACT."""
        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02, number=number))
        assert log.error() == ("INVALID_FACT", 3, 3)

    def test_unknown_context(self):
        """A contextThroughEntryId that names no entry (here the operation ID) is INVALID_REFERENCE."""
        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x04))
        assert log.error() == ("INVALID_REFERENCE", 3, 3)

    def test_wrong_boundary(self):
        """Attempt 1 must cite the context boundary, not an earlier entry: INVALID_TRANSITION."""
        log = Log()
        log.add(user(0x01F, "earlier"))
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x1F))
        assert log.error() == ("INVALID_TRANSITION", 4, 4)

    def test_step_kind_must_match_operation(self):
        """A compaction step in a run is INVALID_TRANSITION; an unknown step kind is INVALID_FACT."""
        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02, kind="compaction"))
        assert log.error() == ("INVALID_TRANSITION", 3, 3)
        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02, kind="tool"))
        assert log.error() == ("INVALID_FACT", 3, 3)

    def test_digest_mismatch(self):
        """A configurationDigest that is not the snapshot's is INVALID_FACT."""
        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02, digest=ZERO))
        assert log.error() == ("INVALID_FACT", 3, 3)

    @pytest.mark.parametrize(
        "change",
        [
            {"extra": "x"},
            {"model": ""},
            {"systemPromptDigest": "sha256:" + "A" * 64},
            {"adapterIdentity": 1},
            {"tools": {}},
            {"tools": [{"name": "read", "definitionDigest": ZERO}, {"name": "read", "definitionDigest": ZERO}]},
            {"tools": [{"name": "read"}]},
            {"tools": [{"name": "read", "definitionDigest": ZERO, "replay": "safe"}]},
        ],
    )
    def test_invalid_snapshot(self, change):
        """Every §8.2 snapshot violation is INVALID_FACT."""
        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02, snapshot={**SNAPSHOT, **change}))
        assert log.error() == ("INVALID_FACT", 3, 3)

    def test_empty_tools_is_valid(self):
        """An empty tools array is a valid snapshot with its own digest."""
        snapshot = {**SNAPSHOT, "tools": []}
        from agent.session.digests import configuration_digest

        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02, snapshot=snapshot, digest=configuration_digest(snapshot)))
        assert log.reduce()["operation"]["step"]["configurationSnapshot"]["tools"] == []

    def test_permuted_snapshot_members(self):
        """A snapshot written with its members in another order has the same digest and exported value."""
        permuted = reorder(SNAPSHOT)
        assert list(permuted) != list(SNAPSHOT) and list(permuted["tools"][0]) != list(SNAPSHOT["tools"][0])
        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02, snapshot=permuted))
        assert log.data().find(b'{"tools":[{"name":"read"') > 0
        assert log.reduce()["operation"]["step"]["configurationSnapshot"] == SNAPSHOT

    def test_overlapping_step(self):
        """A second attempt-1 step while the first is attempting is INVALID_TRANSITION."""
        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        log.add(step_attempt(0x0D, 0x04, 0x0B, 0x0C, 0x02))
        assert log.error() == ("INVALID_TRANSITION", 4, 4)

    def test_retry_must_repeat_context_and_digest(self):
        """Attempt 2 with a different configuration digest is INVALID_TRANSITION."""
        snapshot = {**SNAPSHOT, "model": "other/model"}
        from agent.session.digests import configuration_digest

        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        log.add(step_attempt(0x0D, 0x04, 0x05, 0x0C, 0x02, 2, snapshot=snapshot, digest=configuration_digest(snapshot)))
        assert log.error() == ("INVALID_TRANSITION", 4, 4)

    def test_retry_after_step_failed(self):
        """A retry after stepFailed is INVALID_TRANSITION; the failed step is exported without settled members."""
        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        log.add(step_failed(0x08, 0x04, 0x05, 0x06))
        step = log.reduce()["operation"]["step"]
        assert step["status"] == "failed" and "settledEntryId" not in step and "stopReason" not in step
        log.add(step_attempt(0x0D, 0x04, 0x05, 0x0C, 0x02, 2))
        assert log.error() == ("INVALID_TRANSITION", 5, 5)

    def test_no_third_attempt(self):
        """A second retry of the same step is INVALID_TRANSITION (attempt 2 twice)."""
        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        log.add(step_attempt(0x0D, 0x04, 0x05, 0x0C, 0x02, 2))
        log.add(step_attempt(0x10, 0x04, 0x05, 0x0E, 0x02, 2))
        assert log.error() == ("INVALID_TRANSITION", 5, 5)

    def test_retry_of_unknown_step(self):
        """Attempt 2 of a step that never had attempt 1 is INVALID_TRANSITION."""
        log = self.base()
        log.add(step_attempt(0x0D, 0x04, 0x05, 0x0C, 0x02, 2))
        assert log.error() == ("INVALID_TRANSITION", 3, 3)

    def test_reusing_operation_id_as_attempt_id(self):
        """An attemptId equal to the operation ID is DUPLICATE_ID."""
        log = self.base()
        log.add(step_attempt(0x07, 0x04, 0x05, 0x04, 0x02))
        assert log.error() == ("DUPLICATE_ID", 3, 3)

    def test_operation_lookup_order(self):
        """OP-LOOKUP: malformed is INVALID_FACT, unknown INVALID_REFERENCE, finished INVALID_TRANSITION."""
        log = self.base()
        fact = step_attempt(0x07, 0x04, 0x05, 0x06, 0x02)
        fact["record"]["operationId"] = "x"
        log.add(fact)
        assert log.error() == ("INVALID_FACT", 3, 3)
        log = self.base()
        log.add(step_attempt(0x07, 0x99, 0x05, 0x06, 0x02))
        assert log.error() == ("INVALID_REFERENCE", 3, 3)
        log = self.base()
        log.add(finished(0x07, 0x04, "failed", error={"code": "c", "message": "m"}))
        log.add(step_attempt(0x08, 0x04, 0x05, 0x06, 0x02))
        assert log.error() == ("INVALID_TRANSITION", 4, 4)


class TestToolStarted:
    @pytest.mark.parametrize("arguments", [[1], "{}", None])
    def test_bad_arguments(self, arguments):
        """Arguments that are not an object are INVALID_FACT."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A, arguments=arguments))
        assert log.error() == ("INVALID_FACT", 5, 5)

    def test_overflowing_number_literal_in_arguments(self):
        """The literal 1e400 (Python parses it to inf) in arguments is INVALID_FACT, never exported."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A, arguments={"n": 12345}))
        log.lines[-1] = log.lines[-1].replace("12345", "1e400")
        assert log.error() == ("INVALID_FACT", 5, 5)

    def test_log_nesting_allows_arguments_deeper_than_64(self):
        """Recorded arguments nested 100 deep are legal in the log (limit 128) though §14.3 caps call text at 64."""
        deep: object = {}
        for _ in range(99):
            deep = {"a": deep}
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A, arguments=deep))
        assert log.reduce()["operation"]["toolCalls"][0]["arguments"] == deep
        assert parse_arguments(json.dumps(deep)) is None
        log.lines[-1] = log.lines[-1].replace('"arguments":{', '"arguments":' + '{"a":' * 30 + "{", 1)
        log.lines[-1] = log.lines[-1].replace("}" * 99, "}" * 129, 1)  # depth 2 + 100 + 30 = 132 > 128
        assert log.error() == ("MALFORMED_JSON", 5, None)

    def test_large_finite_numbers_are_exported(self):
        """Finite floats and big integers in arguments are kept as recorded."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A, arguments={"f": 1.5e300, "i": 2**70, "b": True}))
        assert log.reduce()["operation"]["toolCalls"][0]["arguments"] == {"f": 1.5e300, "i": 2**70, "b": True}

    def test_tool_not_in_attempt_snapshot(self):
        """A tool the attempt's snapshot did not offer is INVALID_TRANSITION."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        log.add(assistant(0x08, 0x05, 0x06, calls=[call(name="missing", arguments="{}")]))
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A, name="missing", arguments={}))
        assert log.error() == ("INVALID_TRANSITION", 5, 5)

    def test_environment_checked_before_snapshot(self):
        """An empty environmentIdentity is INVALID_FACT even for a tool missing from the snapshot (pinned)."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        log.add(assistant(0x08, 0x05, 0x06, calls=[call(name="missing", arguments="{}")]))
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A, name="missing", arguments={}, environmentIdentity=""))
        assert log.error() == ("INVALID_FACT", 5, 5)

    @pytest.mark.parametrize(("member", "value"), [("replay", "always"), ("replayKey", ""), ("toolIndex", True)])
    def test_bad_members(self, member, value):
        """replay outside safe/never, an empty replayKey and a boolean toolIndex are INVALID_FACT."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A, **{member: value}))
        assert log.error() == ("INVALID_FACT", 5, 5)

    def test_length_entry_has_no_started_tools(self):
        """toolStarted for a length entry is INVALID_REFERENCE."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        log.add(assistant(0x08, 0x05, 0x06, "length", calls=[call()]))
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A))
        assert log.error() == ("INVALID_REFERENCE", 5, 5)

    def test_call_mismatch(self):
        """A toolCallId or stepId that does not match the call is INVALID_REFERENCE."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A, call_id="call_2"))
        assert log.error() == ("INVALID_REFERENCE", 5, 5)
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x0B, 0x08, 0x0A))
        assert log.error() == ("INVALID_REFERENCE", 5, 5)

    def test_pair_used_twice(self):
        """Starting the same (entry, index) twice is INVALID_TRANSITION."""
        log = completed_tool_step()
        log.add(tool_started(0x0B, 0x04, 0x05, 0x08, 0x0C))
        assert log.error() == ("INVALID_TRANSITION", 7, 7)

    def test_result_id_already_used(self):
        """A resultEntryId that is already a fact ID is DUPLICATE_ID."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x02))
        assert log.error() == ("DUPLICATE_ID", 5, 5)

    def test_tool_call_state_export(self):
        """A started tool is exported with every ToolCallState member, pending."""
        log = settled_tool_step()
        log.add(tool_started(0x09, 0x04, 0x05, 0x08, 0x0A))
        assert log.reduce()["operation"]["toolCalls"] == [
            {
                "operationId": i(4),
                "toolStartedId": i(9),
                "stepId": i(5),
                "assistantEntryId": i(8),
                "toolIndex": 0,
                "toolCallId": "call_1",
                "toolName": "read",
                "arguments": {"path": "README.md"},
                "replay": "safe",
                "replayKey": "builtin:read:v1",
                "environmentIdentity": "fixture",
                "resultEntryId": i(0x0A),
                "status": "pending",
            }
        ]


class TestAbortRequested:
    def test_only_once(self):
        """A second abortRequested is INVALID_TRANSITION."""
        log = settled_tool_step()
        log.add(abort(0x20, 0x04))
        assert log.reduce()["operation"]["abortRequested"] is True
        log.add(abort(0x21, 0x04))
        assert log.error() == ("INVALID_TRANSITION", 6, 6)

    def test_tool_call_id_iff_tool_phase(self):
        """phase tool needs a toolCallId string (possibly empty); other phases must not have one."""
        for phase, members, ok in [
            ("tool", {"toolCallId": ""}, True),
            ("tool", {}, False),
            ("tool", {"toolCallId": 1}, False),
            ("model", {"toolCallId": "call_1"}, False),
            ("compact", {}, True),
        ]:
            log = settled_tool_step()
            log.add(abort(0x20, 0x04, phase=phase, **members))
            if ok:
                assert log.reduce()["operation"]["abortRequested"] is True
            else:
                assert log.error() == ("INVALID_FACT", 5, 5)

    def test_kind_and_reason(self):
        """A wrong operationKind or a reason other than escape is INVALID_TRANSITION; a bad phase INVALID_FACT."""
        log = settled_tool_step()
        log.add(abort(0x20, 0x04, kind="compaction"))
        assert log.error() == ("INVALID_TRANSITION", 5, 5)
        log = settled_tool_step()
        log.add(abort(0x20, 0x04, reason="user"))
        assert log.error() == ("INVALID_TRANSITION", 5, 5)
        log = settled_tool_step()
        log.add(abort(0x20, 0x04, phase="shell"))
        assert log.error() == ("INVALID_FACT", 5, 5)


class TestOperationFinished:
    def stopped(self, content="done") -> Log:
        log = completed_tool_step()
        log.add(step_attempt(0x0D, 0x04, 0x0B, 0x0C, 0x0A))
        log.add(assistant(0x0E, 0x0B, 0x0C, "stop", content))
        return log

    def test_completed_normal(self):
        """A normal completion on the latest stop answer makes the state idle."""
        log = self.stopped()
        log.add(finished(0x0F, 0x04, completion="normal", finalEntryId=i(0x0E)))
        state = log.reduce()
        assert state["operation"] == {"kind": "idle"} and state.boundary == i(0x0E)

    @pytest.mark.parametrize("content", [" \n\t", None, "\u3000"])
    def test_blank_final_answer(self, content):
        """A normal completion whose content is blank (null, or only whitespace) is INVALID_TRANSCRIPT."""
        log = self.stopped(content)
        log.add(finished(0x0F, 0x04, completion="normal", finalEntryId=i(0x0E)))
        assert log.error() == ("INVALID_TRANSCRIPT", 9, 9)

    def test_final_entry_of_older_step(self):
        """finalEntryId naming an entry that is not the latest step's is INVALID_REFERENCE."""
        log = self.stopped()
        log.add(finished(0x0F, 0x04, completion="normal", finalEntryId=i(0x08)))
        assert log.error() == ("INVALID_REFERENCE", 9, 9)

    def test_completion_required_for_run(self):
        """A completed run without completion, or with an unknown one, is INVALID_FACT."""
        log = self.stopped()
        log.add(finished(0x0F, 0x04, finalEntryId=i(0x0E)))
        assert log.error() == ("INVALID_FACT", 9, 9)

    def test_truncated_needs_calls(self):
        """A truncated completion on a length answer without calls is INVALID_TRANSCRIPT."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        log.add(assistant(0x08, 0x05, 0x06, "length", "partial", calls=[]))
        log.add(finished(0x0F, 0x04, completion="truncated", finalEntryId=i(0x08)))
        assert log.error() == ("INVALID_TRANSCRIPT", 5, 5)

    def test_completed_with_error_member(self):
        """A completed outcome carrying an error member is INVALID_FACT."""
        log = self.stopped()
        log.add(finished(0x0F, 0x04, completion="normal", finalEntryId=i(0x0E), error={"code": "a", "message": "b"}))
        assert log.error() == ("INVALID_FACT", 9, 9)

    def test_aborted_needs_abort_request(self):
        """An aborted finish without an earlier abortRequested is INVALID_TRANSITION."""
        log = self.stopped()
        log.add(finished(0x0F, 0x04, "aborted"))
        assert log.error() == ("INVALID_TRANSITION", 9, 9)

    def test_aborted_with_final_entry_is_invalid_fact(self):
        """finalEntryId on an aborted outcome is INVALID_FACT, before the abort preconditions (pinned)."""
        log = self.stopped()
        log.add(finished(0x0F, 0x04, "aborted", finalEntryId=i(0x0E)))
        assert log.error() == ("INVALID_FACT", 9, 9)

    def test_aborted_while_attempting(self):
        """An aborted finish while the step is attempting is INVALID_TRANSITION; stepFailed first makes it legal."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        log.add(step_attempt(0x07, 0x04, 0x05, 0x06, 0x02))
        log.add(abort(0x20, 0x04))
        good = Log()
        good.lines = list(log.lines)
        good.seq = log.seq
        log.add(finished(0x21, 0x04, "aborted"))
        assert log.error() == ("INVALID_TRANSITION", 5, 5)
        good.add(step_failed(0x21, 0x04, 0x05, 0x06, {"code": "aborted", "message": "Operation aborted"}))
        good.add(finished(0x22, 0x04, "aborted"))
        assert good.reduce()["operation"] == {"kind": "idle"}

    def test_failed_needs_error(self):
        """A failed outcome needs an error object with non-empty code and message."""
        for error in (None, {"code": "x"}, {"code": "", "message": "m"}, {"code": "c", "message": "m", "x": 1}):
            log = self.stopped()
            members = {} if error is None else {"error": error}
            log.add(finished(0x0F, 0x04, "failed", **members))
            assert log.error() == ("INVALID_FACT", 9, 9)
        log = self.stopped()
        log.add(finished(0x0F, 0x04, "failed", error={"code": "c", "message": "m"}))
        assert log.reduce()["operation"] == {"kind": "idle"}

    def test_failed_with_completion(self):
        """A completion member on a failed outcome is INVALID_FACT."""
        log = self.stopped()
        log.add(finished(0x0F, 0x04, "failed", completion="normal", error={"code": "c", "message": "m"}))
        assert log.error() == ("INVALID_FACT", 9, 9)

    def test_unknown_outcome(self):
        """An outcome outside completed/aborted/failed is INVALID_TRANSITION."""
        log = self.stopped()
        log.add(finished(0x0F, 0x04, "cancelled"))
        assert log.error() == ("INVALID_TRANSITION", 9, 9)

    def test_records_after_finish(self):
        """Any record for a finished operation fails OP-LOOKUP with INVALID_TRANSITION; usage stays legal."""
        log = self.stopped()
        log.add(finished(0x0F, 0x04, completion="normal", finalEntryId=i(0x0E)))
        log.add(usage(0x10, 0x04, attemptId=i(0x0C)))
        assert log.reduce()["usage"] == {"input": 10, "output": 2, "cacheRead": 3, "cacheWrite": 0}
        log.add(abort(0x11, 0x04))
        assert log.error() == ("INVALID_TRANSITION", 11, 11)


class TestUsage:
    def test_owner_rules(self):
        """Exactly one owner: both or neither is INVALID_FACT; an owner of another operation INVALID_REFERENCE."""
        log = settled_tool_step()
        log.add(usage(0x10, 0x04, attemptId=i(6), toolStartedId=i(9)))
        assert log.error() == ("INVALID_FACT", 5, 5)
        log = settled_tool_step()
        log.add(usage(0x10, 0x04))
        assert log.error() == ("INVALID_FACT", 5, 5)
        log = settled_tool_step()
        log.add(usage(0x10, 0x04, attemptId=i(0x08)))
        assert log.error() == ("INVALID_REFERENCE", 5, 5)
        log = settled_tool_step()
        log.add(usage(0x10, 0x99, attemptId=i(0x06)))
        assert log.error() == ("INVALID_REFERENCE", 5, 5)

    def test_tool_usage(self):
        """Usage owned by a started tool adds to the ledger."""
        log = completed_tool_step()
        log.add(usage(0x10, 0x04, {"input": 1, "output": 1, "cacheRead": 1, "cacheWrite": 1}, toolStartedId=i(9)))
        assert log.reduce()["usage"] == {"input": 1, "output": 1, "cacheRead": 1, "cacheWrite": 1}

    @pytest.mark.parametrize(
        "counters",
        [
            {"input": 1.0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            {"input": True, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            {"input": -1, "output": 0, "cacheRead": 0, "cacheWrite": 0},
            {"input": 0, "output": 0, "cacheRead": 0},
            {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
            [0, 0, 0, 0],
        ],
    )
    def test_bad_counters(self, counters):
        """Counters must be integers in 0..2^53-1 under exactly the four names."""
        log = settled_tool_step()
        log.add(usage(0x10, 0x04, counters, attemptId=i(6)))
        assert log.error() == ("INVALID_FACT", 5, 5)

    def test_ledger_overflow(self):
        """A counter that would push the total above 2^53-1 is INVALID_FACT; reaching it exactly is fine."""
        big = {"input": 2**53 - 2, "output": 0, "cacheRead": 0, "cacheWrite": 0}
        one = {"input": 1, "output": 0, "cacheRead": 0, "cacheWrite": 0}
        log = settled_tool_step()
        log.add(usage(0x10, 0x04, big, attemptId=i(6)), usage(0x11, 0x04, one, attemptId=i(6)))
        assert log.reduce()["usage"]["input"] == 2**53 - 1
        log.add(usage(0x12, 0x04, one, attemptId=i(6)))
        assert log.error() == ("INVALID_FACT", 6, 7)

    def test_extra_member(self):
        """A usage fact with an extra member is INVALID_FACT."""
        log = settled_tool_step()
        log.add(usage(0x10, 0x04, attemptId=i(6)) | {"stepId": i(5)})
        assert log.error() == ("INVALID_FACT", 5, 5)


# ---------------------------------------------------------------------------------------------------------- compaction


def finished_run() -> Log:
    """A finished run whose messages are #02 user, #08 assistant(call_1), #0a tool, #0e assistant 'done'."""
    log = completed_tool_step()
    log.add(step_attempt(0x0D, 0x04, 0x0B, 0x0C, 0x0A))
    log.add(assistant(0x0E, 0x0B, 0x0C, "stop", "done"))
    log.add(finished(0x0F, 0x04, completion="normal", finalEntryId=i(0x0E)))
    return log


MESSAGES = {
    0x02: {"role": "user", "content": "inspect"},
    0x08: {"role": "assistant", "content": None, "tool_calls": [call()]},
    0x0A: {"role": "tool", "tool_call_id": "call_1", "content": "contents"},
    0x0E: {"role": "assistant", "content": "done"},
}


def digest_of(ids: list[int]) -> str:
    return source_digest([{"sourceEntryId": i(n), "message": MESSAGES[n]} for n in ids])


class TestCompaction:
    def start(self, log: Log, compacted=(0x02,), retained=(0x08, 0x0A, 0x0E), through=0x0E, digest=None) -> Log:
        ids = [*compacted, *retained]
        log.add(compaction_started(0x12, 0x11, through, 0x17, compacted, retained, digest or digest_of(ids)))
        log.add(step_attempt(0x16, 0x11, 0x14, 0x15, through, kind="compaction"))
        return log

    def tail(self, ids) -> list:
        return [{"sourceEntryId": i(n), "message": MESSAGES[n]} for n in ids]

    def test_completed_compaction(self):
        """A full compaction resets the active context, keeps the transcript, sets the boundary to inputThrough."""
        log = self.start(finished_run())
        log.add(compaction(0x17, 0x11, 0x02, self.tail([0x08, 0x0A, 0x0E])))
        state = log.reduce()
        assert state["activeContext"][0] == {"role": "user", "content": "[Compacted history]\nsummary"}
        assert state["activeContext"][1:] == [MESSAGES[0x08], MESSAGES[0x0A], MESSAGES[0x0E]]
        assert len(state["transcript"]) == 4 and state.boundary == i(0x0E)
        step = state["operation"]["step"]
        assert step["status"] == "settled" and step["settledEntryId"] == i(0x17) and "stopReason" not in step
        log.add(finished(0x18, 0x11, kind="compaction", finalEntryId=i(0x17)))
        assert log.reduce()["operation"] == {"kind": "idle"}

    def test_permuted_members_in_compaction_entry(self):
        """Compaction facts with every object's members reordered reduce to the same state (§17.2 gap)."""
        plain = self.start(finished_run())
        plain.add(compaction(0x17, 0x11, 0x02, self.tail([0x08, 0x0A, 0x0E])))
        permuted = finished_run()
        for fact in (
            compaction_started(0x12, 0x11, 0x0E, 0x17, (0x02,), (0x08, 0x0A, 0x0E), digest_of([2, 8, 10, 14])),
            step_attempt(0x16, 0x11, 0x14, 0x15, 0x0E, kind="compaction"),
            compaction(0x17, 0x11, 0x02, self.tail([0x08, 0x0A, 0x0E])),
        ):
            fact["seq"] = permuted.seq
            fact["timestamp"] = 1710000000000 + permuted.seq
            permuted.seq += 1
            permuted.raw(dumps(reorder(fact)))
        assert permuted.lines[-1] != plain.lines[-1]
        assert '"message":{"content":"contents","tool_call_id":"call_1","role":"tool"}' in permuted.lines[-1]
        assert permuted.reduce() == plain.reduce()

    def test_missing_middle_message(self):
        """A retained tail that drops a message from the middle is INVALID_REFERENCE."""
        log = self.start(finished_run())
        log.add(compaction(0x17, 0x11, 0x02, self.tail([0x08, 0x0E])))
        assert log.error() == ("INVALID_REFERENCE", 12, 12)

    def test_extra_tail_item(self):
        """A tail longer than E is INVALID_REFERENCE."""
        log = self.start(finished_run())
        log.add(compaction(0x17, 0x11, 0x0A, self.tail([0x0E, 0x0E])))
        assert log.error() == ("INVALID_REFERENCE", 12, 12)

    def test_altered_retained_message(self):
        """A retained message that differs from the stored one is INVALID_REFERENCE."""
        tail = self.tail([0x08, 0x0A, 0x0E])
        tail[2] = {"sourceEntryId": i(0x0E), "message": {"role": "assistant", "content": "done!"}}
        log = self.start(finished_run())
        log.add(compaction(0x17, 0x11, 0x02, tail))
        assert log.error() == ("INVALID_REFERENCE", 12, 12)

    def test_tail_inside_tool_call_group(self):
        """A tail starting with a tool message is INVALID_TRANSCRIPT."""
        log = self.start(finished_run(), compacted=(0x02, 0x08), retained=(0x0A, 0x0E))
        log.add(compaction(0x17, 0x11, 0x08, self.tail([0x0A, 0x0E])))
        assert log.error() == ("INVALID_TRANSCRIPT", 12, 12)

    def test_empty_tail(self):
        """Compacting through inputThrough itself gives an empty tail."""
        log = self.start(finished_run(), compacted=(0x02, 0x08, 0x0A, 0x0E), retained=())
        log.add(compaction(0x17, 0x11, 0x0E, []))
        assert log.reduce()["activeContext"] == [{"role": "user", "content": "[Compacted history]\nsummary"}]

    def test_compacted_through_after_input(self):
        """compactedThroughEntryId later than inputThrough is INVALID_REFERENCE."""
        log = finished_run()
        log.add(compaction_started(0x12, 0x11, 0x0A, 0x17, (0x02,), (0x08, 0x0A), digest_of([2, 8, 10])))
        log.add(step_attempt(0x16, 0x11, 0x14, 0x15, 0x0E, kind="compaction"))
        log.add(compaction(0x17, 0x11, 0x0E, []))
        assert log.error() == ("INVALID_REFERENCE", 12, 12)

    def test_compaction_through_older_message(self):
        """A compaction through an earlier message recomputes the digest from scratch and is accepted."""
        log = finished_run()
        log.add(compaction_started(0x12, 0x11, 0x0A, 0x17, (0x02,), (0x08, 0x0A), digest_of([2, 8, 10])))
        log.add(step_attempt(0x16, 0x11, 0x14, 0x15, 0x0E, kind="compaction"))
        log.add(compaction(0x17, 0x11, 0x02, self.tail([0x08, 0x0A])))
        state = log.reduce()
        assert state.boundary == i(0x0A) and len(state["activeContext"]) == 3

    def test_source_digest_checks(self):
        """A wrong sourceDigest is INVALID_REFERENCE; a malformed one INVALID_FACT."""
        log = self.start(finished_run(), digest="sha256:" + "1" * 64)
        assert log.error() == ("INVALID_REFERENCE", 10, 10)
        log = self.start(finished_run(), digest="sha256:" + "G" * 64)
        assert log.error() == ("INVALID_FACT", 10, 10)

    def test_partition_rule(self):
        """compacted + retained must be every message ID through inputThrough, in order (pinned)."""
        log = self.start(finished_run(), compacted=(0x08,), retained=(0x02, 0x0A, 0x0E))
        assert log.error() == ("INVALID_REFERENCE", 10, 10)
        log = self.start(finished_run(), compacted=(), retained=(0x02, 0x08, 0x0A, 0x0E))
        assert log.error() == ("INVALID_FACT", 10, 10)

    def test_input_through_must_be_a_message(self):
        """inputThroughEntryId naming a compaction entry is INVALID_REFERENCE."""
        log = self.start(finished_run())
        log.add(compaction(0x17, 0x11, 0x02, self.tail([0x08, 0x0A, 0x0E])))
        log.add(finished(0x18, 0x11, kind="compaction", finalEntryId=i(0x17)))
        log.add(compaction_started(0x20, 0x21, 0x17, 0x22, (0x02,), (0x08, 0x0A, 0x0E), digest_of([2, 8, 10, 14])))
        assert log.error() == ("INVALID_REFERENCE", 14, 14)

    def test_user_entry_and_compaction_in_one_transaction(self):
        """A compactionStarted through a user entry of the same transaction digests the staged message."""
        log = finished_run()
        MESSAGES[0x30] = {"role": "user", "content": "next"}
        try:
            ids = [0x02, 0x08, 0x0A, 0x0E, 0x30]
            log.add(user(0x30, "next"), compaction_started(0x12, 0x11, 0x30, 0x17, ids, (), digest_of(ids)))
            assert log.reduce()["operation"]["kind"] == "compaction"
        finally:
            del MESSAGES[0x30]

    def test_result_id_is_reserved(self):
        """The compaction entry must consume the compaction-result reservation: another id is INVALID_REFERENCE."""
        log = self.start(finished_run())
        log.add(compaction(0x18, 0x11, 0x02, self.tail([0x08, 0x0A, 0x0E])))
        assert log.error() == ("INVALID_REFERENCE", 12, 12)

    def test_compaction_needs_open_attempt(self):
        """A compaction entry before its step attempt is INVALID_TRANSITION."""
        log = finished_run()
        log.add(compaction_started(0x12, 0x11, 0x0E, 0x17, (0x02,), (0x08, 0x0A, 0x0E), digest_of([2, 8, 10, 14])))
        log.add(compaction(0x17, 0x11, 0x02, self.tail([0x08, 0x0A, 0x0E])))
        assert log.error() == ("INVALID_TRANSITION", 11, 11)

    def test_finish_with_run_entry(self):
        """Finishing a compaction with another entry is INVALID_REFERENCE (fixture cross-operation-final)."""
        log = self.start(finished_run())
        log.add(compaction(0x17, 0x11, 0x02, self.tail([0x08, 0x0A, 0x0E])))
        log.add(finished(0x18, 0x11, kind="compaction", finalEntryId=i(0x0E)))
        assert log.error() == ("INVALID_REFERENCE", 13, 13)

    def test_compaction_while_run_open(self):
        """compactionStarted while a run is open is INVALID_TRANSITION."""
        log = completed_tool_step()
        log.add(compaction_started(0x12, 0x11, 0x0A, 0x17, (0x02,), (0x08, 0x0A), digest_of([2, 8, 10])))
        assert log.error() == ("INVALID_TRANSITION", 7, 7)


class TestReduction:
    def test_json_form_is_exactly_session_state(self):
        """The JSON form has exactly the six §10 members; the boundary is out of band."""
        state = completed_tool_step().reduce()
        assert isinstance(state, dict) and isinstance(state, Reduction)
        assert set(json.loads(json.dumps(state))) == {
            "header",
            "transcript",
            "activeContext",
            "usage",
            "operation",
            "repairedLength",
        }
        assert state.boundary == i(0x0A)

    def test_run_without_step(self):
        """A run has no step member until its first stepAttempt."""
        log = Log()
        log.add(user(0x02), run_started(0x03, 0x04, 0x02))
        assert log.reduce()["operation"] == {
            "kind": "run",
            "operationId": i(4),
            "inputEntryId": i(2),
            "toolCalls": [],
            "abortRequested": False,
        }
