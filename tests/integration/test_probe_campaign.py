"""`chaos campaign` and `chaos run` over probe scenarios (a Python program under chaos.probe), with real processes.

The programs are tests/agents/workflow.py (stdlib only, run by the tests' own interpreter): the scenarios under
tests/integration/frameworks/ pass (one of them as an expected failure), and planted defects make them fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.campaign import load_library
from chaos.target import is_probe

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "frameworks"
WORKFLOW = HERE.parent / "agents" / "workflow.py"
REPO = HERE.parent.parent


def chaos(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def scenario(tmp_path: Path, name: str, *, env: str = "", extra: str = "", properties: str = "",
             pinned: str = "") -> Path:
    """A probe scenario file over the workflow, written to ``tmp_path``."""
    path = tmp_path / f"{name}.toml"
    path.write_text(f'''
name = "{name}"
description = "the stdlib workflow"
guarantee = "at-least-once effects"
guarantee_source = "tests/agents/workflow.py"
{extra}
[target]
kind = "python"
program = ["{WORKFLOW}", "{{case}}/state"]
reader = ["{WORKFLOW}", "--read", "{{case}}/state"]
sqlite = ["state/wf.db"]
tables = ["progress", "cursor"]
files = ["status.json", "status.json.tmp"]
points = ["effected"]
effect_bound = 2
max_launches = 3
{properties}
env = {{ WORKFLOW_BUGS = "{env}" }}
{pinned}
''')
    return path


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    """One campaign over tests/integration/frameworks/ (both scenarios)."""
    out = tmp_path_factory.mktemp("probe-campaign")
    proc = chaos("campaign", str(SCENARIOS), "--out", str(out), "--name", "folder", "-j", "2")
    return proc, out / "folder"


def test_folder_campaign_passes_with_its_expected_failure(folder_run):
    """Every kill point of the workflow holds; the concurrent-resume scenario's failure is reported as expected."""
    proc, directory = folder_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((directory / "result.json").read_text())
    assert result["cases"]["fail"] == 0 and result["cases"]["expected-failure"] == 1
    assert result["cases"]["pass"] >= 2 * 2 * 12  # two scenarios, two phases, at least twelve durable writes each
    assert "EXPECTED FAILURE" in proc.stdout and "reason: with WORKFLOW_BUGS=no-lock the workflow takes no lock" in proc.stdout


def test_correct_program_fires_once_under_concurrent_resumes(folder_run):
    """With its lock, the workflow resumed by three processes at once holds consume-once (and every property);
    without it (workflow-concurrent: no-lock) the same schedule is the expected consume-once failure."""
    _, directory = folder_run
    report = json.loads((directory / "report.json").read_text())
    status = {c["id"]: c for c in report["cases"]}
    assert status["workflow::dresume(3):point@after-sync#2"]["status"] == "pass"
    failed = status["workflow-concurrent::dresume(3):point@after-sync#2"]
    assert failed["status"] == "expected-failure"
    assert "consume-once" in [f["invariant"] for f in failed["failures"]]


def test_folder_campaign_prints_cases_per_second_per_target(folder_run):
    """Each probe target gets its own line with its case count and cases/s."""
    proc, _ = folder_run
    lines = [l for l in proc.stdout.splitlines() if l.strip().startswith("target ")]
    assert {l.split()[1].rstrip(":") for l in lines} == {"workflow", "workflow-concurrent"}
    assert all("cases/s" in l for l in lines)


def test_expected_failure_is_skipped_in_junit_with_its_reason(folder_run):
    """In JUnit an expected failure is a skipped test whose message carries the reason."""
    _, directory = folder_run
    junit = (directory / "junit.xml").read_text()
    assert 'type="expected-failure"' in junit and "the workflow takes no lock" in junit


def test_expected_failure_has_a_repro_command(folder_run):
    """The report gives the one command that re-runs an expected failure: chaos run FILE --kill SCHEDULE."""
    _, directory = folder_run
    report = json.loads((directory / "report.json").read_text())
    repro = [c["repro"] for c in report["cases"] if c["status"] == "expected-failure"]
    assert repro == [f"chaos run {SCENARIOS / 'workflow-concurrent.toml'} --kill 'dresume(3):point@after-sync#2'"]


@pytest.mark.parametrize("bug, prop", [("rerun-recorded", "recorded-not-redone"),
                                       ("random-resume", "recovery-deterministic")])
def test_planted_defect_fails_the_campaign(tmp_path, bug, prop):
    """A planted defect of the workflow makes its property fail in a campaign (exit 1), reproduced on re-run."""
    path = scenario(tmp_path, "planted", env=bug, properties=(
        'properties = ["state-loads", "recorded-not-redone", "effects-bounded", "completes", '
        '"recovery-deterministic"]'))
    proc = chaos("campaign", str(path), "--out", str(tmp_path / "out"), "--name", "c", "-j", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "out" / "c" / "result.json").read_text())
    assert prop in result["failures_by_invariant"]


def test_unexpected_pass_is_reported(tmp_path):
    """A scenario declared to fail whose cases all hold is reported as an unexpected pass."""
    path = scenario(tmp_path, "fixed", extra='expect_failure = "was broken once"')
    proc = chaos("campaign", str(path), "--out", str(tmp_path / "out"), "--name", "c", "-j", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "UNEXPECTED PASS: declared to fail (was broken once), but every case held" in proc.stdout


def test_unprepared_environment_is_skipped_with_the_reason(tmp_path):
    """A target whose pinned environment is not prepared is skipped, saying so and how to prepare it, and the
    campaign is incomplete (exit 4), never a green run of nothing."""
    path = scenario(tmp_path, "unprepared")
    text = path.read_text().replace('kind = "python"', 'kind = "python"\nrequirements = ["no-such-pkg==0.0.1"]')
    path.write_text(text)
    proc = chaos("campaign", str(path), "--out", str(tmp_path / "out"), "--name", "c")
    assert proc.returncode == 4, proc.stdout + proc.stderr  # incomplete: it ran nothing it was asked to run
    assert "INCOMPLETE" in proc.stdout and "1 target(s) skipped, their environment not prepared" in proc.stdout
    assert f"SKIPPED unprepared: its interpreter environment is not prepared: run `chaos targets prepare {path}`" in (
        proc.stdout + proc.stderr)


def test_default_sweep_leaves_probe_scenarios_out():
    """The default campaign (no path, no tag) never includes scenarios/frameworks/."""
    assert not [e for e in load_library([]) if is_probe(e.scenario)]


def test_chaos_run_reports_the_failing_properties(tmp_path):
    """chaos run of a probe scenario with one schedule prints each failing property and exits 1."""
    path = scenario(tmp_path, "run", env="retry-effect")
    proc = chaos("run", str(path), "--kill", "point@after-sync#2", "--reports", str(tmp_path / "r"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL run::point@after-sync#2" in proc.stdout
    assert "effects-bounded: effect 'b' ran 3 times" in proc.stdout
    assert "repro bundle" not in proc.stdout  # a campaign writes none for a probe case: its report's run line is it


def test_faults_a_probe_cannot_take_are_refused(tmp_path):
    """torn, powerloss, int and ioerror need the session contract: on a probe scenario they are one line, exit 2."""
    path = scenario(tmp_path, "torn")
    proc = chaos("run", str(path), "--kill", "torn(1):commit@after-write#1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "torn does not apply to a python target (only kill and dresume" in proc.stderr
    pinned = scenario(tmp_path, "pinned", pinned='[[schedules]]\nfaults = ["int:commit@after-sync#1"]')
    proc = chaos("validate", str(pinned))
    assert proc.returncode == 2 and "int does not apply to a python target" in proc.stdout + proc.stderr


def test_a_reader_with_a_misspelt_key_is_named(tmp_path):
    """A reader whose object lacks 'complete' (say it printed 'completed') fails state-loads naming the format."""
    reader = tmp_path / "reader.py"
    reader.write_text('import json; print(json.dumps({"done": [], "result": None, "completed": True}))\n')
    path = scenario(tmp_path, "reader")
    path.write_text(path.read_text().replace(f'reader = ["{WORKFLOW}", "--read", "{{case}}/state"]',
                                             f'reader = ["{reader}"]'))
    proc = chaos("run", str(path), "--reports", str(tmp_path / "r"))
    assert proc.returncode == 1
    assert "reader must print one object with 'done' (a list), 'result' and 'complete'" in proc.stdout


def test_schedule_outside_the_vocabulary_is_one_line(tmp_path):
    """A kill point naming a fact the target does not announce is a one-line usage error (exit 2)."""
    path = scenario(tmp_path, "vocab")
    proc = chaos("run", str(path), "--kill", "comit@after-sync#1")
    assert proc.returncode == 2
    assert "unknown fact 'comit' (did you mean 'commit'?)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_target_table_lists_every_problem(tmp_path):
    """A probe scenario whose [target] is wrong gets one line per problem and exit 2, no traceback."""
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\ndescription = "d"\nguarantee = "g"\nguarantee_source = "s"\n'
                    '[target]\nkind = "python"\nprogram = ["./missing.py"]\nrequirements = ["langgraph"]\n'
                    'effect_bound = 0\ncolour = "red"\n')
    proc = chaos("validate", str(path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    for needle in ("colour: unknown key", "requirements: 'langgraph': pin an exact version",
                   "program: no such program file", "effect_bound: must be a positive integer"):
        assert needle in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
