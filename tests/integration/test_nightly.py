"""A nightly you can trust, end to end: honest completion, history across runs, failures first, shard merges, SIGTERM.

Real `chaos campaign` processes (or the engine in-process) over the two small scenarios of
``tests/integration/campaign/``, with seconds-long budgets: a budget-limited nightly is incomplete (exit 4) and says
how much did not run, ``--resume --budget`` finishes it; four campaigns in one ``--out`` give a history whose index
shows green, new, fixed, and whose fourth run replays the known failures first; a merge holding a failure exits 1;
SIGTERM leaves a partial report, an intact journal and no traceback.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from chaos.campaign import CampaignOptions, run_campaign
from chaos.journal import read_lines
from chaos.report.history import FIXED, NEW, load_history
from chaos.target import Target

SCENARIOS = Path(__file__).resolve().parent / "campaign"
TOOL = str(SCENARIOS / "tool-answer.toml")
GREETING = str(SCENARIOS / "greeting.toml")
REPO = Path(__file__).resolve().parents[2]
STALE = ("stale-assistant-calls",)
# The cases the stale-assistantCalls switch fails in tool-answer (tests/integration/test_campaign.py).
STALE_FAILURES = {"tool-answer::assistant@after-sync#2", "tool-answer::operationFinished@before-write#1",
                  "tool-answer::toolStarted@after-sync#1+assistant@after-sync#2"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("killpoint-cache"))


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300, **kw)


def campaign(out: Path, name: str, cache: str, *, bugs=(), **options):
    options = {"workers": 2, "shrink": False, **options}
    opts = CampaignOptions(scenarios=[TOOL], out=str(out), name=name, cache=cache,
                           target=Target(bugs=tuple(bugs)).to_json(), **options)
    return run_campaign(opts)


def test_a_budget_limited_nightly_is_incomplete_and_resume_finishes_it_under_a_new_budget(tmp_path):
    """--nightly --budget 1s exits 4 saying how much did not run (summary, JUnit, page); --resume --budget 5m
    continues with the new budget to a complete campaign; a changed option on resume is refused in one line."""
    args = ["campaign", GREETING, "--nightly", "--out", str(tmp_path), "--name", "n", "--cache",
            str(tmp_path / "cache"), "-j", "2"]
    first = cli(*args, "--budget", "1s")
    directory = tmp_path / "n"
    assert first.returncode == 4, first.stdout + first.stderr
    assert first.stdout.startswith("INCOMPLETE: ") and "did not run" in first.stdout.splitlines()[0]
    assert f"continue with: chaos campaign --resume {directory}" in first.stdout
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["complete"] is False and summary["stopped"] == "budget"
    props = {p.get("name"): p.get("value") for p in ET.parse(directory / "junit.xml").iter("property")}
    assert props["complete"] == "false"
    page = (directory / "index.html").read_text()
    assert "banner pass" not in page and "Incomplete campaign" in page

    refused = cli("campaign", "--resume", str(directory), "--depth", "1")
    assert refused.returncode == 2 and refused.stderr.startswith("--resume: --depth cannot change")
    assert refused.stderr.count("\n") == 1

    second = cli("campaign", "--resume", str(directory), "--budget", "5m")
    assert second.returncode == 0, second.stdout + second.stderr
    result = json.loads((directory / "result.json").read_text())
    assert result["complete"] and result["cases"]["not_run"] == 0 and result["cases"]["done"] == 64
    sessions = json.loads((directory / "campaign.json").read_text())["sessions"]
    assert [s["budget"] for s in sessions] == [1.0, 300.0]


def test_history_shows_green_new_fixed_and_replays_known_failures_first(tmp_path, cache):
    """Four campaigns in one --out: green, then the stale-calls switch's failures as new, then fixed without it,
    and with it again those failing cases run first (the journal's first lines)."""
    campaign(tmp_path, "c1", cache)
    campaign(tmp_path, "c2", cache, bugs=STALE)
    history = load_history(tmp_path)
    one, two = history["runs"]
    assert one["ok"] and one["complete"] and not two["ok"]
    [new] = two["changes"][NEW]
    assert set(new["cases"]) == STALE_FAILURES
    page = (tmp_path / "index.html").read_text()
    assert '<span class="pill pass">pass</span>' in page and '<span class="pill fail">new</span>' in page

    campaign(tmp_path, "c3", cache)
    [fixed] = load_history(tmp_path)["runs"][2]["changes"][FIXED]
    assert fixed["key"] == new["key"] and set(fixed["rerun"]) == STALE_FAILURES
    assert '<span class="pill pass">fixed</span>' in (tmp_path / "index.html").read_text()

    fourth = campaign(tmp_path, "c4", cache, bugs=STALE, workers=1)
    assert set(fourth.replayed) == STALE_FAILURES
    first_lines = [r["id"] for r in read_lines(tmp_path / "c4" / "journal.jsonl")[0]][:len(STALE_FAILURES)]
    assert set(first_lines) == STALE_FAILURES  # one worker: journal order is dispatch order
    plain = campaign(tmp_path, "c5", cache, bugs=STALE, workers=1, replay=False)
    assert plain.replayed == [] and plain.records[0]["id"] not in STALE_FAILURES  # --no-replay: plan order

    shown = cli("report", "history", str(tmp_path))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "bundled on tool-answer: 5 run(s)" in shown.stdout and "  c3  PASS " in shown.stdout
    assert "STILL FAILING: " in shown.stdout  # c5 after c4: the same failure again
    slashed = cli("report", "history", f"{tmp_path}/")  # as a shell completes a directory: no "//" in the paths
    assert f"history: {tmp_path / 'history.json'}, {tmp_path / 'index.html'}" in slashed.stdout


BAD_WRITE = (SCENARIOS / "bad-write.toml").read_text()  # the crash-free run cannot pass (shared with the plugin tests)


def test_a_failing_baseline_says_why_in_the_campaign_summary(tmp_path, cache):
    """A campaign over a scenario whose crash-free run fails exits 1 and prints the tool's error result under it."""
    scenario = tmp_path / "bad-write.toml"
    scenario.write_text(BAD_WRITE)
    done = cli("campaign", str(scenario), "--out", str(tmp_path / "out"), "--name", "b", "--cache", cache, "-j", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("    tool write returned an error: Error: invalid arguments for tool 'write': missing required property "
            "'content'") in done.stdout


def test_a_merge_of_shards_holding_a_failure_exits_1_and_a_self_merge_is_refused(tmp_path, cache):
    """Two shards of the stale-calls campaign merge with exit 1; a shard merged with itself is refused (exit 2)
    unless --force."""
    campaign(tmp_path, "s1", cache, bugs=STALE, shard="1/2")
    campaign(tmp_path, "s2", cache, bugs=STALE, shard="2/2")
    merged = cli("report", "merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"))
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert json.loads((tmp_path / "m" / "summary.json").read_text())["cases"]["failed"] == 3
    twice = cli("report", "merge", str(tmp_path / "s1"), str(tmp_path / "s1"), "--out", str(tmp_path / "m2"))
    assert twice.returncode == 2 and "cannot be merged with itself" in twice.stderr and "--force" in twice.stderr
    forced = cli("report", "merge", str(tmp_path / "s1"), str(tmp_path / "s1"), "--out", str(tmp_path / "m3"),
                 "--force")
    assert forced.returncode in (1, 4), forced.stdout + forced.stderr  # merged: a failure, or only half the plan
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "index.html").write_text("a user's page")
    (tmp_path / "afile").write_text("x")
    for out, why in (("mine", "is not empty"), ("afile", "is not a directory")):
        refused = cli("report", "merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / out))
        assert refused.returncode == 2 and why in refused.stderr and "Traceback" not in refused.stderr
    assert (tmp_path / "mine" / "index.html").read_text() == "a user's page"  # nothing of the user's replaced


def stopped_campaign(directory: Path, cache: str, *signals: int, gap: float = 0.05):
    """Run `chaos campaign` (TOOL, every fault action) into ``directory`` with SIGINT at Ctrl-C's own handler
    (whatever this test runner was started with: a background job inherits SIGINT ignored); once three cases are
    journalled, send ``signals`` ``gap`` seconds apart. Returns (exit status, stdout, stderr)."""
    args = ["campaign", TOOL, "--faults", "all", "--out", str(directory.parent), "--name", directory.name,
            "--cache", cache, "-j", "2"]
    start = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "sys.argv = ['chaos', *sys.argv[1:]]; runpy.run_module('chaos.cli', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", start, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(read_lines(directory / "journal.jsonl")[0]) < 3:
        time.sleep(0.05)
    for n, sig in enumerate(signals):
        if n:
            time.sleep(gap)
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stdout, stderr


def dangling(cases: Path) -> list[str]:
    """Links in a campaign's cases/ to a scratch directory that is gone (a case cut short left its name)."""
    return [p.name for p in (cases.iterdir() if cases.is_dir() else ()) if p.is_symlink() and not p.exists()]


def test_sigterm_stops_a_campaign_like_sigint(tmp_path, cache):
    """SIGTERM to a running `chaos campaign` gives exit 143, a partial report, an intact journal, no traceback."""
    status, stdout, stderr = stopped_campaign(tmp_path / "t", cache, signal.SIGTERM)
    journal = tmp_path / "t" / "journal.jsonl"
    assert status == 143, stdout + stderr
    assert "Traceback" not in stderr and "Traceback" not in stdout
    records, end = read_lines(journal)
    assert journal.read_bytes()[end:] == b"" and 3 <= len(records) < 81  # whole lines only, and not all ran
    summary = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert summary["complete"] is False and summary["stopped"] == "SIGTERM"
    assert summary["cases"]["total"] == len(records)
    assert (tmp_path / "t" / "index.html").is_file() and stdout.startswith("INCOMPLETE: ")
    assert not dangling(tmp_path / "t" / "cases")  # the cases cut short by the stop leave no link to a gone directory


def test_a_sigint_delivered_twice_still_writes_the_partial_report(tmp_path, cache):
    """Two SIGINTs 50 ms apart (`timeout -s INT` signals the command, then its process group) are one interrupt:
    exit 130, the partial report of this session, no traceback from the campaign or its workers."""
    status, stdout, stderr = stopped_campaign(tmp_path / "i", cache, signal.SIGINT, signal.SIGINT)
    assert status == 130, stdout + stderr
    assert "Traceback" not in stderr and "Traceback" not in stdout and "Aborted" not in stderr
    records, _ = read_lines(tmp_path / "i" / "journal.jsonl")
    summary = json.loads((tmp_path / "i" / "summary.json").read_text())
    assert summary["complete"] is False and summary["stopped"] == "SIGINT"
    assert summary["cases"]["total"] == len(records) and stdout.startswith("INCOMPLETE: ")
    assert not dangling(tmp_path / "i" / "cases")


def test_version_and_short_help():
    """`chaos --version` names the version; `-h` is --help, for the group and for a command."""
    version = cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("chaos, version ")
    assert cli("-h").stdout == cli("--help").stdout and "campaign" in cli("-h").stdout
    assert cli("campaign", "-h").returncode == 0 and "--no-replay" in cli("campaign", "-h").stdout


def test_a_random_campaign_is_complete_when_its_duration_is_reached(tmp_path, cache):
    """`--mode random --duration 3s` that runs until its duration ends is complete and exits 0 (no case list)."""
    done = cli("campaign", GREETING, "--mode", "random", "--seed", "7", "--duration", "3s", "--out", str(tmp_path),
               "--name", "r", "--cache", cache, "-j", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["complete"] and result["stopped"] == "duration" and result["cases"]["done"] > 0
    assert "INCOMPLETE" not in done.stdout


def test_a_random_case_list_that_repeats_a_schedule_runs_it_once_and_is_complete(tmp_path, cache):
    """A seeded stream of 100 draws with repeated schedules plans and runs each distinct case once: complete, exit 0."""
    done = cli("campaign", GREETING, "--mode", "random", "--seed", "7", "--cases", "100", "--out", str(tmp_path),
               "--name", "r", "--cache", cache, "-j", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["complete"] and result["cases"]["planned"] == result["cases"]["done"] < 100
    repeats = 100 - result["cases"]["planned"]
    assert f"; {repeats} of the 100 seeded draws repeated an earlier schedule (each case runs once)" in done.stderr


def test_version_of_a_tree_that_was_never_installed(monkeypatch):
    """Without installed metadata `--version` says so and exits 0 (it was an internal error)."""
    from importlib import metadata

    from click.testing import CliRunner

    from chaos.cli import main

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and "not installed" in result.output
