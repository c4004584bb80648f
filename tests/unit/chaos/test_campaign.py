"""Unit tests of chaos.campaign's pure parts: options, durations, results, coverage and merging."""

from __future__ import annotations

import json

import pytest

from chaos.campaign import (
    CampaignError,
    CampaignOptions,
    Reporter,
    build_result,
    coverage,
    merge_journals,
    parse_duration,
    summary_lines,
)
from chaos.journal import Journal, write_campaign


def record(cid: str, status: str = "pass", *, origin: str = "exhaustive", point: str = "toolStarted@after-sync#1",
           facts=("toolStarted",), failures=(), keys=(), minimal=None, rules=(), kills=1) -> dict:
    scenario, _, schedule = cid.partition("::")
    phase = point.split("@")[1].split("#")[0]
    return {"id": cid, "scenario": scenario, "schedule": schedule.split("+"), "origin": origin, "status": status,
            "failures": [{"invariant": i, "message": f"{i} broke", "evidence": None} for i in failures],
            "keys": [list(k) for k in keys], "minimal": minimal, "rules": list(rules), "kills": kills,
            "restarts": kills, "fired": True, "reached": [{"fault": schedule, "point": point, "phase": phase,
                                                           "facts": list(facts), "tx": 4}]}


PARAMS = {"options": {"mode": "exhaustive", "name": "c"}, "name": "c",
          "plan": {"cases": 4, "space": "partition", "points": {"toolStarted@after-sync": 2, "user@after-sync": 1},
                   "recovery": {}},
          "baselines": {"s": {"ok": True}}}


class TestOptions:
    @pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200),
                                                   ("1h30m", 5400), ("1.5m", 90)])
    def test_durations(self, text, seconds):
        """Durations accept seconds and h/m/s units, combined."""
        assert parse_duration(text) == seconds

    @pytest.mark.parametrize("text", ["soon", "5x", "m", "1h 30m", ""])
    def test_bad_durations(self, text):
        """A malformed duration is one clear error."""
        with pytest.raises(CampaignError, match="duration"):
            parse_duration(text)

    def test_check_lists_every_problem(self):
        """Inconsistent options are reported together, one line each."""
        options = CampaignOptions(mode="random", depth=2, faults=["kill", "boom"], shard="5/2", keep="some")
        with pytest.raises(CampaignError) as info:
            options.check()
        text = "\n".join(info.value.messages)
        for word in ("--seed", "--cases N or --duration", "--depth 2", "--faults boom", "K/N", "--keep"):
            assert word in text

    def test_no_fault_family_is_refused(self):
        """`--faults ''` would plan nothing but the pinned schedules and report the run as held: refused instead."""
        with pytest.raises(CampaignError, match="no fault family given"):
            CampaignOptions(faults=[]).check()
        CampaignOptions(faults=[], pinned_only=True).check()  # the pinned schedules alone: what it asks for

    def test_random_cases_are_bounded(self):
        """--cases beyond MAX_RANDOM_CASES is refused (its plan, counted first, would hear neither --budget nor
        SIGTERM); --duration is the way to run longer."""
        from chaos.campaign import MAX_RANDOM_CASES

        with pytest.raises(CampaignError, match="for longer runs: --duration"):
            CampaignOptions(mode="random", seed=1, cases=MAX_RANDOM_CASES + 1).check()
        CampaignOptions(mode="random", seed=1, cases=MAX_RANDOM_CASES).check()

    def test_options_round_trip(self):
        """Options survive campaign.json."""
        options = CampaignOptions(mode="random", seed=3, cases=9, tags=["ci"])
        assert CampaignOptions.from_json(json.loads(json.dumps(options.to_json()))) == options


class TestRoundOneOptions:
    def test_a_round_one_campaign_json_names_its_agent_as_a_target(self):
        """A campaign.json written with round 1's `agent` dict is read as the same target."""
        old = {"agent": {"command": ["{python}", "-m", "agent"], "env": [], "bugs": ["stale-assistant-calls"],
                         "bundled": True, "name": "bundled"}}
        target = CampaignOptions.from_json(old).the_target
        assert target.bundled and target.bugs == ("stale-assistant-calls",)


class TestResult:
    def records(self):
        return [
            record("s::toolStarted@after-sync#1", rules=["P7.1.4"]),
            record("s::toolStarted@after-sync#2", "fail", point="toolStarted@after-sync#2",
                   failures=["outcome", "converges"],
                   keys=[("outcome", "kill", "toolStarted"), ("converges", "kill", "toolStarted")],
                   minimal=["toolStarted@after-sync#1"]),
            record("s::user@after-sync#1", "fail", point="runStarted@after-sync#1", facts=("user", "runStarted"),
                   failures=["outcome"], keys=[("outcome", "kill", "toolStarted")],
                   minimal=["toolStarted@before-write#1", "tx:9@after-sync"]),
            record("s::llm(drop)@1.1", "flaky", origin="random", failures=["attempts-bounded"], kills=0),
        ]

    def test_failures_are_grouped_and_counted(self):
        """Failures are deduplicated by (invariant, action, fact) with a count and the shortest minimal schedule."""
        result = build_result(PARAMS, self.records(), duration=2.0)
        assert result.cases == {"planned": 4, "done": 4, "pass": 1, "fail": 2, "flaky": 1, "not-reached": 0,
                                "error": 0, "expected-failure": 0, "not_run": 0}
        assert result.failures_by_invariant == {"outcome": 2, "converges": 1}
        top = result.failures[0]
        assert (top["invariant"], top["action"], top["fact"], top["count"]) == ("outcome", "kill", "toolStarted", 2)
        assert top["minimal"] == ["toolStarted@after-sync#1"]
        assert [f["id"] for f in result.flaky] == ["s::llm(drop)@1.1"]
        assert result.kills == 3 and result.cases_per_second == 2.0 and not result.ok and result.complete

    def test_coverage_counts_distinct_targets(self):
        """Coverage counts each reached target once per fact@phase, against the planned totals, and planner rules."""
        cov = coverage(PARAMS["plan"], self.records())
        assert cov["points"]["toolStarted@after-sync"] == {"reached": 2, "total": 2}
        assert cov["points"]["user@after-sync"] == {"reached": 1, "total": 1}
        assert cov["points"]["runStarted@after-sync"] == {"reached": 1, "total": 0}
        assert cov["rules"] == {"P7.1.4": 1} and "P0" in cov["rules_unreached"]

    def test_every_fault_action_at_one_point_counts_as_its_own_target(self):
        """An exhaustive campaign plans a case per fault action and torn length at a point; each that ran counts,
        so a complete campaign reads full coverage (not one point of its many cases)."""
        point = "toolStarted@after-write#1"
        texts = ["torn(1):toolStarted@after-write#1", "torn(7):toolStarted@after-write#1",
                 "powerloss:toolStarted@after-write#1", "ioerror(EIO):toolStarted@after-write#1"]
        records = [record(f"s::{t}", origin="torn" if t.startswith("torn") else "exhaustive", point=point)
                   for t in texts]
        plan = {"cases": 4, "space": "partition", "points": {"toolStarted@after-write": 4}, "recovery": {}}
        assert coverage(plan, records)["points"]["toolStarted@after-write"] == {"reached": 4, "total": 4}
        repeats = [record(f"s::{t}", origin="random", point=point) for t in texts]  # random: the point, once
        assert coverage(plan, repeats)["points"]["toolStarted@after-write"]["reached"] == 1

    def test_a_partial_campaign_is_not_complete(self):
        """Cases planned but not run are counted and make the result incomplete."""
        result = build_result(PARAMS, self.records()[:2], duration=1.0, interrupted=True)
        assert result.cases["not_run"] == 2 and not result.complete and result.interrupted

    def test_summary_lines_name_failures_and_coverage(self):
        """The printed summary names each failure group, the flaky cases and the coverage lines."""
        text = "\n".join(summary_lines(build_result(PARAMS, self.records(), duration=1.0)))
        assert "FAIL outcome (kill at toolStarted) ×2" in text and "FLAKY s::llm(drop)@1.1" in text
        assert "toolStarted@after-sync: 2/2 reached" in text

    def test_summary_lines_put_each_findings_command_under_it(self):
        """A reproduce command given for a finding's example case is printed right under that finding's line."""
        result = build_result(PARAMS, self.records(), duration=1.0)
        example = result.failures[0]["example"]
        lines = summary_lines(result, reproduce={example: "sh r/failures/x/repro.sh", "s::other": "nope"})
        at = next(i for i, line in enumerate(lines) if line.startswith("  FAIL ") and line.endswith(example))
        assert lines[at + 1] == "    reproduce: sh r/failures/x/repro.sh"
        groups = sum(g["example"] == example for g in result.failures)  # one case may exemplify two findings
        assert sum("reproduce:" in line for line in lines) == groups
        assert not any("reproduce:" in line for line in summary_lines(result, reproduce={"s::other": "nope"}))


class TestMerge:
    def write(self, directory, records, plan, shard):
        write_campaign(directory, {**PARAMS, "plan": plan, "options": {"shard": shard, "name": "c"}, "elapsed": 3.0})
        with Journal(directory / "journal.jsonl") as journal:
            for r in records:
                journal.append(r)

    def test_shards_add_up(self, tmp_path):
        """Merged shards hold every case once, planned totals add up, and the duration is the longest shard's."""
        plan1 = {"cases": 1, "space": "partition", "points": {"toolStarted@after-sync": 1}, "recovery": {}}
        plan2 = {"cases": 2, "space": "partition", "points": {"toolStarted@after-sync": 1, "user@after-sync": 1},
                 "recovery": {}}
        a, b = TestResult().records()[:2]
        c = record("s::user@after-sync#1", point="user@after-sync#1", facts=("user",))
        self.write(tmp_path / "1", [a], plan1, "1/2")
        self.write(tmp_path / "2", [b, c], plan2, "2/2")
        merged = merge_journals([tmp_path / "1", tmp_path / "2"])
        assert [r["id"] for r in merged.records] == [a["id"], b["id"], c["id"]]
        assert merged.cases["planned"] == 3 and merged.cases["done"] == 3 and merged.shard is None
        assert merged.coverage["points"]["toolStarted@after-sync"] == {"reached": 2, "total": 2}
        assert merged.duration == 3.0 and merged.shards == [str(tmp_path / "1"), str(tmp_path / "2")]

    def test_not_a_campaign(self, tmp_path):
        """Merging a directory that is not a campaign is one clear error."""
        with pytest.raises(CampaignError, match="not a campaign directory"):
            merge_journals([tmp_path])


class TestReporter:
    def test_plain_lines(self):
        """Without a terminal: a line per non-passing case and progress lines with done/total, failures, rate."""
        lines: list[str] = []
        reporter = Reporter(lines.append)
        reporter.start(2, 0, 0)
        reporter.case(record("s::user@after-sync#1", "fail", failures=["outcome"]))
        reporter.case(record("s::user@after-sync#2"))
        assert lines[0].startswith("FAIL  s::user@after-sync#1  outcome")
        assert lines[-1].startswith("[2/2] failures 1,") and "cases/s" in lines[-1]


def test_nightly_preset_keeps_the_scenario_selection():
    """The nightly preset turns on depth 2, every fault action and enumerated regressions, and keeps --tag."""
    from chaos.campaign import FAULT_FAMILIES, CampaignOptions, nightly

    options = nightly(CampaignOptions(tags=["restart-change"]))
    assert (options.depth, options.faults, options.regressions_pinned) == (2, list(FAULT_FAMILIES), False)
    assert options.tags == ["restart-change"]


class TestCompletion:
    def test_exit_codes_put_signals_then_failures_before_incompleteness(self):
        """143 after SIGTERM, 130 after SIGINT, 1 for a failure even when incomplete, 4 when only incomplete, else 0."""
        from chaos.campaign import EXIT_INCOMPLETE, exit_code

        records = TestResult().records()
        passing = [r for r in records if r["status"] != "fail"]
        assert exit_code(build_result(PARAMS, passing[:1], duration=1.0)) == EXIT_INCOMPLETE == 4
        assert exit_code(build_result({**PARAMS, "plan": {**PARAMS["plan"], "cases": 2}}, passing, duration=1.0)) == 0
        assert exit_code(build_result(PARAMS, records[:2], duration=1.0)) == 1  # incomplete, with a failure
        sigterm = {**PARAMS, "stopped": "SIGTERM"}
        assert exit_code(build_result(sigterm, passing[:1], duration=1.0, interrupted=True)) == 143
        assert exit_code(build_result(PARAMS, passing[:1], duration=1.0, interrupted=True)) == 130

    def test_a_campaign_whose_discovery_was_cut_short_is_incomplete_and_says_so(self):
        """Every planned case ran, but depth-2 discovery did not finish: not complete, and the text says how much."""
        params = {**PARAMS, "plan": {**PARAMS["plan"], "cases": 4}, "stopped": "budget",
                  "discovery": {"baselines": {"planned": 1, "done": 1}, "recoveries": {"planned": 10, "done": 4}}}
        result = build_result(params, TestResult().records(), duration=1.0)
        assert not result.complete and result.cases["not_run"] == 0
        assert result.not_run_text() == ("0 of 4 planned case(s) did not run; 6 of 10 depth-2 recoveries were not "
                                         "discovered, so their cases are not counted — the time budget was used up")

    @pytest.mark.parametrize(("stopped", "why"), [("SIGHUP", "its terminal hung up (SIGHUP)"),
                                                   ("SIGQUIT", "stopped (SIGQUIT)")])
    def test_every_stop_says_why(self, stopped, why):
        """A campaign stopped by a hang-up (or any stop it recorded) says so after its counts, not nothing."""
        result = build_result({**PARAMS, "stopped": stopped}, TestResult().records()[:1], duration=1.0,
                              interrupted=True)
        assert result.not_run_text() == f"3 of 4 planned case(s) did not run — {why}"

    def test_a_case_whose_worker_died_leaves_the_campaign_incomplete(self):
        """Every planned case has a line, but one says its worker died: not complete, and the text says --resume
        runs it again."""
        recs = TestResult().records()
        recs[0] = {**recs[0], "status": "error", "verdict": "died"}
        result = build_result({**PARAMS, "plan": {**PARAMS["plan"], "cases": 4}}, recs, duration=1.0)
        assert not result.complete and result.cases["not_run"] == 0
        assert result.not_run_text() == ("0 of 4 planned case(s) did not run; 1 case(s) whose worker process died "
                                         "mid-case are run again by --resume")

    def test_a_random_duration_campaign_is_complete_when_its_duration_is_reached(self):
        """An endless random list is complete when --duration stopped it, not when a budget or a signal did."""
        params = {"options": {"mode": "random", "seed": 1, "duration": 5.0}, "plan": {"cases": None}}
        recs = TestResult().records()[:1]
        assert build_result({**params, "stopped": "duration"}, recs, duration=5.0).complete
        assert not build_result({**params, "stopped": "budget"}, recs, duration=5.0).complete
        assert not build_result({**params, "stopped": "duration"}, recs, duration=5.0, interrupted=True).complete

    def test_an_incomplete_summary_starts_with_how_much_did_not_run_and_the_resume_command(self, tmp_path):
        """An incomplete campaign's summary starts with INCOMPLETE and its counts, then the exact --resume command."""
        lines = summary_lines(build_result({**PARAMS, "stopped": "budget"}, TestResult().records()[:1], duration=1.0),
                              tmp_path / "c")
        assert lines[0] == "INCOMPLETE: 3 of 4 planned case(s) did not run — the time budget was used up"
        assert lines[1].startswith(f"  continue with: chaos campaign --resume {tmp_path / 'c'}")
        complete = summary_lines(build_result({**PARAMS, "plan": {**PARAMS["plan"], "cases": 1}},
                                              TestResult().records()[:1], duration=1.0))
        assert not any("INCOMPLETE" in line for line in complete)


class TestResumeOptions:
    def test_a_changed_option_on_resume_is_refused_in_one_line(self):
        """A given option differing from the stored one is named with both values; budget and workers may change."""
        from chaos.campaign import resume_conflicts

        stored = CampaignOptions(depth=1, budget=60.0)
        given = CampaignOptions(depth=2, budget=600.0, workers=4)
        [line] = resume_conflicts(stored, given, ["depth", "budget", "workers", "resume_dir"])
        assert line.startswith("--resume: --depth cannot change a stored campaign (depth is 1, given 2)")
        assert resume_conflicts(stored, given, ["budget", "workers"]) == []

    def test_repeating_the_same_options_on_resume_is_accepted(self):
        """The original command line with --resume appended (same values, --nightly included) passes."""
        from chaos.campaign import nightly, resume_conflicts

        stored = nightly(CampaignOptions(scenarios=["a.toml"], tags=["x"]))
        given = nightly(CampaignOptions(scenarios=["a.toml"], tags=["x"]))
        assert resume_conflicts(stored, given, ["scenarios", "tags", "nightly", "depth", "faults"]) == []
        other = CampaignOptions(scenarios=["b.toml"])
        assert resume_conflicts(stored, other, ["scenarios"])[0].startswith("--resume: SCENARIOS cannot change")


def test_a_merge_keeps_a_shards_judged_line_over_anothers_worker_died_one(tmp_path):
    """Two shard journals holding one case id, one as worker-died and one judged: the judged line wins, in either
    order (a died line makes no case done, in one journal or across merged ones)."""
    from chaos.campaign import merge_journals
    from chaos.journal import JOURNAL, write_campaign

    cid = "s::toolStarted@after-sync#1"
    for name, status, verdict, shard in (("a", "error", "died", "1/2"), ("b", "pass", "exit:0", "2/2")):
        write_campaign(tmp_path / name, {**PARAMS, "started": name, "options": {**PARAMS["options"], "shard": shard}})
        line = {**record(cid, status), "verdict": verdict}
        (tmp_path / name / JOURNAL).write_text(json.dumps(line) + "\n")
    for order in (["a", "b"], ["b", "a"]):
        merged = merge_journals([tmp_path / n for n in order], force=True)
        assert [r["status"] for r in merged.records] == ["pass"] and merged.ok, order


class TestMergeRefusals:
    def params(self, name="c", started="t0", shard=None, digest="d1", bugs=()):
        return {"name": name, "started": started, "options": {"shard": shard, "target": {"bugs": list(bugs)}},
                "baselines": {"s": {"ok": True, "digest": digest}}}

    def test_a_campaign_is_not_merged_with_itself_or_a_copy(self, tmp_path):
        """The same directory twice, or a copy of one (same name, start and shard), is refused."""
        from chaos.campaign import merge_problems

        a, b = tmp_path / "a", tmp_path / "b"
        assert merge_problems([a, a], [self.params(), self.params(started="t1")])[0].endswith(
            "(a campaign cannot be merged with itself)")
        assert merge_problems([a, b], [self.params(shard="1/2"), self.params(shard="1/2")])
        assert merge_problems([a, b], [self.params(shard="1/2"), self.params(shard="2/2")]) == []

    def test_campaigns_of_other_scenarios_or_targets_are_refused(self, tmp_path):
        """Different scenario files or a different target are named; equal ones merge."""
        from chaos.campaign import merge_problems

        a, b = tmp_path / "a", tmp_path / "b"
        [scen] = merge_problems([a, b], [self.params(shard="1/2"), self.params(shard="2/2", digest="d2")])
        assert "another scenario set" in scen and "different file contents" in scen
        [target] = merge_problems([a, b], [self.params(shard="1/2"),
                                           self.params(shard="2/2", bugs=["stale-assistant-calls"])])
        assert "AGENT_BUGS=stale-assistant-calls" in target


class TestDiscoveryProgress:
    def test_discovery_phases_print_progress_lines(self):
        """A discovery phase prints [what done/total] lines with a rate, like the cases do."""
        lines: list[str] = []
        reporter = Reporter(lines.append)
        reporter.start(2, 0, 0, what="depth-2 recoveries")
        reporter.job()
        reporter.job()
        assert lines[-1].startswith("[depth-2 recoveries 2/2] ") and "/s" in lines[-1]


def test_summary_marks_a_shrink_cut_short_and_explains_a_failed_baseline():
    """A failure whose shrinking was cut short says its minimal schedule is the best so far; a failed baseline
    prints the evidence lines of why under it."""
    records = TestResult().records()
    records[1]["shrink"] = {"invariant": "outcome", "calls": 3, "steps": [], "exhausted": True}
    params = {**PARAMS, "baselines": {"w": {"ok": False, "problems": ["did not pass"],
                                            "why": ["tool write returned an error: missing 'content'"]}}}
    text = "\n".join(summary_lines(build_result(params, records, duration=1.0)))
    assert "minimal toolStarted@after-sync#1 (shrinking cut short: best so far)  e.g. s::toolStarted@after-sync#2" in text
    assert "  BASELINE w: did not pass\n    tool write returned an error: missing 'content'" in text
