"""Integration tests of AGENT_PLANNER_CMD: the agent's recovery decisions made by a foreign planner command.

Real sessions (a real run against the loopback stub model server, cut at a transaction boundary as a crash leaves
it), real planner processes: ``<python> -m agent`` itself (the correct foreign planner), the same with a planner bug
switch (a wrong one), and small planner scripts written into ``tmp_path`` that do not import ``agent``. Most agent
commands run in-process (``cli.main``); the signal case runs the agent as a real subprocess.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent import bugs as bug_switches
from tests.integration.test_agent_importtime import idle_session, imported_modules
from tests.integration.test_agent_recovery import crash, plans, tool_run  # noqa: F401 - fixture
from tests.integration.test_agent_run import (REPO, Supervisor, agent, names, records, script, state_of,  # noqa: F401
                                              stub)
from tests.openai_stub import completion

PY = shlex.quote(sys.executable)
SELF = f"{PY} -m agent"  # the bundled planner, out of process
STALE = f"env AGENT_BUGS=stale-assistant-calls {PY} -m agent"  # the bundled planner with the upstream defect
MARK = "agent: planner-cmd: decided the next plan"

# Crash windows of the `tool_run` session (read + bash, then "done"), each exercising another plan type first.
WINDOWS = {
    "startStep": (lambda n: n == ("user", "runStarted"), 1),
    "startTool-replay": (lambda n: n == ("toolStarted",), 1),
    "appendSynthetic-interrupted": (lambda n: n == ("toolStarted",), 2),
    "finish": (lambda n: n == ("assistant",) or n == ("assistant", "usage"), 2),
}


def planner_script(tmp_path: Path, body: str, name: str = "planner.py") -> str:
    """An AGENT_PLANNER_CMD running a standard-library script (it never imports `agent`)."""
    path = tmp_path / name
    path.write_text("import json, os, subprocess, sys, time\n" + textwrap.dedent(body))
    return f"{PY} {shlex.quote(str(path))}"


def counting(tmp_path: Path) -> tuple[str, Path]:
    """A wrapper around `<python> -m agent` that appends one line per invocation to a file; (command, file)."""
    calls = tmp_path / "planner-calls"
    cmd = planner_script(tmp_path, f"""
        with open({str(calls)!r}, "a") as handle:
            handle.write(" ".join(sys.argv[1:2]) + "\\n")
        os.execv(sys.executable, [sys.executable, "-m", "agent", *sys.argv[1:]])
    """, "counting.py")
    return cmd, calls


def invocations(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def shape(path: Path) -> dict:
    """What must be equal between two recoveries of the same prefix: transaction names, outcomes, messages."""
    state = state_of(path)
    return {"names": names(path), "operation": state["operation"],
            "outcomes": [r["outcome"] for r in records(path, "operationFinished")],
            "transcript": [(m["role"], m.get("content")) for m in state["transcript"]]}


def twin(path: Path, dest: Path) -> Path:
    """A byte copy of a session file (same name: it must keep matching its header id)."""
    dest.mkdir(parents=True)
    copy = dest / path.name
    copy.write_bytes(path.read_bytes())
    return copy


def no_traceback(err: str) -> None:
    assert "Traceback" not in err and all(line.startswith("agent: ") for line in err.splitlines()), err


class TestSameEnd:
    @pytest.mark.parametrize("window", WINDOWS, ids=list(WINDOWS))
    def test_self_as_planner_reaches_the_same_end(self, agent, stub, tool_run, window):
        """`resume` with AGENT_PLANNER_CMD="<python> -m agent" makes the same first plan and ends in the same
        state, output and exit status as the in-process planner."""
        predicate, occurrence = WINDOWS[window]
        cut = crash(agent, tool_run, predicate, occurrence)
        other = twin(cut, agent.tmp / "twin")
        script(stub, lambda request: completion("done"))
        inside = agent.command("resume", cut)
        outside = agent.command("resume", other, env={"AGENT_PLANNER_CMD": SELF})
        assert (outside.status, outside.out) == (inside.status, inside.out) == (0, "done\n")
        assert shape(other) == shape(cut)
        assert plans(outside.err)[0] == plans(inside.err)[0] and plans(outside.err)[0]["type"] == window.split("-")[0]
        assert [p["type"] for p in plans(outside.err)] == [p["type"] for p in plans(inside.err)]
        # Who decided: one planner-cmd line, right before the first plan line (scope recovery: the first decision).
        lines = outside.err.splitlines()
        assert lines.count(MARK) == 1 and lines[lines.index(MARK) + 1].startswith("agent: plan {")
        assert f"agent: planner command: {SELF} (scope recovery, timeout 30 s)" in lines
        assert MARK not in inside.err

    def test_blocked_from_the_command(self, agent, stub, tool_run):
        """A blocked decision of the command is exit 3 with its reason, nothing appended, as without it."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        before = cut.read_bytes()
        result = agent.command("resume", cut, "--environment-identity", "moved", env={"AGENT_PLANNER_CMD": SELF})
        assert result.status == 3 and json.loads(result.out) == {"blocked": "environment_changed"}
        assert cut.read_bytes() == before


class TestFailures:
    @pytest.mark.parametrize("body,phrase", [
        ("""
            for i in range(1, 26):
                print(f"planner trace {i}", file=sys.stderr)
            sys.exit(3)
         """, "planner command exited 3"),
        ("""
            print("planner trace 25", file=sys.stderr)
            print("hello, this is not JSON")
         """, "planner command printed no JSON document"),
        ("""
            print("planner trace 25", file=sys.stderr)
            print(json.dumps({"type": "startTool", "mode": "start"}))
         """, "planner command printed no plan: startTool: required member 'assistantEntryId' is missing"),
        ("""
            print("planner trace 25", file=sys.stderr)
            print(json.dumps({"type": "finish", "outcome": "completed", "because": "I said so"}))
         """, "planner command printed no plan: finish: unknown member 'because'"),
        ("""
            print("planner trace 25", file=sys.stderr)
            print(json.dumps([{"type": "finish", "outcome": "aborted"}]))
         """, "planner command printed no plan: not a JSON object"),
    ], ids=["exit-3", "garbage", "missing-member", "extra-member", "array"])
    def test_failure_exits_8_with_the_stderr_tail(self, agent, stub, tool_run, body, phrase):
        """A failing command, or stdout that is not a plan, is exit 8: one line saying what happened, then the
        command's stderr tail; nothing is appended and no request is sent."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        before, sent = cut.read_bytes(), len(stub.requests)
        result = agent.command("resume", cut, env={"AGENT_PLANNER_CMD": planner_script(agent.tmp, body)})
        assert result.status == 8 and result.out == ""
        no_traceback(result.err)
        lines = result.err.splitlines()
        [failure] = [i for i, line in enumerate(lines) if phrase in line]
        tail = lines[failure + 1:]
        assert tail[-1] == "agent: planner-cmd stderr: planner trace 25"
        if "exited 3" in phrase:
            assert tail == [f"agent: planner-cmd stderr: planner trace {i}" for i in range(6, 26)]  # the last 20
        assert cut.read_bytes() == before and len(stub.requests) == sent

    def test_timeout_exits_8_promptly(self, agent, stub, tool_run):
        """A command that outlives AGENT_PLANNER_TIMEOUT is killed with its process group: exit 8, promptly."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        before = cut.read_bytes()
        cmd = planner_script(agent.tmp, """
            subprocess.Popen(["sleep", "60"])  # inherits the pipes: only a group kill lets the agent go on
            print("still thinking", file=sys.stderr, flush=True)
            time.sleep(60)
        """)
        start = time.monotonic()
        # 3 s: long enough for the script to start its child and print on a loaded machine, before it is cut.
        result = agent.command("resume", cut, env={"AGENT_PLANNER_CMD": cmd, "AGENT_PLANNER_TIMEOUT": "3"})
        assert time.monotonic() - start < 15
        assert result.status == 8
        no_traceback(result.err)
        assert "planner command timed out after 3 s (its process group was killed)" in result.err
        assert result.err.splitlines()[-1] == "agent: planner-cmd stderr: still thinking"
        assert cut.read_bytes() == before

    def test_missing_command_exits_8(self, agent, stub, tool_run):
        """A planner command that cannot be started is exit 8 too."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        result = agent.command("resume", cut, env={"AGENT_PLANNER_CMD": str(agent.tmp / "no-such-planner")})
        assert result.status == 8 and "planner command cannot be started" in result.err
        no_traceback(result.err)

    @pytest.mark.parametrize("variable,value", [
        ("AGENT_PLANNER_SCOPE", "everything"), ("AGENT_PLANNER_TIMEOUT", "-1"), ("AGENT_PLANNER_CMD", "p 'x"),
    ])
    def test_bad_settings_exit_2_before_opening(self, agent, stub, tool_run, variable, value):
        """An unusable AGENT_PLANNER_* value is a usage error (exit 2); the session is not touched."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        before = cut.read_bytes()
        result = agent.command("resume", cut, env={"AGENT_PLANNER_CMD": SELF, variable: value})
        assert result.status == 2 and variable in result.err and result.err.count("\n") == 1
        assert cut.read_bytes() == before


WRONG_ID = "01900000-0000-7000-8000-00000000dead"
WRONG_PLANS = {
    "replay-unknown-intent": {"type": "startTool", "mode": "replay", "assistantEntryId": WRONG_ID, "toolIndex": 0,
                              "toolStartedId": WRONG_ID, "toolName": "read", "arguments": {"path": "notes.txt"}},
    "start-unknown-call": {"type": "startTool", "mode": "start", "assistantEntryId": WRONG_ID, "toolIndex": 7,
                           "toolName": "read", "arguments": {"path": "notes.txt"}},
    "start-undeclared-tool": {"type": "startTool", "mode": "start", "assistantEntryId": WRONG_ID, "toolIndex": 0,
                              "toolName": "launch_rockets", "arguments": {}},
    "finish-unknown-entry": {"type": "finish", "outcome": "completed", "completion": "normal",
                             "finalEntryId": WRONG_ID},
    "finish-failed-empty-error": {"type": "finish", "outcome": "failed", "error": {}},
    "close-without-attempt": {"type": "closeAttempt", "error": {"code": "aborted", "message": "Operation aborted"}},
    "synthetic-unknown-call": {"type": "appendSynthetic", "results": [
        {"assistantEntryId": WRONG_ID, "toolIndex": 0, "toolCallId": "c9", "toolName": "read",
         "reason": "unknownTool", "content": "Error: Unknown tool; the tool was not executed."}]},
    "retry-unknown-step": {"type": "startStep", "stepKind": "assistant", "attempt": 2, "stepId": WRONG_ID,
                           "contextThroughEntryId": WRONG_ID},
}


class TestWrongPlans:
    def test_stale_planner_exits_70(self, agent, stub, tool_run):
        """The bundled planner with the stale-assistantCalls switch, as the command, makes the store reject its
        plan in the stale window: exit 70, nothing written, no request (the command's switch, not the agent's)."""
        cut = crash(agent, tool_run, lambda n: n == ("assistant",) or n == ("assistant", "usage"), occurrence=2)
        before, sent = cut.read_bytes(), len(stub.requests)
        result = agent.command("resume", cut, env={"AGENT_PLANNER_CMD": STALE})
        assert result.status == 70
        no_traceback(result.err)
        assert plans(result.err)[0]["type"] == "startTool"  # the previous turn's read: the upstream defect
        assert "the store rejected our own transaction" in result.err.splitlines()[-1]
        assert cut.read_bytes() == before and len(stub.requests) == sent

    @pytest.mark.parametrize("name", WRONG_PLANS, ids=list(WRONG_PLANS))
    def test_well_formed_wrong_plan_exits_70(self, agent, stub, tool_run, name):
        """A well-formed plan that does not fit the state is executed as usual and refused: exit 70, one line,
        no traceback, no effect, nothing written."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))  # the read is pending
        before, sent = cut.read_bytes(), len(stub.requests)
        cmd = planner_script(agent.tmp, f"print({json.dumps(json.dumps(WRONG_PLANS[name]))})\n")
        result = agent.command("resume", cut, env={"AGENT_PLANNER_CMD": cmd})
        assert result.status == 70, result.err
        no_traceback(result.err)
        assert plans(result.err) == [WRONG_PLANS[name]]
        last = result.err.splitlines()[-1]
        assert "cannot" in last or "rejected" in last
        assert cut.read_bytes() == before and len(stub.requests) == sent
        assert agent.witness.read_text().split() == ["c2"]  # only the original run's bash effect


class TestScope:
    def test_recovery_scope_consults_until_the_first_commit(self, agent, stub, tool_run):
        """With the default scope the command decides only the plans made before the process commits anything."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        cmd, calls = counting(agent.tmp)
        script(stub, [completion("done")])
        result = agent.command("resume", cut, env={"AGENT_PLANNER_CMD": cmd})
        assert result.status == 0 and result.out == "done\n"
        assert invocations(calls) == 1 and len(plans(result.err)) == 4  # replay, start bash, startStep, finish
        assert result.err.count(MARK) == 1

    def test_recovery_scope_covers_plans_that_commit_nothing(self, agent, stub, tool_run):
        """A blocked decision commits nothing, so every later process asks the command again."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        cmd, calls = counting(agent.tmp)
        for _ in range(2):
            result = agent.command("resume", cut, "--replay", "read=never", env={"AGENT_PLANNER_CMD": cmd})
            assert result.status == 3
        assert invocations(calls) == 2

    def test_all_scope_consults_for_every_plan(self, agent, stub, tool_run):
        """With AGENT_PLANNER_SCOPE=all every plan of the resume comes from the command, and the end is the same."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        other = twin(cut, agent.tmp / "twin")
        cmd, calls = counting(agent.tmp)
        script(stub, lambda request: completion("done"))
        result = agent.command("resume", cut, env={"AGENT_PLANNER_CMD": cmd, "AGENT_PLANNER_SCOPE": "all"})
        agent.command("resume", other)  # the reference: the same crash resumed by the built-in planner
        assert result.status == 0 and result.out == "done\n"
        assert invocations(calls) == len(plans(result.err)) == 4 == result.err.count(MARK)
        assert shape(cut) == shape(other)

    def test_live_run_scopes(self, agent, stub):
        """A new run has no recovery decision: scope recovery never asks; scope all asks for every live plan."""
        cmd, calls = counting(agent.tmp)
        script(stub, lambda request: completion("hello"))
        quiet = agent.run("hi", env={"AGENT_PLANNER_CMD": cmd})
        assert quiet.status == 0 and invocations(calls) == 0
        every = agent.run("hi", env={"AGENT_PLANNER_CMD": cmd, "AGENT_PLANNER_SCOPE": "all"})
        assert every.status == 0 and every.out == "hello\n"
        assert invocations(calls) == 2  # startStep, finish
        assert shape(every.path)["names"] == shape(quiet.path)["names"]

    def test_command_wins_over_planner_switches(self, agent, stub, tool_run):
        """With AGENT_BUGS and AGENT_PLANNER_CMD both set, the command decides the recovery plans: a correct
        command under an agent with a planner switch (the command's environment emptied of it) finishes."""
        cut = crash(agent, tool_run, lambda n: n == ("assistant",) or n == ("assistant", "usage"), occurrence=2)
        correct = f"env -u AGENT_BUGS {PY} -m agent"
        result = agent.command("resume", cut, env={"AGENT_BUGS": "stale-assistant-calls",
                                                   "AGENT_PLANNER_CMD": correct})
        assert result.status == 0 and result.out == "done\n"
        assert [p["type"] for p in plans(result.err)] == ["finish"]


class TestCheckpointChannel:
    def test_the_hello_is_answered_before_the_first_plan(self, agent, stub, tool_run, tmp_path):
        """Under a supervisor that closes after the hello without answering, the agent exits 7 before it plans: the
        planner command never runs, no tool is replayed, nothing is appended (the hello's answer is read late, but
        before anything with an effect)."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))  # the first plan would replay the read
        before = cut.read_bytes()
        cmd, calls = counting(agent.tmp)
        supervisor = Supervisor(tmp_path, lambda message: None)  # reads the hello, then closes
        try:
            env = {**os.environ, **agent.env, "CHAOS_CONTROL": supervisor.path, "AGENT_PLANNER_CMD": cmd}
            proc = subprocess.run([sys.executable, "-m", "agent", "resume", str(cut)], capture_output=True,
                                  text=True, timeout=60, env=env, cwd=REPO)
        finally:
            supervisor.close()
        assert proc.returncode == 7, proc.stderr
        assert "checkpoint channel lost" in proc.stderr and "Traceback" not in proc.stderr
        assert [next(iter(m)) for m in supervisor.messages] == ["hello"]
        assert not calls.exists(), "the planner command ran before the hello's answer was read"
        assert cut.read_bytes() == before


class TestInterrupt:
    def test_sigint_while_the_command_runs(self, stub, tool_run, agent, tmp_path):
        """SIGINT while the planner command runs kills it at once; the agent reconciles the abort (exit 130)."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        started = tmp_path / "planner-started"
        cmd = planner_script(tmp_path, f"open({str(started)!r}, 'w').close()\ntime.sleep(60)\n")
        env = {**os.environ, "OPENAI_BASE_URL": stub.base_url, "OPENAI_API_KEY": "k", "AGENT_PLANNER_CMD": cmd}
        env.pop("AGENT_BUGS", None)
        env.pop("CHAOS_CONTROL", None)
        proc = subprocess.Popen([sys.executable, "-m", "agent", "resume", str(cut)], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            while not started.exists():
                assert time.monotonic() < deadline and proc.poll() is None, "the planner command never started"
                time.sleep(0.01)
            start = time.monotonic()
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert time.monotonic() - start < 15
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        assert records(cut, "abortRequested")[0]["phase"] == "tool"
        assert records(cut, "operationFinished")[-1]["outcome"] == "aborted"
        assert state_of(cut)["operation"] == {"kind": "idle"}


class TestBugsVerb:
    def test_bugs_json(self, agent):
        """`bugs --json` lists every switch with its layer and description; the plain listing is unchanged."""
        result = agent.cli(["bugs", "--json"])
        listing = json.loads(result.out)
        assert result.status == 0 and result.out.count("\n") == 1
        assert [item["name"] for item in listing] == list(bug_switches.BUGS)
        for item in listing:
            assert set(item) == {"name", "layer", "description"}
            assert item["layer"] == ("planner" if item["name"] in bug_switches.PLANNER_BUGS else "executor")
            assert item["description"] == bug_switches.BUGS[item["name"]]
        assert agent.cli(["bugs"]).out == bug_switches.listing()

    def test_bugs_json_in_a_subprocess(self):
        """The real entry point prints the same JSON listing."""
        env = {k: v for k, v in os.environ.items() if k != "AGENT_BUGS"}
        proc = subprocess.run([sys.executable, "-m", "agent", "bugs", "--json"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stderr == ""
        assert [item["name"] for item in json.loads(proc.stdout)] == list(bug_switches.BUGS)

    @pytest.mark.parametrize("verb", ["reduce", "plan", "bugs", "bugs --json", "resume", "abort", "compact", "run"])
    def test_unknown_switch_is_exit_2_for_every_verb(self, agent, stub, tool_run, verb):
        """An unknown AGENT_BUGS name is exit 2 with one line naming it, for every verb, before anything is done."""
        current = agent.tmp / "current.json"
        current.write_text(json.dumps({"configurationDigest": "sha256:" + "0" * 64, "environmentIdentity": "e",
                                       "tools": []}))
        argv = {"reduce": ["reduce", tool_run], "plan": ["plan", tool_run, current], "bugs": ["bugs"],
                "bugs --json": ["bugs", "--json"], "resume": ["resume", tool_run], "abort": ["abort", tool_run],
                "compact": ["compact", tool_run], "run": ["run", "--session", tool_run, "again"]}[verb]
        before, sent = tool_run.read_bytes(), len(stub.requests)
        result = agent.cli(argv, env={"AGENT_BUGS": "nosuch"})
        assert result.status == 2 and result.out == ""
        assert result.err.count("\n") == 1 and "nosuch" in result.err
        assert tool_run.read_bytes() == before and len(stub.requests) == sent

    def test_help_lists_exit_8_and_the_planner_variables(self, capsys):
        """--help documents exit 8 and AGENT_PLANNER_CMD / _SCOPE / _TIMEOUT."""
        from agent import cli

        with pytest.raises(SystemExit):
            cli.main(["--help"], environ={})
        out = capsys.readouterr().out
        assert "\n  8 " in out
        assert all(name in out for name in ("AGENT_PLANNER_CMD", "AGENT_PLANNER_SCOPE", "AGENT_PLANNER_TIMEOUT"))


def test_start_path_without_the_variable_stays_light(tmp_path):
    """Without AGENT_PLANNER_CMD an idle `resume` does not import shlex or the plan-shape validator."""
    proc, modules = imported_modules(["resume", str(idle_session(tmp_path))])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "agent.loop" in modules and not {"shlex", "agent.session.plan_shape"} & modules
