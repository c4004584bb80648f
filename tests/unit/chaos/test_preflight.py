"""Tests of chaos.preflight: one plan asked of a foreign planner command before any case, from real commands."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from agent.session.planner import plan_recovery, plan_rule
from agent.session.reducer import reduce_session
from chaos import preflight
from chaos.preflight import planner_problem
from chaos.target import Target

# The reference planner, out of process: a script in the planner's own directory (no `agent` on its command line).
REFERENCE = """\
import runpy, sys
sys.argv = ["agent", *sys.argv[1:]]
runpy.run_module("agent", run_name="__main__")
"""


def script(directory: Path, body: str, name: str = "planner.py") -> str:
    (directory / name).write_text(textwrap.dedent(body))
    return name


def test_the_state_asked_is_a_run_that_has_just_started():
    """The pre-flight log reduces, and the reference planner's answer for it is P2's first assistant step."""
    state = reduce_session(preflight.LOG)
    assert plan_rule(state, preflight.CURRENT) == "P2"
    assert plan_recovery(state, preflight.CURRENT)["type"] == "startStep"


def test_no_planner_command_means_nothing_is_asked():
    """A target without a foreign planner has nothing to pre-flight."""
    assert planner_problem(Target()) is None


def test_the_reference_planner_in_its_directory_passes(tmp_path):
    """A relative script is found in the planner's directory, whatever this process's own is."""
    name = script(tmp_path, REFERENCE)
    assert planner_problem(Target().with_planner(f"{sys.executable} {name}", None, str(tmp_path))) is None


def test_a_well_formed_but_wrong_plan_is_not_refused(tmp_path):
    """Only whether it answers is checked: a wrong plan is for the cases to judge."""
    name = script(tmp_path, 'print(\'{"type": "finish", "outcome": "aborted"}\')\n')
    assert planner_problem(Target().with_planner(f"{sys.executable} {name}", None, str(tmp_path))) is None


def test_a_missing_script_names_the_exit_and_its_error_line(tmp_path):
    """A command whose script is not there: its exit status and the error line of its stderr, in one line."""
    problem = planner_problem(Target().with_planner(f"{sys.executable} missing.py", None, str(tmp_path)))
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"planner command '{sys.executable} missing.py' (run in {tmp_path}) gave no plan "
                              "(exit 2: ")
    assert "missing.py" in problem and "No such file or directory" in problem
    assert problem.endswith("for a run that has just started (SPEC §14.4 P2)")


def test_a_command_that_cannot_start_is_named(tmp_path):
    """An executable that does not exist is said so."""
    problem = planner_problem(Target().with_planner("no-such-planner-binary x", None, str(tmp_path)))
    assert problem is not None and "`no-such-planner-binary` could not run" in problem


def test_an_answer_that_is_not_a_plan_is_refused(tmp_path):
    """JSON that is not one of the six plan shapes is named with the member that is wrong."""
    name = script(tmp_path, 'print(\'{"type": "startTool"}\')\n')
    problem = planner_problem(Target().with_planner(f"{sys.executable} {name}", None, str(tmp_path)))
    assert problem is not None and "an answer that is not a plan (startTool: required member" in problem


def test_a_directory_that_is_gone_is_said_so(tmp_path):
    """A stored planner directory removed since (a resumed campaign): one line, the command is not run."""
    gone = tmp_path / "gone"
    problem = planner_problem(Target().with_planner("anything", None, str(gone)))
    assert problem == f"planner command 'anything' (run in {gone}): its directory does not exist"


def test_it_is_asked_with_the_agents_environment_minus_the_channel(tmp_path, monkeypatch):
    """The command sees the target's variables (as the agent's would) but neither the checkpoint channel nor
    itself."""
    seen = tmp_path / "env.json"
    name = script(tmp_path, f"""\
        import json, os
        json.dump(sorted(os.environ), open({str(seen)!r}, "w"))
        print(json.dumps({{"type": "finish", "outcome": "aborted"}}))
    """)
    monkeypatch.setenv("CHAOS_CONTROL", "/tmp/nowhere.sock")
    target = Target(env=(("MINE", "1"),)).with_planner(f"{sys.executable} {name}", None, str(tmp_path))
    assert planner_problem(target) is None
    names = json.loads(seen.read_text())
    assert "MINE" in names and "AGENT_PLANNER_DIR" in names
    assert "CHAOS_CONTROL" not in names and "AGENT_PLANNER_CMD" not in names


def test_a_record_without_a_directory_is_asked_in_an_empty_one(tmp_path, monkeypatch):
    """A target recorded before planner_dir existed runs its planner in each case's fresh workspace: the pre-flight
    asks it in an empty directory too, not in this process's own (where a relative script would be found)."""
    name = script(tmp_path, REFERENCE)
    monkeypatch.chdir(tmp_path)
    target = Target.from_json({**Target().to_json(), "planner_command": f"{sys.executable} {name}"})
    assert target.planner_dir is None
    problem = planner_problem(target)
    assert problem is not None and "gave no plan (exit 2: " in problem and name in problem


def test_the_agents_planner_timeout_applies(tmp_path):
    """AGENT_PLANNER_TIMEOUT bounds the question as it bounds the agent's; a value the agent refuses is named."""
    name = script(tmp_path, "import time\ntime.sleep(30)\n")
    slow = Target(env=(("AGENT_PLANNER_TIMEOUT", "0.5"),)).with_planner(f"{sys.executable} {name}", None,
                                                                         str(tmp_path))
    problem = planner_problem(slow)
    assert problem is not None and "timed out after 0.5s" in problem
    assert problem.endswith("; the bound of 0.5 s is --planner-timeout, else the target file's or this environment's "
                            "AGENT_PLANNER_TIMEOUT, else the agent's 30 s")  # where a forgotten export shows
    bad = Target(env=(("AGENT_PLANNER_TIMEOUT", "soon"),)).with_planner("p", None, str(tmp_path))
    assert planner_problem(bad).endswith("AGENT_PLANNER_TIMEOUT='soon' is not a positive number of seconds")


def test_hand_edited_records_give_one_line(tmp_path):
    """A command that cannot be split, or a directory that is a file, is a line (a bundle or campaign.json read
    back), not a traceback."""
    assert "cannot be split into words" in planner_problem(Target().with_planner("p 'open", None, str(tmp_path)))
    afile = tmp_path / "file"
    afile.write_text("")
    assert planner_problem(Target().with_planner("p", None, str(afile))).endswith("its directory is not a directory")
