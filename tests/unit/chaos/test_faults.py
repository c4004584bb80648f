"""Unit tests of chaos.faults: the fault grammar, case ids, and the barrier matcher."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.errors import ChaosError
from chaos.faults import (
    FACT_NAMES,
    PHASES,
    BarrierOrderError,
    Fault,
    FaultSyntaxError,
    KillPoint,
    Matcher,
    case_id,
    format_fault,
    format_schedule,
    parse_case_id,
    parse_fault,
    parse_point,
    parse_schedule,
)


class TestParseFault:
    @pytest.mark.parametrize(
        ("text", "fault"),
        [
            ("toolStarted@after-sync#1", Fault("kill", KillPoint("after-sync", fact="toolStarted", n=1))),
            ("kill:tx:3@before-write", Fault("kill", KillPoint("before-write", tx=3))),
            ("tx:12@after-write", Fault("kill", KillPoint("after-write", tx=12))),
            ("int:stepAttempt@after-sync#2", Fault("int", KillPoint("after-sync", fact="stepAttempt", n=2))),
            ("torn(7):assistant@after-write#1", Fault("torn", KillPoint("after-write", fact="assistant", n=1), bytes=7)),
            ("powerloss:tx:2@after-write", Fault("powerloss", KillPoint("after-write", tx=2))),
            ("dresume:usage@before-write#3", Fault("dresume", KillPoint("before-write", fact="usage", n=3))),
            ("ioerror(ENOSPC):user@before-write#1", Fault("ioerror", KillPoint("before-write", fact="user", n=1), errno="ENOSPC")),
            ("ioerror(EIO):tx:4@after-write", Fault("ioerror", KillPoint("after-write", tx=4), errno="EIO")),
        ],
    )
    def test_parses_every_action(self, text, fault):
        """Each action of the grammar parses to the expected Fault."""
        assert parse_fault(text) == fault

    def test_kill_prefix_is_implied(self):
        """``kill:`` is the default action and the canonical form omits it."""
        assert format_fault(parse_fault("kill:toolStarted@before-write#2")) == "toolStarted@before-write#2"

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("", "empty"),
            ("bogus:tx:1@after-sync", "unknown action 'bogus'"),
            ("llm(http:429)@1.2", "a provider fault, not a kill point"),  # a random case id's part, pasted
            ("toolstarted@after-sync#1", "unknown fact 'toolstarted'"),
            ("user@after-synk#1", "unknown phase 'after-synk'"),
            ("user@after-sync", "missing '#N'"),
            ("user#1", "missing '@PHASE'"),
            ("user@after-sync#0", "N an integer >= 1"),
            ("user@after-sync#01", "no leading zeros"),
            ("tx:0@after-sync", "K an integer >= 1"),
            ("torn(0):tx:1@after-write", "powerloss"),
            ("torn(3):tx:1@after-sync", "must be @after-write"),
            ("powerloss:tx:1@before-write", "must be @after-write"),
            ("ioerror(EPERM):tx:1@after-write", "expected ENOSPC or EIO"),
            ("ioerror(EIO):tx:1@after-sync", "not @after-sync"),
            ("int: tx:1@after-sync", "whitespace"),
        ],
    )
    def test_rejects_with_a_clear_message(self, text, message):
        """Bad fault text raises FaultSyntaxError (a ChaosError) whose message names the problem."""
        with pytest.raises(FaultSyntaxError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
            parse_fault(text)
        assert isinstance(info.value, ChaosError)

    def test_header_is_not_a_kill_point(self):
        """The header is not a fact name, so it cannot be named as a kill point."""
        with pytest.raises(FaultSyntaxError, match="unknown fact 'header'"):
            parse_point("header@before-write#1")


points = st.one_of(
    st.builds(lambda p, f, n: KillPoint(p, fact=f, n=n), st.sampled_from(PHASES), st.sampled_from(FACT_NAMES),
              st.integers(1, 10_000)),
    st.builds(lambda p, k: KillPoint(p, tx=k), st.sampled_from(PHASES), st.integers(1, 10_000)),
)


@st.composite
def faults(draw):
    point = draw(points)
    choices = ["kill", "int", "dresume"]
    if point.phase == "after-write":
        choices += ["torn", "powerloss"]
    if point.phase != "after-sync":
        choices.append("ioerror")
    action = draw(st.sampled_from(choices))
    return Fault(
        action,
        point,
        bytes=draw(st.integers(1, 4096)) if action == "torn" else None,
        errno=draw(st.sampled_from(["ENOSPC", "EIO"])) if action == "ioerror" else None,
    )


class TestRoundTrip:
    @given(faults())
    def test_fault_round_trips(self, fault):
        """Formatting then parsing any valid fault gives it back."""
        assert parse_fault(format_fault(fault)) == fault

    @given(st.lists(faults(), max_size=4), st.from_regex(r"[a-z][a-z0-9_-]{0,20}", fullmatch=True))
    def test_case_id_round_trips(self, schedule, scenario):
        """A case id splits back into its scenario and schedule."""
        assert parse_case_id(case_id(scenario, schedule)) == (scenario, tuple(schedule))


class TestCaseIds:
    def test_joins_faults_with_plus(self):
        """A case id is ``<scenario>::<fault>+<fault>``."""
        schedule = parse_schedule("tx:1@after-sync+int:user@before-write#2")
        assert case_id("tools", schedule) == "tools::tx:1@after-sync+int:user@before-write#2"

    def test_baseline_is_the_bare_scenario(self):
        """A case without faults is named by the scenario alone."""
        assert case_id("tools", ()) == "tools"
        assert parse_case_id("tools") == ("tools", ())

    def test_rejects_dangling_separator(self):
        """``scenario::`` with no fault is an error, not a baseline."""
        with pytest.raises(FaultSyntaxError, match="at least one fault"):
            parse_case_id("tools::")

    def test_rejects_bad_scenario_name(self):
        """A scenario name containing ``::`` cannot make a case id."""
        with pytest.raises(FaultSyntaxError, match="scenario name"):
            case_id("a::b", ())

    def test_empty_schedule_text(self):
        """An empty schedule text is the empty schedule; an empty element is an error."""
        assert parse_schedule("") == ()
        with pytest.raises(FaultSyntaxError):
            parse_schedule("tx:1@after-sync++tx:2@after-sync")
        assert format_schedule(parse_schedule(["tx:1@after-sync", "tx:2@after-sync"])) == "tx:1@after-sync+tx:2@after-sync"


def commit(m: Matcher, stream, facts):
    """Announce one transaction's three barriers; return the fired faults' texts per phase."""
    return [m.observe(stream, phase, facts) for phase in PHASES]


class TestMatcher:
    def test_counts_transactions_across_streams(self):
        """Transaction and per-fact numbers continue across processes (streams)."""
        m = Matcher(())
        first = commit(m, "p1", ["user", "runStarted"])
        second = commit(m, "p2", ["toolStarted"])
        third = commit(m, "p2", ["toolResult", "usage"])
        fourth = commit(m, "p3", ["assistant", "usage"])
        assert [b.tx for b, _ in first + second + third + fourth] == [1] * 3 + [2] * 3 + [3] * 3 + [4] * 3
        assert fourth[0][0].ordinals == {"assistant": 1, "usage": 2}
        assert [str(p) for p in fourth[2][0].points()] == ["tx:4@after-sync", "assistant@after-sync#1", "usage@after-sync#2"]

    def test_fact_named_twice_counts_once(self):
        """A transaction containing a name twice is that name's N-th transaction once."""
        m = Matcher(())
        barrier, _ = m.observe("p", "before-write", ["synthetic", "synthetic"])
        assert barrier.ordinals == {"synthetic": 1}

    def test_fires_at_the_named_barrier_only(self):
        """A FACT@PHASE#N fault fires exactly at that phase of the N-th transaction containing FACT."""
        m = Matcher(parse_schedule("usage@after-write#2"))
        fired = [(b.tx, b.phase) for tx in (["assistant", "usage"], ["toolStarted"], ["toolResult", "usage"])
                 for b, f in commit(m, "p", tx) if f]
        assert fired == [(3, "after-write")]
        assert m.pending == ()

    def test_faults_apply_in_order(self):
        """Only the first unfired fault is armed: a later fault whose point already passed never fires."""
        m = Matcher(parse_schedule("tx:2@before-write+tx:1@after-sync"))
        commit(m, "p", ["user"])
        b, f = m.observe("p", "before-write", ["stepAttempt"])
        assert f is not None and str(f) == "tx:2@before-write"
        m.observe("q", "before-write", ["stepAttempt"])
        assert [str(f) for f in m.pending] == ["tx:1@after-sync"]

    def test_second_fault_lands_during_recovery(self):
        """After the first fault fires, the next one is matched on barriers of a later process."""
        m = Matcher(parse_schedule("tx:1@after-sync+tx:2@before-write"))
        assert commit(m, "p1", ["user"])[2][1] is not None
        b, f = m.observe("p2", "before-write", ["stepAttempt"])
        assert f is not None and b.tx == 2

    @pytest.mark.parametrize(
        ("steps", "message"),
        [
            ([("after-sync", ["user"])], "without a before-write"),
            ([("before-write", ["user"]), ("after-sync", ["user"])], "expected after-write"),
            ([("before-write", ["user"]), ("after-write", ["usage"])], "announced"),
            ([("before-write", ["user"]), ("after-write", ["user"]), ("after-write", ["user"])], "after-write barrier after after-write"),
        ],
    )
    def test_rejects_barriers_out_of_order(self, steps, message):
        """A barrier that does not follow its transaction's before-write in phase order raises BarrierOrderError."""
        m = Matcher(())
        with pytest.raises(BarrierOrderError, match=message):
            for phase, facts in steps:
                m.observe("p", phase, facts)

    def test_failed_write_may_start_a_new_transaction(self):
        """After a before-write (answered fail) the next before-write is a new transaction."""
        m = Matcher(())
        m.observe("p", "before-write", ["user"])
        b, _ = m.observe("p", "before-write", ["user"])
        assert b.tx == 2 and b.ordinals == {"user": 2}
