"""End-to-end tests of ``chaos campaign``: the real agent, real worker processes, real SIGKILL of the harness itself.

Scenarios are the two small files in ``tests/integration/campaign/`` (so the case counts here do not move when the
bundled library grows); the kill-point cache is shared by the module's tests, as it is by the shards of a campaign.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from chaos.campaign import CampaignOptions, merge_journals, run_campaign, write_merged
from chaos.target import Target, load_target
from chaos.journal import read_journal, read_lines
from chaos.schedules import spec_from_id
from chaos.workers import WorkerPool
from tests.agents import HERE as AGENTS

SCENARIOS = Path(__file__).resolve().parent / "campaign"
TOOL = str(SCENARIOS / "tool-answer.toml")
GREETING = str(SCENARIOS / "greeting.toml")
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("killpoint-cache"))


def campaign(out: Path, name: str, cache: str, *scenarios: str, bugs=(), **options):
    opts = CampaignOptions(scenarios=list(scenarios), out=str(out), name=name, cache=cache, workers=2,
                           target=Target(bugs=tuple(bugs)).to_json(), **options)
    return run_campaign(opts)


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300, **kw)


def lingering(marker: str) -> list[str]:
    """Live processes whose command line mentions ``marker`` (a test's private directory), as readable lines."""
    out = []
    for p in psutil.process_iter(["cmdline", "status", "ppid"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and any(marker in a for a in p.info["cmdline"] or []):
                out.append(f"{p.pid} (parent {p.info['ppid']}, {p.info['status']}): {' '.join(p.info['cmdline'])}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


class TestExhaustive:
    def test_correct_agent_passes_with_full_coverage(self, tmp_path, cache):
        """Every kill point of the baseline is reached, every case holds, and the journal has one line per case."""
        result = campaign(tmp_path, "ok", cache, TOOL)
        assert result.cases["planned"] == 17 and result.cases["pass"] == 17 and result.ok and result.complete
        assert result.failures == [] and result.kills == 18 and result.restarts >= 18
        points = result.coverage["points"]
        assert points["toolStarted@after-sync"] == {"reached": 1, "total": 1}
        assert all(v["reached"] == v["total"] > 0 for v in points.values()) and len(points) == 16  # 8 facts x 2
        assert {"P7.2.4", "P5.2"} <= set(result.coverage["rules"])  # untouched read; settled final answer
        assert len(read_lines(tmp_path / "ok" / "journal.jsonl")[0]) == 17
        saved = json.loads((tmp_path / "ok" / "result.json").read_text())
        assert saved["cases"] == result.cases and saved["coverage"] == result.coverage
        assert result.baselines["tool-answer"]["ok"] and result.versions["python"]

    def test_stale_assistant_calls_is_found_and_shrunk_to_one_kill(self, tmp_path, cache):
        """Under the stale-calls bug exactly the kills in its window fail, each shrunk to a single kill."""
        result = campaign(tmp_path, "stale", cache, TOOL, bugs=("stale-assistant-calls",))
        records = read_journal(tmp_path / "stale" / "journal.jsonl")
        failed = {cid: r for cid, r in records.items() if r["status"] == "fail"}
        assert set(failed) == {"tool-answer::assistant@after-sync#2", "tool-answer::operationFinished@before-write#1",
                               "tool-answer::toolStarted@after-sync#1+assistant@after-sync#2"}
        assert result.cases["fail"] == 3 and result.cases["pass"] == 14 and not result.ok
        for record in failed.values():
            assert record["rerun"]["status"] == "fail"
            minimal = spec_from_id(record["minimal_id"])
            assert len(minimal.faults) == 1 and minimal.faults[0].action == "kill"
            assert record["shrink"]["invariant"] in {f["invariant"] for f in record["failures"]}
            assert (tmp_path / "stale" / record["minimal_case_dir"]).is_dir()
        pinned = failed["tool-answer::toolStarted@after-sync#1+assistant@after-sync#2"]
        assert pinned["minimal"] == ["assistant@after-sync#2"] and pinned["shrink"]["steps"]
        # The three failures are one finding: the same wrong recovery decision (first divergence) in each.
        [group] = result.failures
        assert (group["action"], group["fact"], group["count"]) == ("divergence", "P5.2", 3)
        assert group["divergence"] == ("reference P5.2 finish completed; implementation startTool read#0, not a call "
                                       "of the current assistant message (it has none)")
        assert sum(g["count"] for g in result.failures if g["invariant"] == result.failures[0]["invariant"]) >= 2


class TestBorrowedPool:
    def test_campaigns_one_after_another_share_the_workers(self, tmp_path, cache):
        """Campaigns on one borrowed pool (chaos mutants) each get their own target, scenarios and directory on
        the same worker processes, and the pool is left running for the next one; closing it leaves nothing."""
        pool = WorkerPool(None, 2)
        try:
            buggy = run_campaign(CampaignOptions(scenarios=[TOOL], out=str(tmp_path), name="stale", cache=cache,
                                                 workers=2, target=Target(bugs=("stale-assistant-calls",)).to_json()),
                                 pool=pool)
            pids = sorted(w.process.pid for w in pool.workers)
            correct = run_campaign(CampaignOptions(scenarios=[TOOL, GREETING], out=str(tmp_path), name="ok",
                                                   cache=cache, workers=1), pool=pool)
            assert buggy.cases["fail"] == 3 and not buggy.ok  # the switch reached the first campaign's agents
            # ... and not the second's: its target replaced the first one's in the workers (their zygotes stay)
            assert correct.ok and correct.cases["pass"] == correct.cases["planned"] > 17
            assert sorted(w.process.pid for w in pool.workers) == pids and len(pids) == 2
            assert all(w.process.is_alive() for w in pool.workers)
            ids = set(read_journal(tmp_path / "ok" / "journal.jsonl"))
            assert {i.split("::")[0] for i in ids} == {"tool-answer", "greeting"}
        finally:
            pool.close()
        assert lingering(str(tmp_path)) == []

    def test_a_worker_that_died_while_idle_is_replaced(self, tmp_path, cache):
        """A worker SIGKILLed between two campaigns on one pool (the OOM killer, say) is dropped and replaced: the
        next campaign runs every case, with no error and no traceback."""
        pool = WorkerPool(None, 2)
        try:
            first = run_campaign(CampaignOptions(scenarios=[GREETING], out=str(tmp_path), name="one", cache=cache,
                                                 workers=2), pool=pool)
            victim = pool.workers[0].process
            victim.kill()
            victim.join(5)
            second = run_campaign(CampaignOptions(scenarios=[GREETING], out=str(tmp_path), name="two", cache=cache,
                                                  workers=2), pool=pool)
            assert first.ok and second.ok and second.cases["pass"] == second.cases["planned"] > 0
            assert second.cases["error"] == 0 and victim.pid not in [w.process.pid for w in pool.workers]
        finally:
            pool.close()
        assert lingering(str(tmp_path)) == []


class TestResume:
    def test_a_resume_asks_the_stored_planner_command_again(self, tmp_path, cache):
        """A campaign's planner command runs where it was given; once its script is gone, --resume refuses in one
        line (exit 2) instead of failing every case left."""
        (tmp_path / "planner.py").write_text("import runpy, sys\nsys.argv = ['agent', *sys.argv[1:]]\n"
                                             "runpy.run_module('agent', run_name='__main__')\n")
        args = [sys.executable, "-m", "chaos.cli", "campaign", GREETING, "--out", str(tmp_path), "--name", "p",
                "--cache", cache, "-j", "2"]
        first = subprocess.run([*args, "--planner-cmd", f"{sys.executable} planner.py"], capture_output=True,
                               text=True, cwd=tmp_path, timeout=300, env={**os.environ, "AGENT_PLANNER_TIMEOUT": "7"})
        assert first.returncode == 0, first.stdout + first.stderr
        stored = json.loads((tmp_path / "p" / "campaign.json").read_text())["options"]["target"]
        assert (stored["planner_dir"], stored["planner_timeout"]) == (str(tmp_path), 7.0)  # recorded, not the shell's
        (tmp_path / "planner.py").unlink()
        # Another AGENT_PLANNER_TIMEOUT in the resuming shell is no flag: the stored one rules, no conflict is said.
        again = subprocess.run([sys.executable, "-m", "chaos.cli", "campaign", "--resume", str(tmp_path / "p")],
                               capture_output=True, text=True, cwd=REPO, timeout=300,
                               env={**os.environ, "AGENT_PLANNER_TIMEOUT": "9"})
        assert again.returncode == 2, again.stdout + again.stderr
        # The planner typed again where it was given: no conflict, the stored timeout belongs to it.
        typed = subprocess.run([sys.executable, "-m", "chaos.cli", "campaign", "--resume", str(tmp_path / "p"),
                                "--planner-cmd", f"{sys.executable} planner.py"], capture_output=True, text=True,
                               cwd=tmp_path, timeout=300, env={**os.environ, "AGENT_PLANNER_TIMEOUT": "9"})
        assert typed.returncode == 2 and "gave no plan" in typed.stderr and "cannot change" not in typed.stderr
        [line] = again.stderr.splitlines()
        assert line.startswith(f"planner command '{sys.executable} planner.py' (run in {tmp_path}) gave no plan")
        assert line.endswith("no case was run")

    def test_sigkill_of_the_campaign_then_resume(self, tmp_path, cache):
        """A campaign SIGKILLed half-way resumes to the same total with no case run twice and nothing left behind."""
        args = ["campaign", TOOL, "--out", str(tmp_path), "--name", "r", "--cache", cache, "-j", "2"]
        journal = tmp_path / "r" / "journal.jsonl"
        proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(read_lines(journal)[0]) < 5:
            time.sleep(0.05)
        tree = psutil.Process(proc.pid).children(recursive=True)  # forkserver, workers, agents of this moment
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before = read_lines(journal)[0]
        assert proc.returncode == -signal.SIGKILL and 5 <= len(before) < 17
        # Workers die with their forkserver (PR_SET_PDEATHSIG); an agent at a barrier loses its channel and exits 7.
        _, alive = psutil.wait_procs(tree, timeout=15)
        assert alive == []
        deadline = time.monotonic() + 15  # agents a worker started after the snapshot end by themselves too
        while lingering(str(tmp_path / "r")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lingering(str(tmp_path / "r")) == []
        done = cli("campaign", "--resume", str(tmp_path / "r"))
        assert done.returncode == 0, done.stdout + done.stderr
        after = read_lines(journal)[0]
        ids = [r["id"] for r in after]
        assert len(ids) == len(set(ids)) == 17
        assert after[: len(before)] == before  # finished cases were neither redone nor lost
        result = json.loads((tmp_path / "r" / "result.json").read_text())
        assert result["cases"]["done"] == result["cases"]["planned"] == 17 and result["complete"]
        assert lingering(str(tmp_path / "r")) == []


    def test_a_resume_runs_again_a_case_whose_worker_died(self, tmp_path, cache):
        """A case journalled as an error because its worker process died (an OOM kill) is not done: --resume runs
        it again, and the campaign ends green once it passes."""
        first = campaign(tmp_path, "w", cache, GREETING)
        journal = tmp_path / "w" / "journal.jsonl"
        lines = journal.read_text().splitlines()
        victim = json.loads(lines[2])
        died = {**victim, "status": "error", "verdict": "died", "detail": "worker process died (exit -9)",
                "failures": [], "harness_error": "worker process died (exit -9) while running case"}
        journal.write_text("\n".join([*lines[:2], *lines[3:], json.dumps(died)]) + "\n")  # as the first session saw it
        assert first.ok and read_journal(journal)[victim["id"]]["status"] == "error"
        done = cli("campaign", "--resume", str(tmp_path / "w"))
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{first.cases['planned']} cases ({first.cases['planned'] - 1} already done)" in done.stderr
        assert read_journal(journal)[victim["id"]]["status"] == "pass"
        result = json.loads((tmp_path / "w" / "result.json").read_text())
        assert result["cases"]["error"] == 0 and result["complete"]


class TestShards:
    def test_two_shards_merged_equal_the_unsharded_case_set(self, tmp_path, cache):
        """Shards 1/2 and 2/2 are disjoint and, merged, hold exactly the unsharded campaign's cases."""
        everything = run_campaign(CampaignOptions(scenarios=[GREETING], out=str(tmp_path), cache=cache),
                                  list_only=True)
        one = campaign(tmp_path, "s1", cache, GREETING, shard="1/2")
        two = campaign(tmp_path, "s2", cache, GREETING, shard="2/2")
        ids1 = set(read_journal(tmp_path / "s1" / "journal.jsonl"))
        ids2 = set(read_journal(tmp_path / "s2" / "journal.jsonl"))
        assert ids1 and ids2 and not ids1 & ids2
        merged = merge_journals([tmp_path / "s1", tmp_path / "s2"])
        assert {r["id"] for r in merged.records} == ids1 | ids2 == set(everything)
        assert merged.cases["planned"] == one.cases["planned"] + two.cases["planned"] == len(everything) == 8
        assert merged.coverage["points"]["assistant@after-sync"] == {"reached": 1, "total": 1}
        written = write_merged([tmp_path / "s1", tmp_path / "s2"], tmp_path / "merged")
        assert set(read_journal(tmp_path / "merged" / "journal.jsonl")) == set(everything)
        assert json.loads((tmp_path / "merged" / "result.json").read_text())["cases"] == written.cases


class TestMoreFaults:
    def test_torn_writes_pass_on_the_correct_agent(self, tmp_path, cache):
        """torn(B) at every after-write, B in {1, middle, length-1, inside a UTF-8 character}, all hold."""
        result = campaign(tmp_path, "torn", cache, GREETING, faults=["torn", "powerloss"], pinned=False)
        ids = list(read_journal(tmp_path / "torn" / "journal.jsonl"))
        assert result.ok and result.cases["pass"] == result.cases["planned"] == len(ids) > 8
        assert sum("powerloss:" in i for i in ids) == 4
        cuts = {spec_from_id(i).faults[0].bytes for i in ids if i.split("::")[1].startswith("torn")}
        assert 1 in cuts and len(cuts) >= 4  # 1, the middles, the lengths-1 and the UTF-8 cuts differ

    def test_torn_writes_fail_without_tail_repair(self, tmp_path, cache):
        """With no-torn-tail-repair the same torn cases fail, naming the invariant."""
        result = campaign(tmp_path, "torn-bug", cache, GREETING, bugs=("no-torn-tail-repair",), faults=["torn"],
                          pinned=False, shard="1/2", shrink=False)
        assert result.cases["fail"] >= 1 and not result.ok
        assert result.failures and all(g["action"] == "torn" for g in result.failures)

    def test_a_shrunk_schedule_fails_every_invariant_its_groups_name(self, tmp_path, cache):
        """Shrinking keeps only schedules that fail every invariant the first run and its re-run both failed, so
        each failure group's minimal schedule is one whose own run failed that group's invariant."""
        library = REPO / "scenarios"
        result = campaign(tmp_path, "joint", cache, str(library / "bash-deploy.toml"),
                          str(library / "mixed-calls.toml"), bugs=("no-torn-tail-repair",), mode="random", seed=11,
                          cases=40, replay=False)
        failed = [r for r in read_journal(tmp_path / "joint" / "journal.jsonl").values() if r["status"] == "fail"]
        assert failed and any(r.get("minimal") != r["schedule"] for r in failed)
        for r in failed:
            common = {f["invariant"] for f in r["failures"]} & set(r["rerun"]["invariants"])
            assert common <= set(r["shrink"]["invariants"]), r["id"]
        shrunk = {(tuple(r["minimal"]), inv) for r in failed for inv in r["shrink"]["invariants"]}
        for group in result.failures:
            assert (tuple(group["minimal"]), group["invariant"]) in shrunk, group

    def test_ioerror_and_double_resume_pass_on_the_correct_agent(self, tmp_path, cache):
        """ioerror(ENOSPC|EIO) and dresume at every transaction fire and hold on the correct agent."""
        result = campaign(tmp_path, "io", cache, GREETING, faults=["ioerror", "dresume"], pinned=False)
        ids = list(read_journal(tmp_path / "io" / "journal.jsonl"))
        assert result.ok and result.cases["pass"] == result.cases["planned"] == 12 == len(ids)
        assert {spec_from_id(i).faults[0].action for i in ids} == {"ioerror", "dresume"}


class TestFlaky:
    def test_a_failure_that_does_not_reproduce_is_flaky(self, tmp_path, cache):
        """An agent that is buggy every other case gives flaky cases, not failures, and the campaign passes."""
        config = tmp_path / "flaky.toml"
        config.write_text(
            f'name = "flaky"\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(AGENTS / "flaky.py"))}]\n'
            f'configuration_flags = true\n'
            f'env = {{ FLAKY_COUNTER = {json.dumps(str(tmp_path / "counter"))}, FLAKY_SKIP = "2" }}\n')
        opts = CampaignOptions(scenarios=[TOOL], out=str(tmp_path), name="f", cache=str(tmp_path / "cache"),
                               workers=1, shard="1/4", target=load_target(config).to_json())
        result = run_campaign(opts)
        assert result.cases["fail"] == 0 and result.cases["flaky"] == result.cases["planned"] >= 2
        assert result.ok and len(result.flaky) == result.cases["flaky"]
        for entry in result.flaky:
            assert entry["invariants"] and entry["rerun"]["status"] == "pass"


class TestDepth2:
    def test_recovery_kill_points_are_discovered_and_pruned(self, tmp_path, cache):
        """--depth 2 lists a second kill at every recovery transaction, one first kill per distinct durable state."""
        opts = CampaignOptions(scenarios=[GREETING], out=str(tmp_path), cache=cache, depth=2)
        ids = run_campaign(opts, list_only=True)
        first_level = [i for i in ids if "+" not in i]
        second = [spec_from_id(i) for i in ids if "+" in i]
        assert len(first_level) == 8 and second
        firsts = list(dict.fromkeys(c.schedule[0] for c in second))
        # after-sync of transaction T and before-write of T+1 leave the same bytes: only the first is kept.
        assert "stepAttempt@before-write#1" not in firsts and "runStarted@after-sync#1" in firsts
        # Distinct states: 0..4 transactions durable; after the 4th (operationFinished) recovery writes nothing.
        assert firsts == ["runStarted@before-write#1", "runStarted@after-sync#1", "stepAttempt@after-sync#1",
                          "assistant@after-sync#1"]
        for case in second:
            assert case.faults[1].point.phase in ("before-write", "after-sync")
        again = run_campaign(opts, list_only=True)  # cached: the very same list
        assert again == ids


class TestCli:
    def test_list_prints_the_case_ids(self, cache):
        """--list prints one case id per line and runs nothing."""
        out = cli("campaign", TOOL, "--list", "--cache", cache)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.split()
        assert len(lines) == 17 and lines[0] == "tool-answer::runStarted@before-write#1"
        assert lines[-1] == "tool-answer::toolStarted@after-sync#1+assistant@after-sync#2"  # pinned, last

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--mode", "random", "--cases", "3"], "--seed"),
            (["--shard", "3/2"], "K/N"),
            (["--faults", "kill,boom"], "--faults boom"),
            (["--budget", "soon"], "duration 'soon'"),
            (["--agent-bugs", "no-such-bug"], "unknown bug switch"),
            (["--seed", "3"], "--seed: random mode only"),  # ignored by an exhaustive campaign: refused
            (["--nightly", "--mode", "random", "--seed", "1", "--cases", "2"], "--nightly sets --mode exhaustive"),
            (["-j", "100000"], "at most"),  # one worker per queued case would only slow every case down
            (["--budget", "0s"], "--budget must be more than 0 seconds"),
        ],
    )
    def test_bad_options_are_one_line_and_exit_2(self, args, message, tmp_path):
        """A bad option gives one clear line on stderr, exit 2, and no traceback."""
        out = cli("campaign", TOOL, "--out", str(tmp_path), *args)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr

    def test_pinned_only_with_nothing_pinned_is_refused(self, tmp_path):
        """--pinned-only over scenarios none of which pins a schedule: exit 2 and one line, not a green empty run."""
        out = cli("campaign", GREETING, "--pinned-only", "--out", str(tmp_path))
        assert out.returncode == 2 and out.stderr.strip().splitlines() == [
            "--pinned-only: none of the 1 selected scenario(s) has pinned [[schedules]]"], out.stderr
        assert not any(tmp_path.iterdir())  # no campaign directory was made

    def test_resume_of_a_non_campaign_directory(self, tmp_path):
        """--resume on a directory that is not a campaign is one clear line, exit 2."""
        out = cli("campaign", "--resume", str(tmp_path))
        assert out.returncode == 2 and "not a campaign directory" in out.stderr
