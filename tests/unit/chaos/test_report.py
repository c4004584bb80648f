"""Unit tests for chaos.report: summary.json, junit.xml, index.html and the SVG timeline, on hand-made campaigns.

The cases are built from real ``chaos.records`` objects (``CaseRun.to_json()``), so the renderers are tested on the
exact shape the supervisor produces, without running an agent.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from chaos.records import Acknowledged, BarrierEvent, CaseRun, FaultRecord, Launch
from chaos.report import (
    ERROR,
    FAIL,
    FLAKY,
    NOT_REACHED,
    PASS,
    CampaignReport,
    CaseReport,
    InvariantFailure,
    case_record,
    write_reports,
)
from chaos.report import timeline as tl
from chaos.report.html import render_html
from chaos.report.junit import junit_xml
from chaos.report.render import read_plans
from chaos.report.summary import fault_key, git_of, summarize

AGENT = ["/usr/bin/python3", "-m", "agent"]


def _barriers(launch: int, tx: int, facts: list[str], start: int, end: int, at: float, index: int,
              fault_phase: str | None = None, fault: str | None = None) -> list[BarrierEvent]:
    out = []
    for i, phase in enumerate(("before-write", "after-write", "after-sync")):
        offset = start if phase == "before-write" else end
        synced = end if phase == "after-sync" else start
        out.append(BarrierEvent(index + i, launch, 100 + launch, phase, facts, tx, tx, offset, synced, tx,
                                {f: 1 for f in facts}, offset, at + i * 0.001,
                                fault=fault if phase == fault_phase else None,
                                answer=None if phase == fault_phase else {"action": "continue"}))
        if phase == fault_phase:
            break
    return out


def make_run(kill_phase: str = "after-sync", stderr: dict[int, str] | None = None) -> dict:
    """A two-launch case: run writes tx 1-3, is SIGKILLed at tx 3 (``kill_phase``), resume writes tx 4, exits 0."""
    fault_text = f"assistant@{kill_phase}#1"
    barriers: list[BarrierEvent] = []
    barriers += _barriers(0, 1, ["user", "runStarted"], 100, 200, 0.01, len(barriers))
    barriers += _barriers(0, 2, ["stepAttempt"], 200, 300, 0.02, len(barriers))
    barriers += _barriers(0, 3, ["assistant", "usage"], 300, 400, 0.03, len(barriers), kill_phase, fault_text)
    fired = barriers[-1].index
    barriers += _barriers(1, 4, ["operationFinished"], 400 if kill_phase == "after-sync" else 300, 480, 0.06,
                          len(barriers))
    run = CaseRun(label="read-then-answer::" + fault_text, schedule=[fault_text], case_dir="/nonexistent",
                  socket="/nonexistent/c.sock", session="/nonexistent/s.jsonl")
    run.launches = [
        Launch(0, "step", 0, 1, [*AGENT, "run", "--session-dir", "x", "What?"], 100, "", stderr.get(0, "") if stderr
               else "", 0.0, 0.035, -9, "fault"),
        Launch(1, "resume", 0, 2, [*AGENT, "resume", "s.jsonl"], 101, "", stderr.get(1, "") if stderr else "",
               0.05, 0.07, 0),
    ]
    run.barriers = barriers
    run.acknowledged = [Acknowledged(b.tx, b.launch, b.index, b.facts, b.seq_first, b.seq_last, b.offset - 100,
                                     b.offset, b.synced_offset, b.file_size, b'{"x":1}\n')
                        for b in barriers if b.phase == "after-sync"]
    run.faults = [FaultRecord(fault_text, "kill", fired, 0, 100, 0.04, signal="SIGKILL", size_at_kill=400,
                              snapshot="/nonexistent/kills/01-kill.jsonl", snapshot_size=400)]
    run.verdict, run.duration = "exit:0", 0.08
    return run.to_json()


def failing_case(**kw) -> CaseReport:
    data = dict(id="read-then-answer::assistant@after-sync#1", scenario="read-then-answer",
                schedule=["assistant@after-sync#1"], status=FAIL,
                failures=[InvariantFailure("converges", "resume exited 70",
                                           [{"message": "the session did not converge", "where": "final log",
                                             "line": 9, "seq": 11}])],
                duration=0.5, verdict="exit:70", run=make_run(),
                plans=[{"launch": 1, "plan": {"type": "startTool", "mode": "start", "toolName": "read",
                                              "toolIndex": 0}}],
                rules=["P7.2.4"], minimal=["assistant@after-sync#1"], repro="sh failures/x/repro.sh",
                bundle="failures/x")
    data.update(kw)
    return CaseReport(**data)


def passing(point: str, status: str = PASS, **kw) -> CaseReport:
    return CaseReport(id=f"read-then-answer::{point}", scenario="read-then-answer", schedule=[point], status=status,
                      duration=0.25, rules=["P7.3"], **kw)


def campaign(cases: list[CaseReport], **kw) -> CampaignReport:
    data = dict(name="demo", cases=cases, seed=7, command=["chaos", "campaign", "--agent-bugs", "stale-assistant-calls"],
                agent_bugs=["stale-assistant-calls"], started="2026-01-01T00:00:00+00:00", duration=2.0,
                versions={"killpoint": "0.1.0", "python": "3.11.7", "git": {"commit": "abc123" * 6, "dirty": False}})
    data.update(kw)
    return CampaignReport(**data)


class TestCaseReport:
    def test_failing_case_must_name_an_invariant(self):
        """A fail or flaky case without a failed invariant is rejected: a report never says 'failed' without why."""
        with pytest.raises(ValueError, match="must name the invariant"):
            CaseReport(id="s::tx:1@before-write", scenario="s", schedule=["tx:1@before-write"], status=FAIL)
        with pytest.raises(ValueError, match="must name the invariant"):
            CaseReport(id="s::tx:1@before-write", scenario="s", schedule=["tx:1@before-write"], status=FLAKY)

    def test_unknown_status_is_rejected(self):
        """A status outside the report vocabulary is rejected."""
        with pytest.raises(ValueError, match="status"):
            CaseReport(id="s", scenario="s", schedule=[], status="passed")

    def test_json_round_trip(self):
        """CampaignReport.from_json(to_json()) gives the same report."""
        report = campaign([failing_case(), passing("tx:1@before-write")], planned=3, baselines={"s": {"ok": True}})
        assert CampaignReport.from_json(json.loads(json.dumps(report.to_json()))) == report

    def test_journal_record_keys_are_tolerated(self):
        """A journal record with the engine's extra keys loads as a CaseReport (unknown keys dropped)."""
        record = {**failing_case().to_json(), "origin": "exhaustive", "keys": [["converges", "kill", "assistant"]],
                  "failures": [{"invariant": "converges", "message": "m", "evidence": None}]}
        case = CaseReport.from_json(record)
        assert case.invariants == ["converges"] and case.status == FAIL


class TestSummary:
    def test_counts_kills_restarts_and_failures_by_invariant(self):
        """summary.json counts cases by status, kills and restarts from the runs, and failing cases per invariant."""
        cases = [failing_case(), failing_case(id="read-then-answer::x", failures=[
                     InvariantFailure("converges", "a"), InvariantFailure("outcome", "b")]),
                 passing("tx:1@before-write", kills=1, restarts=1), passing("tx:9@before-write", NOT_REACHED),
                 passing("tx:2@before-write", ERROR, verdict="launch-error", detail="no such file"),
                 passing("tx:3@before-write", FLAKY, failures=[InvariantFailure("attempts-bounded", "once")])]
        s = summarize(campaign(cases))
        assert s["cases"] == {"planned": 6, "notRun": 0, "total": 6, "passed": 1, "failed": 2, "flaky": 1,
                              "notReached": 1, "errors": 1, "expectedFailures": 0}
        assert s["failures"]["byInvariant"] == {"converges": 2, "outcome": 1}
        assert s["kills"] == 3 and s["restarts"] == 3  # two failing runs (1 kill, 1 resume each) + the counted pass
        assert [f["case"] for f in s["flaky"]] == ["read-then-answer::tx:3@before-write"]
        assert s["errors"] == [{"case": "read-then-answer::tx:2@before-write", "verdict": "launch-error",
                                "detail": "no such file"}]
        assert s["casesPerSecond"] == 3.0 and s["seed"] == 7

    def test_deduplicates_by_invariant_action_and_fact(self):
        """Failures with the same invariant and the same action/fact of their (minimal) last fault form one group."""
        cases = [failing_case(id=f"read-then-answer::c{i}", minimal=[f"assistant@after-sync#{i}"]) for i in (1, 2)]
        cases.append(failing_case(id="read-then-answer::t", minimal=["torn(3):toolStarted@after-write#1"]))
        groups = summarize(campaign(cases))["failures"]["deduplicated"]
        assert [(g["invariant"], g["action"], g["fact"], g["count"]) for g in groups] == [
            ("converges", "kill", "assistant", 2), ("converges", "torn", "toolStarted", 1)]

    def test_a_group_is_the_same_whatever_order_its_cases_finished_in(self):
        """Workers finish in any order: a group's example, message and case list come out the same either way."""
        a = failing_case(id="s::assistant@after-sync#2", minimal=["assistant@after-sync#2"],
                         failures=[InvariantFailure("converges", "a", [])])
        b = failing_case(id="s::operationFinished@before-write#1", minimal=["operationFinished@before-write#1"],
                         failures=[InvariantFailure("converges", "b", [])])
        for c in (a, b):
            c.divergence = {"reference_rule": "P5.2", "signature": "reference P5.2 finish completed; startTool"}
        first, second = (summarize(campaign(order))["failures"]["deduplicated"] for order in ([a, b], [b, a]))
        assert first == second
        assert first[0]["example"] == "s::assistant@after-sync#2" and first[0]["message"] == "a"

    def test_a_groups_message_is_its_examples(self):
        """When a later case (by id) has the shorter minimal schedule and becomes the example, its message comes too."""
        long = failing_case(id="s::a", minimal=["toolStarted@after-sync#1", "assistant@after-sync#1"],
                            failures=[InvariantFailure("converges", "said by the long one", [])])
        short = failing_case(id="s::b", minimal=["assistant@after-sync#3"],
                             failures=[InvariantFailure("converges", "said by the short one", [])])
        [group] = summarize(campaign([long, short]))["failures"]["deduplicated"]
        assert (group["example"], group["message"]) == ("s::b", "said by the short one")

    def test_a_group_of_an_invariant_the_minimal_run_did_not_fail_shows_the_schedule_that_did(self):
        """A case shrunk to a schedule whose run failed only some of its invariants stands for the others with its
        own schedule, not the minimal one."""
        case = failing_case(id="s::torn(178):toolResult@after-write#1+torn(1):tx:8@after-write",
                            schedule=["torn(178):toolResult@after-write#1", "torn(1):tx:8@after-write"],
                            minimal=["torn(1):tx:1@after-write"], shrink={"invariant": "converges",
                                                                        "invariants": ["converges", "outcome"]},
                            failures=[InvariantFailure("converges", "c", []),
                                      InvariantFailure("transcript-legal", "call call_deploy: no result", [])])
        groups = {g["invariant"]: g for g in summarize(campaign([case]))["failures"]["deduplicated"]}
        assert groups["converges"]["minimal"] == ["torn(1):tx:1@after-write"]
        assert groups["transcript-legal"]["minimal"] == case.schedule

    def test_engine_keys_and_coverage_are_used_when_given(self):
        """The engine's dedup keys (canonical kill point) and its coverage are used, not re-derived from texts."""
        case = failing_case(minimal=["tx:4@after-sync"])
        case.keys = [["outcome", "kill", "user"]]
        cov = {"points": {"user@before-write": {"reached": 1, "total": 2}}, "rules": {"P0": 1}}
        s = summarize(campaign([case], coverage=cov, planned=10))
        assert [(g["invariant"], g["action"], g["fact"]) for g in s["failures"]["deduplicated"]] == [
            ("outcome", "kill", "user")]
        assert s["coverage"] == cov and s["cases"]["notRun"] == 9

    def test_a_first_divergence_groups_cases_across_invariants(self):
        """Cases whose first divergence is the same (rule, signature) are one group, whatever invariants broke."""
        sig = "reference P5.2 finish completed; implementation startTool read#0"
        a = failing_case(id="s::a")
        b = failing_case(id="s::b", failures=[InvariantFailure("outcome", "unfinished", [])])
        for c in (a, b):
            c.divergence = {"reference_rule": "P5.2", "signature": sig}
        other = failing_case(id="s::c")
        groups = summarize(campaign([a, b, other]))["failures"]["deduplicated"]
        assert [(g["action"], g["divergence"], g["count"]) for g in groups][0] == ("divergence", sig, 2)
        assert groups[0]["fact"] == "P5.2" and set(groups[0]["invariant"].split(", ")) == {"converges", "outcome"}
        assert groups[1]["divergence"] is None and groups[1]["example"] == "s::c"

    def test_fault_key_of_every_action(self):
        """fault_key gives (action, fact) for kills, actions, tx points and provider faults."""
        assert fault_key("assistant@after-sync#2") == ("kill", "assistant")
        assert fault_key("ioerror(EIO):toolResult@after-write#1") == ("ioerror", "toolResult")
        assert fault_key("tx:3@before-write") == ("kill", "tx")
        assert fault_key("llm(http:429)@1.1") == ("llm", "http")

    def test_git_of_accepts_both_version_shapes(self):
        """git_of reads the commit from a {commit, dirty} dict or the engine's bare string."""
        assert git_of({"git": "deadbeef"}) == {"commit": "deadbeef", "dirty": None}
        assert git_of({"git": {"commit": "c0ffee", "dirty": True}}) == {"commit": "c0ffee", "dirty": True}
        assert git_of({}) == {}


class TestJunit:
    def parse(self, report: CampaignReport) -> ET.Element:
        return ET.fromstring(junit_xml(report).encode("utf-8"))

    def test_one_testcase_per_scenario_and_schedule(self):
        """Each case is a testcase named by its schedule in a suite per scenario; the baseline is 'baseline'."""
        other = CaseReport(id="two-runs", scenario="two-runs", schedule=[], status=PASS)
        root = self.parse(campaign([failing_case(), passing("tx:1@before-write"), other]))
        suites = {s.get("name"): [tc.get("name") for tc in s.iter("testcase")] for s in root.iter("testsuite")}
        assert suites == {"read-then-answer": ["assistant@after-sync#1", "tx:1@before-write"],
                          "two-runs": ["baseline"]}
        assert root.get("tests") == "3" and root.get("failures") == "1"

    def test_failure_names_invariant_evidence_and_repro(self):
        """A failing case has one <failure> typed by its invariant whose text holds the evidence and repro command."""
        root = self.parse(campaign([failing_case()]))
        failure = root.find(".//failure")
        assert failure.get("type") == "converges"
        assert "converges" in failure.get("message")
        assert '"seq": 11' in failure.text
        assert "reproduce (in the campaign directory): sh failures/x/repro.sh" in failure.text

    def test_statuses_map_to_error_skipped_and_flaky_property(self):
        """error -> <error>, not-reached -> <skipped>, flaky -> a passing testcase with a flaky property."""
        root = self.parse(campaign([
            passing("tx:1@before-write", ERROR, verdict="launch-error", detail="cannot start"),
            passing("tx:2@before-write", NOT_REACHED, detail="agent finished first"),
            passing("tx:3@before-write", FLAKY, failures=[InvariantFailure("outcome", "once")])]))
        cases = list(root.iter("testcase"))
        assert cases[0].find("error").get("message") == "cannot start"
        assert "kill-point-not-reached" in cases[1].find("skipped").get("message")
        assert cases[2].find("failure") is None
        assert cases[2].find("properties/property").get("value") == "outcome"
        assert root.get("errors") == "1" and root.get("skipped") == "1"

    def test_control_characters_do_not_break_the_xml(self):
        """Evidence with NUL and other control characters still gives well-formed XML."""
        case = failing_case(failures=[InvariantFailure("log-reduces", "bad byte \x00\x07 here", "\x1b[31m")])
        text = junit_xml(campaign([case]))
        assert "\\x00" in text
        self.parse(campaign([case]))  # raises on malformed XML


class TestTimeline:
    def test_every_durable_transaction_and_fault_appears_once(self):
        """Each after-sync barrier is one tx mark, the kill is one fault mark in the killed lane, after tx 3."""
        t = tl.build(failing_case())
        txs = [m for m in t.marks if m.kind == "tx"]
        assert [m.title.split()[1] for m in txs] == ["1", "2", "3", "4"]
        assert [m.lane for m in txs] == [0, 0, 0, 1]
        faults = [m for m in t.marks if m.kind == "fault"]
        assert len(faults) == 1 and faults[0].lane == 0 and "assistant@after-sync#1" in faults[0].title
        assert faults[0].row > txs[2].row and faults[0].row < txs[3].row

    def test_restart_arrow_and_first_plan(self):
        """The kill points to the resume launch, whose start mark shows its first recovery plan."""
        t = tl.build(failing_case())
        (a, b), = t.arrows
        assert t.marks[a].kind == "fault" and t.marks[b].kind == "start" and t.marks[b].lane == 1
        assert t.marks[b].detail == "first plan: startTool start read#0"
        assert t.lanes == [("#0 run", "pid 100"), ("#1 resume", "pid 101")]

    def test_kill_at_before_write_shows_the_unwritten_transaction(self):
        """A kill at before-write draws its transaction as announced but not written."""
        t = tl.build(failing_case(run=make_run("before-write")))
        unwritten = [m for m in t.marks if m.kind == "unwritten"]
        assert len(unwritten) == 1 and "tx 3" in unwritten[0].title and "not written" in unwritten[0].detail
        assert [m.title.split()[1] for m in t.marks if m.kind == "tx"] == ["1", "2", "4"]

    def test_exit_codes_of_the_bundled_agent_are_explained(self):
        """An end mark names the bundled agent's exit meaning; a failing case gets a verdict bar."""
        t = tl.build(failing_case())
        end = next(m for m in t.marks if m.kind == "end")
        assert end.title == "■ exit 0" and end.detail == "agent: completed / idle"
        assert t.verdict == "✗ FAILED: converges"

    def test_svg_escapes_text(self):
        """Text from the case is escaped in the SVG (a fact or plan name cannot inject markup)."""
        case = failing_case(plans=[{"launch": 1, "plan": {"type": "<script>alert(1)</script>"}}])
        svg = tl.svg(tl.build(case))
        assert "<script>" not in svg and "&lt;script&gt;" in svg
        ET.fromstring(svg)  # well-formed

    def test_plan_summaries(self):
        """Plans read as short phrases."""
        assert tl.plan_summary({"type": "finish", "outcome": "completed", "completion": "truncated"}) == \
            "finish completed (truncated)"
        assert tl.plan_summary({"type": "blocked", "reason": "attempts_exhausted"}) == "blocked: attempts_exhausted"
        assert tl.plan_summary({"type": "startStep", "stepKind": "assistant", "attempt": 2}) == \
            "startStep assistant attempt 2"
        assert tl.plan_summary({"type": "appendSynthetic", "results": [{"reason": "interrupted"}]}) == \
            "appendSynthetic ×1 (interrupted)"


class TestHtml:
    def render(self, report: CampaignReport) -> str:
        return render_html(report, summarize(report))

    def test_failure_section_has_invariant_evidence_timeline_and_repro(self):
        """Each failure shows its invariant, evidence lines, an inline SVG timeline and its repro command."""
        page = self.render(campaign([failing_case(), passing("tx:1@before-write")]))
        assert page.count('<svg class="timeline"') == 1
        assert "final log, line 9, seq 11: the session did not converge" in page
        assert "sh failures/x/repro.sh" in page and 'href="failures/x/"' in page
        assert "startTool start read#0" in page

    def test_page_is_self_contained(self):
        """The page loads nothing: no script, stylesheet, image, font or frame from anywhere."""
        page = self.render(campaign([failing_case()]))
        assert not re.search(r"<script|<link|<img|<iframe|@import|url\((?!#)", page, re.I)  # url(#id): in-page
        assert not re.search(r"(src|href)=\"(https?:)?//", page)

    def test_case_text_is_escaped(self):
        """Scenario-controlled text (case ids, messages, evidence) is escaped, never markup."""
        case = failing_case(failures=[InvariantFailure("outcome", "<b>bold</b>", {"answer": "<img src=x>"})])
        page = self.render(campaign([case]))
        assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
        assert "<img src=x>" not in page

    def test_pass_banner_and_coverage_tables(self):
        """A campaign without failures says so, and lists coverage per kill point and planner rule."""
        cov = {"points": {"assistant@after-sync": {"reached": 1, "total": 1}}, "rules": {"P7.3": 1}}
        page = self.render(campaign([passing("assistant@after-sync#1"), passing("tx:2@before-write", NOT_REACHED)],
                                    coverage=cov))
        assert "Every invariant held in all 2 case(s)" in page
        assert "assistant@after-sync" in page and "P7.3" in page
        assert "Kill points not reached (1)" in page

    def test_flaky_and_baseline_problems_are_reported_apart(self):
        """Flaky cases get their own section, and a failed baseline is a banner naming the scenario."""
        flaky = passing("tx:3@before-write", FLAKY, failures=[InvariantFailure("outcome", "once")], run=make_run())
        page = self.render(campaign([flaky], baselines={"two-runs": {"ok": False, "problems": ["runs disagree"]}}))
        assert "Flaky cases (1)" in page and "FLAKY" in page
        assert "two-runs: runs disagree" in page

    def test_many_failures_are_listed_compactly_after_the_first_ones(self):
        """Past the detailed limit, failing cases are still listed with their invariant and repro command."""
        from chaos.report.html import MAX_DETAILED

        cases = [failing_case(id=f"read-then-answer::tx:{i}@after-sync", schedule=[f"tx:{i}@after-sync"],
                              minimal=None, repro=None) for i in range(1, MAX_DETAILED + 3)]
        page = self.render(campaign(cases))
        assert page.count('<svg class="timeline"') == MAX_DETAILED
        assert "2 more failing case(s)" in page
        assert "chaos run scenarios/read-then-answer.toml --kill tx:22@after-sync --agent-bugs" in page


class TestIncomplete:
    def report(self, **kw) -> CampaignReport:
        return campaign([passing("assistant@after-sync#1")], planned=5, complete=False, stopped="budget",
                        not_run="4 of 5 planned case(s) did not run — the time budget was used up",
                        resume="chaos campaign --resume reports/demo", **kw)

    def test_summary_says_incomplete_with_counts_and_the_resume_command(self):
        """summary.json has complete false, the not-run count, why, and the command that continues the campaign."""
        summary = summarize(self.report())
        assert summary["complete"] is False and summary["cases"]["notRun"] == 4 and summary["stopped"] == "budget"
        assert summary["resume"] == "chaos campaign --resume reports/demo"
        assert summarize(campaign([passing("assistant@after-sync#1")], planned=1))["complete"] is True

    def test_junit_carries_completeness_as_properties_even_with_no_case(self):
        """Every suite has complete/cases_planned/cases_not_run; a campaign with no case still has a suite for them."""
        props = {p.get("name"): p.get("value") for p in ET.fromstring(junit_xml(self.report())).iter("property")}
        assert props["complete"] == "false" and props["cases_planned"] == "5" and props["cases_not_run"] == "4"
        assert props["resume"] == "chaos campaign --resume reports/demo"
        empty = ET.fromstring(junit_xml(campaign([], planned=3, complete=False)))
        [suite] = empty.iter("testsuite")
        assert suite.get("tests") == "1" and {p.get("name"): p.get("value") for p in suite.iter("property")}[
            "complete"] == "false"
        ran_none = ET.fromstring(junit_xml(campaign([], planned=0)))
        [suite] = ran_none.iter("testsuite")
        assert suite.get("tests") == "0" and suite.get("name") == "demo"

    def test_an_incomplete_campaign_is_not_green_in_junit(self):
        """The cases that did not run are one skipped test saying how many, why and how to continue; the totals
        count it, so a dashboard cannot show the cases that ran as a whole green run."""
        xml = ET.fromstring(junit_xml(self.report()))
        assert xml.get("skipped") == "1" and xml.get("tests") == "2"
        [tc] = [t for t in xml.iter("testcase") if t.get("name") == "cases not run"]
        [skipped] = tc.iter("skipped")
        assert skipped.get("message") == ("incomplete campaign: 4 of 5 planned case(s) did not run — the time budget "
                                          "was used up; continue with: chaos campaign --resume reports/demo")
        assert not any(t.get("name") == "cases not run"
                       for t in ET.fromstring(junit_xml(campaign([passing("x@after-sync#1")]))).iter("testcase"))

    def test_the_page_says_first_how_much_did_not_run_and_shows_no_green_banner(self):
        """An incomplete page starts with the not-run banner and the resume command; no "every invariant held"."""
        page = TestHtml().render(self.report())
        assert "Every invariant held" not in page and "banner pass" not in page
        first = page.index('class="banner')
        assert page.index("Incomplete campaign: 4 of 5 planned case(s) did not run") > first
        assert page.index("chaos campaign --resume reports/demo") < page.index('class="cards"')

    def test_a_failed_baseline_is_a_failing_junit_testcase(self):
        """A baseline that did not pass (no case of its scenario ran) is a failing `baseline` testcase, not absent."""
        xml = ET.fromstring(junit_xml(campaign([passing("assistant@after-sync#1")], planned=1, baselines={
            "w": {"ok": False, "problems": ["baseline run 1 did not pass (outcome)"], "why": ["agent stderr: boom"]},
            "fine": {"ok": True}})))
        assert xml.get("failures") == "1" and xml.get("tests") == "2"
        [suite] = [s for s in xml.iter("testsuite") if s.get("name") == "w"]
        [tc] = suite.iter("testcase")
        assert (tc.get("name"), suite.get("failures"), suite.get("tests")) == ("baseline", "1", "1")
        [failure] = tc.iter("failure")
        assert failure.get("type") == "baseline" and failure.get("message") == "baseline run 1 did not pass (outcome)"
        assert "agent stderr: boom" in failure.text
        assert {p.get("name") for p in suite.iter("property")} >= {"complete", "cases_planned"}

    def test_a_failed_baseline_shows_why_and_no_green_banner(self):
        """The baseline banner carries the tool error and stderr lines; the page is not green."""
        why = ["tool write returned an error: invalid arguments for tool 'write': missing required property 'content'"]
        page = TestHtml().render(campaign([passing("assistant@after-sync#1")], planned=1,
                                          baselines={"w": {"ok": False, "problems": ["did not pass"], "why": why}}))
        assert "missing required property &#39;content&#39;" in page and "banner pass" not in page


def test_a_minimal_schedule_from_a_shrink_cut_short_is_marked_everywhere():
    """The page, JUnit and summary.json say when a minimal schedule is only the best found before shrinking stopped."""
    case = failing_case(id="read-then-answer::tx:3@after-sync+assistant@after-sync#1", shrink_cut_short=True,
                        schedule=["tx:3@after-sync", "assistant@after-sync#1"])
    report = campaign([case])
    assert "(shrinking was cut short: the best schedule found so far)" in TestHtml().render(report)
    assert "(shrinking was cut short: the best schedule found so far)" in junit_xml(report)
    assert summarize(report)["failures"]["cases"][0]["shrinkCutShort"] is True
    assert "cut short" not in TestHtml().render(campaign([failing_case()]))


class TestWriteReports:
    def test_writes_all_renderings_and_the_data(self, tmp_path: Path):
        """write_reports writes summary.json, junit.xml, index.html and report.json (re-renderable)."""
        report = campaign([failing_case(), passing("tx:1@before-write")])
        paths = write_reports(report, tmp_path / "out")
        assert {p.name for p in (tmp_path / "out").iterdir()} == {"summary.json", "junit.xml", "index.html",
                                                                   "report.json"}
        assert json.loads(paths["summary"].read_text())["cases"]["failed"] == 1
        again = CampaignReport.from_json(json.loads(paths["data"].read_text()))
        assert again == report


def test_read_plans_from_agent_stderr(tmp_path: Path):
    """Plans are the JSON of the agent's 'agent: plan' stderr lines, per launch; other lines are ignored."""
    err0, err1 = tmp_path / "0.stderr", tmp_path / "1.stderr"
    err0.write_text("agent: session /x\n")
    err1.write_text('agent: session /x\nagent: plan {"type":"finish","outcome":"completed"}\nagent: plan {bad\n'
                    'agent: plan {"type":"blocked","reason":"environment_changed"}\n')
    run = make_run(stderr={0: str(err0), 1: str(err1)})
    assert read_plans(run) == [{"launch": 1, "plan": {"type": "finish", "outcome": "completed"}},
                               {"launch": 1, "plan": {"type": "blocked", "reason": "environment_changed"}}]
    assert read_plans({"launches": [{"index": 0, "stderr": str(tmp_path / "missing")}]}) == []


class TestCaseRecord:
    def test_a_journal_line_is_a_case_report(self):
        """case_record checks and completes a record as a CaseReport and returns exactly its JSON."""
        line = case_record(id="s::a@after-sync#1", scenario="s", schedule=["a@after-sync#1"], status="pass",
                           origin="exhaustive", index=3, reached=[{"point": "a@after-sync#1"}], target="bundled")
        assert line == CaseReport.from_json(line).to_json()
        assert (line["origin"], line["index"], line["target"], line["failures"]) == ("exhaustive", 3, "bundled", [])

    def test_a_field_the_record_does_not_know_is_refused(self):
        """A field the record type does not declare is an error, never silently dropped."""
        with pytest.raises(ValueError, match="unknown field"):
            case_record(id="s::x", scenario="s", schedule=[], status="pass", surprise=1)

    def test_a_status_outside_the_enum_or_a_nameless_failure_is_refused(self):
        """The status must be one of the enum; a failed case must name its invariant."""
        with pytest.raises(ValueError):
            case_record(id="s::x", scenario="s", schedule=[], status="passed")
        with pytest.raises(ValueError):
            case_record(id="s::x", scenario="s", schedule=[], status="fail")
