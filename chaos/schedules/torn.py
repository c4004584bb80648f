"""Torn-write and power-loss policy: cut the unsynced range of each baseline write at a few telling byte counts.

``torn(B):FACT@after-write#N`` kills the agent after its write and before its fsync, then keeps only B bytes of the
unsynced range (what a power cut could leave); ``powerloss`` keeps none. The agent must treat the lost tail as never
committed (repair on reopen) and ``acknowledged-durable`` must still hold for what was synced.

Every byte offset belongs in the store's in-process property tests (cheap); a subprocess campaign takes the
offsets that exercise different repair paths:

    1              a single byte: the line has begun but holds no JSON at all
    length // 2    the middle: a truncated JSON object
    length - 1     everything but the final LF: complete JSON, yet the line is not committed (SPEC §2.3)
    inside UTF-8   a cut in the middle of a multi-byte character: the tail is not even valid UTF-8

Values are deduplicated and kept within 1..length-1 (B >= length would not tear anything; that is a plain kill).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from chaos.faults import Fault
from chaos.schedules import CaseSpec, ScenarioPoints, Transaction


def cut_points(tx: Transaction) -> list[int]:
    """The byte counts B to keep of ``tx``'s write, in the documented order, without duplicates."""
    wanted = [1, tx.length // 2, tx.length - 1]
    if tx.utf8_cut is not None:
        wanted.append(tx.utf8_cut)
    out: list[int] = []
    for b in wanted:
        if 1 <= b < tx.length and b not in out:
            out.append(b)
    return out


@dataclass(frozen=True)
class Torn:
    """torn(B) at every baseline transaction's after-write for each cut point, and ``powerloss`` when asked."""

    powerloss: bool = True
    torn: bool = True
    name: str = "torn"

    def cases(self, library: Sequence[ScenarioPoints]) -> Iterator[CaseSpec]:
        for points in library:
            index = 0
            for tx in points.transactions:
                point = tx.point("after-write")
                faults = [Fault("torn", point, bytes=b) for b in cut_points(tx)] if self.torn else []
                if self.powerloss:
                    faults.append(Fault("powerloss", point))
                for fault in faults:
                    yield CaseSpec(points.scenario, (fault,), origin=self.name, index=index)
                    index += 1
