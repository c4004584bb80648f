"""The framework targets of scenarios/frameworks/ under a real depth-1 campaign, in their prepared environments.

One campaign over the whole folder (as `chaos campaign scenarios/frameworks/` runs it); each scenario is then
checked on its own: it ran (or is skipped here with the reason its environment is missing: `.ci/run` prepares them
with `chaos targets prepare`), it has at least six kill points, its verdict is what the scenario declares — every
case holds, or its failures are the expected failure it pins — and the findings table of docs/track-record.md names
exactly the scenarios that declare an expected failure.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.scenario import load_scenarios

REPO = Path(__file__).resolve().parent.parent.parent
FRAMEWORKS = REPO / "scenarios" / "frameworks"
SCENARIOS, PROBLEMS = load_scenarios([FRAMEWORKS])
BY_NAME = {s.name: s for s in SCENARIOS}


def test_framework_scenarios_are_valid():
    """Every framework scenario file loads (its [target] table included)."""
    assert PROBLEMS == []
    assert len(SCENARIOS) >= 7


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """`chaos campaign scenarios/frameworks/` once, for every scenario's test."""
    out = tmp_path_factory.mktemp("frameworks")
    proc = subprocess.run([sys.executable, "-m", "chaos", "campaign", str(FRAMEWORKS), "--out", str(out),
                           "--name", "frameworks", "--case-timeout", "120"],
                          capture_output=True, text=True, timeout=1800)
    directory = out / "frameworks"
    assert (directory / "result.json").is_file(), proc.stdout + proc.stderr
    return proc, json.loads((directory / "result.json").read_text()), json.loads(
        (directory / "report.json").read_text())


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_framework_target(campaign, name):
    """The target ran at least six kill points, and its verdict is the one its scenario declares."""
    proc, result, report = campaign
    baseline = result["baselines"].get(name) or {}
    if baseline.get("skipped"):
        pytest.skip(f"{name}: {baseline['skipped']}")
    assert baseline.get("ok"), f"{name}: baseline: {baseline.get('problems')}"
    cases = [c for c in report["cases"] if c["scenario"] == name]
    kills = {c["id"] for c in cases if c.get("origin") == "exhaustive"}
    assert len(kills) >= 6, f"{name}: {len(kills)} depth-1 kill points (fewer than six)"
    statuses = {c["status"] for c in cases}
    assert "fail" not in statuses and "error" not in statuses, [
        (c["id"], c["failures"][:1], c.get("detail")) for c in cases if c["status"] in ("fail", "error")]
    line = next((l for l in proc.stdout.splitlines() if l.strip().startswith(f"target {name}:")), "")
    assert "cases/s" in line, proc.stdout[-2000:]
    if BY_NAME[name].expect_failure and "timing-dependent" not in BY_NAME[name].tags:
        # A timing-dependent finding may not show in one campaign: the campaign says UNEXPECTED PASS for a person;
        # a deterministic one must show every time.
        assert "expected-failure" in statuses, f"{name} declares an expected failure, but every case held"


def test_findings_table_matches_the_expected_failures():
    """docs/track-record.md's "Found in the wild" table lists exactly the scenarios that pin an expected failure."""
    text = (REPO / "docs" / "track-record.md").read_text()
    section = text.split("## Found in the wild", 1)[1].split("\n## ", 1)[0]
    rows = "\n".join(line for line in section.splitlines() if line.startswith("| ") and line[2:3].isdigit())
    named = set(re.findall(r"scenarios/frameworks/[^ `]*?/([a-z0-9.-]+)\.toml", rows))
    declared = {s.source.stem for s in SCENARIOS if s.expect_failure}
    assert named == declared
