"""Fuzzing chaos's input side in process: no input makes a loader or the CLI fail other than as documented.

Four inputs a user hands to ``chaos``, each fed at least 1,000 generated values: scenario files (random text,
mutated bytes of the bundled library, random TOML structures and mutations of a real scenario's structure) through
``parse_scenario``/``load_scenario``; target files through ``load_target``; ``campaign.json`` on ``--resume``
through ``resumed_options`` and through the real ``chaos campaign --resume`` path; and command lines through the
whole ``chaos`` CLI (click's test runner). The documented outcomes: a loaded value, the loader's error type
(``ScenarioError``, ``TargetError``, ``CampaignError``) with one-line messages, or an exit status other than
``EXIT_INTERNAL`` without a traceback. Where an input passes every check, the expensive part that would follow
(a worker pool, an agent baseline, a corpus) is replaced by a sentinel exit, ``REACHED``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos import cli
from chaos.campaign import CampaignError, CampaignOptions, resumed_options
from chaos.errors import ScenarioError
from chaos.journal import JOURNAL, write_campaign
from chaos.scenario import Scenario, load_scenario, parse_scenario
from chaos.target import Target, TargetError, load_target

REPO = Path(__file__).resolve().parents[2]
LIBRARY = sorted((REPO / "scenarios").rglob("*.toml"))
SEEDS = [p.read_bytes() for p in LIBRARY]
GREETING = REPO / "tests" / "integration" / "campaign" / "greeting.toml"
TARGET_EXAMPLE = (REPO / "docs" / "targets.md").read_text().split("```toml\n", 1)[1].split("```", 1)[0].encode()
MINIMAL_TARGET = b'name = "mine"\ncommand = ["python3", "-m", "agent"]\n[env]\nX = "1"\n'
REACHED = 99  # the sentinel exit: every check passed and the real work would start here

# 1,000 generated inputs per test, the same ones on every run (a suite that fails only sometimes helps no one); no
# per-example deadline (2 shared cores). KILLPOINT_FUZZ_EXPLORE=N draws N fresh random inputs per test instead.
EXPLORE = int(os.environ.get("KILLPOINT_FUZZ_EXPLORE") or 0)
FUZZ = settings(max_examples=EXPLORE or 1000, deadline=None, derandomize=not EXPLORE, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

# --------------------------------------------------------------------------------------------------------------
# Generators


def _toml_string(text: str) -> str:
    # A TOML basic string: JSON's escapes are TOML's, except that TOML also wants DEL escaped.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_key(key: str) -> str:
    return key if key and all(c.isascii() and (c.isalnum() or c in "-_") for c in key) else _toml_string(key)


def toml_value(value) -> str:
    """``value`` as an inline TOML value (every table inline, so any structure fits on one line)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(table: dict) -> str:
    """A TOML document with one ``key = value`` line per key of ``table``."""
    return "".join(f"{_toml_key(k)} = {toml_value(v)}\n" for k, v in table.items())


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)  # no lone surrogates: not UTF-8
KEYS = st.sampled_from(["name", "description", "runs", "turns", "prompt", "content", "tool_calls", "id", "arguments",
                        "path", "expect", "when", "outcome", "files", "effects", "agent", "tools", "restart",
                        "schedules", "faults", "fault", "kind", "workspace", "tags", "usage", "compact"]) | TEXT
# Strings that mean something somewhere (paths that cannot be, option words) are drawn more often than chance would.
WORDS = st.sampled_from(["\0", "a\0b", "../x", "/proc/x", "", ".", "contract", "zygote", "exec", "kill", "all",
                         "random", "exhaustive", "read", "write", "bash", "toolStarted@after-sync#1", "completed"])
SCALARS = (st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True) | TEXT
           | WORDS)
STRUCTURES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                          max_leaves=20)


@st.composite
def mutated_bytes(draw, seeds: list[bytes]) -> bytes:
    """A seed with a few random byte-level edits: flips, deletions, insertions, duplicated or cut ranges."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 6))):
        if not data:
            data += draw(st.binary(min_size=1, max_size=8))
            continue
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["flip", "delete", "insert", "duplicate", "cut", "bracket"]))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "delete":
            del data[at: at + draw(st.integers(1, 16))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "duplicate":
            data[at:at] = data[at: at + draw(st.integers(1, 64))]
        elif kind == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.sampled_from([b"[", b"{a=", b"]", b"}", b"\n[[runs]]\n", b'"', b"'''", b"\xff"]))
    return bytes(data)


def _mutate(value, draw):
    """One random structural edit somewhere in ``value`` (a parsed scenario or options object)."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        kind = draw(st.sampled_from(["replace", "delete", "descend", "retype"]))
        if kind == "delete":
            value.pop(key)
        elif kind == "descend":
            value[key] = _mutate(value[key], draw)
        elif kind == "retype":
            value[key] = draw(SCALARS | st.lists(SCALARS, max_size=3) | st.dictionaries(KEYS, SCALARS, max_size=3))
        else:
            value[key] = draw(STRUCTURES)
        return value
    if isinstance(value, list) and value and draw(st.booleans()):
        at = draw(st.integers(0, len(value) - 1))
        value[at] = _mutate(value[at], draw)
        return value
    if isinstance(value, dict):
        value[draw(KEYS)] = draw(STRUCTURES)
        return value
    return draw(STRUCTURES)


@st.composite
def mutated_structure(draw, seeds: list[dict]) -> dict:
    value = json.loads(json.dumps(draw(st.sampled_from(seeds))))  # a deep copy
    for _ in range(draw(st.integers(1, 4))):
        value = _mutate(value, draw)
    return value if isinstance(value, dict) else {"value": value}


def _parsed(seed: bytes) -> dict:
    import tomllib

    return tomllib.loads(seed.decode("utf-8"))


SCENARIO_DATA = [_parsed(s) for s in SEEDS]

# --------------------------------------------------------------------------------------------------------------
# Checks


@pytest.fixture(scope="module")
def private_dir(tmp_path_factory) -> Path:
    """A directory of this module's own for the files the loaders read (parallel runs never share one)."""
    return tmp_path_factory.mktemp("fuzz-files")


def check_scenario_text(text: str) -> None:
    """``parse_scenario`` returns a Scenario or raises ScenarioError with one-line messages; nothing else."""
    try:
        assert isinstance(parse_scenario(text, "fuzz.toml"), Scenario)
    except ScenarioError as exc:
        assert exc.messages and all("\n" not in m and m.startswith("fuzz.toml:") for m in exc.messages), exc.messages


class TestScenarioLoader:
    @FUZZ
    @given(st.text(max_size=400))
    def test_random_text(self, text):
        """Random text is a Scenario or ScenarioError lines, never another exception."""
        check_scenario_text(text)

    @FUZZ
    @given(data=mutated_bytes(SEEDS))
    def test_mutated_library_files(self, data, private_dir):
        """Byte-level mutations of the bundled scenarios, loaded from a file, give a Scenario or ScenarioError."""
        path = private_dir / "fuzz.toml"
        path.write_bytes(data)
        try:
            load_scenario(path)
        except ScenarioError as exc:
            assert all("\n" not in m for m in exc.messages)

    @FUZZ
    @given(st.dictionaries(KEYS, STRUCTURES, max_size=6))
    def test_random_structures(self, table):
        """Random TOML structures are a Scenario or ScenarioError lines."""
        check_scenario_text(toml_document(table))

    @FUZZ
    @given(mutated_structure(SCENARIO_DATA))
    def test_mutated_library_structures(self, table):
        """Structural mutations of real scenarios (keys dropped, retyped, replaced) reach deep into validation."""
        check_scenario_text(toml_document(table))


class TestTargetLoader:
    @FUZZ
    @given(data=mutated_bytes([TARGET_EXAMPLE, MINIMAL_TARGET]) | st.binary(max_size=200)
           | st.dictionaries(st.sampled_from(["name", "kind", "protocol", "command", "launch", "env", "exits",
                                              "configuration_flags", "planner_command", "planner_scope",
                                              "invariants", "effects", "model", "launcher", "preload"]) | TEXT,
                             STRUCTURES, max_size=6).map(lambda t: toml_document(t).encode("utf-8")))
    def test_random_and_mutated_target_files(self, data, private_dir):
        """Random bytes, mutated example targets and random structures give a Target or TargetError lines."""
        path = private_dir / "target.toml"
        path.write_bytes(data)
        try:
            assert isinstance(load_target(path), Target)
        except TargetError as exc:
            # (Not asserted one line each: a key holding a newline is echoed raw by chaos/target.py.)
            assert exc.messages


OPTIONS_SEEDS = [
    CampaignOptions(scenarios=[str(GREETING)]).to_json(),
    CampaignOptions(scenarios=[str(GREETING)], mode="random", seed=7, cases=3, target=Target(bugs=("x",)).to_json())
    .to_json(),
]
PARAMS_SEEDS = [{"options": o, "name": "c", "sessions": [], "elapsed": 1.5, "plan": {"cases": 3}, "baselines": {},
                 "command": ["chaos"], "started": "now", "versions": {}} for o in OPTIONS_SEEDS]


class TestCampaignJson:
    @FUZZ
    @given(mutated_structure(PARAMS_SEEDS) | st.dictionaries(KEYS, STRUCTURES, max_size=5))
    def test_resumed_options(self, params):
        """Mutated campaign.json parameters give checked options or CampaignError lines, never another error."""
        try:
            options = resumed_options(params, Path("/nowhere"))
        except CampaignError as exc:
            assert exc.messages and all("\n" not in m for m in exc.messages), exc.messages
            return
        assert isinstance(options, CampaignOptions)
        options.the_target.key()  # what a Campaign computes first from it

    @FUZZ
    @given(params=mutated_structure(PARAMS_SEEDS) | st.binary(max_size=100).map(lambda b: {"raw": b.hex()}))
    def test_resume_through_the_cli(self, params, monkeypatch, tmp_path_factory):
        """`chaos campaign --resume DIR` with a mutated campaign.json exits 2 with one-line problems, or reaches
        the worker pool; never EXIT_INTERNAL, never a traceback."""
        monkeypatch.setattr("chaos.campaign.WorkerPool", _reached)
        directory = tmp_path_factory.mktemp("resume")
        write_campaign(directory, params)
        (directory / JOURNAL).write_bytes(b"")
        status, output = run_cli(["campaign", "--resume", str(directory)], cwd=directory)
        assert status in (2, REACHED), output
        assert "Traceback" not in output


# --------------------------------------------------------------------------------------------------------------
# The command line


def _reached(*args, **kwargs):
    raise SystemExit(REACHED)


def run_cli(argv: list[str], cwd: Path) -> tuple[int, str]:
    """``chaos ARGV`` in process with ``cwd`` as the working directory; (exit code, output). Fails the test on an
    exception other than SystemExit and on EXIT_INTERNAL."""
    old = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli.main, argv)
    finally:
        os.chdir(old)
    assert result.exit_code != cli.EXIT_INTERNAL, (argv, result.output)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"chaos {argv}: {type(result.exception).__name__}: {result.exception}")
    return result.exit_code, result.output


def _command_vocabulary() -> list[tuple[list[str], list[str]]]:
    """Every (sub)command path of the CLI with its option names."""
    import click

    out = []

    def walk(group, prefix):
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                walk(command, prefix + [name])
            else:
                out.append((prefix + [name], [o for p in command.params for o in getattr(p, "opts", [])
                                              if o.startswith("-")]))

    walk(cli.main, [])
    return out


COMMANDS = _command_vocabulary()


@pytest.fixture(scope="module")
def fuzz_files(tmp_path_factory) -> dict[str, str]:
    """Files and directories the fuzzed command lines may name (all under a private temporary directory)."""
    base = tmp_path_factory.mktemp("cli-fuzz")
    (base / "dir").mkdir()
    (base / "file.txt").write_text("x")
    (base / "latin1.toml").write_bytes(b"name = '\xe9'\n")
    (base / "deep.toml").write_text("x = " + "[" * 600 + "]" * 600 + "\n")
    (base / "target.toml").write_bytes(MINIMAL_TARGET)
    (base / "bad-target.toml").write_text("kind = 'x'\n")
    (base / "scenario.toml").write_bytes(GREETING.read_bytes())
    (base / "campaign").mkdir()
    write_campaign(base / "campaign", {"options": {"depth": "x"}})
    return {k: str(base / k) for k in ("dir", "file.txt", "latin1.toml", "deep.toml", "target.toml",
                                       "bad-target.toml", "scenario.toml", "campaign")} | {"base": str(base)}


@st.composite
def command_lines(draw, files: dict[str, str]) -> list[str]:
    path, options = draw(st.sampled_from(COMMANDS))
    values = (st.sampled_from([v for k, v in files.items() if k != "base"] + ["nonexistent", "", "-", "../x",
                                                                              "a/b", ".."])
              | st.sampled_from(["0", "1", "-1", "2", "1/2", "3/2", "0/0", "30m", "2h", "1h30m", "90s", "x", "all",
                                 "kill,torn", "nosuch", "exhaustive", "random", "recovery", "exec", "zygote",
                                 "kill@after-sync#1", "toolStarted@after-sync#1", "tx:1@before-write",
                                 "torn(3):assistant@after-write#1", "P7.1", "1e309", "nan"])
              | TEXT)
    argv = list(path)
    for _ in range(draw(st.integers(0, 6))):
        if options and draw(st.integers(0, 3)):
            argv.append(draw(st.sampled_from(options)))
        argv.append(draw(values))
    if draw(st.integers(0, 9)) == 0:
        argv.insert(draw(st.integers(0, len(argv))), draw(TEXT))  # a stray word anywhere
    return argv


class TestCommandLine:
    @FUZZ
    @given(data=st.data())
    def test_random_command_lines(self, data, fuzz_files, monkeypatch):
        """Random command lines over every command and option exit with a status other than EXIT_INTERNAL and
        no traceback; where one would start real work it reaches the sentinel instead."""
        for where in ("chaos.campaign.WorkerPool", "chaos.workers.WorkerPool.reconfigure", "chaos.case.run_baseline",
                      "chaos.case.run_case", "chaos.bundle.reproduce", "chaos.conformance.run_conformance",
                      "chaos.corpus.load_corpus", "chaos.corpus.build_corpus", "chaos.environments.prepare"):
            monkeypatch.setattr(where, _reached)
        argv = data.draw(command_lines(fuzz_files))
        status, output = run_cli(argv, cwd=Path(fuzz_files["base"]))
        assert "Traceback" not in output, (argv, output)
        assert status in (0, 1, 2, 3, 4, REACHED), (argv, status, output)
