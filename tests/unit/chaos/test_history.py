"""Unit tests of chaos.report.history: runs, series, new / still failing / fixed / flaky, replay order, the index."""

from __future__ import annotations

import json
import threading

from chaos.campaign import build_result
from chaos.report.history import (
    FIXED,
    FLAKY_GROUP,
    NEW,
    NOT_CHECKED,
    STILL,
    add_run,
    empty_history,
    load_history,
    render_index,
    replay_candidates,
    run_entry,
    series_of,
    text_lines,
    update_history,
    verdict,
    watched_ids,
)
from chaos.target import Target

BUGGY = Target(bugs=("stale-assistant-calls",)).to_json()
CORRECT = Target().to_json()
IDS = ["s::assistant@after-sync#2", "s::operationFinished@before-write#1", "s::user@after-sync#1"]
KEY = ("converges", "kill", "assistant")


def record(cid: str, status: str = "pass") -> dict:
    failing = status in ("fail", "flaky")
    return {"id": cid, "scenario": "s", "schedule": [cid.partition("::")[2]], "origin": "exhaustive",
            "status": status, "kills": 1, "restarts": 1, "rules": [], "reached": [],
            "failures": [{"invariant": "converges", "message": "no", "evidence": None}] if failing else [],
            "keys": [list(KEY)] if failing else [], "minimal": [cid.partition("::")[2]] if status == "fail" else None}


def result(name: str, statuses: dict[str, str], *, target=CORRECT, planned: int | None = None, stopped=None):
    params = {"name": name, "started": f"2026-12-0{name[-1]}T02:00:00+00:00", "stopped": stopped,
              "options": {"target": target, "name": name},
              "plan": {"cases": planned if planned is not None else len(statuses), "points": {}, "recovery": {}},
              "baselines": {"s": {"ok": True}}}
    return build_result(params, [record(cid, st) for cid, st in statuses.items()], duration=2.0)


def history_of(*runs) -> dict:
    history = empty_history()
    series = series_of(CORRECT, ["s"])
    for res in runs:
        history = add_run(history, run_entry(res.name, res, series, watched_ids(history, series["key"])))
    return history


GREEN = {cid: "pass" for cid in IDS}
RED = {IDS[0]: "fail", IDS[1]: "fail", IDS[2]: "pass"}


class TestSeries:
    def test_a_bug_switch_does_not_start_another_series_but_other_scenarios_do(self):
        """The series is the target without its switches plus the scenario names."""
        assert series_of(BUGGY, ["s", "t"])["key"] == series_of(CORRECT, ["t", "s"])["key"]
        assert series_of(CORRECT, ["s"])["key"] != series_of(CORRECT, ["s", "t"])["key"]
        assert series_of(Target(name="other").to_json(), ["s"])["key"] != series_of(CORRECT, ["s"])["key"]


class TestChanges:
    def test_green_then_new_then_fixed_then_new_again(self):
        """Failures are new against a green run, fixed when their cases pass again, and a regression when back."""
        history = history_of(result("run1", GREEN), result("run2", RED, target=BUGGY), result("run3", GREEN),
                             result("run4", RED, target=BUGGY))
        one, two, three, four = (r["changes"] for r in history["runs"])
        assert all(not v for v in one.values())
        [new] = two[NEW]
        assert tuple(new["key"]) == KEY and new["count"] == 2 and not new["seenBefore"]
        [fixed] = three[FIXED]
        assert tuple(fixed["key"]) == KEY and fixed["rerun"] == sorted(IDS[:2])
        [again] = four[NEW]
        assert again["seenBefore"]
        assert history["runs"][1]["target"] == "bundled AGENT_BUGS=stale-assistant-calls"
        page = render_index(history, title="out")  # every run's row counts its changes
        assert page.count('<span class="pill fail">new 1</span>') == 2 and '<span class="pill pass">fixed 1</span>' in page

    def test_still_failing_names_the_first_run_of_the_streak(self):
        """A failure in two runs in a row is still failing, since the first of them."""
        history = history_of(result("run1", GREEN), result("run2", RED), result("run3", RED))
        [still] = history["runs"][2]["changes"][STILL]
        assert still["since"] == "run2" and not history["runs"][2]["changes"][NEW]

    def test_a_failure_whose_cases_did_not_run_is_not_called_fixed(self):
        """An incomplete run that never re-ran yesterday's failing cases leaves them not checked."""
        history = history_of(result("run1", RED), result("run2", {IDS[2]: "pass"}, planned=3, stopped="budget"))
        changes = history["runs"][1]["changes"]
        assert not changes[FIXED] and [tuple(g["key"]) for g in changes[NOT_CHECKED]] == [KEY]

    def test_a_flaky_case_comes_with_its_outcome_in_every_run(self):
        """A case failing yesterday and flaky today is flaky, with its history run by run."""
        history = history_of(result("run1", GREEN), result("run2", RED),
                             result("run3", {IDS[0]: "flaky", IDS[1]: "pass", IDS[2]: "pass"}))
        [flaky] = history["runs"][2]["changes"][FLAKY_GROUP]
        assert flaky["history"][IDS[0]] == [["run1", "–"], ["run2", "fail"], ["run3", "flaky"]]
        assert not history["runs"][2]["changes"][FIXED]

    def test_a_resumed_campaign_replaces_its_run(self):
        """Adding a run of the same directory again replaces it instead of counting it twice."""
        history = history_of(result("run1", GREEN), result("run2", RED))
        again = history_of(result("run1", GREEN), result("run2", RED), result("run2", GREEN))
        assert [r["campaign"] for r in again["runs"]] == ["run1", "run2"] and again["runs"][1]["cases"]["fail"] == 0
        assert history["runs"][1]["cases"]["fail"] == 2


class TestVerdict:
    def test_an_incomplete_run_is_never_green(self):
        """A run that held but did not run every planned case is incomplete, on the page and in the text."""
        history = history_of(result("run1", {IDS[0]: "pass"}, planned=3, stopped="budget"))
        run = history["runs"][0]
        assert verdict(run) == "incomplete" and "2 of 3 planned case(s) did not run" in run["notRun"]
        page = render_index(history, title="out")
        assert "banner incomplete" in page and "banner pass" not in page and "chaos campaign --resume run1" in page
        assert "INCOMPLETE" in "\n".join(text_lines(history))

    def test_failures_outrank_incompleteness_and_a_complete_green_run_is_green(self):
        """A failing run is fail even when incomplete; a complete run with no failure is pass."""
        history = history_of(result("run1", GREEN), result("run2", {IDS[0]: "fail"}, planned=3))
        assert [verdict(r) for r in history["runs"]] == ["pass", "fail"]
        page = render_index(history_of(result("run1", GREEN)), title="out")
        assert "banner pass" in page and "every one of its 3 planned case(s) ran and held" in page


class TestReplay:
    def test_failed_and_flaky_cases_of_the_series_come_most_recent_first(self):
        """Replay lists the failing and flaky cases of earlier runs of the series, newest run first, minimal too."""
        history = history_of(result("run1", {IDS[2]: "flaky", IDS[0]: "pass", IDS[1]: "pass"}), result("run2", RED))
        series = series_of(CORRECT, ["s"])["key"]
        assert replay_candidates(history, series) == [IDS[0], IDS[1], IDS[2]]
        assert replay_candidates(history, series, exclude="run2") == [IDS[2]]
        assert replay_candidates(history, series_of(CORRECT, ["other"])["key"]) == []


class TestFiles:
    def test_concurrent_updates_under_the_lock_lose_no_run(self, tmp_path):
        """Eight campaigns finishing at once in one --out all end up in history.json, and index.html is written."""
        series = series_of(CORRECT, ["s"])
        results = [result(f"run{i}", GREEN) for i in range(1, 9)]
        threads = [threading.Thread(target=update_history, args=(tmp_path, tmp_path / r.name, r),
                                    kwargs={"series": series}) for r in results]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        history = load_history(tmp_path)
        assert sorted(r["campaign"] for r in history["runs"]) == sorted(r.name for r in results)
        assert json.loads((tmp_path / "history.json").read_text())["format"] == "killpoint-history/1"
        assert "killpoint history" in (tmp_path / "index.html").read_text()


def test_report_history_on_a_missing_directory_is_one_line_and_creates_nothing(tmp_path):
    """`chaos report history` of a path that does not exist says so in one line, exit 2, and leaves no directory."""
    import subprocess
    import sys

    missing = tmp_path / "no-such-out"
    done = subprocess.run([sys.executable, "-m", "chaos.cli", "report", "history", str(missing)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not a directory" in done.stderr
    assert not missing.exists()
