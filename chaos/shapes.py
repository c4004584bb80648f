"""Type checks of values read back from JSON files (``campaign.json`` on ``--resume``) against Python type hints.

What it is for: a dataclass stored as JSON comes back as whatever is in the file — a hand edit, another version's
field, a corrupted byte. Before such a value reaches code that assumes its declared type (and fails with a
traceback far away), ``problems(value, cls)`` names every field whose JSON value does not fit the field's type
hint, one line each (``options.depth: expected an integer, got a string "2"``).

The hints understood are the ones our dataclasses use: ``str``, ``int`` (not ``bool``), ``float`` (an ``int`` is a
number too), ``bool``, ``None``, unions, ``Literal``, ``Any``, ``list``/``tuple``/``Sequence`` of one type,
fixed-length tuples, ``dict``/``Mapping``. Values are as ``json.loads`` gives them (lists for tuples). Pure.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import math
import types
import typing
from typing import Any


def problems(value: Any, cls: type, where: str) -> list[str]:
    """One line per field of dataclass ``cls`` present in the JSON object ``value`` whose value does not fit its
    type hint (fields absent from ``value`` keep their defaults; unknown keys are not checked)."""
    if not isinstance(value, collections.abc.Mapping):
        return [f"{where}: expected a JSON object, got {describe(value)}"]
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name in value and not fits(value[f.name], hints[f.name]):
            out.append(f"{where}.{f.name}: expected {expected(hints[f.name])}, got {describe(value[f.name])}")
    return out


def field_problems(instance: Any, where: str) -> list[str]:
    """One line per field of the dataclass ``instance`` whose value does not fit its type hint (an instance built
    by a lenient ``from_json`` from whatever a file held)."""
    hints = typing.get_type_hints(type(instance))
    out = []
    for f in dataclasses.fields(instance):
        value = getattr(instance, f.name)
        if not fits(value, hints[f.name]):
            out.append(f"{where}.{f.name}: expected {expected(hints[f.name])}, got {describe(value)}")
    return out


def fits(value: Any, hint: Any) -> bool:
    """Whether the JSON value ``value`` fits the type hint ``hint``."""
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(fits(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        # JSON has one number type; Python's json also reads NaN and Infinity, which no option means.
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    container = origin or hint
    if container in (list, tuple, collections.abc.Sequence):
        if not isinstance(value, (list, tuple)):
            return False
        if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            return len(value) == len(args) and all(fits(v, a) for v, a in zip(value, args))
        return not args or all(fits(v, args[0]) for v in value)
    if container in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            return False
        return not args or all(fits(k, args[0]) and fits(v, args[1]) for k, v in value.items())
    return isinstance(hint, type) and isinstance(value, hint)


def expected(hint: Any) -> str:
    """The type hint in words: ``an integer``, ``a list of strings``, ``a number or null``."""
    if hint is Any or hint is object:
        return "any value"
    if hint is None or hint is type(None):
        return "null"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return " or ".join(expected(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(json.dumps(a) for a in args)
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    container = origin or hint
    if container in (list, tuple, collections.abc.Sequence):
        if args and not (len(args) == 2 and args[1] is Ellipsis) and container is tuple:
            return f"a list of {len(args)} values"
        return "a list" + (f" of {_plural(args[0])}" if args else "")
    if container in (dict, collections.abc.Mapping):
        return "a JSON object" + (f" of {_plural(args[1])}" if args and args[1] is not Any else "")
    return getattr(hint, "__name__", str(hint))


def _plural(hint: Any) -> str:
    word = expected(hint)
    if word.startswith("a JSON object"):  # "a JSON object of strings" → "JSON objects of strings"
        return "JSON objects" + word[len("a JSON object"):]
    return {"an integer": "integers", "a string": "strings", "a number": "numbers",
            "true or false": "booleans"}.get(word, word)


def describe(value: Any) -> str:
    """A JSON value in words, for a message: ``a string "2"``, ``null``, ``a list``. Short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return f"a string {text if len(text) <= 40 else text[:37] + '…'}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "a JSON object"
    return type(value).__name__
