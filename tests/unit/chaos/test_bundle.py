"""Unit tests for chaos.bundle's pure parts: the TOML writer behind `chaos export`, names, and bundle loading errors.

Bundles of real failing cases (repro.sh, `chaos repro`, `chaos export`) are tested in tests/integration/test_bundle.py.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.bundle import BUNDLE_FORMAT, PYTHON, BundleError, dumps_toml, load_bundle, target_json, target_of

REPO = Path(__file__).resolve().parents[3]

keys = st.text(min_size=1, max_size=12)
scalars = st.one_of(st.text(max_size=30), st.integers(-(2**63), 2**63 - 1), st.booleans(),
                    st.floats(allow_nan=False))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=4)), max_leaves=12)


class TestDumpsToml:
    @settings(max_examples=100, deadline=None)
    @given(st.dictionaries(keys, values, max_size=6))
    def test_round_trips_through_tomllib(self, data):
        """Whatever tomllib can produce (tables, arrays of tables, strings with any character), reads back equal."""
        assert tomllib.loads(dumps_toml(data)) == data

    def test_every_bundled_scenario_round_trips(self):
        """Each scenario file of the library, read and written again, gives the same data."""
        files = sorted((REPO / "scenarios").rglob("*.toml"))
        assert files, "no scenario files found"
        for path in files:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            assert tomllib.loads(dumps_toml(data)) == data, path

    def test_readable_layout(self):
        """Runs and turns get [[headers]], tool calls stay inline, multi-line text stays multi-line."""
        text = dumps_toml({"name": "x", "description": "two\nlines\n",
                           "runs": [{"prompt": "p", "turns": [{"tool_calls": [{"id": "c", "arguments": {"a": 1}}]}]}]})
        assert '[[runs]]' in text and '[[runs.turns]]' in text
        assert 'tool_calls = [{ id = "c", arguments = { a = 1 } }]' in text
        assert 'description = """\ntwo\nlines\n"""' in text

    def test_special_floats(self):
        """inf and nan are written as TOML's inf and nan."""
        value = tomllib.loads(dumps_toml({"a": math.inf, "b": -math.inf, "c": math.nan}))
        assert value["a"] == math.inf and value["b"] == -math.inf and math.isnan(value["c"])


class TestTargetJson:
    def test_this_interpreter_is_recorded_as_a_placeholder(self):
        """The bundled agent's interpreter path is stored as {python} and restored as this interpreter."""
        import sys

        data = target_json({"command": [sys.executable, "-m", "agent"], "bugs": ["stale-assistant-calls"]})
        assert data["command"] == [PYTHON, "-m", "agent"]
        target = target_of({"target": data})
        assert target.command == (sys.executable, "-m", "agent") and target.bugs == ("stale-assistant-calls",)

    def test_a_round_one_bundle_names_its_agent(self):
        """A bundle written before targets (an `agent` entry) is read as the same target."""
        target = target_of({"agent": {"command": [PYTHON, "-m", "agent"], "env": [["X", "1"]], "bugs": ["b"],
                                      "bundled": True, "name": "bundled"}})
        assert target.bundled and target.bugs == ("b",) and target.env == (("X", "1"),)


class TestLoadBundle:
    def test_not_a_bundle(self, tmp_path: Path):
        """A folder without bundle.json is refused with one line naming the file."""
        with pytest.raises(BundleError, match="bundle.json: missing"):
            load_bundle(tmp_path)
        with pytest.raises(BundleError, match="no such bundle folder"):
            load_bundle(tmp_path / "nope")

    def test_wrong_format_and_missing_keys(self, tmp_path: Path):
        """A bundle.json of another format, or without a required key, is refused."""
        (tmp_path / "bundle.json").write_text(json.dumps({"format": "other/9"}))
        with pytest.raises(BundleError, match="not a killpoint-bundle/1 bundle"):
            load_bundle(tmp_path)
        (tmp_path / "bundle.json").write_text(json.dumps({"format": BUNDLE_FORMAT, "case": "x"}))
        with pytest.raises(BundleError, match="missing key 'schedule'"):
            load_bundle(tmp_path)

    @pytest.mark.parametrize("key, value, message", [
        ("invariants", [1, 2], "invariants: expected a list of strings, got a list of 2"),
        ("scenario", "x", 'scenario: expected a JSON object, got a string "x"'),
        ("schedule", "garbage@@", 'schedule: expected a list of strings, got a string "garbage@@"'),
        ("target", [1], "target: expected a JSON object, got a list of 1"),
        ("case", 12, "case: expected a string, got the number 12"),
        ("scenario", {"file": 3}, "scenario.file: expected a string, got the number 3"),
    ])
    def test_a_wrongly_typed_member_is_one_line(self, tmp_path: Path, key, value, message):
        """A hand-edited bundle.json member of the wrong type is one line naming it, before anything reads it."""
        source = (REPO / "scenarios" / "read-then-answer.toml").read_text(encoding="utf-8")
        (tmp_path / "scenario.toml").write_text(source, encoding="utf-8")
        data = {"format": BUNDLE_FORMAT, "case": "read-then-answer::assistant@after-sync#2",
                "schedule": ["assistant@after-sync#2"], "invariants": ["converges"], "target": {"bugs": []},
                "scenario": {"file": "scenario.toml"}}
        (tmp_path / "bundle.json").write_text(json.dumps({**data, key: value}))
        with pytest.raises(BundleError) as info:
            load_bundle(tmp_path)
        assert str(info.value) == f"{tmp_path / 'bundle.json'}: {message}"
        (tmp_path / "bundle.json").write_text(json.dumps(data))
        assert load_bundle(tmp_path).data["case"] == data["case"]  # the same bundle, well typed, loads

    def test_edited_scenario_is_refused(self, tmp_path: Path):
        """A scenario.toml whose bytes no longer match the recorded sha256 is refused (it is not the same case)."""
        source = (REPO / "scenarios" / "read-then-answer.toml").read_text(encoding="utf-8")
        (tmp_path / "scenario.toml").write_text(source + "\n# edited\n", encoding="utf-8")
        (tmp_path / "bundle.json").write_text(json.dumps({
            "format": BUNDLE_FORMAT, "case": "read-then-answer::assistant@after-sync#2",
            "schedule": ["assistant@after-sync#2"], "invariants": ["converges"], "target": {"bugs": []},
            "scenario": {"file": "scenario.toml", "sha256": "sha256:" + "0" * 64}}))
        with pytest.raises(BundleError, match="changed since the bundle was written"):
            load_bundle(tmp_path)
