"""Unit tests of the foreign-planner parts of the agent: the plan-shape validator, the AGENT_PLANNER_* settings, the
``PlannerCommand`` runner against real planner scripts (written here, none imports ``agent``), and the module split
that keeps ``agent.loop`` from importing ``agent.cli``.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import textwrap
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from agent import exits
from agent.session.plan_shape import PLAN_TYPES, plan_problem
from agent.planner_cmd import (
    PlannerCommand,
    PlannerCommandCancelled,
    PlannerCommandError,
    PlannerSettingError,
)
from tests.conftest import CORPUS, planner_manifest

REPO = Path(__file__).resolve().parents[2]
ID = "01900000-0000-7000-8000-000000000001"
ID2 = "01900000-0000-7000-8000-000000000002"
CURRENT = {"configurationDigest": "sha256:" + "0" * 64, "environmentIdentity": "e",
           "tools": [{"name": "read", "definitionDigest": "sha256:" + "1" * 64, "replay": "safe",
                      "replayKey": "builtin:read:v1"}],
           "snapshot": {"model": "m"}}

VALID_PLANS = [
    {"type": "finish", "outcome": "completed", "completion": "normal"},
    {"type": "finish", "outcome": "completed", "completion": "truncated", "finalEntryId": ID},
    {"type": "finish", "outcome": "aborted"},
    {"type": "finish", "outcome": "failed", "error": {"code": "model_error", "message": "provider request failed"}},
    {"type": "startStep", "stepKind": "assistant", "attempt": 1, "contextThroughEntryId": ID},
    {"type": "startStep", "stepKind": "compaction", "attempt": 2, "stepId": ID, "contextThroughEntryId": ID2},
    {"type": "startTool", "mode": "start", "assistantEntryId": ID, "toolIndex": 0, "toolName": "read",
     "arguments": {"path": "x"}},
    {"type": "startTool", "mode": "replay", "assistantEntryId": ID, "toolIndex": 3, "toolStartedId": ID2,
     "toolName": "read", "arguments": {}},
    {"type": "appendSynthetic", "results": [
        {"assistantEntryId": ID, "toolIndex": 0, "toolCallId": "c1", "toolName": "nope", "reason": "unknownTool",
         "content": "Error: Unknown tool; the tool was not executed."},
        {"assistantEntryId": ID, "toolIndex": 1, "toolCallId": "c2", "toolName": "bash", "toolStartedId": ID2,
         "resultEntryId": ID, "reason": "interrupted", "content": "Operation interrupted"},
    ]},
    {"type": "closeAttempt", "error": {"code": "aborted", "message": "Operation aborted"}},
    {"type": "blocked", "reason": "attempts_exhausted"},
]

# (value, a phrase of the problem)
INVALID_PLANS = [
    ([], "not a JSON object"),
    ("finish", "not a JSON object"),
    ({}, "is not a plan type"),
    ({"type": "explode"}, "is not a plan type"),
    ({"type": 7}, "is not a plan type"),
    ({"type": "finish"}, "required member 'outcome'"),
    ({"type": "finish", "outcome": "done"}, "outcome must be one of"),
    ({"type": "finish", "outcome": "completed", "extra": 1}, "unknown member 'extra'"),
    ({"type": "finish", "outcome": "failed", "error": "boom"}, "error must be an object"),
    ({"type": "startStep", "stepKind": "assistant", "attempt": 1}, "required member 'contextThroughEntryId'"),
    ({"type": "startStep", "stepKind": "assistant", "attempt": 3, "contextThroughEntryId": ID}, "attempt must be"),
    ({"type": "startStep", "stepKind": "assistant", "attempt": 1.0, "contextThroughEntryId": ID}, "attempt must be"),
    ({"type": "startStep", "stepKind": "assistant", "attempt": True, "contextThroughEntryId": ID}, "attempt must"),
    ({"type": "startStep", "stepKind": "assistant", "attempt": 1, "contextThroughEntryId": 5}, "must be a string"),
    ({"type": "startTool", "mode": "start", "assistantEntryId": ID, "toolIndex": -1, "toolName": "read",
      "arguments": {}}, "toolIndex must be a non-negative integer"),
    ({"type": "startTool", "mode": "start", "assistantEntryId": ID, "toolIndex": False, "toolName": "read",
      "arguments": {}}, "toolIndex must be a non-negative integer"),
    ({"type": "startTool", "mode": "start", "assistantEntryId": ID, "toolIndex": 0, "toolName": "read",
      "arguments": "{}"}, "arguments must be an object"),
    ({"type": "appendSynthetic", "results": []}, "results must be a non-empty array"),
    ({"type": "appendSynthetic", "results": [5]}, "results[0] must be an object"),
    ({"type": "appendSynthetic", "results": [
        {"assistantEntryId": ID, "toolIndex": 0, "toolCallId": "c1", "toolName": "bash", "reason": "interrupted",
         "content": "x"}]}, "required member 'toolStartedId'"),
    ({"type": "appendSynthetic", "results": [
        {"assistantEntryId": ID, "toolIndex": 0, "toolCallId": "c1", "toolName": "n", "reason": "unknownTool",
         "content": "x", "toolStartedId": ID}]}, "unknown member 'toolStartedId'"),
    ({"type": "appendSynthetic", "results": [
        {"assistantEntryId": ID, "toolIndex": 0, "toolCallId": "c1", "toolName": "n", "reason": "oops",
         "content": "x"}]}, "reason must be one of"),
    ({"type": "closeAttempt"}, "required member 'error'"),
    ({"type": "blocked", "reason": "busy"}, "reason must be one of"),
]


def schema_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((CORPUS / "schemas" / "recovery-plan.schema.json").read_text()))


class TestPlanShape:
    def test_every_fixture_plan_is_well_formed(self, corpus):
        """Every expected plan of the planner corpus passes the validator."""
        for entry in planner_manifest():
            plan = json.loads((corpus / "planner-fixtures" / entry["expected"]).read_text())
            assert plan_problem(plan) is None, entry["name"]

    @pytest.mark.parametrize("plan", VALID_PLANS, ids=lambda p: p["type"])
    def test_valid_plans_agree_with_the_schema(self, corpus, plan):
        """Each plan variant of SPEC §14.2 is accepted, as the spec's JSON Schema accepts it."""
        assert schema_validator().is_valid(plan)
        assert plan_problem(plan) is None

    @pytest.mark.parametrize("value,phrase", INVALID_PLANS, ids=lambda v: str(v)[:40])
    def test_invalid_values_are_named_and_agree_with_the_schema(self, corpus, value, phrase):
        """A value that is not a plan gets a problem naming what is wrong; the spec's JSON Schema rejects it too."""
        problem = plan_problem(value)
        assert problem is not None and phrase in problem
        if not (isinstance(value, dict) and any(isinstance(v, float) for v in value.values())):
            # (1.0 is an integer to JSON Schema, never to SPEC §2.5, which the validator follows.)
            assert not schema_validator().is_valid(value)

    def test_plan_types_are_the_schemas(self, corpus):
        """The validator knows exactly the plan types of the schema's oneOf."""
        schema = json.loads((corpus / "schemas" / "recovery-plan.schema.json").read_text())
        assert set(PLAN_TYPES) == {ref["$ref"].rsplit("/", 1)[1] for ref in schema["oneOf"]}


class TestSettings:
    def test_unset_or_empty_means_no_command(self):
        """Without AGENT_PLANNER_CMD (or with an empty one) there is no planner command."""
        assert PlannerCommand.from_environ({}) is None
        assert PlannerCommand.from_environ({"AGENT_PLANNER_CMD": "", "AGENT_PLANNER_SCOPE": "bogus"}) is None

    def test_defaults_and_values(self):
        """The command is split like a shell would; scope defaults to recovery and the timeout to 30 s."""
        command = PlannerCommand.from_environ({"AGENT_PLANNER_CMD": "env 'A B=1' python3 -m agent"})
        assert command.argv == ["env", "A B=1", "python3", "-m", "agent"]
        assert (command.scope, command.timeout) == ("recovery", 30.0)
        assert command.in_scope(True) and not command.in_scope(False)
        every = PlannerCommand.from_environ({"AGENT_PLANNER_CMD": "p", "AGENT_PLANNER_SCOPE": "all",
                                             "AGENT_PLANNER_TIMEOUT": "2.5"})
        assert (every.scope, every.timeout) == ("all", 2.5) and every.in_scope(False)

    @pytest.mark.parametrize("environ,phrase", [
        ({"AGENT_PLANNER_CMD": "   "}, "no command"),
        ({"AGENT_PLANNER_CMD": "p 'unclosed"}, "cannot split"),
        ({"AGENT_PLANNER_CMD": "p", "AGENT_PLANNER_SCOPE": "some"}, "recovery or all"),
        ({"AGENT_PLANNER_CMD": "p", "AGENT_PLANNER_TIMEOUT": "0"}, "positive number"),
        ({"AGENT_PLANNER_CMD": "p", "AGENT_PLANNER_TIMEOUT": "inf"}, "positive number"),
        ({"AGENT_PLANNER_CMD": "p", "AGENT_PLANNER_TIMEOUT": "soon"}, "positive number"),
        ({"AGENT_PLANNER_CMD": "p", "AGENT_PLANNER_DIR": "/nonexistent/dir"}, "AGENT_PLANNER_DIR: not a directory"),
    ])
    def test_bad_settings_are_usage_errors(self, environ, phrase):
        """An unusable AGENT_PLANNER_* value is a usage error (exit 2) naming the variable."""
        with pytest.raises(PlannerSettingError, match=phrase) as info:
            PlannerCommand.from_environ(environ)
        assert info.value.exit_code == exits.EXIT_USAGE == 2


def planner(tmp_path: Path, body: str, name: str = "planner.py") -> str:
    """A planner script (standard library only, no `agent` import); returns its AGENT_PLANNER_CMD."""
    path = tmp_path / name
    path.write_text("import json, os, subprocess, sys, time\n" + textwrap.dedent(body))
    return f"{sys.executable} {path}"


def command(cmd: str, **environ) -> PlannerCommand:
    return PlannerCommand.from_environ({"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "AGENT_PLANNER_CMD": cmd,
                                        **environ})


class TestRunner:
    def test_protocol_arguments_environment_and_temp_file(self, tmp_path):
        """The command gets `plan LOG CURRENT.json`, the closed CurrentConfiguration, the environment without
        CHAOS_CONTROL; the temporary file is private and removed afterwards; stdout is the plan."""
        seen = tmp_path / "seen.json"
        cmd = planner(tmp_path, f"""
            current = sys.argv[3]
            mode = os.stat(current).st_mode & 0o777
            json.dump({{"argv": sys.argv[1:], "current": json.load(open(current)), "mode": mode,
                        "env": sorted(os.environ)}}, open({str(seen)!r}, "w"))
            print(json.dumps({{"type": "finish", "outcome": "aborted"}}))
        """)
        runner = command(cmd, CHAOS_CONTROL="/tmp/socket", KEEP_ME="1")
        assert runner.plan("/some/session.jsonl", CURRENT) == {"type": "finish", "outcome": "aborted"}
        got = json.loads(seen.read_text())
        assert got["argv"][:2] == ["plan", "/some/session.jsonl"]
        assert got["current"] == {k: CURRENT[k] for k in ("configurationDigest", "environmentIdentity", "tools")}
        assert got["mode"] == 0o600 and not os.path.exists(got["argv"][2])
        assert "KEEP_ME" in got["env"] and "AGENT_PLANNER_CMD" in got["env"] and "CHAOS_CONTROL" not in got["env"]
        assert runner.invocations == 1

    def test_runs_in_its_directory_with_an_absolute_log(self, tmp_path, monkeypatch):
        """With AGENT_PLANNER_DIR a relative script resolves there, and a relative LOG is made absolute first."""
        home, elsewhere = tmp_path / "proj", tmp_path / "workspace"
        home.mkdir()
        elsewhere.mkdir()
        seen = tmp_path / "seen.json"
        planner(home, f"""
            json.dump({{"cwd": os.getcwd(), "log": sys.argv[2]}}, open({str(seen)!r}, "w"))
            print(json.dumps({{"type": "finish", "outcome": "aborted"}}))
        """, name="mine.py")
        monkeypatch.chdir(elsewhere)  # the agent's own directory: a case's workspace
        runner = command(f"{sys.executable} mine.py", AGENT_PLANNER_DIR="../proj")  # relative: to the agent's
        assert runner.directory == str(home) and str(home) in runner.describe()
        assert runner.plan("session.jsonl", CURRENT) == {"type": "finish", "outcome": "aborted"}
        assert json.loads(seen.read_text()) == {"cwd": str(home), "log": str(elsewhere / "session.jsonl")}
        with pytest.raises(PlannerCommandError, match="exited 2"):  # without it: the workspace, where mine.py is not
            command(f"{sys.executable} mine.py").plan("session.jsonl", CURRENT)

    def test_non_zero_exit_carries_the_stderr_tail(self, tmp_path):
        """A failing command is a PlannerCommandError (exit 8) with the last 20 lines of its stderr."""
        cmd = planner(tmp_path, """
            for i in range(1, 31):
                print(f"trace line {i}", file=sys.stderr)
            sys.exit(3)
        """)
        with pytest.raises(PlannerCommandError, match="exited 3") as info:
            command(cmd).plan("/x.jsonl", CURRENT)
        assert info.value.exit_code == exits.EXIT_PLANNER_CMD == 8
        assert info.value.details == tuple(f"planner-cmd stderr: trace line {i}" for i in range(11, 31))

    def test_timeout_kills_the_whole_group(self, tmp_path):
        """A command that outlives the timeout is killed with its children, promptly, as exit 8."""
        pid_file = tmp_path / "child.pid"
        cmd = planner(tmp_path, f"""
            child = subprocess.Popen(["sleep", "60"])  # holds stdout/stderr open: only a group kill ends the read
            open({str(pid_file)!r}, "w").write(str(child.pid))
            print("thinking", file=sys.stderr, flush=True)
            time.sleep(60)
        """)
        start = time.monotonic()
        # 3 s: long enough for the script to start its child and write its pid on a loaded machine.
        with pytest.raises(PlannerCommandError, match="timed out after 3 s") as info:
            command(cmd, AGENT_PLANNER_TIMEOUT="3").plan("/x.jsonl", CURRENT)
        assert time.monotonic() - start < 10
        assert info.value.details == ("planner-cmd stderr: thinking",)
        assert wait_gone(int(pid_file.read_text()))

    @pytest.mark.parametrize("body,phrase", [
        ("print('hello, not a plan')", "no JSON document"),
        ("pass", "printed nothing"),
        ("print('[1, 2]')", "not a JSON object"),
        ("print(json.dumps({'type': 'explode'}))", "'explode' is not a plan type"),
        ("print(json.dumps({'ok': False, 'error': {'code': 'X', 'line': 1}}))", "is not a plan type"),
        ("print('{\"type\": \"blocked\", \"type\": \"blocked\", \"reason\": \"attempts_exhausted\"}')",
         "duplicate member"),
        ("print(json.dumps({'type': 'startStep', 'stepKind': 'assistant', 'attempt': 1}))",
         "required member 'contextThroughEntryId'"),
        ("sys.stdout.buffer.write(b'\\xff\\xfe')", "no JSON document"),
    ], ids=["garbage", "empty", "array", "type", "reduce-error", "duplicate", "missing", "not-utf8"])
    def test_output_that_is_not_a_plan(self, tmp_path, body, phrase):
        """Stdout that is not one well-formed plan is exit 8, saying what is wrong with it."""
        cmd = planner(tmp_path, body + "\nprint('said something', file=sys.stderr)\n")
        with pytest.raises(PlannerCommandError, match=phrase) as info:
            command(cmd).plan("/x.jsonl", CURRENT)
        assert info.value.details == ("planner-cmd stderr: said something",)

    def test_a_command_that_cannot_start(self, tmp_path):
        """A missing executable is exit 8 too, not an OSError."""
        with pytest.raises(PlannerCommandError, match="cannot be started"):
            command(str(tmp_path / "no-such-planner")).plan("/x.jsonl", CURRENT)

    def test_cancel_kills_the_running_command(self, tmp_path):
        """`cancel` (the agent's SIGINT/SIGTERM) kills the running command at once: nothing is decided."""
        started = tmp_path / "started"
        cmd = planner(tmp_path, f"open({str(started)!r}, 'w').close()\ntime.sleep(60)\n")
        runner = command(cmd)

        def cancel_when_started():
            deadline = time.monotonic() + 20
            while not started.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            runner.cancel()

        thread = threading.Thread(target=cancel_when_started)
        thread.start()
        start = time.monotonic()
        with pytest.raises(PlannerCommandCancelled) as info:
            runner.plan("/x.jsonl", CURRENT)
        thread.join()
        assert time.monotonic() - start < 20 and info.value.exit_code == 130


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    """True once ``pid`` no longer runs (gone, or a zombie waiting for its new parent)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


class TestModuleSplit:
    @staticmethod
    def imports(module: str) -> set[str]:
        tree = ast.parse((REPO / "agent" / f"{module}.py").read_text())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        return names

    def test_loop_does_not_import_the_cli(self):
        """agent.loop (and the modules it needs for exit codes and input files) never import agent.cli."""
        for module in ("loop", "exits", "files", "planner_cmd", "session/plan_shape", "recovery"):
            assert not {"agent.cli", "agent.loop.cli"} & self.imports(module), module
        assert "agent.exits" in self.imports("loop") and "agent.files" in self.imports("loop")

    def test_cli_keeps_the_moved_names(self):
        """The exit codes, describe_error and check_input_file are the same objects through agent.cli."""
        from agent import cli, files

        assert cli.EXIT_PLANNER_CMD == 8 and cli.EXIT_CODES is exits.EXIT_CODES
        assert cli.describe_error is exits.describe_error and cli.check_input_file is files.check_input_file
        assert "\n  8 " in exits.EXIT_CODES
        codes = [v for k, v in vars(exits).items() if k.startswith("EXIT_") and isinstance(v, int)]
        assert len(codes) == len(set(codes))
