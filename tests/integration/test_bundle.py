"""Repro bundles of a real failing case, end to end: the stale-assistantCalls bug in a read-then-answer run.

The real agent runs with ``AGENT_BUGS=stale-assistant-calls`` and is SIGKILLed after the final answer's
transaction (``assistant@after-sync#2``): its recovery picks up the previous turn's tool call and the session never
converges. From that case: the bundle's layout and provenance, ``repro.sh`` failing the same way, ``chaos repro``
holding without the bug, ``chaos export`` writing a regression scenario that validates, fails under the bug and
passes without it; and a sharded campaign rendered and merged into reports with bundles
(``chaos report render`` / ``merge``).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.bundle import load_bundle, write_bundle
from chaos.case import run_baseline, run_case
from chaos.target import Target
from chaos.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "read-then-answer.toml"
BUG = "stale-assistant-calls"
KILL = "assistant@after-sync#2"
TIMEOUT = 180  # seconds for one CLI invocation (a few real cases); a hang fails the test instead of the suite

pytestmark = pytest.mark.slow


def chaos(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the chaos CLI as a user would (a fresh interpreter)."""
    return subprocess.run([sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=TIMEOUT, env={**os.environ, "AGENT_BUGS": ""})


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A bundle of read-then-answer::assistant@after-sync#2 failing under stale-assistant-calls."""
    work = tmp_path_factory.mktemp("cases")
    scenario = load_scenario(SCENARIO)
    baseline = run_baseline(scenario, work_dir=work, keep="none")
    assert baseline.ok, baseline.result
    target = Target(bugs=(BUG,))
    result = run_case(scenario, [KILL], work_dir=work, target=target, baseline=baseline, keep="all")
    assert result.status == "fail" and "converges" in [r.name for r in result.failed], result
    dest = tmp_path_factory.mktemp("report") / "failures" / "stale"
    return write_bundle(dest, case_dir=result.case_dir, scenario_file=SCENARIO, case_id=result.case_id,
                        schedule=result.schedule, failures=result.failed, target=target, campaign="test-campaign",
                        seed=1234, command_line=["chaos", "campaign", "--agent-bugs", BUG])


def test_bundle_layout_and_provenance(bundle: Path):
    """The bundle holds the scenario, schedule, the whole target and its env, provenance, logs, requests, witnesses,
    stderr, and the first divergence of the defective planner."""
    data = json.loads((bundle / "bundle.json").read_text())
    assert data["case"] == f"read-then-answer::{KILL}" and data["schedule"] == [KILL]
    assert "converges" in data["invariants"]
    assert (bundle / "scenario.toml").read_bytes() == SCENARIO.read_bytes()
    assert data["target"]["command"] == ["{python}", "-m", "agent"] and data["target"]["bugs"] == [BUG]
    assert data["target"]["invariants"] and data["target"]["launch"] == {}  # the whole target, defaults included
    assert data["environment"]["AGENT_BUGS"] == BUG
    assert data["divergence"]["reference_rule"] == "P5.2" and "startTool read#0" in data["divergence"]["signature"]
    readme = (bundle / "README.md").read_text()
    assert "First divergence" in readme and f"`AGENT_BUGS={BUG}`" in readme
    prov = data["provenance"]
    assert prov["versions"]["python"] == platform.python_version()
    assert prov["versions"]["killpoint"]
    assert re.fullmatch(r"[0-9a-f]{40}", prov["versions"]["git"]["commit"])  # the tests run from a checkout
    assert (prov["seed"], prov["campaign"], prov["command_line"]) == (1234, "test-campaign",
                                                                      ["chaos", "campaign", "--agent-bugs", BUG])
    run = json.loads((bundle / "caserun.json").read_text())
    kill = run["faults"][0]
    assert (bundle / "logs" / "kill-01-kill.jsonl").stat().st_size == kill["snapshot_size"] > 0
    assert (bundle / "logs" / "final.jsonl").read_bytes() == Path(run["session"]).read_bytes()
    assert len((bundle / "requests.jsonl").read_text().splitlines()) >= 2
    assert (bundle / "witness.log").is_file()
    assert "agent: plan " in (bundle / "agent" / "01-resume.stderr").read_text()
    assert (bundle / "workspace" / "README.md").is_file()
    assert os.access(bundle / "repro.sh", os.X_OK)
    readme = (bundle / "README.md").read_text()
    assert "**converges**" in readme and "./repro.sh" in readme and "chaos export . scenarios/regressions/" in readme


def test_repro_sh_fails_the_same_way(bundle: Path, tmp_path: Path):
    """repro.sh, run from anywhere, re-runs the case and exits 1 naming the recorded invariant as failing again."""
    proc = subprocess.run([str(bundle / "repro.sh")], capture_output=True, text=True, cwd=tmp_path, timeout=TIMEOUT,
                          env={**os.environ, "AGENT_BUGS": ""})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"REPRODUCED: .*converges.* fails again", proc.stdout)
    assert "Traceback" not in proc.stderr


def test_chaos_repro_holds_without_the_bug(bundle: Path, tmp_path: Path):
    """The same bundle with AGENT_BUGS removed re-runs to every invariant holding: exit 0."""
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    data = json.loads((copy / "bundle.json").read_text())
    data["target"]["bugs"] = []
    (copy / "bundle.json").write_text(json.dumps(data))
    proc = chaos("repro", str(copy))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NOT REPRODUCED" in proc.stdout


def test_chaos_repro_asks_the_bundles_planner_command_first(bundle: Path, tmp_path: Path):
    """A bundle whose planner command is not where it ran (a bundle carries no planner) is one line and exit 2
    before any case, not a case that fails differently."""
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    data = json.loads((copy / "bundle.json").read_text())
    gone = tmp_path / "elsewhere"
    data["target"].update(planner_command="python3 planner.py", planner_dir=str(gone))
    (copy / "bundle.json").write_text(json.dumps(data))
    proc = chaos("repro", str(copy))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [f"{copy}: planner command 'python3 planner.py' (run in {gone}): its directory "
                                        "does not exist; no case was run (--planner-dir DIR: where it is here)"]
    # --planner-dir says where the command's files are on this machine: the case runs (and fails again)
    here = tmp_path / "here"
    here.mkdir()
    (here / "planner.py").write_text("import runpy, sys\nsys.argv = ['agent', *sys.argv[1:]]\n"
                                     "runpy.run_module('agent', run_name='__main__')\n")
    proc = chaos("repro", str(copy), "--planner-dir", str(here))
    assert proc.returncode == 1 and "REPRODUCED" in proc.stdout, proc.stdout + proc.stderr
    assert f"in {here})" in proc.stdout  # the agent's own line: the command ran where it was pointed
    assert f"\nplanner command runs in {here}, within 30 s\n" in proc.stdout  # said before the case runs


def test_chaos_repro_planner_dir_needs_a_planner_and_a_directory(bundle: Path, tmp_path: Path):
    """--planner-dir on a bundle without a planner command, or naming no directory, is one line and exit 2."""
    proc = chaos("repro", str(bundle), "--planner-dir", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"{bundle}: --planner-dir: this bundle's target has no planner command"], proc.stderr
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    data = json.loads((copy / "bundle.json").read_text())
    data["target"].update(planner_command="python3 planner.py", planner_dir=str(tmp_path))
    (copy / "bundle.json").write_text(json.dumps(data))
    proc = chaos("repro", str(copy), "--planner-dir", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"{copy}: --planner-dir {tmp_path / 'nowhere'}: not a directory"], proc.stderr


def test_export_is_valid_and_fails_only_under_the_bug(bundle: Path, tmp_path: Path):
    """The exported regression validates, fails with the bug on its pinned schedule, and passes without it."""
    regressions = tmp_path / "regressions"
    proc = chaos("export", str(bundle), str(regressions))
    assert proc.returncode == 0, proc.stderr
    (path,) = regressions.glob("*.toml")
    assert chaos("validate", str(regressions)).returncode == 0
    exported = load_scenario(path)
    original = load_scenario(SCENARIO)
    assert [s.faults for s in exported.schedules] == [[KILL]]
    assert "regression" in exported.tags and exported.name != original.name
    assert exported.runs == original.runs and exported.expect == original.expect
    assert exported.workspace == original.workspace
    reports = tmp_path / "reports"
    with_bug = chaos("run", str(path), "--kill", KILL, "--agent-bugs", BUG, "--reports", str(reports))
    assert with_bug.returncode == 1, with_bug.stdout + with_bug.stderr
    without = chaos("run", str(path), "--kill", KILL, "--reports", str(reports))
    assert without.returncode == 0, without.stdout + without.stderr


def test_export_does_not_overwrite_an_edited_regression(bundle: Path, tmp_path: Path):
    """Exporting twice is harmless; a regression edited since is replaced only with --force."""
    assert chaos("export", str(bundle), str(tmp_path)).returncode == 0
    assert chaos("export", str(bundle), str(tmp_path)).returncode == 0
    (path,) = tmp_path.glob("*.toml")
    path.write_text(path.read_text() + "# hand edit\n")
    proc = chaos("export", str(bundle), str(tmp_path))
    assert proc.returncode == 2 and "exists with other content" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert chaos("export", "--force", str(bundle), str(tmp_path)).returncode == 0


def test_bad_paths_give_one_line(tmp_path: Path):
    """repro, export and report render on something that is not a bundle / campaign print one line and exit 2."""
    for args in (("repro", str(tmp_path / "missing")), ("export", str(tmp_path), str(tmp_path / "out")),
                 ("report", "render", str(tmp_path))):
        proc = chaos(*args)
        assert proc.returncode == 2, proc
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_campaign_console_names_each_findings_command(tmp_path: Path):
    """`chaos campaign` prints, under each finding, the one command that re-runs it, and that command reproduces it."""
    proc = chaos("campaign", str(SCENARIO), "--agent-bugs", BUG, "--shard", "14/16", "--out", "reports",
                 "--name", "c", "-j", "1", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  FAIL ") and line.endswith(f"::{KILL}"))
    assert lines[at + 1].startswith("    reproduce: sh reports/c/failures/"), lines[at:at + 2]
    command = lines[at + 1].removeprefix("    reproduce: ")
    again = subprocess.run(command, shell=True, capture_output=True, text=True, cwd=tmp_path, timeout=TIMEOUT,
                           env={**os.environ, "AGENT_BUGS": ""})
    assert again.returncode == 1 and "REPRODUCED" in again.stdout, again.stdout + again.stderr


def _campaign(out: Path, shard: str) -> Path:
    from chaos.campaign import CampaignOptions, run_campaign

    options = CampaignOptions(scenarios=[str(SCENARIO)], target=Target(bugs=(BUG,)).to_json(), name=f"shard-{shard[:2]}",
                              out=str(out), workers=2, shard=shard, shrink_calls=8)
    run_campaign(options, command=["chaos", "campaign", "--agent-bugs", BUG, "--shard", shard],
                 reporter=_Quiet())
    return out / options.name


class _Quiet:
    """A campaign reporter that prints nothing (the test asserts on the files)."""

    def message(self, text): pass
    def start(self, total, done, failures, what="cases"): pass
    def job(self): pass
    def case(self, record): pass
    def stop(self): pass


def test_campaign_render_and_merge_with_bundles(tmp_path: Path):
    """Two shards of a campaign under the bug render reports with a bundle per failure; merged, both appear."""
    # The exhaustive list has 16 first faults in read-then-answer; with 16 shards each shard runs one of them.
    # Shard 14 holds assistant@after-sync#2 (the kill after the final answer), shard 1 runStarted@before-write#1.
    first = _campaign(tmp_path / "reports", "14/16")
    second = _campaign(tmp_path / "reports", "1/16")

    proc = chaos("report", "render", str(first))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # one reproduce command per finding, from where chaos ran: the bundle's repro.sh (run below)
    assert (f"reproduce read-then-answer::{KILL}: sh {first}/failures/read-then-answer_assistant_after-sync_2/"
            "repro.sh") in proc.stdout.splitlines()
    summary = json.loads((first / "summary.json").read_text())
    assert summary["cases"]["failed"] == 1 and summary["failures"]["byInvariant"].get("converges") == 1
    (case,) = summary["failures"]["cases"]
    assert case["case"] == f"read-then-answer::{KILL}"
    bundle = first / case["bundle"]
    data = load_bundle(bundle).data
    assert data["original_case"] == case["case"] and data["schedule"] == (case["minimal"] or case["schedule"])
    page = (first / "index.html").read_text()
    assert '<svg class="timeline"' in page and f"{case['bundle']}/repro.sh" in page
    assert "of the minimal schedule" in page or (case["minimal"] or [KILL]) == [KILL]
    repro = subprocess.run([str(bundle / "repro.sh")], capture_output=True, text=True, timeout=TIMEOUT,
                           env={**os.environ, "AGENT_BUGS": ""})
    assert repro.returncode == 1, repro.stdout + repro.stderr

    merged = tmp_path / "merged"
    proc = chaos("report", "merge", str(first), str(second), "--out", str(merged))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the merged campaign holds a failure: a red final CI job
    summary = json.loads((merged / "summary.json").read_text())
    # (Today's stale-assistant-calls switch also breaks the crash-free run, so shard 1 fails too; an agent whose
    # switch acts on recovery only would pass it. Either way the merged report holds both cases.)
    failed = summary["cases"]["failed"]
    assert summary["cases"]["total"] == 2 and failed >= 1
    assert sorted(summary["shards"]) == sorted([str(first), str(second)])
    assert f"read-then-answer::{KILL}" in [e["case"] for e in summary["failures"]["cases"]]
    for entry in summary["failures"]["cases"]:
        assert (merged / entry["bundle"] / "repro.sh").is_file()
    assert f"reproduce read-then-answer::{KILL}: sh {merged}/failures/" in proc.stdout
    junit = (merged / "junit.xml").read_text()
    assert junit.count("<testcase ") == 2 and junit.count("<failure ") == failed
