"""Unit and property tests of chaos.shrink: each pass, termination, and 1-minimality for synthetic predicates."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.faults import FACT_NAMES, PHASES, Fault, FaultSyntaxError, KillPoint, parse_fault
from chaos.schedules import CaseSpec, LlmFault, spec_from_id
from chaos.shrink import drop_faults, drop_llm, earlier, neighbours, plain_kills, shrink, size


def case(text: str) -> CaseSpec:
    return spec_from_id(text, origin="random")


def ids(cases) -> list[str]:
    return [c.id for c in cases]


class TestPasses:
    def test_drop_faults_never_proposes_the_baseline(self):
        """Dropping kills proposes every one-shorter schedule, but not the empty one."""
        assert ids(drop_faults(case("s::toolStarted@after-sync#1"))) == []
        two = case("s::toolStarted@after-sync#1+tx:9@before-write")
        assert ids(drop_faults(two)) == ["s::tx:9@before-write", "s::toolStarted@after-sync#1"]

    def test_drop_llm(self):
        """Provider faults can be dropped; with no kill left the last one stays."""
        c = case("s::toolStarted@after-sync#1+llm(drop)@1.2")
        assert ids(drop_llm(c)) == ["s::toolStarted@after-sync#1"]
        assert ids(drop_llm(case("s::llm(drop)@1.2"))) == []

    def test_plain_kills(self):
        """torn, powerloss and dresume become a plain kill; a kill at after-write moves to after-sync."""
        c = case("s::torn(5):assistant@after-write#2+dresume:tx:9@before-write+int:tx:10@after-sync")
        assert ids(plain_kills(c)) == [
            "s::assistant@after-sync#2+dresume:tx:9@before-write+int:tx:10@after-sync",
            "s::torn(5):assistant@after-write#2+tx:9@before-write+int:tx:10@after-sync",
        ]

    def test_earlier(self):
        """A fault moves to ordinal 1, to N-1, then to an earlier phase; plain kills skip after-write."""
        assert ids(earlier(case("s::assistant@after-sync#3"))) == [
            "s::assistant@after-sync#1", "s::assistant@after-sync#2", "s::assistant@before-write#3"]
        assert ids(earlier(case("s::ioerror(EIO):tx:2@after-write"))) == [
            "s::ioerror(EIO):tx:1@after-write", "s::ioerror(ENOSPC):tx:2@before-write"]
        assert ids(earlier(case("s::torn(3):tx:1@after-write"))) == []  # torn lives at after-write only

    def test_neighbours_are_strictly_smaller(self):
        """Every proposed neighbour has a strictly smaller size."""
        c = case("s::torn(5):assistant@after-write#2+int:tx:9@after-sync+llm(http:500)@1.1")
        assert all(size(n) < size(c) for n in neighbours(c))


points = st.builds(
    lambda fact, n, phase, tx, use_tx: KillPoint(phase, tx=tx) if use_tx else KillPoint(phase, fact=fact, n=n),
    st.sampled_from(FACT_NAMES), st.integers(1, 5), st.sampled_from(PHASES), st.integers(1, 12), st.booleans(),
)


@st.composite
def faults(draw):
    point = draw(points)
    action = draw(st.sampled_from(["kill", "int", "torn", "powerloss", "dresume", "ioerror"]))
    try:
        return Fault(action, point, bytes=draw(st.integers(1, 9)) if action == "torn" else None,
                     errno=draw(st.sampled_from(["ENOSPC", "EIO"])) if action == "ioerror" else None)
    except FaultSyntaxError:
        return Fault("kill", point)


cases = st.builds(
    lambda fs, llm: CaseSpec("s", tuple(fs), tuple(llm), origin="random"),
    st.lists(faults(), min_size=1, max_size=4),
    st.lists(st.builds(LlmFault, st.just("drop"), st.integers(1, 2), st.integers(1, 3)), max_size=1),
)


# Synthetic predicates standing in for "the same invariant still fails".
def kills_a_tool_late(c: CaseSpec) -> bool:
    """Fails when some kill-like fault hits a toolStarted transaction numbered 2 or more."""
    return any(f.point.fact == "toolStarted" and f.point.n >= 2 and f.kills for f in c.faults)


def two_faults_or_provider(c: CaseSpec) -> bool:
    """Fails with two faults at least, or with any provider fault."""
    return len(c.faults) >= 2 or bool(c.llm)


class TestShrink:
    def test_stale_calls_shape_shrinks_to_one_kill(self):
        """A three-fault schedule whose failure needs one late kill shrinks to that kill alone, made plain."""
        start = case("s::int:tx:1@after-sync+torn(7):toolStarted@after-write#3+tx:12@before-write+llm(drop)@1.1")
        result = shrink(start, kills_a_tool_late)
        assert result.case.id == "s::toolStarted@before-write#2"
        assert not result.exhausted and result.steps[-1] == result.case.id

    def test_budget_is_respected(self):
        """Shrinking stops after max_calls predicate calls and says so."""
        calls = []
        result = shrink(case("s::tx:9@after-sync+tx:10@after-sync+tx:11@after-sync"),
                        lambda c: calls.append(c) or False, max_calls=3)
        assert len(calls) == 3 and result.exhausted and result.calls == 3 and result.cut_short == "calls"

    def test_a_deadline_cuts_shrinking_short_and_keeps_the_best_schedule_so_far(self):
        """No predicate call starts at or after the deadline; the result is the best case found, marked cut short."""
        now = [0.0]

        def fails_and_takes_time(c: CaseSpec) -> bool:
            now[0] += 10.0  # each candidate run costs ten seconds of the clock
            return kills_a_tool_late(c)

        start = case("s::int:tx:1@after-sync+torn(7):toolStarted@after-write#3+tx:12@before-write+llm(drop)@1.1")
        result = shrink(start, fails_and_takes_time, deadline=25.0, clock=lambda: now[0])
        assert result.calls == 3 and result.exhausted and result.cut_short == "deadline"
        assert result.case.id != start.id and result.case.id == result.steps[-1]  # progress kept, not the start
        assert shrink(start, kills_a_tool_late, deadline=None).cut_short is None

    def test_the_predicate_is_asked_once_per_candidate(self):
        """A candidate proposed again is answered from the cache."""
        seen: list[str] = []
        shrink(case("s::tx:5@after-sync+tx:6@after-sync"), lambda c: seen.append(c.id) or two_faults_or_provider(c))
        assert len(seen) == len(set(seen))

    @settings(max_examples=150, deadline=None)
    @given(cases, st.sampled_from([kills_a_tool_late, two_faults_or_provider]))
    def test_result_is_one_minimal(self, start, predicate):
        """The result still fails, is no larger than the start, and no neighbour of it still fails."""
        if not predicate(start):
            return
        result = shrink(start, predicate, max_calls=10_000)
        assert predicate(result.case) and size(result.case) <= size(start)
        assert not any(predicate(n) for n in neighbours(result.case))

    @settings(max_examples=100, deadline=None)
    @given(cases)
    def test_two_fault_predicate_keeps_exactly_two_simple_faults(self, start):
        """For 'two faults fail', the minimum is two plain kills at ordinal 1 before-write, or one provider fault."""
        if not two_faults_or_provider(start):
            return
        result = shrink(start, two_faults_or_provider, max_calls=10_000).case
        if result.llm:
            assert result.faults == () and len(result.llm) == 1
        else:
            assert len(result.faults) == 2
            for f in result.faults:
                assert f.action in ("kill", "int", "ioerror") and f.point.phase == "before-write"
                assert (f.point.tx or f.point.n) == 1


def test_parse_fault_helper_matches_grammar():
    """The helper builds the same faults as the grammar."""
    assert case("s::toolStarted@after-sync#1").faults == (parse_fault("toolStarted@after-sync#1"),)
