"""chaos.properties on hand-built evidence: each property holds on a correct case and fails on a planted defect."""

from __future__ import annotations

import pytest

from chaos.properties import (ALL_PROPERTIES, NO_BASELINE, PROPERTIES, LaunchEvidence, ProbeEvidence, completes,
                              consume_once, effects_bounded, judge, matches_baseline, recorded_not_redone,
                              recovery_deterministic, state_loads)


def found(done, result=None, complete=False, integrity="ok"):
    """An inspection record: the state a restarted launch found."""
    return {"integrity": {"wf.db": integrity}, "reader": {"done": list(done), "result": result, "complete": complete},
            "reader_error": None}


FINAL = found("abc", 123, True)


def correct(**changes) -> ProbeEvidence:
    """A case killed once after step a's record, resumed, finished: every property holds."""
    base = dict(
        launches=(LaunchEvidence(0, "step", -9, True), LaunchEvidence(1, "resume", 0, False, None, found("a", 1))),
        effects=(("a", 0), ("b", 1), ("c", 1)), final=FINAL, verdict="exit:0", baseline=123)
    base.update(changes)
    return ProbeEvidence(**base)


def test_correct_case_holds_every_property():
    """A correct case has no problem under any property."""
    assert judge(correct(), bound=1, max_launches=2) == {name: [] for name in PROPERTIES}


class TestStateLoads:
    def test_integrity_failure_after_a_kill_fails(self):
        """A store whose integrity check fails when a restart opens it fails state-loads, naming the launch."""
        ev = correct(launches=(LaunchEvidence(0, "step", -9, True),
                               LaunchEvidence(1, "resume", 0, False, None, found("a", 1, integrity="page 3: bad"))))
        assert state_loads(ev) == ["the state launch 1 (resume) found: wf.db: integrity check: page 3: bad"]

    def test_a_restart_that_raises_fails(self):
        """A launch not killed by the harness that exits non-zero fails state-loads with its exception line."""
        ev = correct(launches=(LaunchEvidence(0, "step", -9, True),
                               LaunchEvidence(1, "resume", 1, False, "json.decoder.JSONDecodeError: Expecting value",
                                              found("a", 1))))
        assert state_loads(ev) == ["launch 1 (resume) exited 1: json.decoder.JSONDecodeError: Expecting value"]

    def test_reader_failure_and_absent_store(self):
        """A reader that fails is a problem; a store that does not exist yet is not."""
        final = {"integrity": {"wf.db": "absent"}, "reader": None, "reader_error": "reader exited 1: boom"}
        assert state_loads(correct(final=final)) == ["the final state: the target's reader failed: reader exited 1: boom"]


class TestRecordedNotRedone:
    def test_recorded_effect_run_again_fails(self):
        """An effect the starting state recorded as done, run again by that launch, fails the property."""
        ev = correct(effects=(("a", 0), ("a", 1), ("b", 1), ("c", 1)))
        assert recorded_not_redone(ev) == [
            "effect 'a' ran in launch 1, but the state launch 1 started from already recorded it as done"]

    def test_unrecorded_effect_may_run_again(self):
        """An effect run before the kill but not recorded may run again."""
        ev = correct(launches=(LaunchEvidence(0, "step", -9, True),
                               LaunchEvidence(1, "resume", 0, False, None, found(""))),
                     effects=(("a", 0), ("a", 1), ("b", 1), ("c", 1)))
        assert recorded_not_redone(ev) == []


class TestEffectsBounded:
    def test_over_the_bound_fails(self):
        """An effect run three times under a bound of two fails, listing its launches."""
        ev = correct(effects=(("a", 0), ("a", 1), ("a", 1), ("b", 1), ("c", 1)))
        assert effects_bounded(ev, 2) == [
            "effect 'a' ran 3 times (launches [0, 1, 1]); the target's guarantee allows at most 2"]
        assert effects_bounded(ev, 3) == []


class TestCompletes:
    def test_unfinished_state_fails(self):
        """A case whose final state is not finished fails completes."""
        assert completes(correct(final=found("ab", 12, False)), 4) == [
            "the final state does not record the program as finished"]

    def test_too_many_launches_and_a_hang_fail(self):
        """More launches than allowed, or a case that did not end by itself, fails completes."""
        assert completes(correct(), 1) == ["2 launches, more than the 1 allowed"]
        assert completes(correct(verdict="hang"), 4) == ["the case ended hang, not exit:0"]


class TestMatchesBaseline:
    def test_different_result_fails(self):
        """A final result other than the crash-free run's fails matches-baseline."""
        assert matches_baseline(correct(final=found("abc", 23, True))) == [
            "final result 23, the crash-free run's is 123"]

    def test_not_judged_without_a_baseline(self):
        """Without a crash-free result the property is not judged."""
        assert matches_baseline(correct(final=found("abc", 23, True), baseline=NO_BASELINE)) == []


def test_unknown_property_is_refused():
    """Asking for a property that does not exist is an error naming the known ones."""
    with pytest.raises(ValueError, match="unknown property 'consume-twice'.*state-loads"):
        judge(correct(), properties=("consume-twice",))


def concurrent(*effects) -> ProbeEvidence:
    """Killed at a parked interrupt, then three processes resumed it at once (dresume(3))."""
    return correct(launches=(LaunchEvidence(0, "step", -9, True), *(
        LaunchEvidence(i, "dresume", 0, False, None, found("a", 1)) for i in (1, 2, 3))), effects=effects)


class TestConsumeOnce:
    def test_one_of_the_concurrent_resumes_fires_it(self):
        """The effect fired by one of three concurrent resumes holds."""
        assert consume_once(concurrent(("a", 0), ("b", 2), ("c", 2))) == []

    def test_two_concurrent_resumes_firing_it_fails(self):
        """The same effect fired by two concurrent resumes fails, naming both launches."""
        assert consume_once(concurrent(("a", 0), ("b", 1), ("b", 3))) == [
            "effect 'b' ran 2 times in 3 concurrent resumes (launches [1, 3]); it must fire once"]

    def test_not_judged_without_concurrent_resumes(self):
        """A case with no concurrent resume leaves consume-once out of the judgement (never a silent pass)."""
        assert "consume-once" not in judge(correct(), properties=ALL_PROPERTIES)
        assert judge(concurrent(("b", 1), ("b", 2)), properties=("consume-once",))["consume-once"]


class TestRecoveryDeterministic:
    def test_same_result_holds(self):
        """A second recovery of the same durable state that ends with the case's result holds."""
        assert recovery_deterministic(correct(again=123)) == []

    def test_other_result_fails(self):
        """A second recovery that ends elsewhere fails, with both results."""
        assert recovery_deterministic(correct(again=124)) == [
            "recovering the same durable state again ended with 124, the case with 123"]

    def test_not_judged_without_a_second_recovery(self):
        """Without a second recovery the property is left out of the judgement."""
        assert "recovery-deterministic" not in judge(correct(), properties=ALL_PROPERTIES)
