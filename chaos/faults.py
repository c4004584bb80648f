"""The one fault grammar (``[ACTION:]POINT``), case ids, and the matcher that decides where a fault fires.

Used everywhere a fault is named: the CLI, scenario files, reports, journals and case ids. Grammar::

    FAULT  := [ACTION ":"] POINT
    ACTION := "kill" | "int" | "torn(" B ")" | "powerloss" | "dresume" | "dresume(" K ")"
            | "ioerror(" ("ENOSPC" | "EIO") ")"      dresume(K): kill, then K (2..8) concurrent resumes
    POINT  := FACT "@" PHASE "#" N       the N-th announced transaction containing a fact named FACT
            | "tx:" K "@" PHASE          the K-th announced transaction
    PHASE  := "before-write" | "after-write" | "after-sync"
    CASEID := SCENARIO "::" FAULT ("+" FAULT)*      (a case with no fault, the baseline, is just SCENARIO)

Transactions are counted when they are announced at their ``before-write`` barrier, across every process of a case
(a kill during recovery keeps counting where the previous process stopped), 1-based. A transaction that contains a
fact name twice counts once for that name. The header write is not a barrier, so it is never a kill point.

Invariant protected: ``parse_fault(format_fault(f)) == f`` and every accepted text has exactly one canonical form
(``kill:`` is implied and dropped, ``dresume(2)`` is written ``dresume``, numbers have no leading zeros), so case ids are stable journal keys.

Pure: no I/O, no processes. The supervisor feeds the ``Matcher`` barrier messages; what a fault *does* (SIGKILL,
SIGINT, cutting the file, answering ``fail``) is the supervisor's business.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from chaos.errors import ChaosError

PHASES = ("before-write", "after-write", "after-sync")

# The protocol's fact names (issue 3): record types, then the names of the other facts. Kill points are checked
# against this list so that a typo (`toolstarted`) fails at parse time instead of as `kill-point-not-reached`.
FACT_NAMES = (
    "runStarted",
    "compactionStarted",
    "stepAttempt",
    "stepFailed",
    "toolStarted",
    "abortRequested",
    "operationFinished",
    "user",
    "assistant",
    "toolResult",
    "synthetic",
    "compaction",
    "usage",
)

ACTIONS = ("kill", "int", "torn", "powerloss", "dresume", "ioerror")
ERRNOS = ("ENOSPC", "EIO")
# Actions after which the agent process is gone and the case restarts it with `resume`.
KILLING_ACTIONS = frozenset({"kill", "torn", "powerloss", "dresume"})


class FaultSyntaxError(ChaosError):
    """A fault, schedule or case id text does not follow the grammar; the message names the text and the problem."""


class BarrierOrderError(ChaosError):
    """A process announced barriers out of order (e.g. ``after-sync`` without its ``before-write``)."""


_NUMBER = r"[1-9][0-9]*"
_ACTION_RE = re.compile(r"^(kill|int|powerloss|dresume|torn\(([0-9]+)\)|ioerror\(([A-Z]+)\)|dresume\(([0-9]+)\))$")
DRESUME_MAX = 8  # concurrent resumes of one state: enough for consume-once, few enough for two cores
_FACT_POINT_RE = re.compile(rf"^([A-Za-z][A-Za-z0-9_]*)@([a-z-]+)#({_NUMBER})$")
_TX_POINT_RE = re.compile(rf"^tx:({_NUMBER})@([a-z-]+)$")


@dataclass(frozen=True)
class KillPoint:
    """One barrier of a case: ``FACT@PHASE#N`` (``fact`` and ``n`` set) or ``tx:K@PHASE`` (``tx`` set)."""

    phase: str
    fact: str | None = None
    n: int | None = None
    tx: int | None = None

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise FaultSyntaxError(f"kill point phase {self.phase!r}: expected one of {', '.join(PHASES)}")
        if (self.tx is None) == (self.fact is None):
            raise FaultSyntaxError("kill point: give either FACT and N or tx:K, not both or neither")
        if self.fact is not None and (self.n is None or self.n < 1):
            raise FaultSyntaxError(f"kill point {self.fact}@{self.phase}: N must be an integer >= 1")
        if self.tx is not None and self.tx < 1:
            raise FaultSyntaxError(f"kill point tx:{self.tx}: K must be an integer >= 1")

    def __str__(self) -> str:
        if self.tx is not None:
            return f"tx:{self.tx}@{self.phase}"
        return f"{self.fact}@{self.phase}#{self.n}"

    def matches(self, barrier: Barrier) -> bool:
        """True when this point names ``barrier``."""
        if barrier.phase != self.phase:
            return False
        if self.tx is not None:
            return barrier.tx == self.tx
        return barrier.ordinals.get(self.fact) == self.n  # type: ignore[arg-type]


@dataclass(frozen=True)
class Fault:
    """An action applied at a kill point. ``bytes`` is set for ``torn``, ``errno`` for ``ioerror``, ``count`` (the
    number of concurrent resumes, ≥ 2; 2 when not given) for ``dresume``."""

    action: str
    point: KillPoint
    bytes: int | None = None
    errno: str | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        if self.count == 2:  # dresume(2) is plain dresume: one canonical form
            object.__setattr__(self, "count", None)
        word = {"torn": f"torn({self.bytes})", "ioerror": f"ioerror({self.errno})"}.get(self.action, self.action)
        if self.count is not None:
            word = f"dresume({self.count})"
            if self.action != "dresume":
                raise FaultSyntaxError(f"fault {word}:{self.point}: only dresume carries a count")
            if not 2 <= self.count <= DRESUME_MAX:
                raise FaultSyntaxError(f"fault {word}:{self.point}: dresume(K) needs 2 <= K <= {DRESUME_MAX}")
        text = f"{word}:{self.point}"
        if self.action not in ACTIONS:
            raise FaultSyntaxError(f"fault {text!r}: unknown action {self.action!r} (expected {_action_list()})")
        if (self.action == "torn") != (self.bytes is not None):
            raise FaultSyntaxError(f"fault {text!r}: torn(B) and only torn carries a byte count")
        if self.bytes is not None and self.bytes < 1:
            raise FaultSyntaxError(f"fault {text!r}: torn(B) keeps B >= 1 bytes (B = 0 is `powerloss`)")
        if (self.action == "ioerror") != (self.errno is not None):
            raise FaultSyntaxError(f"fault {text!r}: ioerror(E) and only ioerror carries an errno")
        if self.errno is not None and self.errno not in ERRNOS:
            raise FaultSyntaxError(f"fault {text!r}: ioerror errno {self.errno!r}: expected ENOSPC or EIO")
        if self.action in ("torn", "powerloss") and self.point.phase != "after-write":
            # Only at after-write is there a written-but-unsynced range to lose: the agent fsyncs every commit, so
            # at the other barriers syncedOffset == offset and the cut would be a plain kill under another name.
            raise FaultSyntaxError(
                f"fault {text!r}: {self.action} cuts the unsynced bytes of a write, so its point must be @after-write"
            )
        if self.action == "ioerror" and self.point.phase == "after-sync":
            # Protocol: `fail` is an answer to before-write (the write fails) or after-write (the fsync fails) only.
            raise FaultSyntaxError(f"fault {text!r}: ioerror applies at @before-write or @after-write, not @after-sync")

    def __str__(self) -> str:
        return format_fault(self)

    @property
    def resumes(self) -> int:
        """How many processes resume concurrently after this fault (``dresume``: K; otherwise one)."""
        return (self.count or 2) if self.action == "dresume" else 1

    @property
    def kills(self) -> bool:
        """True when the action SIGKILLs the agent (the case then restarts it)."""
        return self.action in KILLING_ACTIONS


@dataclass(frozen=True)
class Barrier:
    """How the matcher identified one barrier message: its transaction number and per-fact ordinals."""

    phase: str
    facts: tuple[str, ...]
    tx: int
    ordinals: Mapping[str, int] = field(default_factory=dict)

    def points(self, vocabulary: Sequence[str] = FACT_NAMES) -> list[KillPoint]:
        """Every kill point that names this barrier: ``tx:K@PHASE`` and one ``FACT@PHASE#N`` per distinct fact of
        ``vocabulary`` (the target's fact names; the session contract's by default)."""
        named = [KillPoint(self.phase, fact=f, n=n) for f, n in self.ordinals.items() if f in vocabulary]
        return [KillPoint(self.phase, tx=self.tx), *named]


def _action_list() -> str:
    return "kill, int, torn(B), powerloss, dresume, dresume(K), ioerror(ENOSPC|EIO)"


def parse_point(text: str, vocabulary: Sequence[str] = FACT_NAMES) -> KillPoint:
    """Parse ``FACT@PHASE#N`` or ``tx:K@PHASE``; raises ``FaultSyntaxError`` naming the problem.

    ``vocabulary``: the fact names the target announces (a probe target's tables, files and points, chaos.probe);
    the session contract's ``FACT_NAMES`` by default, so every existing caller keeps its check."""
    m = _TX_POINT_RE.match(text)
    if m:
        return KillPoint(_phase(text, m.group(2)), tx=int(m.group(1)))
    m = _FACT_POINT_RE.match(text)
    if m:
        fact, phase, n = m.groups()
        if fact not in vocabulary:
            import difflib

            # A case slip (`toolstarted`) first, then a typo (`toolStartd`): say which fact was meant.
            close = [v for v in vocabulary if v.lower() == fact.lower()] or difflib.get_close_matches(fact, vocabulary, 1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise FaultSyntaxError(
                f"kill point {text!r}: unknown fact {fact!r}{hint} (expected one of {', '.join(vocabulary)})"
            )
        return KillPoint(_phase(text, phase), fact=fact, n=int(n))
    if text.startswith("tx:"):
        raise FaultSyntaxError(f"kill point {text!r}: expected tx:K@PHASE with K an integer >= 1 (no leading zeros)")
    if "@" not in text:
        raise FaultSyntaxError(f"kill point {text!r}: expected FACT@PHASE#N or tx:K@PHASE (missing '@PHASE')")
    if "#" not in text:
        raise FaultSyntaxError(f"kill point {text!r}: missing '#N' (the N-th transaction containing the fact, 1-based)")
    raise FaultSyntaxError(
        f"kill point {text!r}: expected FACT@PHASE#N with N an integer >= 1 (no leading zeros) or tx:K@PHASE"
    )


def _phase(text: str, phase: str) -> str:
    if phase not in PHASES:
        raise FaultSyntaxError(f"kill point {text!r}: unknown phase {phase!r} (expected one of {', '.join(PHASES)})")
    return phase


def parse_fault(text: str, vocabulary: Sequence[str] = FACT_NAMES) -> Fault:
    """Parse ``[ACTION:]POINT``; the default action is ``kill``. Raises ``FaultSyntaxError``."""
    if not isinstance(text, str) or not text.strip():
        raise FaultSyntaxError("fault: empty text (expected [ACTION:]FACT@PHASE#N or [ACTION:]tx:K@PHASE)")
    text = text.strip()
    if any(c.isspace() for c in text):
        raise FaultSyntaxError(f"fault {text!r}: whitespace is not allowed inside a fault")
    if text.startswith("llm("):  # a campaign case id's provider fault, pasted where only kill points go
        raise FaultSyntaxError(f"fault {text!r}: a provider fault, not a kill point: provider faults are injected by "
                               "a random campaign (its case is reproducible from --seed and its index) or declared in "
                               "a scenario's [[runs.turns]] (fault = {...}); a schedule here takes kill points only")
    head, sep, rest = text.partition(":")
    # `tx:K@PHASE` also contains a colon: a head that is not an action word is part of the point.
    if not sep or head == "tx":
        return Fault("kill", parse_point(text, vocabulary))
    m = _ACTION_RE.match(head)
    if not m:
        raise FaultSyntaxError(f"fault {text!r}: unknown action {head!r} (expected {_action_list()})")
    word = m.group(1)
    point = parse_point(rest, vocabulary)
    if word.startswith("torn("):
        if not re.fullmatch(_NUMBER, m.group(2)):
            raise FaultSyntaxError(
                f"fault {text!r}: torn(B) needs B an integer >= 1 without leading zeros (B = 0 is `powerloss`)"
            )
        return Fault("torn", point, bytes=int(m.group(2)))
    if word.startswith("ioerror("):
        return Fault("ioerror", point, errno=m.group(3))
    if word.startswith("dresume("):
        if not re.fullmatch(_NUMBER, m.group(4)):
            raise FaultSyntaxError(f"fault {text!r}: dresume(K) needs K an integer without leading zeros")
        return Fault("dresume", point, count=int(m.group(4)))  # __post_init__ makes dresume(2) plain dresume
    return Fault(word, point)


def format_fault(fault: Fault) -> str:
    """The canonical text of a fault (``kill:`` omitted)."""
    if fault.action == "kill":
        return str(fault.point)
    if fault.action == "torn":
        return f"torn({fault.bytes}):{fault.point}"
    if fault.action == "ioerror":
        return f"ioerror({fault.errno}):{fault.point}"
    if fault.count is not None:
        return f"dresume({fault.count}):{fault.point}"
    return f"{fault.action}:{fault.point}"


PROBE_ACTIONS = ("kill", "dresume")


def probe_fault_problem(fault: Fault) -> str | None:
    """Why ``fault`` cannot act on a program under the probe, or None. ``torn``/``powerloss`` cut a session file's
    unsynced bytes at announced offsets and ``int``/``ioerror`` need the contract's abort and write-failure
    protocol: a probe announces neither (docs/frameworks.md)."""
    if fault.action in PROBE_ACTIONS:
        return None
    return (f"fault {format_fault(fault)!r}: {fault.action} does not apply to a python target (only "
            f"{' and '.join(PROBE_ACTIONS)}: it announces no session offsets and no abort protocol)")


def parse_schedule(text: str | Iterable[str], vocabulary: Sequence[str] = FACT_NAMES) -> tuple[Fault, ...]:
    """Parse ``FAULT+FAULT…`` (or an iterable of fault texts) into a schedule; ``""`` is the empty schedule."""
    parts = text.split("+") if isinstance(text, str) else list(text)
    if isinstance(text, str) and not text.strip():
        return ()
    return tuple(parse_fault(p, vocabulary) for p in parts)


def format_schedule(schedule: Sequence[Fault]) -> str:
    """``FAULT+FAULT…`` in canonical form."""
    return "+".join(format_fault(f) for f in schedule)


def case_id(scenario: str, schedule: Sequence[Fault]) -> str:
    """``<scenario>::<fault>[+<fault>…]``; the baseline (no fault) is the bare scenario name."""
    if not scenario or "::" in scenario or any(c.isspace() for c in scenario):
        raise FaultSyntaxError(f"case id: scenario name {scenario!r} must be non-empty, without '::' or whitespace")
    return f"{scenario}::{format_schedule(schedule)}" if schedule else scenario


def parse_case_id(text: str, vocabulary: Sequence[str] = FACT_NAMES) -> tuple[str, tuple[Fault, ...]]:
    """Split a case id into its scenario name and schedule; raises ``FaultSyntaxError``."""
    scenario, sep, schedule = text.partition("::")
    if not scenario or any(c.isspace() for c in scenario):
        raise FaultSyntaxError(f"case id {text!r}: expected <scenario>::<fault>[+<fault>...]")
    if sep and not schedule:
        raise FaultSyntaxError(f"case id {text!r}: '::' must be followed by at least one fault")
    return scenario, parse_schedule(schedule, vocabulary) if sep else ()


class Matcher:
    """Numbers barrier messages in arrival order and says which fault of the schedule fires at each.

    Faults are applied in order: only the first unfired fault is armed, so a later fault is looked for only after
    the previous one fired (it may land during the recovery the previous one caused). At most one fault fires per
    barrier. ``stream`` identifies the announcing process (one connection): its ``after-*`` barriers belong to the
    transaction of its latest ``before-write``.
    """

    def __init__(self, schedule: Sequence[Fault]):
        self.schedule = tuple(schedule)
        self.fired: list[Fault] = []
        self.transactions = 0
        self._counts: dict[str, int] = {}
        self._current: dict[Hashable, tuple[Barrier, str]] = {}

    @property
    def pending(self) -> tuple[Fault, ...]:
        """The faults not fired yet, in schedule order."""
        return self.schedule[len(self.fired) :]

    def withdraw(self, fault: Fault) -> None:
        """``fault``, the last one fired, did not happen after all (the process it was to act on had already ended
        by itself): it is pending again, and unfired when the case ends."""
        if self.fired and self.fired[-1] is fault:
            self.fired.pop()

    def observe(self, stream: Hashable, phase: str, facts: Sequence[str]) -> tuple[Barrier, Fault | None]:
        """Identify one barrier and return it with the fault that fires there (or None).

        Raises ``BarrierOrderError`` for an ``after-*`` barrier with no matching ``before-write`` on the same stream,
        a phase that goes backwards, or facts that differ from the transaction's announcement.
        """
        facts = tuple(facts)
        if phase == "before-write":
            self.transactions += 1
            ordinals: dict[str, int] = {}
            for name in dict.fromkeys(facts):  # a name counts once per transaction, in first-appearance order
                self._counts[name] = self._counts.get(name, 0) + 1
                ordinals[name] = self._counts[name]
            barrier = Barrier(phase, facts, self.transactions, ordinals)
        elif phase in PHASES:
            previous = self._current.get(stream)
            if previous is None:
                raise BarrierOrderError(f"{phase} barrier without a before-write announcing its transaction")
            tx_barrier, last_phase = previous
            if PHASES.index(phase) != PHASES.index(last_phase) + 1:
                raise BarrierOrderError(f"{phase} barrier after {last_phase} (expected {_next_phase(last_phase)})")
            if facts != tx_barrier.facts:
                raise BarrierOrderError(
                    f"{phase} barrier announces facts {list(facts)} "
                    f"but its before-write announced {list(tx_barrier.facts)}"
                )
            barrier = Barrier(phase, facts, tx_barrier.tx, tx_barrier.ordinals)
        else:
            raise BarrierOrderError(f"unknown phase {phase!r}")
        self._current[stream] = (barrier, phase)
        fault = None
        if self.pending and self.pending[0].point.matches(barrier):
            fault = self.pending[0]
            self.fired.append(fault)
        return barrier, fault


def _next_phase(phase: str) -> str:
    i = PHASES.index(phase)
    return "before-write" if i == len(PHASES) - 1 else f"{PHASES[i + 1]} or before-write"
