"""Shrinking: delta-debug a failing case's schedule to a minimal one on which the same invariants still fail.

A random or depth-2 failure arrives as ``torn(17):tx:9@after-write+int:tx:12@after-sync+llm(drop)@1.2``; the
engineer wants the smallest schedule that still breaks the same invariants, e.g. ``assistant@after-sync#2``. Like
Hypothesis's shrinker, this is a set of small *passes*, each proposing simpler neighbours of the current case:

    drop_faults      remove one kill fault
    drop_llm         remove one provider fault
    plain_kills      turn a torn write / power loss / double resume into a plain kill at the same transaction
    earlier          move one fault earlier: a smaller ordinal (to 1, then N-1), or an earlier phase of the same
                     transaction (after-sync → before-write for a plain kill)

A neighbour is accepted when it is strictly smaller (``size``: fewer kills, fewer provider faults, simpler actions,
smaller ordinals, earlier phases — compared in that order) and the predicate still holds. Because every accepted
step strictly decreases a well-founded measure, shrinking terminates; because it stops only when no neighbour of
any pass is accepted, the result is *1-minimal*: no single pass step from it keeps the failure (unless the
predicate-call budget or the deadline — the campaign's ``--budget`` — ran out first: the result is then the best
schedule found so far, and says so with ``exhausted`` and ``cut_short``).

Pure: the predicate (the campaign's: "run this case and see whether every invariant the failure's two runs broke
still fails", ``chaos.workers``) is passed in. Results of the predicate are cached by case id, so a neighbour
proposed by two passes runs once. The empty schedule (the baseline, which by construction passes) is never
proposed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from chaos.faults import PHASES, Fault, FaultSyntaxError, KillPoint
from chaos.schedules import CaseSpec

# Simpler actions weigh less: a plain kill is the simplest crash, and the exotic ones become plain kills.
_ACTION_WEIGHT = {"kill": 0, "int": 1, "ioerror": 1, "powerloss": 2, "dresume": 2, "torn": 3}
_TO_PLAIN = ("torn", "powerloss", "dresume")


def size(case: CaseSpec) -> tuple[int, int, int, int, int]:
    """The well-founded measure shrinking decreases (compared lexicographically)."""
    return (
        len(case.faults),
        len(case.llm),
        sum(_ACTION_WEIGHT[f.action] for f in case.faults),
        sum(_ordinal(f.point) for f in case.faults),
        sum(PHASES.index(f.point.phase) for f in case.faults),
    )


def _ordinal(point: KillPoint) -> int:
    return point.tx if point.tx is not None else point.n  # type: ignore[return-value]


def _with_faults(case: CaseSpec, faults: tuple[Fault, ...]) -> CaseSpec:
    return replace(case, faults=faults, origin="shrunk", index=0)


def _fault(action: str, point: KillPoint, *, bytes: int | None = None, errno: str | None = None) -> Fault | None:
    """A fault, or None when the combination is not allowed by the grammar (e.g. torn away from after-write)."""
    try:
        return Fault(action, point, bytes=bytes, errno=errno)
    except FaultSyntaxError:
        return None


# ---- passes: each yields neighbours of a case, simplest first ---------------------------------------------------


def drop_faults(case: CaseSpec) -> Iterator[CaseSpec]:
    """Remove one kill fault (never leaving a case with no fault at all: that is the baseline)."""
    for i in range(len(case.faults)):
        faults = case.faults[:i] + case.faults[i + 1 :]
        if faults or case.llm:
            yield _with_faults(case, faults)


def drop_llm(case: CaseSpec) -> Iterator[CaseSpec]:
    """Remove one provider fault."""
    for i in range(len(case.llm)):
        llm = case.llm[:i] + case.llm[i + 1 :]
        if llm or case.faults:
            yield replace(case, llm=llm, origin="shrunk", index=0)


def plain_kills(case: CaseSpec) -> Iterator[CaseSpec]:
    """Turn one torn write / power loss / double resume into a plain SIGKILL at the same transaction.

    A plain kill after the write leaves the same bytes at after-write and after-sync (page cache), so the kill is
    placed at after-sync, where exhaustive campaigns name it.
    """
    for i, f in enumerate(case.faults):
        if f.action in _TO_PLAIN:
            phase = "after-sync" if f.point.phase == "after-write" else f.point.phase
            kill = _fault("kill", replace(f.point, phase=phase))
            if kill is not None:
                yield _with_faults(case, case.faults[:i] + (kill,) + case.faults[i + 1 :])


def earlier(case: CaseSpec) -> Iterator[CaseSpec]:
    """Move one fault earlier: its ordinal to 1, then to N-1; then an earlier phase of the same transaction."""
    for i, f in enumerate(case.faults):
        for moved in _earlier_points(f):
            fault = _fault(f.action, moved, bytes=f.bytes, errno=_errno_for(f, moved))
            if fault is not None:
                yield _with_faults(case, case.faults[:i] + (fault,) + case.faults[i + 1 :])


def _earlier_points(f: Fault) -> Iterator[KillPoint]:
    p = f.point
    number = _ordinal(p)
    for target in dict.fromkeys((1, number - 1)):
        if 1 <= target < number:
            yield replace(p, tx=target) if p.tx is not None else replace(p, n=target)
    for phase in PHASES[: PHASES.index(p.phase)]:
        # A plain kill never moves *to* after-write: under SIGKILL it leaves the bytes after-sync leaves.
        if not (f.action == "kill" and phase == "after-write"):
            yield replace(p, phase=phase)


def _errno_for(f: Fault, point: KillPoint) -> str | None:
    if f.action != "ioerror":
        return None
    # ENOSPC is what a write fails with and EIO what an fsync fails with; keep the pairing the policies use.
    return "ENOSPC" if point.phase == "before-write" else f.errno


PASSES: tuple[Callable[[CaseSpec], Iterator[CaseSpec]], ...] = (drop_faults, drop_llm, plain_kills, earlier)


def neighbours(case: CaseSpec) -> Iterator[CaseSpec]:
    """Every strictly smaller neighbour of ``case`` across all passes, in pass order."""
    here = size(case)
    for shrink_pass in PASSES:
        for candidate in shrink_pass(case):
            if size(candidate) < here:
                yield candidate


@dataclass
class ShrinkResult:
    """The smallest case found, the accepted steps (case ids, in order), predicate calls, and budget exhaustion.

    ``exhausted``: shrinking stopped before the case was 1-minimal; ``cut_short`` says why (``"calls"``: the
    predicate-call budget, ``"deadline"``: the wall-clock deadline), and ``case`` is the best schedule so far."""

    case: CaseSpec
    steps: list[str] = field(default_factory=list)
    calls: int = 0
    exhausted: bool = False
    cut_short: str | None = None


def shrink(case: CaseSpec, still_fails: Callable[[CaseSpec], bool], *, max_calls: int = 50,
           deadline: float | None = None, clock: Callable[[], float] = time.time) -> ShrinkResult:
    """Shrink ``case`` (which fails) while ``still_fails`` holds; at most ``max_calls`` predicate calls, and none
    started at or after ``deadline`` (a ``clock()`` value, wall-clock seconds by default: the campaign's budget ends
    there, and the campaign process and its workers share that clock).

    Greedy: the first accepted neighbour becomes the current case and the passes start over from it.
    """
    result = ShrinkResult(case)
    cache: dict[str, bool] = {case.id: True}
    progress = True
    while progress:
        progress = False
        for candidate in neighbours(result.case):
            if candidate.id not in cache:
                if result.calls >= max_calls or (deadline is not None and clock() >= deadline):
                    result.exhausted = True
                    result.cut_short = "calls" if result.calls >= max_calls else "deadline"
                    return result
                result.calls += 1
                cache[candidate.id] = bool(still_fails(candidate))
            if cache[candidate.id]:
                result.case = candidate
                result.steps.append(candidate.id)
                progress = True
                break
    return result
