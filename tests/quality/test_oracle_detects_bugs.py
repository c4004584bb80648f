"""The harness can fail: the same kill cases that pass on the correct agent fail, naming the right invariant, when
a known bug is switched on in the agent (AGENT_BUGS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.case import run_baseline, run_case
from chaos.target import Target
from chaos.faults import PHASES
from chaos.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
# The kills that leave the deploy command pending (toolStarted durable, result not): the only cases in which a
# planner that re-runs never tools can do harm.
PENDING_BASH = {"toolStarted@after-write#1", "toolStarted@after-sync#1", "toolResult@before-write#1"}
# The kills between the final answer and its terminal record: the only window in which a planner that takes the
# previous turn's tool calls decides anything (the upstream stale-assistantCalls defect).
STALE_WINDOW = {"assistant@after-write#2", "assistant@after-sync#2", "operationFinished@before-write#1"}
# The kills that leave the final answer settled without its terminal record: where a recovery planner that takes the
# previous turn's tool calls wedges the session.
AFTER_FINAL_ANSWER = {"assistant@after-write#2", "assistant@after-sync#2", "operationFinished@before-write#1"}


@pytest.fixture(scope="module")
def scenario():
    return load_scenario(SCENARIOS / "bash-deploy.toml")


@pytest.fixture(scope="module")
def baseline(scenario, tmp_path_factory):
    base = run_baseline(scenario, work_dir=tmp_path_factory.mktemp("baseline"))
    assert base.ok, base.result.to_json()
    return base


def _cases(scenario, baseline, phase: str, bugs: tuple[str, ...], work: Path):
    points = [k.point for k in baseline.killpoints if k.phase == phase]
    return {p: run_case(scenario, (p,), work_dir=work, baseline=baseline, target=Target(bugs=bugs), keep="none")
            for p in points}


@pytest.mark.parametrize("phase", PHASES)
def test_stale_assistant_calls_fails_converges_exactly_in_the_stale_window(phase, scenario, baseline, tmp_path):
    """With the upstream stale-assistantCalls planner, a kill between the final answer and its terminal record wedges
    the session (`converges` fails, naming the open run); every other kill still passes."""
    results = _cases(scenario, baseline, phase, ("stale-assistant-calls",), tmp_path)
    assert len(results) == 8
    failed = {p for p, r in results.items() if not r.ok}
    assert failed == {p for p in results if p in STALE_WINDOW}
    for point in failed:
        r = results[point]
        converges = next((i for i in r.failed if i.name == "converges"), None)
        assert converges is not None, (point, [i.name for i in r.failed])
        assert any("did not converge" in f.message and "run operation" in f.message for f in converges.findings)


@pytest.mark.parametrize("phase", PHASES)
def test_replay_never_tools_fails_effects_exactly_where_the_deploy_was_pending(phase, scenario, baseline, tmp_path):
    """Re-running a never tool after a crash fails `effects-at-most-once` in exactly the cases that left it pending."""
    results = _cases(scenario, baseline, phase, ("replay-never-tools",), tmp_path)
    failed = {p for p, r in results.items() if not r.ok}
    assert failed == {p for p in results if p in PENDING_BASH}
    for point in failed:
        r = results[point]
        effects = next((i for i in r.failed if i.name == "effects-at-most-once"), None)
        assert effects is not None, (point, [i.name for i in r.failed])
        assert all(f.call == "call_deploy" for f in effects.findings)
        assert any("re-run by launch" in f.message or "happened 2 times" in f.message for f in effects.findings)


def test_starting_a_call_while_another_is_pending_fails_log_reduces_in_the_library(tmp_path):
    """The library case mixed-calls::toolStarted@after-sync#1 (the read pending) fails only log-reduces, naming both
    calls, when recovery starts the deploy ahead of the pending read, and passes on the correct agent."""
    mixed = load_scenario(SCENARIOS / "mixed-calls.toml")
    base = run_baseline(mixed, work_dir=tmp_path / "baseline")
    assert base.ok, base.result.to_json()
    schedule = ("toolStarted@after-sync#1",)
    bad = run_case(mixed, schedule, work_dir=tmp_path, baseline=base,
                   target=Target(bugs=("start-untouched-while-pending",)), keep="none")
    assert [i.name for i in bad.failed] == ["log-reduces"], [i.to_json() for i in bad.failed]
    [finding] = bad.failed[0].findings
    assert finding.call == "call_deploy_staging" and "'call_read_config' (index 0)" in finding.message
    assert "P7.1" in finding.message
    good = run_case(mixed, schedule, work_dir=tmp_path, baseline=base, target=Target(), keep="none")
    assert good.ok, [i.to_json() for i in good.failed]
