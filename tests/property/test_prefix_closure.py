"""Prefix closure: what a crash can leave of a valid log always reduces, to the state of its last complete line.

A crash (or a short write) can cut a session file at any byte. The cut keeps every complete line and leaves a torn
tail, which the reducer ignores (SPEC §2.2). So for a valid log, every byte-cut prefix must reduce — or, before the
header's LF, fail with MISSING_HEADER — and must equal the state of its last line boundary, with ``repairedLength``
at that boundary. The fixtures are checked exhaustively at every byte; generated logs (Hypothesis) at every line
boundary and at sampled cuts, against the incremental ``Reducer`` export after each line.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.session.digests import configuration_digest, source_digest
from agent.session.errors import CorruptionError
from agent.session.framing import committed_lines, parse_line
from agent.session.reducer import Reducer, reduce_prefixes, reduce_session
from tests.conftest import CORPUS, reducer_manifest
from tests.unit.session.test_reducer import (
    ABORTED,
    INTERRUPTED,
    INVALID_ARGUMENTS,
    SNAPSHOT,
    TRUNCATED,
    UNKNOWN_TOOL,
    Log,
    abort,
    assistant,
    call,
    compaction,
    compaction_started,
    finished,
    i,
    run_started,
    step_attempt,
    step_failed,
    synthetic,
    tool_result,
    tool_started,
    usage,
    user,
)

ENTRIES = reducer_manifest()


def expectation(entry: dict) -> dict:
    return json.loads((CORPUS / "fixtures" / entry["expected"]).read_text())


VALID = [entry for entry in ENTRIES if expectation(entry)["ok"]]
INVALID = [entry for entry in ENTRIES if not expectation(entry)["ok"]]


def outcome(data: bytes) -> tuple:
    """("ok", state, boundary) or ("error", code, line, seq); any other exception propagates and fails the test."""
    try:
        state = reduce_session(data)
    except CorruptionError as exc:
        return ("error", exc.code, exc.line, exc.seq)
    return ("ok", state, state.boundary)


def boundary_states(data: bytes) -> dict[int, tuple]:
    """The outcome at every line boundary (byte count after each LF) of ``data``; states must be plain JSON."""
    states = {index + 1: outcome(data[: index + 1]) for index, byte in enumerate(data) if byte == 0x0A}
    for result in states.values():
        if result[0] == "ok":
            json.dumps(result[1], allow_nan=False)
    return states


def test_fixture_partition_is_not_empty(corpus):
    """The corpus provides both valid and invalid fixtures to cut."""
    assert len(VALID) == 26 and len(INVALID) == 20


@pytest.mark.parametrize("entry", VALID, ids=[entry["name"] for entry in VALID])
def test_every_byte_cut_of_a_valid_fixture(corpus, entry):
    """Every cut reduces to the state of its last line boundary (MISSING_HEADER before the header's LF)."""
    data = (corpus / "fixtures" / entry["file"]).read_bytes()
    at_boundary = boundary_states(data)
    for committed, result in at_boundary.items():
        assert result[0] == "ok", (committed, result)
        assert result[1]["repairedLength"] == committed
    for cut in range(len(data) + 1):
        last_lf = data.rfind(b"\n", 0, cut)
        expected = ("error", "MISSING_HEADER", 1, None) if last_lf < 0 else at_boundary[last_lf + 1]
        assert outcome(data[:cut]) == expected, cut


@pytest.mark.parametrize("entry", INVALID, ids=[entry["name"] for entry in INVALID])
def test_every_byte_cut_of_an_invalid_fixture(corpus, entry):
    """Cuts before the failing line reduce; once that line is committed, the exact expected error appears."""
    data = (corpus / "fixtures" / entry["file"]).read_bytes()
    error = expectation(entry)["error"]
    expected_error = ("error", error["code"], error["line"], error.get("seq"))
    for cut in range(len(data) + 1):
        committed = data[: data.rfind(b"\n", 0, cut) + 1]
        lines = committed.count(b"\n")
        result = outcome(data[:cut])
        if lines == 0:
            assert result == ("error", "MISSING_HEADER", 1, None), cut
        elif lines >= error["line"]:
            assert result == expected_error, cut
        else:
            assert result[0] == "ok", (cut, result)


# ---------------------------------------------------------------------------------------------------------- generated


class Writer:
    """Builds a valid, well-formed log from Hypothesis choices (a conforming writer, SPEC §12 and §15)."""

    def __init__(self, draw):
        self.draw = draw
        self.log = Log()
        self.next_id = 0x100
        self.messages: list[tuple[str, dict]] = []  # (entry id, message) in commit order
        self.boundary: str | None = None

    def new(self) -> int:
        self.next_id += 1
        return self.next_id

    def add(self, *facts: dict) -> None:
        for fact in facts:
            if fact["kind"] == "entry" and fact["entry"]["type"] == "message":
                self.messages.append((fact["id"], fact["entry"]["message"]))
                self.boundary = fact["id"]
        self.log.add(*facts)

    def run(self) -> None:
        draw = self.draw
        op, entry = self.new(), self.new()
        prompt = draw(st.sampled_from(["inspect", "fix it", "é\u2028ü"]))
        self.add(user(entry, prompt), run_started(self.new(), op, entry))
        aborted = False
        for step_number in range(draw(st.integers(1, 3))):
            step, attempt = self.new(), self.new()
            context = int(self.boundary[-12:], 16)
            self.add(step_attempt(self.new(), op, step, attempt, context))
            if draw(st.booleans()) and draw(st.booleans()):
                retry = self.new()
                self.add(step_attempt(self.new(), op, step, retry, context, number=2))
                attempt = retry
            if draw(st.integers(0, 9)) == 0:
                self.add(step_failed(self.new(), op, step, attempt))
                self.add(finished(self.new(), op, "failed", error={"code": "model_error", "message": "failed"}))
                return
            last = step_number == 2 or draw(st.booleans())
            answer = self.new()
            if last:
                stop = draw(st.sampled_from(["stop", "length"]))
                calls = [call(f"c{answer}_{k}") for k in range(draw(st.integers(0, 2)))] if stop == "length" else []
                owner_usage = usage(self.new(), op, attemptId=i(attempt))
                self.add(assistant(answer, step, attempt, stop, "done", calls=calls), owner_usage)
                for index, item in enumerate(calls):
                    self.add(synthetic(self.new(), step, answer, index, "truncated", TRUNCATED, item["id"]))
                if stop == "stop" or calls:
                    completion = "normal" if stop == "stop" else "truncated"
                    self.add(finished(self.new(), op, completion=completion, finalEntryId=i(answer)))
                else:
                    self.add(finished(self.new(), op, "failed", error={"code": "truncated_response", "message": "x"}))
                return
            calls = [call(f"c{answer}_{k}") for k in range(draw(st.integers(1, 3)))]
            self.add(assistant(answer, step, attempt, "toolUse", None, calls=calls))
            for index, item in enumerate(calls):
                choice = draw(st.sampled_from(["success", "error", "interrupted", "unknown", "invalid", "abort"]))
                if choice == "abort" and not aborted:
                    self.add(abort(self.new(), op, phase="tool", toolCallId=item["id"]))
                    aborted = True
                if aborted:
                    self.add(synthetic(self.new(), step, answer, index, "aborted", ABORTED, item["id"]))
                elif choice in ("unknown", "invalid"):
                    reason, text = (
                        ("unknownTool", UNKNOWN_TOOL) if choice == "unknown" else ("invalidArguments", INVALID_ARGUMENTS)
                    )
                    self.add(synthetic(self.new(), step, answer, index, reason, text, item["id"]))
                else:
                    started, result = self.new(), self.new()
                    self.add(tool_started(started, op, step, answer, result, index, item["id"]))
                    content = INTERRUPTED if choice == "interrupted" else "out"
                    kind = {"type": choice}
                    if choice == "interrupted":
                        kind = {"type": "synthetic", "reason": "interrupted"}
                    self.add(tool_result(result, step, started, item["id"], content=content, result=kind))
            if aborted:
                self.add(finished(self.new(), op, "aborted"))
                return
        self.add(finished(self.new(), op, "failed", error={"code": "model_error", "message": "gave up"}))

    def compact(self) -> None:
        if not self.messages:
            return
        op, result, step, attempt = self.new(), self.new(), self.new(), self.new()
        ids = [entry_id for entry_id, _ in self.messages]
        split = self.draw(st.integers(1, len(ids)))
        # A retained tail cannot start inside a tool-call group: move the split to a user/assistant message.
        while split < len(ids) and self.messages[split][1]["role"] == "tool":
            split += 1
        items = [{"sourceEntryId": entry_id, "message": message} for entry_id, message in self.messages]
        through = int(ids[-1][-12:], 16)
        record = compaction_started(self.new(), op, through, result, [], [], source_digest(items))
        record["record"]["compactedEntryIds"] = ids[:split]
        record["record"]["retainedEntryIds"] = ids[split:]
        self.add(record)
        self.add(step_attempt(self.new(), op, step, attempt, through, kind="compaction"))
        self.add(compaction(result, op, int(ids[split - 1][-12:], 16), items[split:], "sum"))
        self.add(finished(self.new(), op, kind="compaction", finalEntryId=i(result)))
        self.boundary = ids[-1]


@st.composite
def valid_logs(draw) -> bytes:
    writer = Writer(draw)
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 3)) == 0:
            writer.compact()
        writer.run()
    return writer.log.data()


def test_writer_snapshot_digest_is_the_fixture_digest():
    """The generated logs use the fixture snapshot, whose digest the builder hard-codes."""
    assert configuration_digest(SNAPSHOT) == "sha256:83d5da8892d877c5f94a6ff60ea8babcd1138107dcb80ed8f747372346bb5f75"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=valid_logs(), cuts=st.lists(st.floats(0, 1), max_size=8))
def test_generated_logs_are_prefix_closed(data, cuts):
    """Each line-boundary prefix equals the incremental export after that line; sampled cuts equal their boundary."""
    lines, repaired = committed_lines(data)
    assert repaired == len(data)
    reducer = Reducer()
    reducer.apply_header(parse_line(lines[0], 1), 1)
    offset = len(lines[0].encode()) + 1
    incremental = {offset: reducer.export(offset)}
    for number, text in enumerate(lines[1:], 2):
        reducer.apply(parse_line(text, number), number)
        offset += len(text.encode()) + 1
        incremental[offset] = reducer.export(offset)
    for boundary, state in incremental.items():
        assert outcome(data[:boundary]) == ("ok", state, state.boundary)
    for fraction in cuts:
        cut = int(fraction * len(data))
        last_lf = data.rfind(b"\n", 0, cut)
        if last_lf < 0:
            assert outcome(data[:cut]) == ("error", "MISSING_HEADER", 1, None)
        else:
            state = incremental[last_lf + 1]
            assert outcome(data[:cut]) == ("ok", state, state.boundary)


# ----------------------------------------------------------------------------------------------- one pass, all prefixes


def prefixes_agree(data: bytes, ends: list[int]) -> None:
    """``reduce_prefixes`` gives ``reduce_session`` of the whole and of exactly the asked-for line-boundary prefixes."""
    whole, parts = reduce_prefixes(data, ends)
    assert outcome(data) == ("ok", whole, whole.boundary)
    boundaries = {end for end in ends if 0 < end <= len(data) and data[end - 1] == 0x0A}
    assert set(parts) == boundaries
    for end, state in parts.items():
        assert outcome(data[:end]) == ("ok", state, state.boundary), end
        assert state.compaction_started == reduce_session(data[:end]).compaction_started


@pytest.mark.parametrize("entry", VALID, ids=[entry["name"] for entry in VALID])
def test_reduce_prefixes_of_a_valid_fixture(corpus, entry):
    """Asked for every byte offset, one pass returns each line-boundary prefix's own reduction and nothing else."""
    data = (corpus / "fixtures" / entry["file"]).read_bytes()
    prefixes_agree(data, list(range(-1, len(data) + 2)))


@pytest.mark.parametrize("entry", INVALID, ids=[entry["name"] for entry in INVALID])
def test_reduce_prefixes_of_an_invalid_fixture_raises_its_error(corpus, entry):
    """A log that does not reduce raises exactly reduce_session's error, whatever its prefixes would do."""
    data = (corpus / "fixtures" / entry["file"]).read_bytes()
    error = expectation(entry)["error"]
    with pytest.raises(CorruptionError) as info:
        reduce_prefixes(data, [data.find(b"\n") + 1])
    assert info.value.to_json() == error


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=valid_logs(), cuts=st.lists(st.floats(0, 1), max_size=8))
def test_reduce_prefixes_of_generated_logs(data, cuts):
    """On generated logs: every line boundary and sampled cuts, each prefix's reduction from the one pass."""
    ends = [index + 1 for index, byte in enumerate(data) if byte == 0x0A] + [int(f * len(data)) for f in cuts]
    prefixes_agree(data, ends)
