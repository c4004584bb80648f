"""Random policy: seeded schedules of 1..K faults, each case reproducible from ``(seed, case index)`` alone.

The exploratory half of a campaign (etcd's robustness tests call it that): where exhaustive depth 1 and depth 2
enumerate, this samples longer schedules — a kill during the recovery of an interrupt during the recovery of a torn
write — and provider faults on top.

Case ``i`` draws from its own generator ``random.Random(f"killpoint:{seed}:{i}")`` (string seeds are hashed with
SHA-512 by CPython, stable across processes and versions), so case 1234 of a 30-minute run is regenerated without
drawing the 1233 before it, and a shard or a resumed campaign produces the very same case.

Schedule shape. The first fault names a baseline transaction (``FACT@PHASE#N``, so it reads like an exhaustive
case); later faults land during recovery, whose layout is unknown before running, so they name a transaction number
(``tx:K@PHASE``) after the previous fault's, at most one transaction per earlier fault past the baseline's count. A
later fault that the case never reaches makes the case ``kill-point-not-reached`` (coverage), not a failure. At most
one provider fault per case (``llm(...)@RUN.TURN``).
"""

from __future__ import annotations

import random as _random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import count as _count

from chaos.faults import Fault, KillPoint
from chaos.schedules import CaseSpec, LlmFault, ScenarioPoints, Transaction
from chaos.schedules.torn import cut_points

ACTIONS = ("kill", "int", "torn", "powerloss", "ioerror", "dresume", "llm")
DEFAULT_ACTIONS = ("kill", "int", "torn", "llm")
# Provider faults drawn by default: each makes the step fail live. `timeout` holds a request for the whole request
# timeout (seconds per case), so it is opt-in through a scenario, not drawn here.
LLM_CHOICES = (("http", 500), ("http", 429), ("drop", None), ("malformed", None))
_PHASES = {
    "kill": ("before-write", "after-sync"),
    "int": ("before-write", "after-sync"),
    "torn": ("after-write",),
    "powerloss": ("after-write",),
    "ioerror": ("before-write", "after-write"),
    "dresume": ("before-write", "after-sync"),
}


@dataclass(frozen=True)
class Random:
    """``cases`` cases (None: endless) of 1..``max_faults`` faults drawn from ``actions``, seeded by ``seed``."""

    seed: int
    cases_count: int | None = None
    max_faults: int = 3
    actions: tuple[str, ...] = DEFAULT_ACTIONS
    name: str = "random"

    def __post_init__(self) -> None:
        unknown = [a for a in self.actions if a not in ACTIONS]
        if unknown or not self.actions:
            raise ValueError(f"random policy: unknown action(s) {unknown} (expected some of {', '.join(ACTIONS)})")
        if self.max_faults < 1:
            raise ValueError("random policy: max_faults must be >= 1")

    def cases(self, library: Sequence[ScenarioPoints]) -> Iterator[CaseSpec]:
        usable = [p for p in library if p.transactions]
        if not usable:
            return
        indices = range(self.cases_count) if self.cases_count is not None else _count()
        for i in indices:
            yield self.case(usable, i)

    def case(self, library: Sequence[ScenarioPoints], index: int) -> CaseSpec:
        """Case ``index`` of this seed: depends on (seed, index, library) only."""
        rng = _random.Random(f"killpoint:{self.seed}:{index}")
        points = library[rng.randrange(len(library))]
        actions = [rng.choice(self.actions) for _ in range(rng.randint(1, self.max_faults))]
        llm: list[LlmFault] = []
        total = len(points.transactions)
        if "llm" in actions:
            actions = [a for a in actions if a != "llm"]
            if points.restart_changes:
                # The variant's expectation comes from its own crash-free run, which never restarts; with restart
                # changes a killed case ends differently by design, so such scenarios get kills only.
                actions = actions or ["kill"]
            else:
                llm.append(_llm_fault(rng, points))
                total = _transactions_before(points, llm[0])
        faults: list[Fault] = []
        last = 0  # the transaction number of the previous fault
        for action in actions:
            if total == 0:
                break  # a provider fault on the very first request: nothing of the baseline layout is left
            if not faults:
                tx = points.transactions[rng.randrange(total)]
                fault = _first_fault(rng, action, tx)
                last = tx.tx
            else:
                # Recovery announces at most the rest of the baseline plus one transaction per earlier fault that
                # re-announces one (a kill before the write, a cut write) or adds one (an abort's record).
                upper = total + sum(1 for f in faults if f.point.phase != "after-sync" or f.action == "int")
                if last + 1 > upper:
                    break  # nothing is left to announce: a further fault could never fire
                k = rng.randint(last + 1, upper)
                fault = _later_fault(rng, action, k)
                last = k
            faults.append(fault)
        if not faults and not llm:
            faults.append(_first_fault(rng, "kill", points.transactions[rng.randrange(len(points.transactions))]))
        return CaseSpec(points.scenario, tuple(faults), tuple(llm), origin=self.name, index=index)


def _transactions_before(points: ScenarioPoints, fault: LlmFault) -> int:
    """How many baseline transactions a provider fault leaves as they are: those up to its request's stepAttempt.

    A provider fault (other than a delay) makes that step fail live, so the baseline's later transactions are not
    written in the same order, or at all; kill points are drawn from the unchanged prefix. The request is the
    stepAttempt of turn ``turn`` of run ``run`` (compaction summaries are not counted: an approximation that can
    only make a later fault unreachable, which the case then reports).
    """
    if fault.kind == "delay":
        return len(points.transactions)
    if fault.turn == "summary":
        wanted = sum(points.turns[: fault.run]) + 1
    else:
        wanted = sum(points.turns[: fault.run - 1]) + int(fault.turn)
    seen = 0
    for tx in points.transactions:
        if "stepAttempt" in tx.facts:
            seen += 1
            if seen == wanted:
                return tx.tx
    return len(points.transactions)


def _first_fault(rng: _random.Random, action: str, tx: Transaction) -> Fault:
    if action == "torn" and not cut_points(tx):
        action = "powerloss"  # a one-byte write cannot be torn; losing it whole is the closest fault
    phase = rng.choice(_PHASES[action])
    point = tx.point(phase)
    return _make(rng, action, point, cut_points(tx) if action == "torn" else [1])


def _later_fault(rng: _random.Random, action: str, k: int) -> Fault:
    phase = rng.choice(_PHASES[action])
    # The write's length is unknown before running; one byte is inside every transaction line (each is > 1 byte).
    return _make(rng, action, KillPoint(phase, tx=k), [1])


def _make(rng: _random.Random, action: str, point: KillPoint, cuts: list[int]) -> Fault:
    if action == "torn":
        return Fault("torn", point, bytes=rng.choice(cuts))
    if action == "ioerror":
        return Fault("ioerror", point, errno="ENOSPC" if point.phase == "before-write" else "EIO")
    return Fault(action, point)


def _llm_fault(rng: _random.Random, points: ScenarioPoints) -> LlmFault:
    run = rng.randint(1, max(1, points.runs))
    turns = points.turns[run - 1] if run - 1 < len(points.turns) else 1
    kind, status = LLM_CHOICES[rng.randrange(len(LLM_CHOICES))]
    return LlmFault(kind, run, rng.randint(1, max(1, turns)), status)
