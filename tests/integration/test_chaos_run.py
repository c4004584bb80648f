"""End-to-end tests of the harness core loop with the real agent: baseline, a kill at every phase of every
transaction, `chaos run` / `chaos killpoints` on the command line, hangs, and malformed scenario files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import chaos.case
from chaos import scratch
from chaos.case import run_baseline, run_case
from chaos.target import Target
from chaos.cli import main
from chaos.fakellm import write_log
from chaos.faults import PHASES
from chaos.oracle import INVARIANTS
from chaos.scenario import load_scenario
from chaos.supervisor import Limits
from tests.integration import gone

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


@pytest.fixture(scope="module")
def bash_deploy():
    return load_scenario(SCENARIOS / "bash-deploy.toml")


@pytest.fixture(scope="module")
def baseline(bash_deploy, tmp_path_factory):
    return run_baseline(bash_deploy, work_dir=tmp_path_factory.mktemp("baseline"))


def test_the_baseline_passes_every_invariant_and_lists_its_kill_points(baseline):
    """The crash-free run is itself judged by all seven invariants and reaches three kill points per transaction."""
    assert baseline.ok, baseline.result.to_json()
    assert [r.name for r in baseline.result.invariants] == list(INVARIANTS)
    assert all(r.ok and r.checked for r in baseline.result.invariants)
    assert baseline.facts.witnesses == {"call_deploy": 1}
    facts = [k.facts for k in baseline.killpoints if k.phase == "before-write"]
    assert facts[0] == ["user", "runStarted"] and ["toolStarted"] in facts and facts[-1] == ["operationFinished"]
    assert len(baseline.killpoints) == 3 * len(facts)
    assert [s[0] for s in baseline.schedules()][:2] == ["runStarted@before-write#1", "runStarted@after-sync#1"]


@pytest.mark.parametrize("phase", PHASES)
def test_a_kill_at_every_transaction_passes_on_the_correct_agent(phase, bash_deploy, baseline, tmp_path):
    """SIGKILL at this phase of each transaction of a tool-using scenario: every case holds every invariant."""
    points = [k.point for k in baseline.killpoints if k.phase == phase]
    assert len(points) == 8
    results = [run_case(bash_deploy, (p,), work_dir=tmp_path, baseline=baseline) for p in points]
    bad = {r.case_id: (r.status, r.verdict, [(i.name, [f.text() for f in i.findings]) for i in r.failed])
           for r in results if not r.ok}
    assert not bad
    assert all(r.kills == 1 and r.launches >= 2 for r in results)
    assert not any(tmp_path.iterdir()), "passing case directories are removed"


def test_a_hung_agent_is_reported_hang_and_leaves_no_process(bash_deploy, tmp_path):
    """An agent that never says anything is reported `hang` by the watchdog, and its child process is gone too."""
    script = tmp_path / "hung_agent.py"
    pids = tmp_path / "pids"
    script.write_text(textwrap.dedent(f"""
        import os, pathlib, subprocess, time
        child = subprocess.Popen(["sleep", "300"], process_group=0)  # like the bash tool: own group, same session
        pathlib.Path({str(pids)!r}).write_text(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(300)
    """))
    target = Target(command=(sys.executable, str(script)), configuration_flags=False, name="hung")
    result = run_case(bash_deploy, (), work_dir=tmp_path / "cases", target=target,
                      limits=Limits(case_seconds=20, silence_seconds=1.0))
    assert result.status == "hang" and result.verdict == "hang"
    assert "silent for 1s" in result.detail
    assert result.duration < 20  # cut by the silence limit, not by the script's 300 s sleep
    for pid in map(int, pids.read_text().split()):
        assert gone(pid)
    assert result.case_dir is not None and (Path(result.case_dir) / "launches").is_dir()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_chaos_run_stopped_by_sigterm_or_sighup_leaves_no_process(sig, tmp_path):
    """SIGTERM (a CI timeout) or SIGHUP stops `chaos run` as Ctrl-C does: the exec'd target's processes (own
    session) are killed, and the exit status is 128 + the signal."""
    script, pids = tmp_path / "hung.py", tmp_path / "pids"
    script.write_text(textwrap.dedent(f"""
        import os, pathlib, subprocess, time
        child = subprocess.Popen(["sleep", "300"])
        pathlib.Path({str(pids)!r}).write_text(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(300)
    """))
    target = tmp_path / "hung.toml"
    target.write_text(f'name = "hung"\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(script))}]\n')
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(SCENARIOS / "single-read.toml"),
                             "--target", str(target), "--kill", "tx:1@after-sync"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not pids.exists() or len(pids.read_text().split()) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "the target never started"
            time.sleep(0.05)
        proc.send_signal(sig)
        assert proc.wait(60) == 128 + sig
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for pid in map(int, pids.read_text().split()):
        assert gone(pid)


# --------------------------------------------------------------------------------------------------------------
# The command line


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_chaos_run_passes_on_the_correct_agent_and_keeps_nothing(tmp_path, monkeypatch):
    """`chaos run` with one kill prints the baseline and the case as passing, exits 0, keeps no directory (not even
    the --reports directories it made, while one that was there stays)."""
    result = invoke("run", str(SCENARIOS / "plain-answer.toml"), "--kill", "stepAttempt@after-sync#1",
                    "--reports", str(tmp_path / "made" / "reports"))
    assert result.exit_code == 0, result.output
    assert "plain-answer (baseline)" in result.output and "plain-answer::stepAttempt@after-sync#1" in result.output
    assert "2 case(s): 2 pass" in result.output
    assert list(tmp_path.iterdir()) == []
    result = invoke("run", str(SCENARIOS / "plain-answer.toml"), "--kill", "stepAttempt@after-sync#1",
                    "--reports", str(tmp_path))
    assert result.exit_code == 0 and tmp_path.is_dir() and list(tmp_path.iterdir()) == [], result.output
    monkeypatch.chdir(tmp_path)  # a path with `..` makes `a` too: it goes as well
    result = invoke("run", str(SCENARIOS / "plain-answer.toml"), "--kill", "stepAttempt@after-sync#1",
                    "--reports", "a/../b/c")
    assert result.exit_code == 0 and list(tmp_path.iterdir()) == [], result.output


def test_chaos_run_reports_the_stale_calls_bug_and_keeps_the_failing_case(tmp_path):
    """The motivating bug: a kill after the final answer with stale-assistant-calls fails `converges`, exit 1."""
    result = invoke("run", str(SCENARIOS / "read-then-answer.toml"), "--kill", "assistant@after-sync#2",
                    "--agent-bugs", "stale-assistant-calls", "--reports", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "read-then-answer::assistant@after-sync#2" in result.output
    assert "converges:" in result.output and "did not converge" in result.output
    assert "schedule: assistant@after-sync#2; target bundled AGENT_BUGS=stale-assistant-calls" in result.output
    assert ("first divergence (kill 1, assistant@after-sync#2): reference P5.2 finish completed; implementation "
            "startTool read#0") in " ".join(result.output.split())
    # A kept case directory is evidence, not a bundle: the run says which command writes one.
    assert ("a repro bundle of each failure: `chaos campaign " + str(SCENARIOS / "read-then-answer.toml")
            + " --agent-bugs stale-assistant-calls`") in " ".join(result.output.split())
    [run_dir] = tmp_path.iterdir()
    [case] = run_dir.iterdir()
    names = {p.relative_to(case).as_posix() for p in case.rglob("*")}
    assert {"requests.jsonl", "witness.log", "result.json", "caserun.json", "final-state.json"} <= names
    # The request log, written when the case is kept: every request the server recorded, in order.
    logged = [json.loads(line) for line in (case / "requests.jsonl").read_text().splitlines()]
    assert [r["seq"] for r in logged] == list(range(1, json.loads((case / "result.json").read_text())["requests"] + 1))
    assert all(r["body"]["messages"] and r["kind"] == "answer" for r in logged)
    assert any(n.startswith("sessions/") and n.endswith(".jsonl") for n in names)
    assert any(n.startswith("kills/") for n in names)
    assert any(n.startswith("launches/") and n.endswith(".stderr") for n in names)


def test_a_failing_schedule_no_campaign_plans_is_to_be_pinned_for_a_bundle(tmp_path):
    """A --kill schedule the scenario's campaign does not plan (a torn write) gets no bundle from it as is: the run
    says to pin the schedule first."""
    result = invoke("run", str(SCENARIOS / "read-then-answer.toml"), "--kill", "torn(1):stepAttempt@after-write#1",
                    "--agent-bugs", "no-torn-tail-repair", "--reports", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert ("a repro bundle of a failure: pin its schedule in the scenario's [[schedules]], then `chaos campaign "
            + str(SCENARIOS / "read-then-answer.toml") + " --agent-bugs no-torn-tail-repair`") in " ".join(
        result.output.split())


def test_chaos_run_reports_an_unreached_kill_point_as_coverage_not_pass(tmp_path, monkeypatch):
    """A kill point the agent never reaches is `kill-point-not-reached`, the run exits 1 and says which command
    lists the points it does reach."""
    monkeypatch.chdir(SCENARIOS)  # a short path: the console folds a word longer than its width
    result = invoke("run", "plain-answer.toml", "--kill", "toolStarted@after-sync#1", "--reports", str(tmp_path))
    assert result.exit_code == 1
    assert "kill-point-not-reached" in result.output
    assert "`chaos killpoints plain-answer.toml` lists the points" in " ".join(result.output.split())


REFERENCE_PLANNER = ("import runpy, sys\nsys.argv = ['agent', *sys.argv[1:]]\n"
                     "runpy.run_module('agent', run_name='__main__')\n")


def test_a_planner_command_runs_where_it_was_written(tmp_path, monkeypatch):
    """`--planner-cmd "python3 planner.py"` names a script in the directory chaos ran in, not in each case's
    workspace: the reference planner behind it passes the stale window's kill."""
    (tmp_path / "planner.py").write_text(REFERENCE_PLANNER)
    monkeypatch.chdir(tmp_path)
    result = invoke("run", str(SCENARIOS / "read-then-answer.toml"), "--kill", "assistant@after-sync#2",
                    "--planner-cmd", f"{sys.executable} planner.py", "--reports", str(tmp_path / "reports"))
    assert result.exit_code == 0, result.output
    assert "2 case(s): 2 pass" in result.output


def test_a_planner_command_that_cannot_plan_stops_before_any_case(tmp_path, monkeypatch):
    """A planner command that gives no plan is one line and exit 2 before the baseline: nothing runs, nothing is
    made."""
    monkeypatch.chdir(tmp_path)
    result = invoke("run", str(SCENARIOS / "read-then-answer.toml"), "--planner-cmd", f"{sys.executable} plannr.py",
                    "--reports", str(tmp_path / "reports"))
    assert result.exit_code == 2
    [line] = result.output.splitlines()
    assert line.startswith(f"planner command '{sys.executable} plannr.py' (run in {tmp_path}) gave no plan (exit 2: ")
    assert "plannr.py" in line and line.endswith("(SPEC §14.4 P2); no case was run")
    assert not (tmp_path / "reports").exists()


def test_the_planner_timeout_of_the_environment_bounds_the_question(tmp_path, monkeypatch):
    """AGENT_PLANNER_TIMEOUT in chaos's environment is --planner-timeout: a planner that hangs is refused after it."""
    (tmp_path / "hang.py").write_text("import time\ntime.sleep(30)\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", str(SCENARIOS / "plain-answer.toml"), "--planner-cmd",
                                       f"{sys.executable} hang.py"], env={"AGENT_PLANNER_TIMEOUT": "0.5"})
    assert result.exit_code == 2 and "timed out after 0.5s" in result.output
    # Without a planner command the variable means nothing (to the agent either): not even a bad value stops a run.
    listed = CliRunner().invoke(main, ["campaign", str(SCENARIOS / "plain-answer.toml"), "--list"],
                                env={"AGENT_PLANNER_TIMEOUT": "soon"})
    assert listed.exit_code == 0, listed.output
    typed = invoke("run", str(SCENARIOS / "plain-answer.toml"), "--planner-timeout", "3")
    assert typed.exit_code == 2 and "planner timeout: given without a planner command" in typed.output


@pytest.mark.parametrize("command", ["campaign", "mutants"])
def test_campaign_and_mutants_ask_the_planner_first_but_a_list_does_not(tmp_path, monkeypatch, command):
    """`chaos campaign` and `chaos mutants` refuse a planner command that gives no plan before any worker starts
    (exit 2, nothing under --out); `campaign --list` runs nothing, so it asks nothing."""
    monkeypatch.chdir(tmp_path)
    scenario, missing = str(SCENARIOS / "plain-answer.toml"), f"{sys.executable} plannr.py"
    result = invoke(command, scenario, "--planner-cmd", missing, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    [line] = result.output.splitlines()
    assert "gave no plan (exit 2: " in line and line.endswith("no case was run")
    assert not (tmp_path / "out").exists()
    if command == "campaign":
        listed = invoke("campaign", scenario, "--planner-cmd", missing, "--list", "--out", str(tmp_path / "out"))
        assert listed.exit_code == 0 and "plain-answer::stepAttempt@after-sync#1" in listed.output


def test_chaos_killpoints_lists_every_kill_point_of_the_baseline():
    """`chaos killpoints` prints every transaction's kill points at the three phases."""
    result = invoke("killpoints", str(SCENARIOS / "plain-answer.toml"))
    assert result.exit_code == 0, result.output
    for point in ("runStarted@before-write#1", "stepAttempt@after-write#1", "assistant@after-sync#1",
                  "operationFinished@after-sync#1"):
        assert point in result.output
    assert "12 kill point(s) in 4 transaction(s)" in result.output


def test_malformed_scenario_files_give_file_line_field_messages_and_exit_2(tmp_path):
    """A bad scenario gives every problem as `file:line: field: message` (TOML syntax: with column), exit 2."""
    syntax = tmp_path / "syntax.toml"
    syntax.write_text('name = "x"\ndescription = "d"\n[[runs]\nprompt = "p"\n')
    result = invoke("run", str(syntax))
    assert result.exit_code == 2
    assert result.output.startswith(f"{syntax}:3:") and ": toml: " in result.output
    assert "Traceback" not in result.output

    schema = tmp_path / "schema.toml"
    schema.write_text(textwrap.dedent("""\
        name = "Bad Name"
        description = "two problems"
        [[runs]]
        prompt = "p"
        promt = "typo"
        [[runs.turns]]
        content = "hi"
    """))
    result = invoke("run", str(schema))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert f"{schema}:1: name: must be a slug" in lines[0]
    assert any(line.startswith(f"{schema}:5: runs[0].promt: unknown key") for line in lines)

    result = invoke("killpoints", str(tmp_path / "missing.toml"))
    assert result.exit_code == 2 and "missing.toml:1: file: cannot read" in result.output


def test_bad_fault_texts_and_bug_names_are_usage_errors(tmp_path):
    """`--kill` and `--agent-bugs` are validated before anything runs: one line each, exit 2."""
    plain = str(SCENARIOS / "plain-answer.toml")
    result = invoke("run", plain, "--kill", "toolstarted@after-sync#1", "--reports", str(tmp_path))
    assert result.exit_code == 2 and "--kill 'toolstarted@after-sync#1': kill point" in result.output
    assert "unknown fact 'toolstarted'" in result.output
    result = invoke("run", plain, "--agent-bugs", "no-such-bug", "--reports", str(tmp_path))
    assert result.exit_code == 2 and "no-such-bug" in result.output
    assert list(tmp_path.iterdir()) == []  # nothing ran


# --------------------------------------------------------------------------------------------------------------
# Where a case's files live (chaos.scratch)


def test_a_kept_case_is_copied_out_of_scratch_with_every_path_it_names_valid(tmp_path, monkeypatch):
    """A failing case ran under a scratch link and is kept as a plain directory; the paths its records name exist."""
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setenv("KILLPOINT_SCRATCH", str(shm))
    monkeypatch.setattr(scratch, "MIN_SIZE", 0)  # whatever the temporary directory's file system
    target = Target().with_bugs(("stale-assistant-calls",))
    result = run_case(load_scenario(SCENARIOS / "read-then-answer.toml"), ("assistant@after-sync#2",),
                      work_dir=tmp_path / "work", target=target, keep="failing")
    assert not result.ok
    case = Path(result.case_dir)
    assert case.is_dir() and not case.is_symlink()
    run = json.loads((case / "caserun.json").read_text())
    assert run["session"] and Path(run["session"]).is_file()
    assert run["faults"][0]["snapshot"] and Path(run["faults"][0]["snapshot"]).is_file()
    assert all(Path(launch["stderr"]).is_file() for launch in run["launches"])
    # Nothing of it left in scratch but in the trash (emptied every scratch.TRASH_BATCH cases and at exit).
    assert [p for p in shm.rglob("*") if p.is_file() and p.suffix != ".lock" and scratch.TRASH not in p.parts] == []


def test_a_case_the_harness_fails_in_keeps_its_files(bash_deploy, tmp_path, monkeypatch):
    """An error of the harness mid-case propagates and leaves the case's directory, copied out of scratch."""
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setenv("KILLPOINT_SCRATCH", str(shm))
    monkeypatch.setattr(scratch, "MIN_SIZE", 0)  # whatever the temporary directory's file system

    class BrokenServer:
        def add_case(self, *args, **kwargs):
            raise RuntimeError("the model server is gone")

    with pytest.raises(RuntimeError, match="model server is gone"):
        run_case(bash_deploy, (), work_dir=tmp_path / "work", server=BrokenServer(), keep="none")
    [case] = (tmp_path / "work").iterdir()
    assert case.is_dir() and not case.is_symlink() and (case / "workspace").is_dir()
    assert not (case / "requests.jsonl").exists()  # no request was ever served

    # Failing after the agents ran (here: judging), the case keeps what the model server saw.
    def broken_judge(*args, **kwargs):
        raise RuntimeError("the oracle is broken")

    monkeypatch.setattr(chaos.case, "_judge", broken_judge)
    with pytest.raises(RuntimeError, match="oracle is broken"):
        run_case(bash_deploy, (), work_dir=tmp_path / "judged", keep="none")
    [case] = (tmp_path / "judged").iterdir()
    logged = [json.loads(line) for line in (case / "requests.jsonl").read_text().splitlines()]
    assert [r["seq"] for r in logged] == list(range(1, len(logged) + 1)) and len(logged) >= 2
    # The scratch copy is gone but for the trash (emptied every scratch.TRASH_BATCH cases and at exit).
    assert [p for p in shm.rglob("*") if p.is_file() and p.suffix != ".lock" and scratch.TRASH not in p.parts] == []


def test_a_kept_cases_request_log_is_whole_once_whatever_fails_after_it(bash_deploy, tmp_path, monkeypatch):
    """The request log of a kept case is written whole, not appended: when the harness fails after writing it (here
    the write itself reports a full disk), the failure path writes it again and it still holds each request once."""
    writes = []

    def full_after_writing(path, records, **kw):
        write_log(path, records, **kw)
        writes.append(path)
        if len(writes) == 1:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(chaos.case, "write_log", full_after_writing)
    with pytest.raises(OSError, match="No space left"):
        run_case(bash_deploy, (), work_dir=tmp_path, keep="all")
    [case] = tmp_path.iterdir()
    logged = [json.loads(line) for line in (case / "requests.jsonl").read_text().splitlines()]
    assert len(writes) == 2 and [r["seq"] for r in logged] == list(range(1, len(logged) + 1)) and len(logged) >= 2


def test_cases_run_in_scratch_unless_every_case_is_kept(bash_deploy, tmp_path, monkeypatch):
    """With scratch on, a case's directory is under the scratch root while it runs (its real path when the case is
    set up), and `keep="all"` (nothing to gain: every case is copied) works in the work directory itself."""
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setenv("KILLPOINT_SCRATCH", str(shm))
    monkeypatch.setattr(scratch, "MIN_SIZE", 0)  # whatever the temporary directory's file system
    seen = []
    environment = chaos.case._environment

    def watching(scenario, target, witness, base_url):
        """The case's environment, recording where its witness file is while the case runs."""
        seen.append(os.path.realpath(Path(witness).parent))
        return environment(scenario, target, witness, base_url)

    monkeypatch.setattr(chaos.case, "_environment", watching)
    run_case(bash_deploy, (), work_dir=tmp_path / "a", keep="none")
    run_case(bash_deploy, (), work_dir=tmp_path / "b", keep="all")
    assert seen[0].startswith(str(shm)) and seen[1].startswith(str(tmp_path / "b"))
    assert not any((tmp_path / "a").iterdir())  # the passing case left nothing in the work directory...
    roots = [p for p in (shm / f"killpoint-{os.getuid()}").iterdir() if p.is_dir()]
    assert roots and all(not any(p.name != scratch.TRASH for p in r.iterdir()) for r in roots)  # ...nor in scratch
    # (but in its trash: emptied every scratch.TRASH_BATCH cases and at exit)
