"""Framing and strict JSON: raw session bytes to committed lines, one line to one JSON value.

What for: the first two stages of the reducer's pipeline (SPEC §2). ``committed_lines`` applies the file-level byte
checks of §2.3 in their normative order and returns the committed lines plus ``repairedLength``; ``parse_line``
applies the per-line checks of §2.4 steps 1-3 and the strict JSON rules of §2.5; ``parse_arguments`` is the planner's
argument parser (§14.3).

Invariant: for ANY input the only exception that escapes is ``CorruptionError`` with the exact code and line of the
spec (``parse_arguments`` raises nothing: it answers ``None``). Deep nesting, huge integers, BOMs and lone surrogates
are reported, never crash the parser.

Speed: Python's C scanner with a duplicate-key hook does the bulk of §2.5. The rules it does not cover (escaped lone
surrogates, depth, integer length) are checked on the parsed value only when the raw text could violate them, which a
few substring counts decide; a line written by our store never needs the careful walk.

Not here: transaction semantics (``reducer``), canonical JSON (``digests``), any I/O.
"""

from __future__ import annotations

import math
import re
from json.decoder import JSONDecoder

from agent.session.errors import CorruptionError

MAX_LINE_DEPTH = 128  # SPEC §2.5
MAX_ARGUMENT_DEPTH = 64  # SPEC §14.3
MAX_INTEGER_DIGITS = 4300  # SPEC §2.5 (equal to CPython's default int/str conversion limit)
# §2.5: an integer literal whose value overflows binary64 is not finite, like 1e400. This is the smallest integer
# that rounds to infinity (halfway between the largest double, 2^1024-2^971, and 2^1024; ties go to even).
FLOAT_OVERFLOW_INT = 2**1024 - 2**970

# §2.3 step 2: the CESU-8 / WTF-8 encoding of U+D800..U+DFFF.
_RAW_SURROGATE = re.compile(rb"\xed[\xa0-\xbf][\x80-\xbf]")
# A decoded lone surrogate: Python's json turns an unpaired "\ud800" escape into this code point, and a correctly
# paired escape into one astral character, so any match after parsing is a lone surrogate (§2.5).
_SURROGATE_CHAR = re.compile("[\ud800-\udfff]")
# Conservative pre-filter on raw text: only a line containing a \uD8xx..\uDFxx escape can decode to a surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
# Conservative pre-filter: an integer literal with more than 4300 digits needs 4301 consecutive ASCII digits.
_LONG_DIGITS = re.compile(r"[0-9]{%d}" % (MAX_INTEGER_DIGITS + 1))
_WHITESPACE = " \t\n\r"  # RFC 8259 insignificant whitespace (a log line cannot hold LF; argument text can)


class _MalformedError(ValueError):
    """Internal: the text is not a strict JSON text (§2.5)."""


def _unique_object(pairs: list) -> dict:
    # §2.5: duplicate member names at any depth, compared after unescaping (the scanner has unescaped them).
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _MalformedError("duplicate member name")
    return obj


def _reject_constant(name: str) -> object:
    # §2.5: NaN, Infinity and -Infinity are not RFC 8259 literals.
    raise _MalformedError(f"non-RFC literal {name}")


def _checked_int(literal: str) -> int:
    # §2.5: an integer literal with more than 4300 digits is malformed, whatever the interpreter's own limit is.
    if len(literal) - (literal[0] == "-") > MAX_INTEGER_DIGITS:
        raise _MalformedError("integer literal too long")
    return int(literal)


_scan = JSONDecoder(object_pairs_hook=_unique_object, parse_constant=_reject_constant).scan_once
_scan_checked_ints = JSONDecoder(
    object_pairs_hook=_unique_object, parse_constant=_reject_constant, parse_int=_checked_int
).scan_once


def _walk(value: object, max_depth: int, finite_only: bool) -> None:
    """Check depth, lone surrogates in strings and member names, and (optionally) finiteness, iteratively."""
    stack = [(value, 1)]
    pop = stack.pop
    push = stack.append
    surrogate = _SURROGATE_CHAR.search
    while stack:
        node, depth = pop()
        kind = type(node)
        if kind is dict:
            if depth > max_depth:
                raise _MalformedError("nesting too deep")
            for key, item in node.items():
                if surrogate(key):
                    raise _MalformedError("lone surrogate in member name")
                push((item, depth + 1))
        elif kind is list:
            if depth > max_depth:
                raise _MalformedError("nesting too deep")
            for item in node:
                push((item, depth + 1))
        elif kind is str:
            if surrogate(node):
                raise _MalformedError("lone surrogate in string")
        elif kind is float and finite_only and not _isfinite(node):
            raise _MalformedError("non-finite number")  # §14.3: e.g. 1e400, which Python parses as inf
        elif kind is int and finite_only and not -FLOAT_OVERFLOW_INT < node < FLOAT_OVERFLOW_INT:
            raise _MalformedError("non-finite number")  # §14.3: an integer literal such as 1 followed by 400 zeros


_isfinite = math.isfinite


def _strict_loads(text: str, max_depth: int, finite_only: bool = False) -> object:
    """Parse one strict JSON text (§2.5); raise ``_MalformedError`` for anything else."""
    long_text = len(text) > MAX_INTEGER_DIGITS
    # A long run of digits may be an over-long integer literal: parse integers with the explicit length check.
    scan = _scan_checked_ints if long_text and _LONG_DIGITS.search(text) else _scan
    start = 0
    end_of_text = len(text)
    # Leading/trailing insignificant whitespace is legal (§2.5); a BOM is not whitespace, so it fails the scan.
    while start < end_of_text and text[start] in _WHITESPACE:
        start += 1
    try:
        value, end = scan(text, start)
    except StopIteration:
        raise _MalformedError("no JSON value") from None
    except RecursionError:
        # §2.5: parsers MUST NOT crash on deep nesting; a recursion failure is MALFORMED_JSON.
        raise _MalformedError("nesting too deep") from None
    except _MalformedError:
        raise
    except ValueError as exc:  # JSONDecodeError, or CPython's own integer-length limit
        raise _MalformedError(str(exc)) from None
    while end < end_of_text:
        if text[end] not in _WHITESPACE:
            raise _MalformedError("extra data after the JSON value")
        end += 1
    # Depth can exceed the limit only if the text holds more opening brackets than the limit (strings included).
    deep = text.count("[") + text.count("{") > max_depth
    if deep or finite_only or ("\\u" in text and _SURROGATE_ESCAPE.search(text)):
        _walk(value, max_depth, finite_only)
    return value


def committed_lines(data: bytes) -> tuple[list[str], int]:
    """Apply the file-level checks of SPEC §2.3 in order; return (lines L1..Ln, repairedLength)."""
    last_lf = data.rfind(b"\n")
    if last_lf < 0:
        # §2.2/§2.3 step 1: an empty file, or a header without its LF.
        raise CorruptionError("MISSING_HEADER", 1)
    repaired_length = last_lf + 1
    committed = data[:repaired_length]  # §2.2: the torn tail after the last LF is ignored whatever it holds
    raw = _RAW_SURROGATE.search(committed)
    if raw is not None:
        # §2.3 step 2: over the whole committed range BEFORE any other check; line = 1 + LFs before the 0xED byte.
        raise CorruptionError("MALFORMED_JSON", committed.count(b"\n", 0, raw.start()) + 1)
    try:
        text = committed.decode("utf-8")  # strict RFC 3629: no overlongs, surrogates, > U+10FFFF, truncation
    except UnicodeDecodeError:
        raise CorruptionError("INVALID_UTF8", 1) from None  # §2.3 step 3: always line 1, no seq
    # §2.1: LF is the only separator; U+2028/U+2029/U+0085 and CR stay inside their line.
    lines = text[:-1].split("\n")
    if not lines[0]:
        raise CorruptionError("MISSING_HEADER", 1)  # §2.3 step 4
    return lines, repaired_length


def parse_line(text: str, line: int) -> object:
    """SPEC §2.4 steps 1-3 for one complete line: blank, then CR, then strict JSON (§2.5)."""
    if not text:
        raise CorruptionError("BLANK_LINE", line)
    if text[-1] == "\r":
        raise CorruptionError("CRLF_NOT_ALLOWED", line)
    try:
        return _strict_loads(text, MAX_LINE_DEPTH)
    except _MalformedError:
        raise CorruptionError("MALFORMED_JSON", line) from None


def parse_arguments(text: str) -> dict | None:
    """SPEC §14.3: the call's argument text as a JSON object, or None when it is not a valid one.

    Valid means strict JSON (§2.5), only finite numbers, nesting depth at most 64, and an object at the top.
    """
    if type(text) is not str:
        return None
    try:
        value = _strict_loads(text, MAX_ARGUMENT_DEPTH, finite_only=True)
    except _MalformedError:
        return None
    return value if type(value) is dict else None
