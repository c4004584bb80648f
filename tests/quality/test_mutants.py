"""``chaos mutants`` measures the harness's detection power: every switch is caught, and a miss or a false alarm fails.

The main test runs the real command on a reduced subset (the regression scenarios, each with only its pinned
schedule: ``--fast``) against the correct agent and every known-bug switch. The others show that the verdict can
fail both ways — a switch the subset cannot reach survives (exit 1), a scenario that fails on the correct agent is a
false alarm (exit 1) — and that the oracle gap found for ``replay-ignores-environment`` stays closed: the replay
under another environment is caught by an invariant even when the scenario states no expectation at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.bugs import BUGS

REPO = Path(__file__).resolve().parents[2]
REGRESSIONS = REPO / "scenarios" / "regressions"
# The invariant that first catches each switch on its pinned regression (docs/track-record.md, "caught by").
CAUGHT_BY = {
    "stale-assistant-calls": "converges",
    "pre-exec-synthetic-repeat": "converges",
    "replay-never-tools": "effects-at-most-once",
    "effect-before-intent": "effects-at-most-once",
    "retry-live-failures": "attempts-bounded",
    "unbounded-retry": "converges",
    "ignore-configuration-change": "converges",
    "replay-ignores-environment": "effects-at-most-once",
    "no-torn-tail-repair": "log-reduces",
    "start-untouched-while-pending": "log-reduces",
}


def mutants(*args: str, out: Path) -> tuple[subprocess.CompletedProcess, dict | None]:
    """Run ``chaos mutants ARGS --out OUT`` through this interpreter; (process, summary.json or None)."""
    proc = subprocess.run([sys.executable, "-m", "chaos.cli", "mutants", *args, "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    summary = out / "summary.json"
    return proc, json.loads(summary.read_text()) if summary.is_file() else None


def test_every_switch_is_detected_on_the_pinned_regressions(tmp_path):
    """On the regressions' pinned schedules the correct agent passes every case and each switch is caught by its
    expected invariant, with its first failing case, shrunk schedule, detection time and a repro bundle."""
    proc, summary = mutants(str(REGRESSIONS), "--fast", out=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary is not None and summary["ok"] is True and summary["survivors"] == []
    correct = summary["correct"]
    # --fast: one pinned case per regression file, nothing else (the exhaustive kill points are the library's).
    files = sorted(REGRESSIONS.glob("*.toml"))
    assert correct["cases"]["done"] == correct["cases"]["pass"] == len(files)
    assert correct["failures"] == [] and correct["flaky"] == [] and correct["errors"] == []
    assert sorted(r["switch"] for r in summary["switches"]) == sorted(BUGS)
    for run in summary["switches"]:
        d = run["detection"]
        assert run["detected"] and d is not None, run
        assert d["invariant"] == CAUGHT_BY[run["switch"]], (run["switch"], d)
        assert d["scenario"] == f"regression-{run['switch']}", (run["switch"], d)
        assert d["minimal"] and d["seconds"] > 0 and d["cases_run"] >= 1
        assert d["bundle"] and (Path(d["bundle"]) / "repro.sh").is_file()
        assert run["switch"] in proc.stdout
    assert f"{len(BUGS)}/{len(BUGS)} switch(es) detected" in proc.stdout
    assert f"correct agent: {len(files)} case(s), no failure" in proc.stdout


def test_a_switch_the_campaign_never_reaches_survives_and_fails_the_run(tmp_path):
    """A switch whose defect the scenario set never exercises is reported as surviving, and the command exits 1."""
    proc, summary = mutants(str(REGRESSIONS / "no-torn-tail-repair.toml"), "--fast", "--switch", "replay-never-tools",
                            out=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert summary["ok"] is False and summary["survivors"] == ["replay-never-tools"]
    assert summary["correct"]["cases"]["pass"] == 1
    assert "SURVIVED: replay-never-tools" in proc.stdout


def test_a_failure_on_the_correct_agent_is_a_false_alarm(tmp_path):
    """A case that fails on the correct agent (here: an expectation that is wrong for a kill with the attempt open)
    fails the command even though the switch is detected."""
    scenario = tmp_path / "wrong.toml"
    scenario.write_text('''
name = "wrong-expectation"
description = "A kill with the attempt open is retried and completes; this file wrongly expects it to block."
tags = ["regression"]

[[runs]]
prompt = "Say hi."

[[runs.turns]]
content = "Hi."

[[schedules]]
faults = ["stepAttempt@after-sync#1"]

[expect]
outcome = "completed"

[[expect.when]]
when = "open-attempt"
outcome = "blocked:configuration_changed"
''')
    proc, summary = mutants(str(scenario), "--fast", "--switch", "unbounded-retry", out=tmp_path / "out")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    correct = summary["correct"]
    assert summary["ok"] is False and correct["cases"]["fail"] == 1
    assert [g["invariant"] for g in correct["failures"]] == ["outcome"]
    assert "FALSE ALARM" in proc.stdout
    # The switch's campaign fails the same case, which proves nothing about the switch: not a detection.
    [switch] = summary["switches"]
    assert switch["cases"]["fail"] == 1 and switch["detection"] is None


def test_an_unknown_switch_is_a_usage_error(tmp_path):
    """``--switch`` with a name the agent does not know is one line on stderr and exit 2, before any campaign."""
    proc, summary = mutants("--switch", "no-such-bug", out=tmp_path)
    assert proc.returncode == 2
    assert "--switch no-such-bug: unknown bug switch" in proc.stderr and "Traceback" not in proc.stderr
    assert summary is None and not any(tmp_path.iterdir())


@pytest.fixture(scope="module")
def environment_replay(tmp_path_factory):
    """The replay-ignores-environment regression's pinned case, with and without the switch: (evidence, evidence)."""
    from chaos.case import execute_case, run_baseline
    from chaos.target import Target
    from chaos.scenario import load_scenario

    scenario = load_scenario(REGRESSIONS / "replay-ignores-environment.toml")
    work = tmp_path_factory.mktemp("env-replay")
    baseline = run_baseline(scenario, work_dir=work, keep="none")
    assert baseline.ok
    [schedule] = [tuple(s.faults) for s in scenario.schedules]
    runs = []
    for bugs in (("replay-ignores-environment",), ()):
        _, evidence, _ = execute_case(scenario, schedule, work_dir=work, target=Target(bugs=bugs),
                                      baseline=baseline, server=None, limits=None, probes=2, keep="none", name=None)
        runs.append(evidence)
    return runs


def test_a_replay_in_another_environment_fails_an_invariant_without_any_expectation(environment_replay):
    """Oracle gap closed: with the scenario's expectations removed, effects-at-most-once still fails the replay that
    ignored the environment change (P7.1.1), while the correct agent's blocked case passes every invariant."""
    from chaos import oracle

    buggy, correct = environment_replay
    for ev in (buggy, correct):
        ev.expect = None  # judge on the facts alone: no outcome rule can help
    failed = {r.name: r for r in oracle.check(buggy) if not r.ok}
    assert "effects-at-most-once" in failed, sorted(failed)
    [finding] = failed["effects-at-most-once"].findings
    assert "P7.1.1" in finding.message and finding.call == "call_read_hosts_list"
    assert all(r.ok for r in oracle.check(correct)), [r.to_json() for r in oracle.check(correct) if not r.ok]
