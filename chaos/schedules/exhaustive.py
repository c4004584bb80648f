"""Exhaustive depth-1 policy: one fault at every kill point the crash-free baseline reaches, plus pinned schedules.

For a plain SIGKILL only two phases per transaction are distinct: ``before-write`` (the transaction is not in the
file) and ``after-sync`` (it is, acknowledged). ``after-write`` leaves the same bytes as ``after-sync`` under SIGKILL
because the page cache survives the process, so it is enumerated only by the actions for which the unsynced range
matters (torn writes and power loss, in ``torn.py``).

Other actions, on request (``actions``), each at the phases where it means something:

    kill       before-write, after-sync
    int        after-sync                 SIGINT then continue: the agent aborts at its next decision
    ioerror    ioerror(ENOSPC)@before-write (the write fails, rolled back) and ioerror(EIO)@after-write (fsync fails)
    dresume    after-sync                 kill, then two concurrent resumes: one writes, the other is refused

Does not run anything; the order is scenario by scenario, transaction by transaction, then pinned schedules.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from chaos.faults import Fault
from chaos.schedules import CaseSpec, ScenarioPoints, pinned_cases, unique

ACTIONS = ("kill", "int", "ioerror", "dresume")


def faults_at(points: ScenarioPoints, action: str) -> Iterator[Fault]:
    """Every depth-1 fault of ``action`` on the scenario's baseline transactions, in transaction order."""
    for tx in points.transactions:
        if action == "kill":
            yield Fault("kill", tx.point("before-write"))
            yield Fault("kill", tx.point("after-sync"))
        elif action == "int":
            yield Fault("int", tx.point("after-sync"))
        elif action == "ioerror":
            yield Fault("ioerror", tx.point("before-write"), errno="ENOSPC")
            yield Fault("ioerror", tx.point("after-write"), errno="EIO")
        elif action == "dresume":
            yield Fault("dresume", tx.point("after-sync"))
        else:
            raise ValueError(f"exhaustive policy: unknown action {action!r} (expected one of {', '.join(ACTIONS)})")


@dataclass(frozen=True)
class Exhaustive:
    """Depth 1 over ``actions`` (default: plain kills), then each scenario's pinned schedules when ``pinned``."""

    actions: tuple[str, ...] = ("kill",)
    pinned: bool = True
    name: str = "exhaustive"

    def cases(self, library: Sequence[ScenarioPoints]) -> Iterator[CaseSpec]:
        def generate() -> Iterator[CaseSpec]:
            for points in library:
                index = 0
                for action in self.actions:
                    for fault in faults_at(points, action):
                        yield CaseSpec(points.scenario, (fault,), origin=self.name, index=index)
                        index += 1
                if self.pinned:
                    yield from pinned_cases(points)

        return unique(generate())
