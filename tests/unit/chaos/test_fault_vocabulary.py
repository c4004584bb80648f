"""The fault grammar checks fact names against a target's own vocabulary (a probe target's tables, files, points)."""

from __future__ import annotations

import pytest

from chaos.faults import (FACT_NAMES, Barrier, Fault, FaultSyntaxError, KillPoint, Matcher, format_fault,
                          parse_case_id, parse_fault, parse_schedule)

PROBE = ("commit", "writes", "checkpoints", "fsync", "point", "effected")


def test_default_vocabulary_is_the_contract():
    """Without a vocabulary a contract fact parses and a probe fact is refused, naming the contract's names."""
    assert parse_fault("toolStarted@after-sync#1").point.fact == "toolStarted"
    with pytest.raises(FaultSyntaxError, match="unknown fact 'writes'.*runStarted"):
        parse_fault("writes@after-sync#2")


def test_target_vocabulary_accepts_its_names_and_refuses_others():
    """With a target's vocabulary its names parse, a contract name is refused, and the message lists its names."""
    assert parse_fault("writes@after-sync#2", PROBE) == Fault("kill", KillPoint("after-sync", fact="writes", n=2))
    assert parse_fault("ioerror(EIO):commit@before-write#1", PROBE).errno == "EIO"
    with pytest.raises(FaultSyntaxError, match="unknown fact 'toolStarted'.*commit, writes"):
        parse_fault("toolStarted@after-sync#1", PROBE)


def test_schedule_and_case_id_carry_the_vocabulary():
    """A schedule and a case id parse with the vocabulary, and round-trip through their canonical text."""
    schedule = parse_schedule("commit@before-write#1+writes@after-sync#2", PROBE)
    assert [format_fault(f) for f in schedule] == ["commit@before-write#1", "writes@after-sync#2"]
    assert parse_case_id("wf::effected@after-sync#3", PROBE)[1][0].point.fact == "effected"
    assert parse_schedule("tx:3@after-sync", PROBE)[0].point.tx == 3  # tx:K needs no vocabulary


def test_barrier_points_follow_the_vocabulary():
    """A barrier names a kill point per fact of the vocabulary given, and none for names outside it."""
    barrier = Barrier("after-sync", ("commit", "writes"), 4, {"commit": 3, "writes": 2})
    assert [str(p) for p in barrier.points(PROBE)] == ["tx:4@after-sync", "commit@after-sync#3", "writes@after-sync#2"]
    assert [str(p) for p in barrier.points()] == ["tx:4@after-sync"]  # not contract facts
    assert "commit" not in FACT_NAMES


def test_matcher_fires_on_a_probe_fact():
    """The matcher counts probe facts like contract facts: the second transaction writing `writes` fires."""
    m = Matcher(parse_schedule("writes@after-sync#2", PROBE))
    fired = []
    for facts in (("commit", "checkpoints", "writes"), ("commit", "checkpoints"), ("commit", "writes")):
        for phase in ("before-write", "after-write", "after-sync"):
            fired.append(m.observe("s", phase, facts)[1])
    assert [i for i, f in enumerate(fired) if f] == [8]
