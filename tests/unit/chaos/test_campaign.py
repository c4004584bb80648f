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
            record("s::llm(drop)@1.1", "flaky", failures=["attempts-bounded"], kills=0),
        ]

    def test_failures_are_grouped_and_counted(self):
        """Failures are deduplicated by (invariant, action, fact) with a count and the shortest minimal schedule."""
        result = build_result(PARAMS, self.records(), duration=2.0)
        assert result.cases == {"planned": 4, "done": 4, "pass": 1, "fail": 2, "flaky": 1, "not-reached": 0,
                                "error": 0, "not_run": 0}
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

    def test_a_partial_campaign_is_not_complete(self):
        """Cases planned but not run are counted and make the result incomplete."""
        result = build_result(PARAMS, self.records()[:2], duration=1.0, interrupted=True)
        assert result.cases["not_run"] == 2 and not result.complete and result.interrupted

    def test_summary_lines_name_failures_and_coverage(self):
        """The printed summary names each failure group, the flaky cases and the coverage lines."""
        text = "\n".join(summary_lines(build_result(PARAMS, self.records(), duration=1.0)))
        assert "FAIL outcome (kill at toolStarted) ×2" in text and "FLAKY s::llm(drop)@1.1" in text
        assert "toolStarted@after-sync: 2/2 reached" in text


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
