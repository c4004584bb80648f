"""Canonical JSON (RFC 8785, JCS) and every digest of the session contract.

What for: the configuration identity of an attempt (SPEC §8.2), the compaction ``sourceDigest`` (§8.3) and our
definitions of the system-prompt, tool-definition and output-options digests (§8.4). The reducer recomputes the first
two to validate a log; the agent computes all of them to describe the configuration it would use now.

Invariant: ``canonical_json`` returns exactly the RFC 8785 bytes or raises ``ValueError`` (lone surrogate, non-finite
number, integer outside ±(2^53−1), non-string member name, non-JSON value). Members are ordered by UTF-16 code units
and numbers follow ECMAScript's Number::toString (§8.1), which ``json.dumps(sort_keys=True)`` gets wrong for astral
member names and for floats such as ``1e-07``. Most values (no floats, no astral member names) take a fast path
through the C encoder, which produces identical bytes for them.

Not here: validation of snapshot or message *shapes* (the reducer does that), I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from json.encoder import encode_basestring as _quote  # C implementation: the JCS escaping for strings (§8.1)

MAX_SAFE_INTEGER = 2**53 - 1

_dumps_sorted = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False, check_circular=False
).encode
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _needs_slow_path(value: object) -> bool:
    """True when the C encoder might differ from JCS: floats, big integers, astral member names, odd types."""
    stack = [value]
    pop = stack.pop
    push = stack.append
    while stack:
        node = pop()
        kind = type(node)
        if kind is str or node is None or kind is bool:
            continue
        if kind is dict:
            for key, item in node.items():
                # Code-point order equals UTF-16 code-unit order unless a name holds a character above U+FFFF.
                if type(key) is not str or (not key.isascii() and _ASTRAL.search(key)):
                    return True
                push(item)
        elif kind is list:
            for item in node:
                push(item)
        elif kind is int:
            if not -MAX_SAFE_INTEGER <= node <= MAX_SAFE_INTEGER:
                return True
        else:
            return True
    return False


def _number(value: float) -> str:
    """ECMAScript Number::toString for a finite float (§8.1 table), from Python's shortest round-trip repr."""
    if not math.isfinite(value):
        raise ValueError("canonical JSON has no NaN or Infinity")
    if value == 0:
        return "0"  # -0 is written 0
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)  # value = 0.digits × 10^point before stripping
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k, n = len(digits), point
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        text = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + text


def _utf16_key(name: str) -> bytes:
    return name.encode("utf-16-be")  # big-endian code units compare bytewise in code-unit order (§8.1)


def _emit(value: object, out: list) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_quote(value))
    elif isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise ValueError("canonical JSON integers are limited to ±(2^53−1)")
        out.append(str(int(value)))
    elif isinstance(value, float):
        out.append(_number(value))
    elif isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise ValueError("canonical JSON member names must be strings")
        out.append("{")
        first = True
        for key in sorted(value, key=_utf16_key):
            if not first:
                out.append(",")
            first = False
            out.append(_quote(key))
            out.append(":")
            _emit(value[key], out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _emit(item, out)
        out.append("]")
    else:
        raise ValueError(f"canonical JSON cannot encode {type(value).__name__}")


def canonical_json(value: object) -> bytes:
    """RFC 8785 canonical JSON of ``value`` as UTF-8 bytes (SPEC §8.1); ``ValueError`` if it has none."""
    try:
        if _needs_slow_path(value):
            parts: list[str] = []
            _emit(value, parts)
            text = "".join(parts)
        else:
            text = _dumps_sorted(value)
        # A lone surrogate survives the encoders as a raw code point and cannot be encoded as UTF-8.
        return text.encode("utf-8")
    except UnicodeError:
        raise ValueError("canonical JSON cannot encode a lone surrogate") from None
    except RecursionError:
        raise ValueError("value nested too deeply for canonical JSON") from None


def sha256_digest(data: bytes) -> str:
    """``"sha256:" + lowercase hex`` (SPEC §2.8)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _check_domain(value: object, allow_null: bool, what: str) -> None:
    """The §8.1 domains: configuration = strings, objects, arrays; message = the same plus null."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str) or (allow_null and node is None):
            continue
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
        else:
            raise ValueError(f"{what} may not contain {type(node).__name__} values")


def configuration_digest(snapshot: dict) -> str:
    """SPEC §8.2: digest of the canonical JSON of a ``configurationSnapshot`` (configuration domain)."""
    _check_domain(snapshot, False, "a configuration snapshot")
    return sha256_digest(canonical_json(snapshot))


def source_digest(items: list[dict]) -> str:
    """SPEC §8.3: digest of the canonical JSON of ``[{"sourceEntryId", "message"}, …]`` (message domain)."""
    _check_domain(items, True, "a source digest input")
    return sha256_digest(canonical_json(items))


def system_prompt_digest(prompt: str) -> str:
    """SPEC §8.4: digest of the UTF-8 bytes of the system prompt exactly as sent (no normalization)."""
    try:
        return sha256_digest(prompt.encode("utf-8"))
    except UnicodeError:
        raise ValueError("the system prompt holds a lone surrogate") from None


def definition_digest(tool_element: dict) -> str:
    """SPEC §8.4: digest of the canonical JSON of one element of the request's ``tools`` array, as sent."""
    return sha256_digest(canonical_json(tool_element))


def output_options_digest(options: dict) -> str:
    """SPEC §8.4: digest of the canonical JSON of the request body minus ``model``, ``messages`` and ``tools``."""
    return sha256_digest(canonical_json(options))


class RunningSourceDigest:
    """The §8.3 digest over a growing list of message entries, fed one item at a time (SPEC §13.4).

    The canonical JSON of a list is ``[`` + items joined by ``,`` + ``]``, so a running SHA-256 over the prefix lets
    ``compactionStarted`` through the latest message cost O(new messages) instead of O(history).
    """

    __slots__ = ("_hash", "count")

    def __init__(self) -> None:
        self._hash = hashlib.sha256(b"[")
        self.count = 0

    def add(self, source_entry_id: str, message: dict) -> None:
        """Append one ``{"sourceEntryId", "message"}`` item (message domain)."""
        item = {"sourceEntryId": source_entry_id, "message": message}
        _check_domain(item, True, "a source digest input")
        self._hash.update((b"," if self.count else b"") + canonical_json(item))
        self.count += 1

    def copy(self) -> RunningSourceDigest:
        """An independent continuation of this digest (used by a trial transaction)."""
        other = RunningSourceDigest.__new__(RunningSourceDigest)
        other._hash = self._hash.copy()
        other.count = self.count
        return other

    def digest(self) -> str:
        """The source digest of the items added so far."""
        final = self._hash.copy()
        final.update(b"]")
        return "sha256:" + final.hexdigest()
