"""Unit and property tests of chaos.schedules: policies, case ids with provider faults, and sharding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.faults import FACT_NAMES, Fault, KillPoint, parse_fault
from chaos.schedules import (
    CampaignSpecError,
    CaseSpec,
    LlmFault,
    Recovery,
    ScenarioPoints,
    Transaction,
    parse_campaign_case_id,
    parse_llm_fault,
    parse_shard,
    shard,
    spec_from_id,
    utf8_cut,
)
from chaos.schedules.depth2 import Depth2, representatives
from chaos.schedules.exhaustive import Exhaustive
from chaos.schedules.random import Random
from chaos.schedules.torn import Torn, cut_points

# A realistic baseline layout (the bundled agent's read-then-answer scenario).
LAYOUT = [
    ("user", "runStarted"),
    ("stepAttempt",),
    ("assistant", "usage"),
    ("toolStarted",),
    ("toolResult",),
    ("stepAttempt",),
    ("assistant", "usage"),
    ("operationFinished",),
]


def transactions(layout=LAYOUT, lengths=None) -> tuple[Transaction, ...]:
    counts: dict[str, int] = {}
    out = []
    for i, facts in enumerate(layout, start=1):
        ordinals = []
        for name in dict.fromkeys(facts):
            counts[name] = counts.get(name, 0) + 1
            ordinals.append((name, counts[name]))
        length = lengths[i - 1] if lengths else 100 + i
        out.append(Transaction(i, tuple(facts), tuple(ordinals), length, None))
    return tuple(out)


def points(name="s", layout=LAYOUT, pinned=(), recoveries=None, **kw) -> ScenarioPoints:
    return ScenarioPoints(name, transactions(layout), tuple(pinned), recoveries=recoveries or {}, **kw)


layouts = st.lists(st.lists(st.sampled_from(FACT_NAMES), min_size=1, max_size=3), min_size=1, max_size=8)
libraries = st.lists(layouts, min_size=1, max_size=3).map(
    lambda ls: [points(f"s{i}", [tuple(f) for f in layout], runs=2, turns=(2, 3)) for i, layout in enumerate(ls)]
)


class TestTransaction:
    def test_points_are_named_by_the_record_type(self):
        """A transaction's kill point names its record type, not the user entry or usage riding along."""
        first = transactions()[0]
        assert str(first.point("before-write")) == "runStarted@before-write#1"
        assert str(transactions()[2].point("after-sync")) == "assistant@after-sync#1"
        assert str(transactions()[6].point("after-sync")) == "assistant@after-sync#2"

    def test_json_round_trip(self):
        """A transaction survives its JSON form unchanged."""
        tx = Transaction(3, ("assistant", "usage"), (("assistant", 2), ("usage", 2)), 321, 17)
        assert Transaction.from_json(tx.to_json()) == tx

    def test_utf8_cut_lands_inside_a_character(self):
        """utf8_cut keeps a lead byte without its continuation, and is None for ASCII."""
        data = '{"content":"caf\u00e9"}\n'.encode()
        b = utf8_cut(data)
        assert b is not None and 1 <= b < len(data)
        with pytest.raises(UnicodeDecodeError):
            data[:b].decode("utf-8")
        assert utf8_cut(b'{"a":1}\n') is None


class TestExhaustive:
    def test_every_transaction_at_before_write_and_after_sync_then_pinned(self):
        """Plain kills cover each transaction at before-write and after-sync, in order, then pinned schedules."""
        lib = [points(pinned=[("stepAttempt@after-sync#1", "tx:9@after-sync")])]
        ids = [c.id for c in Exhaustive().cases(lib)]
        assert len(ids) == 2 * len(LAYOUT) + 1
        assert ids[:3] == ["s::runStarted@before-write#1", "s::runStarted@after-sync#1",
                           "s::stepAttempt@before-write#1"]
        assert ids[-1] == "s::stepAttempt@after-sync#1+tx:9@after-sync"

    def test_a_pinned_schedule_equal_to_an_enumerated_one_runs_once(self):
        """A pinned schedule that equals an enumerated case does not duplicate it."""
        lib = [points(pinned=[("kill:toolStarted@after-sync#1",)])]
        ids = [c.id for c in Exhaustive().cases(lib)]
        assert len(ids) == len(set(ids)) == 2 * len(LAYOUT)

    def test_other_actions_sit_at_their_meaningful_phases(self):
        """ioerror uses ENOSPC at before-write and EIO at after-write; int and dresume sit at after-sync."""
        lib = [points(layout=[("stepAttempt",)])]
        ids = [c.id for c in Exhaustive(("int", "ioerror", "dresume"), pinned=False).cases(lib)]
        assert ids == [
            "s::int:stepAttempt@after-sync#1",
            "s::ioerror(ENOSPC):stepAttempt@before-write#1",
            "s::ioerror(EIO):stepAttempt@after-write#1",
            "s::dresume:stepAttempt@after-sync#1",
        ]

    @given(libraries)
    def test_deterministic_and_unique(self, lib):
        """The same library always gives the same list, with unique ids that parse back to their specs."""
        a = list(Exhaustive(("kill", "int", "ioerror", "dresume")).cases(lib))
        b = list(Exhaustive(("kill", "int", "ioerror", "dresume")).cases(lib))
        assert a == b
        assert len({c.id for c in a}) == len(a)
        for case in a:
            assert parse_campaign_case_id(case.id) == (case.scenario, case.faults, case.llm)


class TestTorn:
    def test_cut_points_are_the_documented_offsets(self):
        """The cuts are 1, the middle, length-1 and a cut inside a UTF-8 character, deduplicated and in range."""
        assert cut_points(Transaction(1, ("user",), (("user", 1),), 10, 4)) == [1, 5, 9, 4]
        assert cut_points(Transaction(1, ("user",), (("user", 1),), 3, None)) == [1, 2]
        assert cut_points(Transaction(1, ("user",), (("user", 1),), 1, None)) == []

    def test_torn_and_powerloss_at_after_write(self):
        """Every baseline transaction gets its torn cuts and a power loss, all at after-write."""
        lib = [points(layout=[("stepAttempt",)])]
        ids = [c.id for c in Torn().cases(lib)]
        assert ids == [
            "s::torn(1):stepAttempt@after-write#1",
            "s::torn(50):stepAttempt@after-write#1",
            "s::torn(100):stepAttempt@after-write#1",
            "s::powerloss:stepAttempt@after-write#1",
        ]


class TestDepth2:
    def recoveries(self):
        rec = transactions([("stepAttempt",), ("assistant", "usage")])
        shifted = tuple(Transaction(t.tx + 3, t.facts, t.ordinals, t.length) for t in rec)
        return {
            "runStarted@after-sync#1": Recovery("sha256:A", shifted),
            "stepAttempt@before-write#1": Recovery("sha256:A", shifted),  # same bytes as the kill before it
            "stepAttempt@after-sync#1": Recovery("sha256:B", shifted[1:]),
        }

    def test_one_representative_per_durable_state(self):
        """First kills that leave the same bytes share their second-level cases (the first in order represents them)."""
        p = points(recoveries=self.recoveries())
        assert representatives(p, Exhaustive(pinned=False)) == ["runStarted@after-sync#1", "stepAttempt@after-sync#1"]

    def test_second_kills_at_every_recovery_transaction(self):
        """Each representative gets a second kill at before-write and after-sync of every recovery transaction."""
        ids = [c.id for c in Depth2().cases([points(recoveries=self.recoveries())])]
        assert ids == [
            "s::runStarted@after-sync#1+stepAttempt@before-write#1",
            "s::runStarted@after-sync#1+stepAttempt@after-sync#1",
            "s::runStarted@after-sync#1+assistant@before-write#1",
            "s::runStarted@after-sync#1+assistant@after-sync#1",
            "s::stepAttempt@after-sync#1+assistant@before-write#1",
            "s::stepAttempt@after-sync#1+assistant@after-sync#1",
        ]

    def test_no_discovery_no_cases(self):
        """Without discovered recoveries depth 2 adds nothing."""
        assert list(Depth2().cases([points()])) == []


class TestRandom:
    @settings(max_examples=50)
    @given(libraries, st.integers(0, 2**32), st.integers(0, 500))
    def test_a_case_is_reproducible_from_seed_and_index(self, lib, seed, index):
        """Case i of a seed is the same whether drawn alone or as the i-th of the stream."""
        policy = Random(seed, cases_count=index + 1, actions=("kill", "int", "torn", "powerloss", "ioerror",
                                                                "dresume", "llm"))
        streamed = list(policy.cases(lib))[index]
        assert policy.case(lib, index) == streamed
        assert Random(seed, actions=policy.actions).case(lib, index) == streamed

    @settings(max_examples=50)
    @given(libraries, st.integers(0, 2**32))
    def test_schedules_are_well_formed(self, lib, seed):
        """Random cases have 1..K faults, later kills after earlier ones, and ids that parse back."""
        for case in Random(seed, cases_count=20, max_faults=4).cases(lib):
            assert 1 <= len(case.faults) + len(case.llm) <= 4 and len(case.llm) <= 1
            assert case.faults[0].point.tx is None if case.faults else True
            later = [f.point.tx for f in case.faults[1:]]
            assert later == sorted(later) and len(set(later)) == len(later)
            assert parse_campaign_case_id(case.id) == (case.scenario, case.faults, case.llm)

    def test_provider_faults_keep_kills_before_their_request(self):
        """With a provider fault on turn T, the first kill targets a transaction up to turn T's stepAttempt."""
        lib = [points(runs=1, turns=(2,))]
        attempt_tx = {1: 2, 2: 6}  # the stepAttempts of LAYOUT
        seen = 0
        for case in Random(5, cases_count=200, actions=("kill", "llm")).cases(lib):
            if case.llm and case.faults:
                seen += 1
                first = next(t for t in transactions() if t.point(case.faults[0].point.phase) == case.faults[0].point)
                assert first.tx <= attempt_tx[case.llm[0].turn]
        assert seen > 10

    def test_no_provider_faults_with_restart_changes(self):
        """A scenario whose restarts change the configuration gets kills only."""
        lib = [points(restart_changes=True)]
        cases = list(Random(5, cases_count=100, actions=("kill", "llm")).cases(lib))
        assert all(not c.llm and c.faults for c in cases)

    def test_different_seeds_differ(self):
        """Two seeds give different streams (the seed is really used)."""
        lib = [points()]
        assert list(Random(1, cases_count=20).cases(lib)) != list(Random(2, cases_count=20).cases(lib))


class TestCaseIds:
    def test_provider_faults_follow_the_kills(self):
        """A case id lists kill faults, then provider faults; it parses back to the same spec."""
        case = CaseSpec("s", (parse_fault("toolStarted@after-sync#1"),), (LlmFault("http", 1, 2, 500),))
        assert case.id == "s::toolStarted@after-sync#1+llm(http:500)@1.2"
        assert spec_from_id(case.id, origin="exhaustive") == case
        only = CaseSpec("s", (), (LlmFault("drop", 2, "summary"),))
        assert only.id == "s::llm(drop)@2.summary" and spec_from_id(only.id, origin="exhaustive") == only

    @pytest.mark.parametrize("text", ["llm(http:200)@1.1", "llm(boom)@1.1", "llm(drop)@0.1", "llm(drop)@1"])
    def test_bad_provider_faults_are_refused(self, text):
        """Malformed provider-fault tokens raise CampaignSpecError naming the token."""
        with pytest.raises(CampaignSpecError, match="provider fault"):
            parse_llm_fault(text)

    def test_kill_after_provider_fault_is_refused(self):
        """Provider faults must come last in a case id."""
        with pytest.raises(CampaignSpecError):
            parse_campaign_case_id("s::llm(drop)@1.1+toolStarted@after-sync#1")


class TestShard:
    @given(libraries, st.integers(1, 6))
    def test_shards_partition_the_case_list_exactly(self, lib, n):
        """The shards of K/N for K = 1..N together hold every case exactly once, in the list's order."""
        cases = list(Exhaustive(("kill", "ioerror")).cases(lib)) + list(Depth2().cases(lib))
        parts = [list(shard(cases, k, n)) for k in range(1, n + 1)]
        merged = [c for part in parts for c in part]
        assert sorted(c.id for c in merged) == sorted(c.id for c in cases)
        assert len(merged) == len(cases)
        for part in parts:
            assert [c for c in cases if c in part] == part

    @given(libraries, st.integers(1, 4))
    def test_one_first_fault_one_shard(self, lib, n):
        """All cases sharing a first fault land in the same shard."""
        cases = list(Random(7, cases_count=40).cases(lib))
        owner: dict[tuple[str, str], int] = {}
        for k in range(1, n + 1):
            for case in shard(cases, k, n):
                assert owner.setdefault((case.scenario, case.first), k) == k

    @pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0"])
    def test_bad_shard_text(self, text):
        """A malformed --shard value is one clear error."""
        with pytest.raises(CampaignSpecError, match="K/N"):
            parse_shard(text)

    def test_shard_text(self):
        """K/N parses to a pair."""
        assert parse_shard("2/4") == (2, 4)


def test_killpoint_fixture_is_consistent():
    """The fixture layout's ordinals count per fact name across transactions."""
    txs = transactions()
    assert dict(txs[6].ordinals) == {"assistant": 2, "usage": 2}
    assert txs[6].point("before-write") == KillPoint("before-write", fact="assistant", n=2)
    assert Fault("kill", txs[6].point("before-write")) == parse_fault("assistant@before-write#2")
