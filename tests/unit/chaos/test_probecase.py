"""chaos.probecase.classify: the one verdict of a probe case, on hand-built runs (no processes)."""

from __future__ import annotations

from chaos import records
from chaos.probecase import ProbeCase, classify
from chaos.properties import ProbeEvidence
from chaos.records import CaseRun, FaultRecord


def case(verdict: str, problems: dict | None = None, fired: bool = True) -> ProbeCase:
    """A probe case that ended with ``verdict`` and the properties' ``problems``."""
    run = CaseRun("t::commit@after-sync#1", ["commit@after-sync#1"], "/nowhere", "/nowhere.sock", verdict=verdict,
                  detail="detail")
    if fired:
        run.faults.append(FaultRecord("commit@after-sync#1", "kill", 0, 0, 1, 0.0, signal="SIGKILL"))
    return ProbeCase(run, ProbeEvidence(()), problems or {"state-loads": [], "completes": []})


def test_all_properties_holding_is_a_pass():
    """A case that exited 0 with every judged property holding passes."""
    assert classify(case("exit:0")) == ("pass", [])


def test_a_failing_property_is_a_failure_with_its_evidence():
    """A failing property is the case's failure, with its first problem as the message."""
    status, failures = classify(case("exit:0", {"completes": ["the case ended exit:1", "more"]}))
    assert status == "fail"
    assert failures == [{"invariant": "completes", "message": "the case ended exit:1",
                         "evidence": ["the case ended exit:1", "more"]}]


def test_a_hang_is_never_hidden_by_holding_properties():
    """A hang (or crash, protocol error) fails the case under its own name even when every property held."""
    status, failures = classify(case(records.HANG))
    assert status == "fail" and failures[0]["invariant"] == records.HANG


def test_an_unexpected_exit_with_no_failing_property_fails():
    """A program that ended with another exit while no listed property noticed fails as program-exit."""
    status, failures = classify(case("exit:3"))
    assert status == "fail" and failures[0]["invariant"] == "program-exit"


def test_unreached_point_is_not_a_pass_and_a_fired_fault_keeps_its_failure():
    """A schedule whose point was never reached is not-reached; if an earlier fault fired and a property failed,
    that failure is kept."""
    assert classify(case(records.NOT_REACHED, fired=False)) == ("not-reached", [])
    status, failures = classify(case(records.NOT_REACHED, {"recorded-not-redone": ["redone"]}))
    assert status == "fail" and failures[0]["invariant"] == "recorded-not-redone"


def test_launch_error_and_unknown_verdicts_are_harness_errors():
    """A launch error, or a verdict the harness does not know, is an error, not a pass or a fail."""
    assert classify(case(records.LAUNCH_ERROR))[0] == "error"
    assert classify(case("weird"))[0] == "error"
