"""What one supervised case did, as plain data: launches, barriers, acknowledged transactions, faults, verdict.

The supervisor fills a ``CaseRun``; the oracle reads it (with the session file and the kill snapshots it points to)
and reports serialize it with ``to_json()``; journals read it back with ``CaseRun.from_json()``.

Invariant protected: ``Acknowledged.data`` holds the exact bytes of a transaction as read from the session file at
its ``after-sync`` barrier, so ``acknowledged-durable`` compares against what the agent acknowledged, not against a
re-serialization. ``CaseRun.from_json(run.to_json()) == run``.

Plain dataclasses, no behaviour beyond (de)serialization and a few derived views: judging a run is the oracle's job.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field, fields
from typing import Any

from chaos.faults import Barrier

# Verdicts: how the case ended from the processes' point of view (the oracle judges the files afterwards).
HANG = "hang"  # a watchdog limit fired: case wall clock or per-barrier silence
CRASH = "crash"  # an agent process died by a signal the supervisor did not send
PROTOCOL_ERROR = "protocol-error"  # malformed line, wrong protocol version, barriers out of order, ...
NOT_REACHED = "kill-point-not-reached"  # the agent finished while faults of the schedule were still unfired
NOT_APPLICABLE = "fault-not-applicable"  # the fault fired where it cannot act (torn(B) longer than the unsynced range)
LAUNCH_ERROR = "launch-error"  # the agent command could not be started at all
# A campaign worker process died mid-case (an OOM kill, a signal meant for it): the harness never judged the case,
# so its journal line (status error) does not make it done: a --resume runs it again (chaos.journal).
WORKER_DIED = "died"


def exit_verdict(code: int) -> str:
    """``exit:<code>``: the last process exited by itself with that code after every fault fired."""
    return f"exit:{code}"


@dataclass
class Launch:
    """One agent process the supervisor started."""

    index: int
    role: str  # "step" (a step's command), "again" (a step re-issued), "resume", "dresume", "abort"
    step: int  # index of the command step this launch serves
    generation: int  # launches of one generation run together (two for dresume)
    argv: list[str]
    pid: int
    stdout: str
    stderr: str
    # Seconds since the case started, when the process was created: exec, the launch call (Popen forks in it);
    # zygote, when its process got the launch (handed to a spare forked ahead, or its fork's return), as reported.
    started: float
    # When it was reaped: its reaper's time where it reports one (the zygote), else when the supervisor saw it (a
    # fault kill: before the kill's bookkeeping).
    ended: float | None = None
    returncode: int | None = None  # subprocess convention: -N = terminated by signal N
    killed_by: str | None = None  # "fault" or "watchdog" when the supervisor SIGKILLed it, else None
    hello: dict | None = None  # the hello message it sent, if any

    @property
    def exited_by_itself(self) -> bool:
        """True when the process ended on its own (not SIGKILLed by the supervisor)."""
        return self.returncode is not None and self.killed_by is None


@dataclass
class BarrierEvent:
    """One checkpoint message, as announced, numbered by the matcher, and answered (or not)."""

    index: int  # position among all barrier messages of the case, 0-based
    launch: int
    pid: int
    phase: str
    facts: list[str]
    seq_first: int
    seq_last: int
    offset: int
    synced_offset: int
    tx: int  # 1-based announced-transaction number across the case
    ordinals: dict[str, int]  # per fact name: this transaction is its N-th
    file_size: int | None  # size of the session file when the message arrived; None where the agent did not wait
    at: float
    fault: str | None = None  # the fault that fired here
    answer: dict | None = None  # the line sent back; None when the process was killed instead, or did not wait
    held: float = 0.0  # seconds the answer was withheld (dresume lockstep: siblings still running)
    waited: bool = True  # False: a phase the agent was told not to wait at (docs/protocol.md): reported, not answered

    def points(self) -> list[str]:
        """Every kill-point text that names this barrier (``tx:K@PHASE`` first)."""
        return [str(p) for p in Barrier(self.phase, tuple(self.facts), self.tx, self.ordinals).points()]


@dataclass
class Acknowledged:
    """A transaction the agent announced at ``after-sync``: durable by its own account, with its bytes."""

    tx: int
    launch: int
    barrier: int  # index of the after-sync BarrierEvent
    facts: list[str]
    seq_first: int
    seq_last: int
    start: int  # offset announced at its before-write (file size before the write)
    end: int  # offset announced at after-sync
    synced_offset: int
    file_size: int | None  # size of the file when the after-sync message arrived
    data: bytes  # file[start:end] read at that moment

    @property
    def sha256(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()


@dataclass
class FaultRecord:
    """A fault that fired: where, what was done, and for kills the durable state it left."""

    fault: str
    action: str
    barrier: int  # index of the BarrierEvent where it fired
    launch: int
    pid: int
    at: float
    signal: str | None = None  # "SIGKILL" / "SIGINT" when a signal was sent
    errno: str | None = None  # ioerror answer
    killed: list[dict] = field(default_factory=list)  # processes SIGKILLed: {pid, name}
    survivors: list[dict] = field(default_factory=list)  # processes not confirmed gone within the limit
    size_at_kill: int | None = None  # session file size when the process was confirmed gone
    cut_to: int | None = None  # torn/powerloss: the size the file was truncated to
    snapshot: str | None = None  # copy of the session file as the restart finds it (after any cut)
    snapshot_size: int | None = None
    note: str = ""


@dataclass
class Straggler:
    """A process of the case found alive after its session leader ended (or at the end of the case); killed."""

    pid: int
    name: str
    cmdline: list[str]
    session: int
    launch: int | None
    found: str  # "after-exit" (leader exited by itself, member left behind) or "end" (final sweep)


@dataclass
class CaseRun:
    """Everything the supervisor observed during one case."""

    label: str
    schedule: list[str]
    case_dir: str
    socket: str
    session: str | None = None
    launches: list[Launch] = field(default_factory=list)
    barriers: list[BarrierEvent] = field(default_factory=list)
    acknowledged: list[Acknowledged] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    stragglers: list[Straggler] = field(default_factory=list)
    unreached: list[str] = field(default_factory=list)
    verdict: str = ""
    detail: str = ""
    duration: float = 0.0

    @property
    def kills(self) -> list[FaultRecord]:
        """The fired faults that SIGKILLed the agent (kill, torn, powerloss, dresume), in order."""
        return [f for f in self.faults if f.signal == "SIGKILL"]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (bytes as UTF-8 text when they decode, else base64; plus a sha256)."""
        return _dump(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> CaseRun:
        """Inverse of ``to_json``."""
        run = cls(**{k: v for k, v in value.items() if k not in _NESTED})
        for name, kind in _NESTED.items():
            setattr(run, name, [_load(kind, item) for item in value.get(name, [])])
        return run


def _dump(obj: Any) -> Any:
    if isinstance(obj, Acknowledged):
        out = {f.name: _dump(getattr(obj, f.name)) for f in fields(obj) if f.name != "data"}
        try:
            out["data"] = {"text": obj.data.decode("utf-8")}
        except UnicodeDecodeError:
            out["data"] = {"base64": base64.b64encode(obj.data).decode("ascii")}
        out["sha256"] = obj.sha256
        return out
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: _dump(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, list | tuple):
        return [_dump(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _dump(v) for k, v in obj.items()}
    return obj


def _load(kind: type, value: dict[str, Any]) -> Any:
    value = {k: v for k, v in value.items() if k in kind.__dataclass_fields__}
    if kind is Acknowledged:
        data = value["data"]
        value["data"] = data["text"].encode("utf-8") if "text" in data else base64.b64decode(data["base64"])
    return kind(**value)


_NESTED: dict[str, type] = {
    "launches": Launch,
    "barriers": BarrierEvent,
    "acknowledged": Acknowledged,
    "faults": FaultRecord,
    "stragglers": Straggler,
}
