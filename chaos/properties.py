"""Properties for programs that do not write the session contract: pure functions over a probe case's evidence.

The oracle's seven invariants (chaos.oracle) read a session-contract log byte by byte; a program run under the probe
(chaos.probe: an agent framework on SQLite, a workflow on files) has no such log. What can still be judged, from
what the harness saw (``ProbeEvidence``: each launch, the state each restarted launch found — chaos.probe.inspect —,
the effects witnessed outside the state, the final state, the crash-free run's result):

- ``state-loads`` — after every kill the store opens (``PRAGMA integrity_check`` is ``ok``; the target's reader
  reads it) and every launch the harness did not kill ends without an exception (exit 0);
- ``recorded-not-redone`` — an effect the durable state recorded as done when a launch started (the reader's
  ``done``) is not executed again by that launch or a later one;
- ``effects-bounded`` — no effect is executed more often than the target's documented guarantee allows (``bound``:
  1 for exactly-once, 2 for at-least-once under one kill);
- ``completes`` — the case ends by itself (exit 0), the final state says the program finished, within ``max_launches``
  launches;
- ``matches-baseline`` — the final result (the reader's ``result``) equals the crash-free run's;
- ``consume-once`` — when k ≥ 2 processes resumed one durable state concurrently (``dresume(k)``), no effect was
  executed more than once across them, whichever ran it (one parked interrupt or pending step fires once);
- ``recovery-deterministic`` — recovering the durable state of the last kill a second time (a copy, another
  process, no kill) ends with the same result as the case did.

A property that the evidence cannot judge is left out of ``judge``'s answer, never reported as holding:
``matches-baseline`` without a crash-free result, ``consume-once`` without concurrent resumes,
``recovery-deterministic`` without a second recovery.

Invariant protected: each property is a pure function of the evidence (no I/O), returns one line per problem, and
is proven able to fail by a planted defect (tests/unit/chaos/test_properties.py on hand-built evidence,
tests/integration/test_probe.py with tests/agents/workflow.py under real kills).

Not here: gathering the evidence (chaos.probecase), the contract's invariants (chaos.oracle).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PROPERTIES = ("state-loads", "recorded-not-redone", "effects-bounded", "completes", "matches-baseline")
# Judged only when a case has the evidence: concurrent resumes (a dresume(k) schedule), a second recovery (it costs
# one more recovery per case, so a target lists it when it wants it).
ALL_PROPERTIES = (*PROPERTIES, "consume-once", "recovery-deterministic")
NO_BASELINE = object()  # matches-baseline is not judged without a crash-free result


@dataclass(frozen=True)
class LaunchEvidence:
    """One process of the case: how it ended and, for a restart, the state it found (an inspection record)."""

    index: int
    role: str  # "step", "resume", … (chaos.records.Launch.role)
    returncode: int | None
    killed: bool  # SIGKILLed by a fault (its end is the harness's doing, not the program's)
    error: str | None = None  # the last line of a traceback on its stderr, if any
    inspection: dict | None = None  # chaos.probe.inspect record: the durable state when it started


@dataclass(frozen=True)
class ProbeEvidence:
    """Everything the properties judge."""

    launches: tuple[LaunchEvidence, ...]
    effects: tuple[tuple[str, int], ...] = ()  # (effect key, launch index), in the order they were witnessed
    final: dict = field(default_factory=dict)  # inspection record of the final state
    verdict: str = "exit:0"  # the supervisor's verdict (chaos.records): "exit:N", "hang", "crash", …
    baseline: Any = NO_BASELINE  # the crash-free run's final result
    again: Any = NO_BASELINE  # the final result of recovering the last kill's durable state a second time


def _reader(inspection: dict | None) -> dict:
    return (inspection or {}).get("reader") or {}


def state_loads(ev: ProbeEvidence) -> list[str]:
    """The state opens after every kill and at the end, and no launch the harness let run ended in an error."""
    problems = []
    found = [(f"the state launch {l.index} ({l.role}) found", l.inspection) for l in ev.launches if l.inspection]
    for where, record in [*found, ("the final state", ev.final)]:
        for path, status in sorted((record.get("integrity") or {}).items()):
            if status not in ("ok", "absent"):
                problems.append(f"{where}: {path}: integrity check: {status}")
        if record.get("reader_error"):
            problems.append(f"{where}: the target's reader failed: {record['reader_error']}")
    for l in ev.launches:
        if not l.killed and l.returncode not in (0, None):
            why = f": {l.error}" if l.error else ""
            problems.append(f"launch {l.index} ({l.role}) exited {l.returncode}{why}")
    return problems


def recorded_not_redone(ev: ProbeEvidence) -> list[str]:
    """No effect runs again in a launch that started from a state recording it as done (or in a later one)."""
    problems = []
    recorded: dict[str, int] = {}  # effect -> the first launch whose starting state recorded it as done
    for l in ev.launches:
        for key in _reader(l.inspection).get("done", []):
            recorded.setdefault(str(key), l.index)
    for key, launch in ev.effects:
        first = recorded.get(key)
        if first is not None and launch >= first:
            problems.append(f"effect {key!r} ran in launch {launch}, but the state launch {first} started from "
                            f"already recorded it as done")
    return problems


def effects_bounded(ev: ProbeEvidence, bound: int) -> list[str]:
    """No effect ran more than ``bound`` times."""
    counts = Counter(key for key, _ in ev.effects)
    return [f"effect {key!r} ran {n} times (launches {[l for k, l in ev.effects if k == key]}); the target's "
            f"guarantee allows at most {bound}" for key, n in counts.items() if n > bound]


def completes(ev: ProbeEvidence, max_launches: int) -> list[str]:
    """The case ended by itself with exit 0, the final state says finished, within ``max_launches`` launches."""
    problems = []
    if ev.verdict != "exit:0":
        problems.append(f"the case ended {ev.verdict}, not exit:0")
    if not _reader(ev.final).get("complete"):
        problems.append("the final state does not record the program as finished")
    # Concurrent resumes (dresume(K)) are one restart of the program, not K: count generations of launches.
    generations = sum(1 for l in ev.launches if l.role != "dresume") + any(l.role == "dresume" for l in ev.launches)
    if generations > max_launches:
        problems.append(f"{generations} launches, more than the {max_launches} allowed")
    return problems


def matches_baseline(ev: ProbeEvidence) -> list[str]:
    """The final result equals the crash-free run's (not judged without one)."""
    if ev.baseline is NO_BASELINE:
        return []
    result = _reader(ev.final).get("result")
    if result != ev.baseline:
        return [f"final result {result!r}, the crash-free run's is {ev.baseline!r}"]
    return []


def consume_once(ev: ProbeEvidence) -> list[str]:
    """Among the launches that resumed concurrently (role ``dresume``), each effect ran at most once."""
    concurrent = {l.index for l in ev.launches if l.role == "dresume"}
    counts = Counter(key for key, launch in ev.effects if launch in concurrent)
    return [f"effect {key!r} ran {n} times in {len(concurrent)} concurrent resumes (launches "
            f"{sorted(l for k, l in ev.effects if k == key and l in concurrent)}); it must fire once"
            for key, n in counts.items() if n > 1]


def recovery_deterministic(ev: ProbeEvidence) -> list[str]:
    """Recovering the last kill's durable state again ends with the case's final result."""
    result = _reader(ev.final).get("result")
    if ev.again != result:
        return [f"recovering the same durable state again ended with {ev.again!r}, the case with {result!r}"]
    return []


def judgeable(ev: ProbeEvidence, name: str) -> bool:
    """Whether the evidence can judge property ``name`` (module docstring)."""
    if name == "matches-baseline":
        return ev.baseline is not NO_BASELINE
    if name == "consume-once":
        return sum(1 for l in ev.launches if l.role == "dresume") >= 2
    if name == "recovery-deterministic":
        return ev.again is not NO_BASELINE
    return True


def judge(ev: ProbeEvidence, *, bound: int = 1, max_launches: int = 4,
          properties: tuple[str, ...] = PROPERTIES) -> dict[str, list[str]]:
    """Each judgeable property of ``properties`` → its problems (an empty list: it holds)."""
    checks: dict[str, Callable[[], list[str]]] = {
        "state-loads": lambda: state_loads(ev),
        "recorded-not-redone": lambda: recorded_not_redone(ev),
        "effects-bounded": lambda: effects_bounded(ev, bound),
        "completes": lambda: completes(ev, max_launches),
        "matches-baseline": lambda: matches_baseline(ev),
        "consume-once": lambda: consume_once(ev),
        "recovery-deterministic": lambda: recovery_deterministic(ev),
    }
    unknown = [p for p in properties if p not in checks]
    if unknown:
        raise ValueError(f"unknown property {unknown[0]!r} (known: {', '.join(ALL_PROPERTIES)})")
    return {name: checks[name]() for name in properties if judgeable(ev, name)}
