"""Depth-2 policy: a second kill at every kill point reached during the recovery that follows each first kill.

A crash *during recovery* is where durable-agent bugs hide (the recovery's own writes, the replay, the synthetic
results). For each first fault of the depth-1 policy, discovery (``chaos.campaign``) ran the case once and recorded
the transactions announced after the fault fired and the digest of the session bytes the restart found
(``ScenarioPoints.recoveries``). This policy then emits ``FIRST+SECOND`` for every such transaction at
``before-write`` and ``after-sync``.

Pruning to distinct durable states: two first kills that leave the same bytes (e.g. ``X@after-sync#1`` and the next
transaction's ``before-write``) start the same recovery, so only the first of them in depth-1 order gets
second-level cases. The second fault's point is named with the counts of the representative's own case (the fault
grammar counts transactions across every process of a case), so it is only meaningful after that first fault.

First faults without a discovered recovery (discovery not run, or the first fault was not reached) get no cases.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from chaos.faults import Fault
from chaos.schedules import CaseSpec, Policy, ScenarioPoints
from chaos.schedules.exhaustive import Exhaustive

PHASES = ("before-write", "after-sync")


def representatives(points: ScenarioPoints, first: Policy) -> list[str]:
    """The first faults (texts, depth-1 order) that get second-level cases: one per distinct durable state."""
    seen: set[str] = set()
    out: list[str] = []
    for case in first.cases([points]):
        if len(case.faults) != 1:
            continue
        text = case.schedule[0]
        recovery = points.recoveries.get(text)
        if recovery is None or recovery.state in seen:
            continue
        seen.add(recovery.state)
        out.append(text)
    return out


@dataclass(frozen=True)
class Depth2:
    """``FIRST+SECOND`` cases; FIRST ranges over ``first``'s single-fault cases, pruned to distinct durable states."""

    first: Policy = field(default_factory=lambda: Exhaustive(("kill",), pinned=False))
    name: str = "depth2"

    def cases(self, library: Sequence[ScenarioPoints]) -> Iterator[CaseSpec]:
        for points in library:
            index = 0
            by_text = {c.schedule[0]: c.faults[0] for c in self.first.cases([points]) if len(c.faults) == 1}
            for text in representatives(points, self.first):
                for tx in points.recoveries[text].transactions:
                    for phase in PHASES:
                        second = Fault("kill", tx.point(phase))
                        yield CaseSpec(points.scenario, (by_text[text], second), origin=self.name, index=index)
                        index += 1
