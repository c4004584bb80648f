"""Unit tests for agent.session.framing: committed bytes, byte-level checks, strict JSON (SPEC §2, §14.3)."""

from __future__ import annotations

import pytest

from agent.session.errors import CorruptionError
from agent.session.framing import committed_lines, parse_arguments, parse_line

HEADER = b'{"kind":"header"}'


def error_of(call, *args) -> tuple:
    """Run ``call`` and return the (code, line, seq) of the CorruptionError it must raise."""
    with pytest.raises(CorruptionError) as info:
        call(*args)
    return info.value.code, info.value.line, info.value.seq


class TestCommittedLines:
    def test_empty_file_is_missing_header(self):
        """An empty file has no LF and is MISSING_HEADER on line 1 without seq."""
        assert error_of(committed_lines, b"") == ("MISSING_HEADER", 1, None)

    def test_header_without_lf_is_missing_header(self):
        """A header whose LF was never written is MISSING_HEADER, not a parsed header."""
        assert error_of(committed_lines, HEADER) == ("MISSING_HEADER", 1, None)

    def test_empty_first_line_is_missing_header(self):
        """A file starting with LF has an empty first line: MISSING_HEADER line 1."""
        assert error_of(committed_lines, b"\n" + HEADER + b"\n") == ("MISSING_HEADER", 1, None)

    def test_torn_tail_is_ignored_and_measured(self):
        """Bytes after the last LF are dropped and repairedLength is the index of the last LF plus one."""
        data = HEADER + b"\n[1]\n" + b'{"partial":'
        lines, repaired = committed_lines(data)
        assert lines == [HEADER.decode(), "[1]"]
        assert repaired == len(HEADER) + 5

    def test_torn_tail_may_hold_invalid_bytes(self):
        """Invalid UTF-8 and raw surrogates after the last LF cause no error (§2.2)."""
        lines, repaired = committed_lines(HEADER + b"\n\xff\xed\xa0\x80")
        assert lines == [HEADER.decode()] and repaired == len(HEADER) + 1

    def test_raw_surrogate_on_later_line_reports_its_line(self):
        """Raw ED A0 80 bytes on line 3 are MALFORMED_JSON at line 3 (the corpus lost this case, §17.2)."""
        data = HEADER + b'\n[1]\n"\xed\xa0\x80"\n'
        assert error_of(committed_lines, data) == ("MALFORMED_JSON", 3, None)

    def test_raw_surrogate_scan_runs_before_utf8_check(self):
        """A raw surrogate on line 3 wins over an invalid UTF-8 byte on line 2 (§2.3 order)."""
        data = HEADER + b'\n"\xff"\n"\xed\xbf\xbf"\n'
        assert error_of(committed_lines, data) == ("MALFORMED_JSON", 3, None)

    def test_raw_surrogate_scan_runs_before_empty_first_line(self):
        """A raw surrogate is reported even when line 1 is empty."""
        assert error_of(committed_lines, b'\n"\xed\xa0\x80"\n') == ("MALFORMED_JSON", 2, None)

    def test_invalid_utf8_is_always_line_one(self):
        """A bad byte on line 4 is INVALID_UTF8 reported on line 1 without seq."""
        data = HEADER + b"\n[1]\n[2]\n\"\xff\"\n"
        assert error_of(committed_lines, data) == ("INVALID_UTF8", 1, None)

    @pytest.mark.parametrize(
        "bad",
        [b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\x80", b"\xed\xa0"],
        ids=["overlong-2", "overlong-3", "above-10ffff", "truncated", "lone-continuation", "half-surrogate"],
    )
    def test_strict_utf8_rejects(self, bad):
        """Overlong forms, code points above U+10FFFF and truncated sequences are INVALID_UTF8."""
        assert error_of(committed_lines, HEADER + b"\n" + bad + b"\n") == ("INVALID_UTF8", 1, None)

    def test_only_lf_separates_lines(self):
        """U+2028, U+2029, U+0085 and CR do not split lines."""
        line = '"a\u2028b\u2029c\u0085d\re"'
        lines, _ = committed_lines(HEADER + b"\n" + line.encode() + b"\n")
        assert lines == [HEADER.decode(), line]


class TestParseLine:
    def test_blank_line(self):
        """An empty complete line is BLANK_LINE at its line number."""
        assert error_of(parse_line, "", 7) == ("BLANK_LINE", 7, None)

    def test_crlf_line(self):
        """A line ending in CR is CRLF_NOT_ALLOWED even when the JSON before it is valid."""
        assert error_of(parse_line, "{}\r", 3) == ("CRLF_NOT_ALLOWED", 3, None)

    def test_cr_as_inner_whitespace_is_legal(self):
        """A CR between tokens is JSON whitespace and does not end the line."""
        assert parse_line('{"a":\r1}', 2) == {"a": 1}

    def test_leading_and_trailing_whitespace_are_legal(self):
        """Spaces and tabs around the value are insignificant."""
        assert parse_line(' \t[1] \t', 2) == [1]

    @pytest.mark.parametrize(
        "text",
        [
            '{"a":1,"a":2}',
            '{"a":1,"\\u0061":2}',
            '{"x":{"b":1,"b":1}}',
            '[1,[{"k":null,"k":null}]]',
        ],
        ids=["top", "escaped", "nested", "in-array"],
    )
    def test_duplicate_members_at_any_depth(self, text):
        """Duplicate member names, compared after unescaping, are MALFORMED_JSON."""
        assert error_of(parse_line, text, 2) == ("MALFORMED_JSON", 2, None)

    @pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a":-Infinity}', "[nan]", "'a'", "[1,]", "01", "+1", ".5", "True"])
    def test_non_rfc_tokens(self, text):
        """NaN, Infinity and other tokens outside RFC 8259 are MALFORMED_JSON."""
        assert error_of(parse_line, text, 4) == ("MALFORMED_JSON", 4, None)

    @pytest.mark.parametrize(
        "text",
        ['"\\ud800"', '"\\udc00"', '"\\ud800\\u0041"', '"\\udc00\\ud800"', '{"\\uDBFF":1}', '["ok","x\\uD83D"]'],
        ids=["high", "low", "high-then-other", "reversed", "member-name", "upper-hex"],
    )
    def test_escaped_lone_surrogates(self, text):
        """Escaped lone surrogates in values or member names are MALFORMED_JSON."""
        assert error_of(parse_line, text, 2) == ("MALFORMED_JSON", 2, None)

    def test_escaped_surrogate_pair_is_fine(self):
        """A correctly paired escape decodes to one astral character."""
        assert parse_line('"\\ud83d\\ude00"', 2) == "\U0001f600"

    def test_escaped_backslash_before_u_is_not_a_surrogate(self):
        """The text \\\\ud800 is an escaped backslash followed by letters, not a surrogate escape."""
        assert parse_line('"\\\\ud800"', 2) == "\\ud800"

    def test_raw_control_character_in_string(self):
        """A raw U+001F inside a string is MALFORMED_JSON; its escape is fine."""
        assert error_of(parse_line, '"a\x1fb"', 2) == ("MALFORMED_JSON", 2, None)
        assert parse_line('"a\\u001fb"', 2) == "a\x1fb"

    def test_depth_128_is_accepted(self):
        """Nesting depth exactly 128 is legal."""
        value = parse_line("[" * 128 + "]" * 128, 2)
        for _ in range(127):
            value = value[0]
        assert value == []
        assert parse_line('{"a":' * 127 + "[]" + "}" * 127, 2) is not None

    def test_depth_129_is_malformed(self):
        """Nesting depth 129 is MALFORMED_JSON, for arrays and objects alike."""
        assert error_of(parse_line, "[" * 129 + "]" * 129, 2) == ("MALFORMED_JSON", 2, None)
        assert error_of(parse_line, '{"a":' * 128 + "{}" + "}" * 128, 2) == ("MALFORMED_JSON", 2, None)

    def test_brackets_inside_strings_do_not_count(self):
        """Brackets inside strings do not add nesting depth."""
        assert parse_line('["' + "[{" * 200 + '"]', 2) == ["[{" * 200]

    def test_very_deep_nesting_never_crashes(self):
        """A 100,000-deep array is MALFORMED_JSON, not a RecursionError."""
        assert error_of(parse_line, "[" * 100_000 + "]" * 100_000, 5) == ("MALFORMED_JSON", 5, None)

    def test_integer_literal_of_4300_digits_is_legal(self):
        """An integer literal of exactly 4300 digits, signed or not, parses."""
        assert parse_line("[" + "9" * 4300 + "]", 2)[0] == int("9" * 4300)
        assert parse_line("-" + "9" * 4300, 2) == -int("9" * 4300)

    def test_integer_literal_of_4301_digits_is_malformed(self):
        """An integer literal of 4301 digits is MALFORMED_JSON."""
        assert error_of(parse_line, "[" + "9" * 4301 + "]", 2) == ("MALFORMED_JSON", 2, None)
        assert error_of(parse_line, "-" + "1" * 4301, 2) == ("MALFORMED_JSON", 2, None)

    def test_long_digit_string_and_long_fraction_are_legal(self):
        """4301 digits inside a string, or in a number with a fraction, are not an over-long integer literal."""
        assert parse_line('"' + "1" * 5000 + '"', 2) == "1" * 5000
        assert parse_line("1" * 5000 + ".5", 2) > 0

    def test_huge_exponent_parses_as_infinity(self):
        """1e400 is syntactically valid; the field that receives it rejects it later (§2.5)."""
        assert parse_line("[1e400]", 2) == [float("inf")]

    @pytest.mark.parametrize("text", ["\ufeff{}", "[\ufeff1]", "{}\ufeff", '{\ufeff"a":1}'])
    def test_bom_outside_strings(self, text):
        """A BOM at the start or between tokens is MALFORMED_JSON, not whitespace."""
        assert error_of(parse_line, text, 1) == ("MALFORMED_JSON", 1, None)

    def test_bom_inside_string_is_a_character(self):
        """A BOM inside a string is an ordinary character."""
        assert parse_line('"\ufeff"', 2) == "\ufeff"

    def test_line_separators_inside_strings(self):
        """U+2028, U+2029 and U+0085 are ordinary characters in strings."""
        assert parse_line('"\u2028\u2029\u0085"', 2) == "\u2028\u2029\u0085"

    @pytest.mark.parametrize("text", ["{} {}", "[1]]", "{", '"abc', "tru", "1 2"])
    def test_syntax_errors(self, text):
        """Extra data and truncated values are MALFORMED_JSON."""
        assert error_of(parse_line, text, 9) == ("MALFORMED_JSON", 9, None)


class TestParseArguments:
    def test_object_is_valid(self):
        """A strict JSON object is returned as a dict."""
        assert parse_arguments('{"path":"README.md","n":[1,2.5]}') == {"path": "README.md", "n": [1, 2.5]}

    def test_newlines_are_whitespace_in_arguments(self):
        """Argument text is not a log line: an LF between tokens is whitespace."""
        assert parse_arguments('{\n  "a": 1\n}\n') == {"a": 1}

    @pytest.mark.parametrize("text", ["", "null", "[]", "1", '"x"', "true", "{", '{"a":1,"a":2}'])
    def test_not_an_object(self, text):
        """Empty text, non-objects and malformed JSON are invalid arguments (§14.3)."""
        assert parse_arguments(text) is None

    @pytest.mark.parametrize("text", ['{"a":1e400}', '{"a":[-1e999]}', '{"a":NaN}', '{"a":Infinity}'])
    def test_non_finite_numbers(self, text):
        """Numbers that are not finite, including overflowing literals, make arguments invalid."""
        assert parse_arguments(text) is None

    def test_depth_limit_is_64(self):
        """Depth 64 is valid in arguments, depth 65 is not (the log allows 128)."""
        assert parse_arguments('{"a":' * 63 + "{}" + "}" * 63) is not None
        assert parse_arguments('{"a":' * 64 + "{}" + "}" * 64) is None

    def test_lone_surrogate_and_bom(self):
        """Escaped lone surrogates and a leading BOM make arguments invalid."""
        assert parse_arguments('{"a":"\\ud800"}') is None
        assert parse_arguments('\ufeff{"a":1}') is None

    def test_non_string_input(self):
        """A non-string argument text is invalid rather than an exception."""
        assert parse_arguments(None) is None
