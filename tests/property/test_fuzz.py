"""Fuzzing the reading side: no input bytes make the reducer raise anything but CorruptionError (SPEC §11.1).

Three generators: random bytes; random byte-level and JSON-level mutations of the valid fixtures (which reach deep
into the transaction rules); and JSON-ish texts compared against an independent, deliberately naive strict-JSON
parser written from §2.5, which checks that the fast paths of ``framing`` never accept what the rules reject.
"""

from __future__ import annotations

import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.session.errors import CorruptionError
from agent.session.framing import committed_lines, parse_arguments, parse_line
from agent.session.reducer import Reducer, reduce_session
from tests.conftest import CORPUS, reducer_manifest

CODES_WITHOUT_SEQ = {
    "INVALID_UTF8",
    "MISSING_HEADER",
    "INVALID_HEADER",
    "UNSUPPORTED_VERSION",
    "BLANK_LINE",
    "CRLF_NOT_ALLOWED",
    "MALFORMED_JSON",
    "EMPTY_TRANSACTION",
}
CODES_WITH_SEQ = {"SEQ_MISMATCH", "DUPLICATE_ID", "INVALID_REFERENCE", "INVALID_TRANSITION", "INVALID_TRANSCRIPT"}
ALL_CODES = CODES_WITHOUT_SEQ | CODES_WITH_SEQ | {"INVALID_FACT"}

VALID_LOGS = [
    (CORPUS / "fixtures" / entry["file"]).read_bytes()
    for entry in reducer_manifest()
    if json.loads((CORPUS / "fixtures" / entry["expected"]).read_text())["ok"]
]
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check_outcome(data: bytes) -> None:
    """Reduce ``data``: either a plain-JSON state or a well-formed CorruptionError; nothing else may escape."""
    try:
        state = reduce_session(data)
    except CorruptionError as exc:
        assert exc.code in ALL_CODES
        lines = max(1, data[: data.rfind(b"\n") + 1].count(b"\n"))
        assert 1 <= exc.line <= lines
        if exc.code in CODES_WITHOUT_SEQ:
            assert exc.seq is None
        elif exc.code in CODES_WITH_SEQ:
            assert type(exc.seq) is int and exc.seq >= 1
        else:
            assert exc.seq is None or (type(exc.seq) is int and exc.seq >= 1)
        if exc.code in ("INVALID_UTF8", "MISSING_HEADER"):
            assert exc.line == 1
        return
    text = json.dumps(state, allow_nan=False)  # never NaN/Infinity, never a non-JSON value
    assert json.loads(text) == state
    assert state["repairedLength"] == data.rfind(b"\n") + 1


def test_there_are_valid_logs_to_mutate(corpus):
    """The mutation fuzzers start from the 26 valid fixtures."""
    assert len(VALID_LOGS) == 26


@settings(FUZZ, max_examples=150)
@given(st.binary(max_size=400))
def test_random_bytes(data):
    """Arbitrary bytes reduce or raise CorruptionError."""
    check_outcome(data)


@settings(FUZZ, max_examples=150)
@given(st.binary(max_size=300), st.sampled_from(VALID_LOGS))
def test_random_bytes_after_a_valid_header(tail, log):
    """Random bytes after a valid header line reach the transaction parser and still only raise CorruptionError."""
    header = log[: log.index(b"\n") + 1]
    check_outcome(header + tail)
    check_outcome(header + tail + b"\n")


@st.composite
def byte_mutations(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(VALID_LOGS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "dup-line", "swap-lines", "cut"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] = draw(st.sampled_from([0x00, 0x0A, 0x0D, 0x22, 0x5C, 0x7B, 0x5D, 0xED, 0xFF, 0x31, 0x20]))
        elif kind == "insert":
            inserts = [b"\n", b"\r", b"\xef\xbb\xbf", b"\xed\xa0\x80", b"[", b"}", b",", b" "]
            data[at:at] = draw(st.sampled_from(inserts))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 40))]
        elif kind == "cut":
            del data[at:]
        else:
            lines = bytes(data).split(b"\n")
            a = draw(st.integers(0, len(lines) - 1))
            b = draw(st.integers(0, len(lines) - 1))
            if kind == "dup-line":
                lines.insert(b, lines[a])
            else:
                lines[a], lines[b] = lines[b], lines[a]
            data = bytearray(b"\n".join(lines))
    return bytes(data)


@settings(FUZZ, max_examples=200)
@given(byte_mutations())
def test_byte_mutations_of_valid_logs(data):
    """Flipped, inserted, deleted or reordered bytes and lines of valid logs never escape CorruptionError."""
    check_outcome(data)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.sampled_from([0, 1, 2, -1, 2**53, 2**53 - 1, 1.0, 0.5, 1e300, "", "x", "read", "call_1", "toolUse"])
    | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=6,
)


def paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


@st.composite
def json_mutations(draw) -> bytes:
    log = draw(st.sampled_from(VALID_LOGS))
    lines = log.decode().split("\n")[:-1]
    for _ in range(draw(st.integers(1, 3))):
        # Mostly transaction lines: a broken header hides everything behind INVALID_HEADER.
        header = len(lines) == 1 or draw(st.integers(0, 9)) == 0
        number = 0 if header else draw(st.integers(1, len(lines) - 1))
        value = json.loads(lines[number])
        target = draw(st.sampled_from(list(paths(value))))
        action = draw(st.sampled_from(["replace", "delete", "add", "swap-ids", "bool"]))
        if not target:
            value = draw(JSON_VALUES) if action == "replace" else value
        else:
            parent = value
            for key in target[:-1]:
                parent = parent[key]
            last = target[-1]
            if action == "replace":
                parent[last] = draw(JSON_VALUES)
            elif action == "delete":
                del parent[last]
            elif action == "add" and isinstance(parent, dict):
                parent[draw(st.sampled_from(["extra", "seq", "toolCallId", "completion", "error", "reason"]))] = draw(
                    JSON_VALUES
                )
            elif action == "swap-ids" and isinstance(parent[last], str):
                ids = re.findall(r"018f0000-0000-7000-8000-[0-9a-f]{12}", log.decode())
                parent[last] = draw(st.sampled_from(ids))
            elif action == "bool" and isinstance(parent[last], int):
                parent[last] = bool(parent[last]) if draw(st.booleans()) else float(parent[last])
        lines[number] = json.dumps(value, separators=(",", ":"), ensure_ascii=draw(st.booleans()))
    return ("\n".join(lines) + "\n").encode()


@settings(FUZZ, max_examples=250)
@given(json_mutations())
def test_json_mutations_of_valid_logs(data):
    """Replaced, deleted, added or retyped members anywhere in valid logs give a state or a CorruptionError."""
    check_outcome(data)


@settings(FUZZ, max_examples=80)
@given(json_mutations())
def test_rejected_lines_leave_the_reducer_unchanged(data):
    """Under random corruption, a line the reducer rejects changes neither its state nor its next seq (§4.1)."""
    try:
        lines, _ = committed_lines(data)
        reducer = Reducer()
        reducer.apply_header(parse_line(lines[0], 1), 1)
    except CorruptionError:
        return
    for number, text in enumerate(lines[1:], 2):
        try:
            value = parse_line(text, number)
        except CorruptionError:
            return
        before = json.dumps(reducer.export(0)), reducer.next_seq, reducer.next_line, reducer.boundary
        try:
            reducer.apply(value, number)
        except CorruptionError:
            assert (json.dumps(reducer.export(0)), reducer.next_seq, reducer.next_line, reducer.boundary) == before
            return


# ---------------------------------------------------------------------------------------------------------- strict JSON


class Reject(Exception):
    """The reference parser rejects the text."""


class ReferenceParser:
    """A direct, slow transcription of RFC 8259 plus the extra rules of SPEC §2.5 (depth, digits, surrogates)."""

    NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")

    def __init__(self, text: str, max_depth: int):
        self.text = text
        self.pos = 0
        self.max_depth = max_depth

    def parse(self) -> object:
        self.ws()
        value = self.value(1)
        self.ws()
        if self.pos != len(self.text):
            raise Reject("extra data")
        return value

    def ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\n\r":
            self.pos += 1

    def value(self, depth: int) -> object:
        text, pos = self.text, self.pos
        if pos >= len(text):
            raise Reject("end")
        char = text[pos]
        if char in "{[":
            if depth > self.max_depth:
                raise Reject("depth")
            return self.container(depth, char)
        if char == '"':
            return self.string()
        for literal, result in (("true", True), ("false", False), ("null", None)):
            if text.startswith(literal, pos):
                self.pos += len(literal)
                return result
        match = self.NUMBER.match(text, pos)
        if not match:
            raise Reject("token")
        self.pos = match.end()
        if match.group(2) is None and match.group(3) is None:
            if len(match.group(1)) > 4300:
                raise Reject("digits")
            return int(match.group(0))
        return float(match.group(0))

    def container(self, depth: int, opener: str) -> object:
        self.pos += 1
        closer = "}" if opener == "{" else "]"
        items: list = []
        members: dict = {}
        self.ws()
        if self.text.startswith(closer, self.pos):
            self.pos += 1
            return members if opener == "{" else items
        while True:
            self.ws()
            if opener == "{":
                if not self.text.startswith('"', self.pos):
                    raise Reject("key")
                key = self.string()
                self.ws()
                if not self.text.startswith(":", self.pos):
                    raise Reject("colon")
                self.pos += 1
                self.ws()
                if key in members:
                    raise Reject("duplicate")
                members[key] = self.value(depth + 1)
            else:
                self.ws()
                items.append(self.value(depth + 1))
            self.ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith(closer, self.pos):
                self.pos += 1
                return members if opener == "{" else items
            raise Reject("separator")

    def string(self) -> str:
        self.pos += 1
        units: list[int] = []
        text = self.text
        while True:
            if self.pos >= len(text):
                raise Reject("unterminated")
            char = text[self.pos]
            self.pos += 1
            if char == '"':
                break
            if ord(char) < 0x20:
                raise Reject("control")
            if char != "\\":
                code = ord(char)
                if code > 0xFFFF:  # an astral character is two UTF-16 code units
                    units += [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)]
                else:
                    units.append(code)
                continue
            escape = text[self.pos : self.pos + 1]
            self.pos += 1
            simple = {'"': 0x22, "\\": 0x5C, "/": 0x2F, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9}
            if escape in simple:
                units.append(simple[escape])
            elif escape == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[self.pos : self.pos + 4]):
                units.append(int(text[self.pos : self.pos + 4], 16))
                self.pos += 4
            else:
                raise Reject("escape")
        # Lone surrogates (escaped; raw ones cannot reach here from UTF-8) are rejected.
        out, index = [], 0
        while index < len(units):
            unit = units[index]
            if 0xD800 <= unit <= 0xDBFF and index + 1 < len(units) and 0xDC00 <= units[index + 1] <= 0xDFFF:
                out.append(chr(0x10000 + ((unit - 0xD800) << 10) + (units[index + 1] - 0xDC00)))
                index += 2
            elif 0xD800 <= unit <= 0xDFFF:
                raise Reject("lone surrogate")
            else:
                out.append(chr(unit))
                index += 1
        return "".join(out)


def reference(text: str, max_depth: int = 128) -> tuple:
    try:
        return ("ok", ReferenceParser(text, max_depth).parse())
    except Reject:
        return ("malformed",)


def same(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[key], b[key]) for key in a)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


SPACE = st.sampled_from(["", "", "", " ", "\t", "\r ", "\ufeff"])
STRING_PIECES = st.sampled_from(
    ["a", "é", "\U0001f600", "\u2028", "[{", "\\n", "\\\\", '\\"', "\\/", "\\u0061", "\\u00e9", "\\ud83d\\ude00",
     "\\ud800", "\\udc00", "\\uDBFF\\uDFFF", "\\ud800\\u0041", "\\x", "\x01", "\\\\ud800", "\\u12"]
)
KEYS = st.sampled_from(['"a"', '"\\u0061"', '"b"', '""', '"\\ud800"', '"kind"', "a"])
NUMBERS = st.sampled_from(
    ["0", "-0", "1", "-12", "1.5", "1e400", "-1E-400", "1.0", "2e0", "01", "1.", ".5", "+1", "NaN", "Infinity",
     "-Infinity", "1" * 4300, "-" + "1" * 4300, "2" * 4301, "1" * 4400 + ".5", "9007199254740993",
     "1" + "0" * 300, "-1" + "0" * 400, str(2**1024 - 2**970), str(2**1024 - 2**970 - 1)]
)


def json_texts() -> st.SearchStrategy[str]:
    scalars = (
        NUMBERS
        | st.sampled_from(["true", "false", "null", "nul", "True"])
        | st.lists(STRING_PIECES, max_size=4).map(lambda pieces: '"' + "".join(pieces) + '"')
    )

    def containers(children):
        array = st.tuples(SPACE, st.lists(st.tuples(children, SPACE), max_size=3)).map(
            lambda t: "[" + t[0] + ",".join(value + space for value, space in t[1]) + "]"
        )
        obj = st.lists(st.tuples(KEYS, SPACE, children), max_size=3).map(
            lambda members: "{" + ",".join(key + space + ":" + value for key, space, value in members) + "}"
        )
        return array | obj

    return st.tuples(SPACE, st.recursive(scalars, containers, max_leaves=8), SPACE).map("".join)


@settings(FUZZ, max_examples=400)
@given(json_texts())
def test_strict_json_matches_the_reference(text):
    """parse_line accepts exactly the texts the reference strict parser accepts, with identical values."""
    expected = reference(text)
    try:
        got = ("ok", parse_line(text, 2))
    except CorruptionError as exc:
        assert (exc.code, exc.line, exc.seq) in {("MALFORMED_JSON", 2, None), ("CRLF_NOT_ALLOWED", 2, None)}
        if exc.code == "CRLF_NOT_ALLOWED":
            assert text.endswith("\r")
            return
        got = ("malformed",)
    if text.endswith("\r"):
        raise AssertionError("a line ending in CR must be CRLF_NOT_ALLOWED")
    assert got[0] == expected[0], (text, got, expected)
    if got[0] == "ok":
        assert same(got[1], expected[1]), text


@settings(FUZZ, max_examples=120)
@given(st.integers(100, 140), st.sampled_from(["[", '{"a":', '{"\\u0061":[']), st.booleans())
def test_depth_limit_matches_the_reference(depth, opener, in_string):
    """Around the depth limit, with brackets also hidden in strings, parse_line agrees with the reference."""
    closer = {"[": "]", '{"a":': "}", '{"\\u0061":[': "]}"}[opener]
    inner = '"' + "[" * 200 + '"' if in_string else "1"
    text = opener * depth + inner + closer * depth
    expected = reference(text)
    try:
        got = ("ok", parse_line(text, 3))
    except CorruptionError:
        got = ("malformed",)
    assert got[0] == expected[0]


@settings(FUZZ, max_examples=150)
@given(json_texts())
def test_arguments_match_the_reference(text):
    """parse_arguments accepts exactly the reference's objects with depth <= 64 and only finite numbers."""
    expected = reference(text, max_depth=64)
    valid = expected[0] == "ok" and type(expected[1]) is dict and finite(expected[1])
    got = parse_arguments(text)
    assert (got is not None) == valid, text
    if valid:
        assert same(got, expected[1])


def finite(value: object) -> bool:
    """No number that is, or (as an integer literal) rounds to, an IEEE-754 infinity."""
    if isinstance(value, dict):
        return all(finite(item) for item in value.values())
    if isinstance(value, list):
        return all(finite(item) for item in value)
    if type(value) is int:
        try:
            float(value)  # Python rounds half-even and raises exactly when the result would be infinite
        except OverflowError:
            return False
        return True
    return not isinstance(value, float) or value - value == 0
