"""Unit tests of chaos.shapes: JSON values read back from a file checked against a dataclass's type hints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from chaos import shapes


@dataclass
class Sample:
    name: str = ""
    count: int = 0
    ratio: float = 1.0
    flag: bool = False
    limit: int | None = None
    tags: list[str] = field(default_factory=list)
    pairs: tuple[tuple[str, str], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    mode: Literal["a", "b"] = "a"


@pytest.mark.parametrize("value, hint, ok", [
    (True, int, False), (3, int, True), (3, float, True), (float("nan"), float, False), (True, bool, True),
    (None, int | None, True), ("x", int | None, False), (["a", 1], list[str], False), ([["a", "b"]],
    tuple[tuple[str, str], ...], True), ([["a"]], tuple[tuple[str, str], ...], False), ({"k": 1}, dict[str, Any],
    True), ([], dict[str, Any], False), ("b", Literal["a", "b"], True), ("c", Literal["a", "b"], False),
])
def test_fits(value, hint, ok):
    """A JSON value fits a hint exactly when its JSON type matches (a bool is not an integer)."""
    assert shapes.fits(value, hint) is ok


def test_problems_name_each_wrong_field_once():
    """Every wrongly typed field present in the object gets one line; absent and unknown keys are not checked."""
    lines = shapes.problems({"count": "3", "tags": "x", "limit": None, "unknown": 1, "flag": 1}, Sample, "f: o")
    assert lines == ['f: o.count: expected an integer, got a string "3"',
                     'f: o.flag: expected true or false, got the number 1',
                     'f: o.tags: expected a list of strings, got a string "x"']


def test_problems_of_a_non_object():
    """A value that is not an object is one line saying so."""
    assert shapes.problems([1], Sample, "f: o") == ["f: o: expected a JSON object, got a list of 1"]


def test_field_problems_check_an_instance():
    """An instance built leniently from a file is checked field by field (tuples count as lists)."""
    assert shapes.field_problems(Sample(pairs=(("a", "b"),)), "t") == []
    assert shapes.field_problems(Sample(name=5, mode="z"), "t") == [  # type: ignore[arg-type]
        "t.name: expected a string, got the number 5", 't.mode: expected one of "a", "b", got a string "z"']


@pytest.mark.parametrize("hint, words", [
    (list[dict], "a list of JSON objects"), (dict[str, dict[str, int]], "a JSON object of JSON objects of integers"),
    (list[str], "a list of strings"), (dict[str, str] | None, "a JSON object of strings or null"),
])
def test_a_hint_in_words_is_plural_inside_a_container(hint, words):
    """expected() names the members of a list or object in the plural ("a list of JSON objects")."""
    assert shapes.expected(hint) == words
