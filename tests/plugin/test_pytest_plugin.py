"""The killpoint pytest plugin, driven the way CI drives it: real pytest subprocesses over tiny scenario files.

Each run launches the real agent under the real supervisor (no mocks), so the checks here are end to end: items are
collected per kill point, a correct agent passes, a known-bug switch fails with the invariant and its evidence
(not a traceback), pytest-xdist (``-n 2``, ``--tx 2*popen``) and ``--junitxml`` work, and the project's own test
run never turns into a campaign. The kill-point cache is shared by the tests of one process so each scenario's
baseline runs once.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TINY = '''
name = "tiny"
description = "One run, one model step, no tools: every kill completes with the answer."
[[runs]]
prompt = "Say hi."
[[runs.turns]]
content = "Hi!"
[[schedules]]
faults = ["stepAttempt@after-sync#1", "stepAttempt@after-sync#2"]
description = "two kills with the attempt open: no third request, blocked"
[expect]
outcome = "completed"
answer = "Hi!"
[[expect.when]]
when = "open-attempt:2"
outcome = "blocked:attempts_exhausted"
'''

STALE = '''
name = "tiny-stale-calls"
description = "A read, then the final answer; the kill lands after the final answer's transaction."
tags = ["regression"]
[workspace]
"a.txt" = "alpha\\n"
[[runs]]
prompt = "Read a.txt."
[[runs.turns]]
tool_calls = [{ id = "call_read_a", name = "read", arguments = { path = "a.txt" } }]
[[runs.turns]]
content = "It says alpha."
[[schedules]]
faults = ["assistant@after-sync#2"]
[expect]
outcome = "completed"
answer = "It says alpha."
'''

# The exhaustive depth-1 list of TINY: its four transactions at before-write and after-sync, then the pinned one.
TINY_ITEMS = [
    "scenarios/tiny.toml::runStarted@before-write#1",
    "scenarios/tiny.toml::runStarted@after-sync#1",
    "scenarios/tiny.toml::stepAttempt@before-write#1",
    "scenarios/tiny.toml::stepAttempt@after-sync#1",
    "scenarios/tiny.toml::assistant@before-write#1",
    "scenarios/tiny.toml::assistant@after-sync#1",
    "scenarios/tiny.toml::operationFinished@before-write#1",
    "scenarios/tiny.toml::operationFinished@after-sync#1",
    "scenarios/tiny.toml::stepAttempt@after-sync#1+stepAttempt@after-sync#2",
]


@pytest.fixture(scope="session")
def kp_cache(tmp_path_factory) -> str:
    """A kill-point cache shared by this process's plugin runs (each scenario's baseline runs once)."""
    return str(tmp_path_factory.mktemp("killpoint-cache"))


@pytest.fixture
def project(pytester: pytest.Pytester):
    """A project like ours: testpaths = tests (one unit test and a .toml fixture), scenarios/ with TINY and STALE."""
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_unit.py").write_text("def test_unit():\n    assert 1 + 1 == 2\n")
    (pytester.path / "tests" / "fixture.toml").write_text('name = "not-a-scenario"\n')
    (pytester.path / "scenarios" / "regressions").mkdir(parents=True)
    (pytester.path / "scenarios" / "tiny.toml").write_text(TINY)
    (pytester.path / "scenarios" / "regressions" / "stale.toml").write_text(STALE)
    return pytester


def _collected(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "::" in line and not line.startswith(("=", "FAILED", "ERROR"))]


def test_items_are_one_per_kill_point_and_pinned_schedule(project, kp_cache):
    """A scenario file yields one item per exhaustive kill point plus one per pinned schedule, in campaign order."""
    result = project.runpytest_subprocess("scenarios/tiny.toml", "--collect-only", "-q", "--killpoint-cache", kp_cache)
    assert result.ret == 0, result.stdout.str()
    assert _collected(result) == TINY_ITEMS


def test_regression_files_contribute_their_pinned_schedules_only(project, kp_cache):
    """A file under regressions/ (or tagged regression) is collected as its pinned schedules, not every kill point."""
    result = project.runpytest_subprocess("scenarios/regressions", "--collect-only", "-q",
                                          "--killpoint-cache", kp_cache)
    assert result.ret == 0, result.stdout.str()
    assert _collected(result) == ["scenarios/regressions/stale.toml::assistant@after-sync#2"]


def test_the_projects_own_runs_never_collect_scenarios(project):
    """Without a scenario path the testpaths run, `pytest tests` and `pytest .` collect no .toml file at all."""
    for args in ((), ("tests",), (".",)):
        result = project.runpytest_subprocess("--collect-only", "-q", *args)
        assert result.ret == 0, result.stdout.str()
        assert _collected(result) == ["tests/test_unit.py::test_unit"], args


def test_the_option_alone_runs_the_scenarios_instead_of_the_testpaths(project, kp_cache):
    """`--killpoint-scenarios DIR` without positional arguments collects DIR's scenarios and not the testpaths."""
    result = project.runpytest_subprocess("--killpoint-scenarios", "scenarios/regressions", "--collect-only", "-q",
                                          "--killpoint-cache", kp_cache)
    assert result.ret == 0, result.stdout.str()
    assert _collected(result) == ["scenarios/regressions/stale.toml::assistant@after-sync#2"]


def test_an_invalid_scenario_is_reported_as_file_line_field_message(project):
    """A broken scenario is a collection error naming file, line, field and problem, without a traceback."""
    (project.path / "scenarios" / "broken.toml").write_text(
        'name = "broken"\ndescription = "x"\n[[runs]]\nprompt = "p"\n[[runs.turns]]\ncontent = "c"\n'
        '[expect]\noutcome = "finished"\n')
    result = project.runpytest_subprocess("scenarios/broken.toml")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.stdout.fnmatch_lines(["*broken.toml:8: expect.outcome: 'finished' is not an outcome*"])
    assert "Traceback" not in result.stdout.str()


def test_a_correct_agent_passes_under_xdist_with_a_junit_report(project, kp_cache):
    """`-n 2 --junitxml` runs every item of the scenario on two workers (same item list) and reports them passed."""
    xml = project.path / "junit.xml"
    result = project.runpytest_subprocess("scenarios/tiny.toml", "-n", "2", "--junitxml", str(xml),
                                          "--killpoint-cache", kp_cache, "-p", "no:randomly")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=len(TINY_ITEMS))
    cases = ET.parse(xml).getroot().findall(".//testcase")
    assert sorted(c.get("name") for c in cases) == sorted(i.partition("::")[2] for i in TINY_ITEMS)
    assert not ET.parse(xml).getroot().findall(".//failure")


def test_a_known_bug_fails_with_invariant_and_evidence_under_tx_popen(project, kp_cache):
    """With AGENT_BUGS=stale-assistant-calls the pinned kill fails on `--tx 2*popen`, shown as invariants and
    evidence plus the reproducing command (no harness traceback), and the junit failure carries the same text."""
    xml = project.path / "junit.xml"
    result = project.runpytest_subprocess("scenarios/regressions", "--tx", "2*popen", "--dist", "load",
                                          "--killpoint-agent-bugs", "stale-assistant-calls", "--junitxml", str(xml),
                                          "--killpoint-cache", kp_cache)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*killpoint case tiny-stale-calls::assistant@after-sync#2 did not pass: fail (agent exit:70)*",
        "*invariant converges failed:*",
        "*the session did not converge*exited 70*",
        "*invariant outcome failed:*",
        "*reproduce: chaos run scenarios/regressions/stale.toml --kill 'assistant@after-sync#2' "
        "--agent-bugs stale-assistant-calls*",
    ])
    assert "Traceback" not in result.stdout.str()
    [failure] = ET.parse(xml).getroot().findall(".//failure")
    assert "invariant converges failed" in (failure.text or "") + (failure.get("message") or "")


def test_the_same_regression_passes_on_the_correct_agent(project, kp_cache):
    """Without the bug switch the pinned stale-calls kill passes: the failure above is the bug, not the harness."""
    result = project.runpytest_subprocess("scenarios/regressions", "-q", "--killpoint-cache", kp_cache)
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)


def test_an_unknown_bug_switch_is_a_usage_error(project):
    """A misspelt --killpoint-agent-bugs stops the run with one line, instead of running the correct agent."""
    result = project.runpytest_subprocess("scenarios/tiny.toml", "--killpoint-agent-bugs", "stale-calls")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--killpoint-agent-bugs: unknown bug switch stale-calls for target bundled*"])


def test_a_planner_command_that_cannot_plan_is_a_usage_error(project):
    """A --killpoint-planner-cmd that gives no plan stops the run with one line, instead of failing every item."""
    result = project.runpytest_subprocess("scenarios/tiny.toml", "--killpoint-planner-cmd",
                                          f"{sys.executable} no-planner.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--killpoint-planner-cmd: planner command * gave no plan (exit 2: *no-planner.py*"])
    listed = project.runpytest_subprocess("scenarios/tiny.toml", "--collect-only", "--killpoint-planner-cmd",
                                          f"{sys.executable} no-planner.py")
    assert listed.ret == pytest.ExitCode.OK  # nothing runs, nothing is asked
    hang = project.path / "hang.py"
    hang.write_text("import time\ntime.sleep(30)\n")
    slow = project.runpytest_subprocess("scenarios/tiny.toml", "-p", "no:xdist", "--killpoint-planner-cmd",
                                        f"{sys.executable} {hang}", "--killpoint-planner-timeout", "0.5")
    assert slow.ret == pytest.ExitCode.USAGE_ERROR
    slow.stderr.fnmatch_lines(["*timed out after 0.5s*"])
    scope = project.runpytest_subprocess("scenarios/tiny.toml", "--killpoint-planner-scope", "all")
    assert scope.ret == pytest.ExitCode.USAGE_ERROR  # one line at the start, not a collection error
    scope.stderr.fnmatch_lines(["*planner scope: given without a planner command*"])


def test_a_plugin_run_reuses_a_campaigns_baselines(project, tmp_path):
    """After `chaos campaign` filled a cache, the plugin on the same scenario runs no baseline of its own."""
    cache = tmp_path / "shared-cache"
    done = subprocess.run([sys.executable, "-m", "chaos", "campaign", "scenarios/tiny.toml", "--pinned-only",
                           "--cache", str(cache), "--out", str(tmp_path / "out"), "-j", "1"],
                          cwd=project.path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    entries = sorted(p.name for p in cache.glob("*.json"))
    assert len(entries) == 1
    basetemp = tmp_path / "basetemp"
    result = project.runpytest_subprocess("scenarios/tiny.toml", "-q", "-p", "no:xdist", "--killpoint-cache",
                                          str(cache), "--killpoint-mode", "pinned", "--basetemp", str(basetemp))
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1)
    assert sorted(p.name for p in cache.glob("*.json")) == entries  # the campaign's entry, no second one
    assert not list(basetemp.rglob("baselines"))  # and no crash-free baseline ran under pytest


def test_a_foreign_planner_failure_names_the_first_divergence(project, kp_cache):
    """With a wrong --killpoint-planner-cmd the pinned kill fails and the item names the first divergence."""
    planner = f"env AGENT_BUGS=stale-assistant-calls {sys.executable} -m agent"
    result = project.runpytest_subprocess("scenarios/regressions", "-p", "no:xdist", "--killpoint-planner-cmd",
                                          planner, "--killpoint-cache", kp_cache)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines([
        "*first divergence (kill 1, assistant@after-sync#2): reference P5.2 finish completed; implementation "
        "startTool read#0, not a call of the current assistant message (it has none)*",
        "*reproduce: chaos run scenarios/regressions/stale.toml --kill 'assistant@after-sync#2' --planner-cmd*",
    ])


# A scenario whose crash-free run cannot pass (shared with tests/integration/test_nightly.py).
BAD_WRITE = (Path(__file__).resolve().parents[1] / "integration" / "campaign" / "bad-write.toml").read_text()


def test_a_failing_baseline_item_says_why(project, kp_cache):
    """The baseline item of a scenario whose crash-free run fails shows the tool's error result and stderr tail."""
    (project.path / "scenarios" / "bad-write.toml").write_text(BAD_WRITE)
    result = project.runpytest_subprocess("scenarios/bad-write.toml", "-p", "no:xdist", "--killpoint-cache", kp_cache)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines([
        "*the crash-free baseline of bad-write did not pass*",
        "*why (from the kept baseline run):*",
        "*tool write returned an error: Error: invalid arguments for tool 'write': missing required property "
        "'content'*",
        "*agent stderr (launch 0, step): agent: *",
    ])


def test_ci_reproduce_line_case_directory_and_junit_names(project, kp_cache, tmp_path):
    """Run from scenarios/: the reproduce line works pasted there, --killpoint-case-dir holds the kept case, and the
    JUnit testcase has the classname and name `chaos campaign`'s junit.xml gives the same case."""
    xml = tmp_path / "junit.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "regressions", "-p", "no:xdist", "-p", "no:cacheprovider",
                          "--killpoint-agent-bugs", "stale-assistant-calls", "--killpoint-cache", kp_cache,
                          "--junitxml", str(xml), "--killpoint-case-dir", "../artifacts"],
                         cwd=project.path / "scenarios", capture_output=True, text=True, timeout=300)
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, run.stdout + run.stderr
    assert ("reproduce: chaos run regressions/stale.toml --kill 'assistant@after-sync#2' --agent-bugs "
            "stale-assistant-calls") in run.stdout
    kept = project.path / "artifacts" / "tiny-stale-calls_assistant_after-sync_2"
    assert (kept / "caserun.json").is_file() and f"case directory: {kept}" in run.stdout
    [case] = ET.parse(xml).getroot().iter("testcase")
    assert (case.get("classname"), case.get("name")) == ("killpoint.tiny-stale-calls", "assistant@after-sync#2")
    from chaos.report import CaseReport
    from chaos.report.junit import case_name

    report = CaseReport(id="tiny-stale-calls::assistant@after-sync#2", scenario="tiny-stale-calls",
                        schedule=["assistant@after-sync#2"], status="pass")
    assert case_name(report) == case.get("name")  # the campaign's name for the same case


def test_importing_the_plugin_loads_nothing_heavy():
    """Importing chaos.pytest_plugin (as pytest does in every run) imports neither pydantic nor the supervisor."""
    code = ("import sys, chaos.pytest_plugin; "
            "heavy = [m for m in ('pydantic', 'chaos.supervisor', 'chaos.scenario', 'chaos.oracle', 'rich', 'psutil')"
            " if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
