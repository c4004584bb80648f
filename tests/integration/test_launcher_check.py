"""`chaos campaign --launcher-check` with real processes: the launchers agree, and a zygote that differs is caught."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.campaign import CampaignOptions
from chaos.launchercheck import run_check, sample
from chaos.target import BUNDLED_PRELOAD, Target

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "single-read.toml"


def test_sample_keeps_one_case_per_action_and_per_kill_point_kind():
    """The sample is the first case per (scenario, action) and per (scenario, FACT@PHASE), in list order."""
    ids = ["s::stepAttempt@after-sync#1", "s::stepAttempt@after-sync#2", "s::int:stepAttempt@after-sync#1",
           "s::toolStarted@before-write#1", "t::stepAttempt@after-sync#1"]
    assert [cid for cid, _, _ in sample(ids)] == ["s::stepAttempt@after-sync#1", "s::int:stepAttempt@after-sync#1",
                                                  "s::toolStarted@before-write#1", "t::stepAttempt@after-sync#1"]


@pytest.mark.slow
def test_the_launchers_agree_on_a_scenario(tmp_path):
    """Every sampled case has the same verdict and transcript under the zygote and under exec."""
    options = CampaignOptions(scenarios=[str(SCENARIO)], cache=str(tmp_path / "cache"), workers=2)
    check = run_check(options, say=lambda line: None)
    assert check.ok, check.lines()
    assert set(check.actions()) == {"kill", "int", "ioerror", "dresume", "torn", "powerloss"}


@pytest.mark.slow
def test_a_zygote_whose_preload_changes_the_agent_is_caught(tmp_path, monkeypatch):
    """A preload with a side effect makes forked agents differ from exec'd ones: the check fails and says where."""
    monkeypatch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    target = Target(preload=(*BUNDLED_PRELOAD, "tests.agents.bad_preload"))
    options = CampaignOptions(scenarios=[str(SCENARIO)], cache=str(tmp_path / "cache"), workers=2,
                              target=target.to_json())
    check = run_check(options, say=lambda line: None)
    assert not check.ok
    # The forked agents write another configuration digest than the target describes (by exec): the crash-free
    # baseline under the zygote already fails its writer obligations, so no case of it is trusted.
    assert any("BASELINE single-read" in line and "log-reduces" in line for line in check.lines())


def test_the_cli_exits_1_when_the_launchers_differ_and_0_when_they_agree(tmp_path):
    """The command line prints the summary and exits by the result."""
    proc = subprocess.run([sys.executable, "-m", "chaos", "campaign", str(REPO / "tests" / "integration" /
                           "campaign" / "greeting.toml"), "--launcher-check", "--cache", str(tmp_path / "c")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 differ, 0 error(s)" in proc.stdout
