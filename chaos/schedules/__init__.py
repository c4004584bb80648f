"""Schedule policies: which fault schedules a campaign runs, as pure functions of the kill-point lists.

A campaign first learns, per scenario, which transactions the crash-free baseline writes (``ScenarioPoints``, built
by ``chaos.campaign`` and cached on disk). A *policy* turns that library into an ordered list of ``CaseSpec``s; one
policy per small module, behind the ``Policy`` protocol (the shape of pytest-xdist's schedulers):

    exhaustive.py   every transaction at before-write and after-sync (+ other actions on request), plus pinned
    torn.py         torn(B) at after-write for B in {1, middle, length-1, inside a multi-byte UTF-8 char}, powerloss
    depth2.py       every kill point reached during the recovery after each first kill, one per durable state
    random.py       seeded schedules of 1..K faults (kill, int, torn, provider fault), reproducible from (seed, index)

Besides the fault grammar of ``chaos.faults``, a campaign case may carry *provider faults* (``LlmFault``): a fault
the scripted model server applies to the first request of one (run, turn), written ``llm(KIND[:ARG])@RUN.TURN``
(1-based; ``TURN`` may be ``summary``). They are part of the case id after the kill faults, so a case id is still
``<scenario>::<token>[+<token>…]``; ``parse_campaign_case_id`` is the inverse of ``CaseSpec.id``.

Invariants protected here: a policy is deterministic (same library → same list, same order), case ids are
canonical, and ``shard`` partitions any case list exactly (every case in exactly one shard; all cases with the same
first fault in the same shard, so a shard can reuse that fault's discovery work).

Pure: no I/O, no processes, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from chaos.errors import ChaosError
from chaos.probe import PROBE_FACTS  # stdlib only: the words a probe barrier starts with
from chaos.faults import (
    FACT_NAMES,
    Fault,
    FaultSyntaxError,
    KillPoint,
    case_id,
    format_fault,
    parse_fault,
)

# Which fact names a transaction's kill point: the record type when there is one (it says what the transaction
# *does*), else the entry; `user` and `usage` ride along with other facts and name a point only when alone.
_NAMING_ORDER = tuple(n for n in FACT_NAMES if n not in ("user", "usage")) + ("user", "usage")

LLM_KINDS = ("http", "drop", "timeout", "malformed", "delay")
_LLM_RE = re.compile(r"^llm\((http:[1-9][0-9]{2}|drop|timeout|malformed|delay)\)@([1-9][0-9]*)\.([1-9][0-9]*|summary)$")


class CampaignSpecError(ChaosError):
    """A campaign option or case id is malformed (shard text, provider fault token, …)."""


@dataclass(frozen=True)
class LlmFault:
    """A provider fault injected for one campaign case: ``kind`` at (``run``, ``turn``), both 1-based.

    ``turn`` is an int, or ``"summary"`` for the compaction after the run. ``status`` is set for ``http`` only.
    """

    kind: str
    run: int
    turn: int | str
    status: int | None = None

    def __str__(self) -> str:
        word = f"http:{self.status}" if self.kind == "http" else self.kind
        return f"llm({word})@{self.run}.{self.turn}"


def parse_llm_fault(text: str) -> LlmFault:
    """Parse ``llm(KIND[:ARG])@RUN.TURN``; raises ``CampaignSpecError``."""
    m = _LLM_RE.match(text)
    if not m:
        raise CampaignSpecError(
            f"provider fault {text!r}: expected llm(http:STATUS|drop|timeout|malformed|delay)@RUN.TURN (1-based)"
        )
    word, run, turn = m.groups()
    status = int(word.split(":")[1]) if word.startswith("http:") else None
    if status is not None and not 400 <= status <= 599:
        raise CampaignSpecError(f"provider fault {text!r}: HTTP status must be 4xx or 5xx")
    return LlmFault(word.split(":")[0], int(run), turn if turn == "summary" else int(turn), status)


@dataclass(frozen=True)
class CaseSpec:
    """One case of a campaign: a scenario, a fault schedule, optional provider faults, and where it came from.

    ``origin`` is the policy that produced it (``exhaustive``, ``pinned``, ``torn``, ``depth2``, ``random``) and
    ``index`` its position in that policy's output (random: the case index that, with the seed, regenerates it).
    """

    scenario: str
    faults: tuple[Fault, ...]
    llm: tuple[LlmFault, ...] = ()
    origin: str = "exhaustive"
    index: int = 0

    @property
    def id(self) -> str:
        base = case_id(self.scenario, self.faults)
        if not self.llm:
            return base
        tokens = "+".join(str(f) for f in self.llm)
        return f"{base}+{tokens}" if self.faults else f"{base}::{tokens}"

    @property
    def schedule(self) -> tuple[str, ...]:
        """The kill faults as canonical texts (what the supervisor runs)."""
        return tuple(format_fault(f) for f in self.faults)

    @property
    def first(self) -> str:
        """The shard key: the first fault's text (a provider fault when there is no kill fault)."""
        if self.faults:
            return format_fault(self.faults[0])
        return str(self.llm[0]) if self.llm else ""


def parse_campaign_case_id(text: str, vocabulary: Sequence[str] | None = None
                           ) -> tuple[str, tuple[Fault, ...], tuple[LlmFault, ...]]:
    """Split a campaign case id into scenario, kill faults and provider faults; raises ``CampaignSpecError``.
    ``vocabulary``: the target's fact names (a probe target's; the session contract's when None)."""
    scenario, sep, rest = text.partition("::")
    if not scenario or (sep and not rest):
        raise CampaignSpecError(f"case id {text!r}: expected <scenario>::<fault>[+<fault>...]")
    faults: list[Fault] = []
    llm: list[LlmFault] = []
    for token in rest.split("+") if rest else []:
        if token.startswith("llm("):
            llm.append(parse_llm_fault(token))
            continue
        if llm:
            raise CampaignSpecError(f"case id {text!r}: provider faults come after every kill fault")
        try:
            faults.append(parse_fault(token) if vocabulary is None else parse_fault(token, vocabulary))
        except FaultSyntaxError as exc:
            raise CampaignSpecError(f"case id {text!r}: {exc}") from None
    return scenario, tuple(faults), tuple(llm)


def spec_from_id(text: str, *, origin: str = "pinned", index: int = 0,
                 vocabulary: Sequence[str] | None = None) -> CaseSpec:
    """The ``CaseSpec`` a case id names (``vocabulary``: as for ``parse_campaign_case_id``)."""
    scenario, faults, llm = parse_campaign_case_id(text, vocabulary)
    return CaseSpec(scenario, faults, llm, origin, index)


@dataclass(frozen=True)
class Transaction:
    """One transaction a run announced: its number, fact names, per-fact ordinals and the bytes it wrote.

    ``length`` is the size of its write (after-write offset minus the synced offset before it); ``utf8_cut`` is a
    byte count that ends *inside* a multi-byte UTF-8 character of the write, or None when the write is ASCII.
    """

    tx: int
    facts: tuple[str, ...]
    ordinals: tuple[tuple[str, int], ...]
    length: int = 0
    utf8_cut: int | None = None

    @property
    def name(self) -> str:
        """The fact that names this transaction's kill points: a probe barrier's first fact (the probe's own word:
        ``commit``, ``write``…, whatever its tables are called), else the contract's naming order."""
        if self.facts and self.facts[0] in PROBE_FACTS:
            return self.facts[0]
        present = dict(self.ordinals)
        return next((n for n in _NAMING_ORDER if n in present), self.facts[0])

    def point(self, phase: str) -> KillPoint:
        """The canonical kill point of this transaction at ``phase`` (``FACT@PHASE#N``)."""
        name = self.name
        return KillPoint(phase, fact=name, n=dict(self.ordinals)[name])

    def to_json(self) -> dict:
        return {"tx": self.tx, "facts": list(self.facts), "ordinals": dict(self.ordinals), "length": self.length,
                "utf8_cut": self.utf8_cut}

    @classmethod
    def from_json(cls, value: Mapping) -> Transaction:
        return cls(int(value["tx"]), tuple(value["facts"]), tuple((k, int(v)) for k, v in value["ordinals"].items()),
                   int(value.get("length", 0)), value.get("utf8_cut"))


def utf8_cut(data: bytes) -> int | None:
    """A byte count B (1 <= B < len(data)) that ends inside a multi-byte UTF-8 character of ``data``, or None."""
    for i, byte in enumerate(data):
        # A lead byte of a multi-byte sequence is 0b11xxxxxx; keeping i+1 bytes keeps it without its continuation.
        if byte >= 0xC0 and i + 1 < len(data):
            return i + 1
    return None


@dataclass(frozen=True)
class Recovery:
    """What happens after one first fault: the durable state it left, and the transactions recovery announced."""

    state: str  # digest of the session bytes the restart found; equal digests share second-level cases
    transactions: tuple[Transaction, ...]

    def to_json(self) -> dict:
        return {"state": self.state, "transactions": [t.to_json() for t in self.transactions]}

    @classmethod
    def from_json(cls, value: Mapping) -> Recovery:
        return cls(value["state"], tuple(Transaction.from_json(t) for t in value["transactions"]))


@dataclass(frozen=True)
class ScenarioPoints:
    """One scenario's kill-point list: the baseline's transactions, its pinned schedules, and (depth 2) recoveries.

    ``recoveries`` maps a first fault's text to its ``Recovery``; it is empty until depth-2 discovery ran.
    """

    scenario: str
    transactions: tuple[Transaction, ...]
    pinned: tuple[tuple[str, ...], ...] = ()
    tags: tuple[str, ...] = ()
    runs: int = 1
    turns: tuple[int, ...] = (1,)  # scripted turns per run (provider faults target one of them)
    recoveries: Mapping[str, Recovery] = field(default_factory=dict)
    restart_changes: bool = False  # launches after a kill run with another configuration (or abort when blocked)
    vocabulary: tuple[str, ...] | None = None  # a probe target's fact names (None: the session contract's)

    def to_json(self) -> dict:
        return {
            "scenario": self.scenario,
            "transactions": [t.to_json() for t in self.transactions],
            "pinned": [list(s) for s in self.pinned],
            "tags": list(self.tags),
            "runs": self.runs,
            "turns": list(self.turns),
            "recoveries": {k: r.to_json() for k, r in sorted(self.recoveries.items())},
            "restart_changes": self.restart_changes,
            "vocabulary": list(self.vocabulary) if self.vocabulary is not None else None,
        }

    @classmethod
    def from_json(cls, value: Mapping) -> ScenarioPoints:
        return cls(
            value["scenario"],
            tuple(Transaction.from_json(t) for t in value["transactions"]),
            tuple(tuple(s) for s in value.get("pinned", [])),
            tuple(value.get("tags", [])),
            int(value.get("runs", 1)),
            tuple(value.get("turns", [1])),
            {k: Recovery.from_json(r) for k, r in value.get("recoveries", {}).items()},
            bool(value.get("restart_changes", False)),
            tuple(value["vocabulary"]) if value.get("vocabulary") is not None else None,
        )


class Policy(Protocol):
    """A schedule policy: a deterministic, ordered stream of cases for a library of scenarios."""

    name: str

    def cases(self, library: Sequence[ScenarioPoints]) -> Iterator[CaseSpec]:
        """Every case of this policy, in a fixed order (random mode may be endless)."""
        ...


def pinned_cases(points: ScenarioPoints) -> Iterator[CaseSpec]:
    """The scenario's ``[[schedules]]``, in file order."""
    for index, texts in enumerate(points.pinned):
        faults = tuple(parse_fault(t) if points.vocabulary is None else parse_fault(t, points.vocabulary)
                       for t in texts)
        yield CaseSpec(points.scenario, faults, origin="pinned", index=index)


def unique(cases: Iterable[CaseSpec]) -> Iterator[CaseSpec]:
    """Drop later cases whose id was already produced (a pinned schedule may equal an enumerated one)."""
    seen: set[str] = set()
    for case in cases:
        if case.id not in seen:
            seen.add(case.id)
            yield case


# ---- sharding -------------------------------------------------------------------------------------------------


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` with 1 <= K <= N; raises ``CampaignSpecError``."""
    m = re.fullmatch(r"([1-9][0-9]*)/([1-9][0-9]*)", text.strip())
    if not m or int(m.group(1)) > int(m.group(2)):
        raise CampaignSpecError(f"--shard {text!r}: expected K/N with 1 <= K <= N (e.g. 2/4)")
    return int(m.group(1)), int(m.group(2))


def shard(cases: Iterable[CaseSpec], k: int, n: int) -> Iterator[CaseSpec]:
    """The cases of shard ``k`` of ``n`` (1-based): groups of equal (scenario, first fault), dealt round-robin.

    Groups are numbered in order of first appearance, so the partition depends only on the case list (which every
    shard computes identically from the cached kill-point lists) and balances by group count. Lazy: works on an
    endless random stream.
    """
    if not 1 <= k <= n:
        raise CampaignSpecError(f"shard {k}/{n}: expected 1 <= K <= N")
    groups: dict[tuple[str, str], int] = {}
    for case in cases:
        key = (case.scenario, case.first)
        group = groups.setdefault(key, len(groups))
        if group % n == k - 1:
            yield case
