"""The oracle: seven named invariants that judge one case from its evidence, each able to fail, each with evidence.

After a case ran (``chaos.case``), the evidence is plain data: the final session file, the file as each restart found
it after a SIGKILL, the transactions the agent acknowledged at ``after-sync`` with their bytes, the barrier events,
the launches with the configuration each ran with, every request the scripted model server received, the effect
witnesses (written by the tools' commands outside the workspace, keyed by provider call id), two extra ``resume``
probes, the scenario's expectations and the crash-free baseline. ``check(evidence)`` returns one ``InvariantResult``
per invariant:

1. ``log-reduces`` — the final log reduces (reference reducer); no torn tail is left behind; the committed prefix at
   every kill reduces, is well-formed (SPEC §12) and is a prefix of the final log (append-only); every transaction
   meets the writer obligations of §12/§15 (``toolStarted`` arguments equal the parsed call text, replay declaration
   and environment identity as configured for the launch that wrote it, no ``toolStarted`` while another call of
   the same answer is pending (§14.4 P7.1), digests as configured, synthetic reasons that fit, no live write after
   ``abortRequested``, user entries only with ``runStarted`` …) and every model request carries the configuration
   its ``stepAttempt`` recorded.
2. ``acknowledged-durable`` — every transaction acknowledged at ``after-sync`` is in the final log and in every later
   kill snapshot byte for byte, and the offsets the agent reported match the file.
3. ``converges`` — the final state is idle, or blocked with a reason the durable prefix justifies (checked from the
   facts and the configuration, not by asking the planner); every blocked exit on the way was justified too; two
   more ``resume`` runs change nothing.
4. ``transcript-legal`` — every tool call has at most one result, and one unless the case ended blocked; every
   request the server received was provider-legal and carried the durable tool results.
5. ``effects-at-most-once`` — from the witnesses, not the log: a ``never`` tool's effect at most once per call,
   exactly once when the log records a real result (for calls the baseline shows to leave a witness); no effect
   without a durable intent; a result produced by a process other than the one that wrote the intent (a replay) only
   for a ``safe`` read, in the environment that recorded the intent, with the content the baseline read.
6. ``attempts-bounded`` — per step the server saw at most 2 requests, no more than the durable attempts, a second
   only after a kill left attempt 1 open, none after the step's live failure, none without a durable attempt.
7. ``outcome`` — the final outcome, answer, files and effect counts equal the scenario's expectation for the durable
   state at the last kill; every scripted run was performed; no unscripted request; and (differential) when no
   restart change applies and the last kill left no open attempt and no pending tool, the final log equals the
   baseline's fact for fact, ids consistently renamed, usage, seq, timestamps and header ignored.

Each check is its own function over the evidence; they share only the parsing helpers below (``LogView``, a small
independent reading of the log — not the agent's reducer — and the reference reducer for "does it reduce":
``reduce_prefixes``, ``reduce_session`` of the final log and, from the same pass, of the kill snapshots it
extends). Pure: no I/O, no processes; unit tests build evidence by hand. It does not run anything and does not know
how the evidence was collected (``chaos.case`` does).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any

INVARIANTS = (
    "log-reduces",
    "acknowledged-durable",
    "converges",
    "transcript-legal",
    "effects-at-most-once",
    "attempts-bounded",
    "outcome",
)

BLOCKED_EXIT = 3
LOCKED_EXIT = 6  # the refused process of a dresume pair (the supervisor's default ``locked_exit``)
_UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
# Planner-fixed failure codes (SPEC §14.2) and the executor's step budget (issue 3): each has a precondition.
_MODEL_ERROR = "model_error"
_TRUNCATED_RESPONSE = "truncated_response"
_EMPTY_RESPONSE = "empty_response"
_KILL_ACTIONS = frozenset({"kill", "torn", "powerloss", "dresume"})


# --------------------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Finding:
    """One piece of evidence of a violation: what is wrong and exactly where (log line/seq, call, request)."""

    message: str
    where: str = ""  # "final log", "kill 1 (toolStarted@after-sync#1)", "request 3", "witness file", "probe 1"
    line: int | None = None
    seq: int | None = None
    call: str | None = None
    request: int | None = None

    def text(self) -> str:
        """One readable line."""
        loc = [self.where] if self.where else []
        if self.line is not None:
            loc.append(f"line {self.line}")
        if self.seq is not None:
            loc.append(f"seq {self.seq}")
        if self.call is not None:
            loc.append(f"call {self.call}")
        if self.request is not None and not self.where.startswith("request"):
            loc.append(f"request {self.request}")
        return (", ".join(loc) + ": " if loc else "") + self.message

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}


@dataclass
class InvariantResult:
    """The verdict of one invariant: ``ok``, the findings when it failed, and what it checked (never vacuous
    silently: ``checked`` says how many things it looked at)."""

    name: str
    ok: bool
    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"name": self.name, "ok": self.ok, "findings": [f.to_json() for f in self.findings],
                "checked": list(self.checked)}

    @classmethod
    def from_json(cls, value: Mapping) -> InvariantResult:
        return cls(value["name"], value["ok"], [Finding(**f) for f in value.get("findings", [])],
                   list(value.get("checked", [])))


def _result(name: str, findings: list[Finding], checked: list[str]) -> InvariantResult:
    return InvariantResult(name, not findings, findings, checked)


# --------------------------------------------------------------------------------------------------------------
# Evidence


@dataclass
class Kill:
    """One SIGKILL of the case: the fault text, the launch it killed and the session file as the restart found it."""

    fault: str
    launch: int
    snapshot: bytes
    action: str = "kill"
    barrier: int | None = None  # index of the barrier event where it fired (None: the killed launch's last one)


@dataclass
class LaunchInfo:
    """One agent process: how it ended and the configuration it ran with.

    ``current`` is its SPEC §8.7 CurrentConfiguration (plus ``snapshot``) as the harness configured it, or None when
    the harness cannot compute it (a foreign agent): the checks that need it then say so in ``checked``.
    """

    index: int
    role: str
    returncode: int | None
    killed: bool = False  # SIGKILLed by the harness (a fault or the watchdog)
    stdout: str = ""
    current: Mapping | None = None
    restart: bool = False  # launched with the scenario's restart changes


@dataclass
class Fired:
    """A fault of the schedule that fired: its action, its text, the launch it hit and the barrier event index."""

    action: str
    fault: str
    launch: int
    barrier: int | None = None


@dataclass
class Probe:
    """One extra ``resume`` after the case ended (convergence): its exit and the file before and after."""

    returncode: int | None  # None: it did not end within the limit and was killed
    stdout: str
    sha_before: str
    sha_after: str
    size_before: int
    size_after: int


@dataclass
class Ack:
    """A transaction acknowledged at ``after-sync``: its bytes as read from the file at that moment."""

    tx: int
    launch: int
    seq_first: int
    seq_last: int
    start: int
    end: int
    synced_offset: int
    file_size: int | None
    data: bytes


@dataclass
class Barrier:
    """One checkpoint message: who announced what, and the file size the supervisor saw when it arrived (None at a
    barrier the agent did not wait at)."""

    index: int
    launch: int
    phase: str
    facts: list[str]
    seq_first: int
    seq_last: int
    offset: int
    synced_offset: int
    file_size: int | None


@dataclass
class BaselineFacts:
    """What the crash-free baseline leaves for the differential and witness checks."""

    normalized: list  # normalize_log(final log of the baseline)
    witnesses: dict[str, int]  # effect count per provider call id
    results: dict[str, str]  # durable tool-result content per provider call id (real results only)
    ok: bool = True  # the baseline passed every invariant itself

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping) -> BaselineFacts:
        return cls(list(value["normalized"]), dict(value["witnesses"]), dict(value["results"]), bool(value["ok"]))


@dataclass
class Evidence:
    """Everything the oracle judges. Plain data; ``chaos.case`` collects it, tests build it by hand."""

    case_id: str
    schedule: tuple[str, ...]
    final_log: bytes
    kills: list[Kill] = field(default_factory=list)
    fired: list[Fired] = field(default_factory=list)  # every fault that fired, in order (kill, int, ioerror…)
    acknowledged: list[Ack] = field(default_factory=list)
    barriers: list[Barrier] = field(default_factory=list)
    launches: list[LaunchInfo] = field(default_factory=list)
    requests: list[Mapping] = field(default_factory=list)  # chaos.fakellm.RecordedRequest.to_json()
    witness: list[str] = field(default_factory=list)  # lines of the witness file
    probes: list[Probe] = field(default_factory=list)
    expect: Any = None  # chaos.scenario.Expect (``resolve(reduction)``), None: no expectation
    prompts: list[str] = field(default_factory=list)  # the scenario's run prompts, in order
    files: dict[str, str | None] = field(default_factory=dict)  # workspace files the expectations name (None: absent)
    restart_changes: bool = False  # the scenario has restart changes (they apply after the first kill)
    baseline: BaselineFacts | None = None  # None for the baseline itself

    @cached_property
    def final(self) -> LogView:
        return self._views[0]

    @cached_property
    def kill_views(self) -> list[LogView]:
        return self._views[1]

    @cached_property
    def _views(self) -> tuple[LogView, list[LogView]]:
        """The final log's view and each kill snapshot's, from one pass of the reference reducer where it can.

        A snapshot whose committed bytes the final log starts with (recovery keeps them: log-reduces checks it) is
        reduced as that prefix of the final log, in the final log's pass (``reduce_prefixes``): the reducer ignores
        a torn tail whatever it holds (SPEC §2.2), so the snapshot's reduction is the prefix's. It was a second
        reduction of nearly the same bytes in every killed case, a quarter of the oracle's time. Any other snapshot
        (or a final log that does not reduce) is reduced on its own."""
        data = self.final_log
        cuts = [k.snapshot.rfind(b"\n") + 1 for k in self.kills]
        shared = [c if c and data[:c] == k.snapshot[:c] else 0 for c, k in zip(cuts, self.kills)]
        final = LogView(data, prefixes=[c for c in shared if c])
        views = [LogView(k.snapshot, within=(final, c)) if c and c in final.prefixes else LogView(k.snapshot)
                 for c, k in zip(shared, self.kills)]
        return final, views

    @cached_property
    def writers(self) -> dict[int, int]:
        """seq -> the launch that announced the transaction holding it (at its before-write barrier)."""
        out: dict[int, int] = {}
        for b in self.barriers:
            if b.phase == "before-write":
                for seq in range(b.seq_first, b.seq_last + 1):
                    out[seq] = b.launch  # a later announcement of the same seq (after a kill) is the one kept
        return out

    @property
    def faults(self) -> list[str]:
        """The actions of the fired faults, in order."""
        return [f.action for f in self.fired]

    def launch(self, index: int | None) -> LaunchInfo | None:
        return next((l for l in self.launches if l.index == index), None)

    def kill_name(self, i: int) -> str:
        return f"kill {i + 1} ({self.kills[i].fault})"

    @property
    def ended(self) -> list[LaunchInfo]:
        """The launches that ended by themselves (not killed), without a dresume pair's refused sibling: its
        ``locked`` exit says nothing about the session (which of the two is refused is a race)."""
        return [l for l in self.launches if not l.killed and l.returncode is not None
                and not (l.role == "dresume" and l.returncode == LOCKED_EXIT)]

    @property
    def last_exit(self) -> LaunchInfo | None:
        """The last launch that ended by itself (not killed, not a refused dresume sibling)."""
        ended = self.ended
        return ended[-1] if ended else None


# --------------------------------------------------------------------------------------------------------------
# Reading a log (independent of the agent's reducer: a small model of what the oracle needs)


def fact_name(fact: Mapping) -> str:
    """The protocol name of a fact (record type, user, assistant, toolResult, synthetic, compaction, usage)."""
    kind = fact.get("kind")
    if kind == "record":
        return str(fact.get("record", {}).get("type"))
    if kind == "usage":
        return "usage"
    entry = fact.get("entry", {})
    if entry.get("type") == "compaction":
        return "compaction"
    role = entry.get("message", {}).get("role")
    if role == "tool":
        return "synthetic" if entry.get("result", {}).get("type") == "synthetic" else "toolResult"
    return str(role)


@dataclass
class Line:
    number: int  # physical line (header = 1)
    facts: list[dict]
    start: int
    end: int  # byte offset after its LF

    @property
    def seqs(self) -> list[int]:
        return [f.get("seq") for f in self.facts]


class LogView:
    """The committed lines of a log as parsed JSON, plus whether the reference reducer accepts it.

    ``error`` is the reducer's ``{code, line, seq?}`` (or a parse problem) and ``lines`` stops before the first bad
    line, so every other check can still look at the valid prefix.
    """

    def __init__(self, data: bytes, prefixes: Sequence[int] = (), *, within: tuple[LogView, int] | None = None):
        """``prefixes``: ends of ``data`` whose reductions to keep (``self.prefixes``). ``within``: (the view of a
        longer log, ``end``) when ``data``'s committed bytes are that log's up to ``end`` (an end in its
        ``prefixes``): the reduction, lines and states are that log's up to there, nothing is parsed again."""
        self.data = data
        self.error: dict | None = None
        self.reduction: Mapping | None = None
        self.prefixes: dict[int, Mapping] = {}  # end -> the reduction of data[:end] (``prefixes`` asked for)
        self.header: dict | None = None
        self.lines: list[Line] = []
        self._states: dict[int | None, State] = {}
        self._within: tuple[LogView, int] | None = None  # (the longer log's view, how many of its lines are ours)
        last_lf = data.rfind(b"\n")
        self.committed = last_lf + 1
        self.torn = len(data) - self.committed
        if within is not None:
            longer, end = within
            self.reduction, self.header = longer.prefixes[end], longer.header
            self.lines = [line for line in longer.lines if line.end <= end]
            self._within = (longer, len(self.lines))
            return
        try:
            from agent.session.errors import CorruptionError
            from agent.session.reducer import reduce_prefixes
        except ImportError as exc:  # pragma: no cover - the reference reducer is part of the distribution
            self.error = {"code": "NO_REDUCER", "line": 0, "message": str(exc)}
        else:
            try:
                self.reduction, self.prefixes = reduce_prefixes(data, list(prefixes))
            except CorruptionError as exc:
                self.error = exc.to_json()
        stop = self.error.get("line") if self.error else None
        offset = 0
        for number, raw in enumerate(data[: self.committed].split(b"\n")[:-1], start=1):
            start, offset = offset, offset + len(raw) + 1
            if stop is not None and number >= stop:
                break
            try:
                value = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):  # (a line nested too deep stops the reducer first, at `stop`)
                if self.error is None:
                    self.error = {"code": "MALFORMED_JSON", "line": number}
                break
            if number == 1:
                self.header = value if isinstance(value, dict) else None
                continue
            facts = value if isinstance(value, list) else [value]
            if not all(isinstance(f, dict) for f in facts):
                break
            self.lines.append(Line(number, facts, start, offset))

    @property
    def reduces(self) -> bool:
        return self.error is None

    def state(self, upto: int | None = None) -> State:
        """The oracle's model of the log after its first ``upto`` transactions (all by default). Made once per
        ``upto`` and shared: a case's invariants ask for the final state ~10 times (replaying the log each time was
        a quarter of the oracle's time), and none of them changes what it reads (tests/unit/chaos/test_oracle.py).
        A prefix's states are its longer log's (the same lines)."""
        if self._within is not None:
            longer, count = self._within
            if upto is None:
                return longer.state(count)
            return longer.state(min(upto, count) if upto >= 0 else max(0, count + upto))  # as self.lines[:upto]
        if upto not in self._states:
            state = State(self.header or {})
            for line in self.lines[:upto]:
                for fact in line.facts:
                    state.apply(fact, line.number)
            self._states[upto] = state
        return self._states[upto]


@dataclass
class _Attempt:
    id: str
    number: int
    digest: str | None
    snapshot: dict
    status: str = "open"  # open | settled | failed | superseded
    error: dict | None = None
    line: int = 0


@dataclass
class _Step:
    id: str
    op: str
    kind: str
    attempts: list[_Attempt] = field(default_factory=list)
    settled: str | None = None
    stop_reason: str | None = None

    @property
    def latest(self) -> _Attempt:
        return self.attempts[-1]

    @property
    def status(self) -> str:
        latest = self.latest.status
        return "attempting" if latest == "open" else latest


@dataclass
class _Op:
    id: str
    kind: str
    line: int
    prompt: str | None = None
    steps: list[str] = field(default_factory=list)
    abort: bool = False
    finished: bool = False
    outcome: str | None = None
    completion: str | None = None
    error: dict | None = None
    final_entry: str | None = None
    record: dict = field(default_factory=dict)
    seq: int = 0  # seq of its runStarted/compactionStarted
    finish_seq: int | None = None  # seq of its operationFinished


class State:
    """What the log says so far, fact by fact: operations, steps, attempts, entries, tool intents, calls."""

    def __init__(self, header: Mapping):
        self.header = dict(header)
        self.ops: dict[str, _Op] = {}
        self.order: list[str] = []  # operation ids in order
        self.current: str | None = None
        self.steps: dict[str, _Step] = {}
        self.entries: dict[str, dict] = {}  # id -> the entry object (+ "_line", "_seq", "_op")
        self.transcript: list[str] = []  # message entry ids in commit order
        self.started: dict[str, dict] = {}  # toolStarted id -> the record (+ "_status", "_line", "_seq", "_result")
        self.started_at: dict[tuple[str, int], str] = {}  # (assistantEntryId, toolIndex) -> toolStarted id

    # -- applying
    def apply(self, fact: Mapping, line: int) -> None:
        name = fact_name(fact)
        fid = fact.get("id")
        if fact.get("kind") == "entry":
            entry = dict(fact["entry"])
            entry.update(_line=line, _seq=fact.get("seq"), _name=name, _op=self.current)
            self.entries[fid] = entry
            if name == "compaction":
                step = self._step_of_attempt_open(entry.get("operationId"))
                if step is not None:
                    step.latest.status = "settled"
                    step.settled = fid
                return
            self.transcript.append(fid)
            if name == "assistant":
                step = self.steps.get(entry.get("stepId"))
                if step is not None:
                    step.latest.status = "settled"
                    step.settled = fid
                    step.stop_reason = entry.get("stopReason")
            elif name in ("toolResult", "synthetic") and entry.get("toolStartedId") in self.started:
                started = self.started[entry["toolStartedId"]]
                started["_status"] = "completed"
                started["_result"] = fid
            return
        if fact.get("kind") != "record":
            return
        rec = fact["record"]
        if name in ("runStarted", "compactionStarted"):
            op = _Op(rec["operationId"], "run" if name == "runStarted" else "compaction", line, record=dict(rec),
                     seq=fact.get("seq") or 0)
            if op.kind == "run":
                user = self.entries.get(rec.get("inputEntryId"), {})
                op.prompt = user.get("message", {}).get("content")
            self.ops[op.id] = op
            self.order.append(op.id)
            self.current = op.id
        elif name == "stepAttempt":
            step = self.steps.get(rec["stepId"])
            if step is None:
                step = self.steps[rec["stepId"]] = _Step(rec["stepId"], rec["operationId"], rec.get("stepKind"))
                if rec["operationId"] in self.ops:
                    self.ops[rec["operationId"]].steps.append(step.id)
            elif step.attempts:
                step.latest.status = "superseded"
            step.attempts.append(_Attempt(rec["attemptId"], rec.get("attempt", 1), rec.get("configurationDigest"),
                                          rec.get("configurationSnapshot") or {}, line=line))
        elif name == "stepFailed":
            step = self.steps.get(rec.get("stepId"))
            if step is not None:
                for attempt in step.attempts:
                    if attempt.id == rec.get("attemptId"):
                        attempt.status = "failed"
                        attempt.error = rec.get("error")
        elif name == "toolStarted":
            started = dict(rec)
            started.update(_status="pending", _line=line, _seq=fact.get("seq"), _id=fid, _result=None)
            self.started[fid] = started
            self.started_at[(rec.get("assistantEntryId"), rec.get("toolIndex"))] = fid
        elif name == "abortRequested":
            if rec.get("operationId") in self.ops:
                self.ops[rec["operationId"]].abort = True
        elif name == "operationFinished":
            op = self.ops.get(rec.get("operationId"))
            if op is not None:
                op.finished = True
                op.outcome = rec.get("outcome")
                op.completion = rec.get("completion")
                op.error = rec.get("error")
                op.final_entry = rec.get("finalEntryId")
                op.finish_seq = fact.get("seq")
            if self.current == rec.get("operationId"):
                self.current = None

    def _step_of_attempt_open(self, op_id: str | None) -> _Step | None:
        op = self.ops.get(op_id) if op_id else None
        if op is None or not op.steps:
            return None
        return self.steps.get(op.steps[-1])

    # -- derived views
    @property
    def op(self) -> _Op | None:
        return self.ops.get(self.current) if self.current else None

    def latest_step(self, op: _Op | None = None) -> _Step | None:
        op = op or self.op
        if op is None or not op.steps:
            return None
        return self.steps.get(op.steps[-1])

    @property
    def idle(self) -> bool:
        return self.current is None

    def message(self, entry_id: str) -> dict:
        return self.entries.get(entry_id, {}).get("message", {})

    def calls(self) -> list[dict]:
        """Every tool call of every assistant message, with the ids of the tool messages answering it.

        Each item: ``{entry, index, id, name, arguments, results: [entry ids]}``; a result answers the call when its
        ``tool_call_id`` matches and it follows that assistant message (before the next assistant message).
        """
        out: list[dict] = []
        group: dict[str, dict] = {}
        for entry_id in self.transcript:
            entry = self.entries[entry_id]
            message = entry.get("message", {})
            role = message.get("role")
            if role == "assistant":
                group = {}
                for index, call in enumerate(message.get("tool_calls") or []):
                    item = {"entry": entry_id, "index": index, "id": call.get("id"),
                            "name": call.get("function", {}).get("name"),
                            "arguments": call.get("function", {}).get("arguments"), "results": []}
                    out.append(item)
                    group.setdefault(item["id"], item)
            elif role == "tool":
                item = group.get(message.get("tool_call_id"))
                if item is not None:
                    item["results"].append(entry_id)
            elif role == "user":
                group = {}
        return out

    def unresolved(self) -> list[dict]:
        return [c for c in self.calls() if not c["results"]]

    def settled_entry(self) -> str | None:
        """The settled assistant entry of the current step of the current run (SPEC §14.3 "current assistant")."""
        op = self.op
        step = self.latest_step(op)
        if op is None or op.kind != "run" or step is None or step.status != "settled":
            return None
        return step.settled


def well_formed_problems(state: State) -> list[str]:
    """SPEC §12: every unresolved call belongs to the settled assistant entry of the current step of the current run."""
    current = state.settled_entry()
    problems = []
    for call in state.unresolved():
        if call["entry"] != current:
            problems.append(f"call {call['id']!r} ({call['name']}) of assistant entry {call['entry']} is unresolved "
                            "but that entry is not the current step's settled answer")
    return problems


def normalize_log(data: bytes | LogView) -> list[list[dict]]:
    """The log's transactions with usage facts, seq, timestamps and the header dropped and every UUID renamed by
    first appearance (``id1``, ``id2``…), so two logs of the same work compare equal exactly when they have the
    same facts in the same transactions with ids consistently renamed. Given a ``LogView`` (e.g. ``Evidence.final``)
    it reuses that parse and reduction instead of reducing the bytes once more (~1 ms a case)."""
    names: dict[str, str] = {}

    def rename(value: Any) -> Any:
        if isinstance(value, str) and _UUID7.match(value):
            return names.setdefault(value, f"id{len(names) + 1}")
        if isinstance(value, list):
            return [rename(v) for v in value]
        if isinstance(value, dict):
            # compactionStarted.sourceDigest hashes the source entries' ids (SPEC §8.3), so it differs between two
            # runs of the same work like the ids do; the reducer already checks it against the entries.
            return {k: ("(digest over ids)" if k == "sourceDigest" else rename(value[k])) for k in sorted(value)}
        return value

    out = []
    for line in (data if isinstance(data, LogView) else LogView(data)).lines:
        facts = [rename({k: v for k, v in f.items() if k not in ("seq", "timestamp")})
                 for f in line.facts if f.get("kind") != "usage"]
        if facts:
            out.append(facts)
    return out


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _parse_arguments(text: object) -> dict | None:
    from agent.session.framing import parse_arguments

    return parse_arguments(text) if isinstance(text, str) else None


def _decl(current: Mapping | None, name: str) -> Mapping | None:
    if current is None:
        return None
    return next((t for t in current.get("tools", []) if t.get("name") == name), None)


def _clip(value: Any) -> str:
    """A value as evidence text, whole: a reader acts on the exact bytes (an argument, a result, a transaction), and a
    line cut with "…" hides the very difference it reports."""
    if value is None:
        return "(none)"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _show(value: str | None) -> str:
    return "none" if value is None else repr(_clip(value))


def _blocked_reason(launch: LaunchInfo | None) -> str | None:
    if launch is None:
        return None
    for line in reversed(launch.stdout.splitlines()):
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # the agent's own stdout: any line, any depth
            continue
        if isinstance(value, dict) and isinstance(value.get("blocked"), str):
            return value["blocked"]
    return None


# --------------------------------------------------------------------------------------------------------------
# 1. log-reduces


def log_reduces(ev: Evidence) -> InvariantResult:
    """The final log reduces with no torn tail left; every kill prefix reduces, is well-formed and is kept; every
    transaction meets the writer obligations; every request carries the configuration its attempt recorded."""
    findings: list[Finding] = []
    checked: list[str] = []
    final = ev.final
    checked.append(f"final log ({len(ev.final_log)} bytes, {len(final.lines)} transactions) reduces")
    if not final.reduces:
        err = final.error or {}
        findings.append(Finding(f"the final log does not reduce: {err.get('code')}", "final log",
                                line=err.get("line"), seq=err.get("seq")))
    if final.torn:
        findings.append(Finding(f"{final.torn} byte(s) after the last LF were left in the final log (a torn tail the "
                                "agent did not repair, or a partial write by a process that exited)", "final log",
                                line=len(final.lines) + 2))
    else:
        problems = well_formed_problems(final.state())
        for p in problems:
            findings.append(Finding(f"final log is not well-formed (SPEC §12): {p}", "final log"))
    for i, (kill, view) in enumerate(zip(ev.kills, ev.kill_views)):
        where = ev.kill_name(i)
        checked.append(f"{where}: prefix reduces, is well-formed and kept")
        if not view.reduces:
            err = view.error or {}
            findings.append(Finding(f"the log at the kill does not reduce: {err.get('code')}", where,
                                    line=err.get("line"), seq=err.get("seq")))
            continue
        for p in well_formed_problems(view.state()):
            findings.append(Finding(f"prefix is not well-formed (SPEC §12): {p}", where))
        prefix = kill.snapshot[: view.committed]
        if ev.final_log[: len(prefix)] != prefix:
            at = next((j for j in range(min(len(prefix), len(ev.final_log))) if prefix[j] != ev.final_log[j]),
                      min(len(prefix), len(ev.final_log)))
            line = prefix[:at].count(b"\n") + 1
            findings.append(Finding(f"committed bytes at the kill were not kept by recovery (first difference at "
                                    f"byte {at}): the log is not append-only", where, line=line))
    obligations, notes = writer_obligations(ev)
    findings += obligations
    checked += notes
    findings += _request_snapshots(ev, checked)
    return _result("log-reduces", findings, checked)


def writer_obligations(ev: Evidence) -> tuple[list[Finding], list[str]]:
    """SPEC §12 and §15 obligations, transaction by transaction over the final log's valid prefix."""
    findings: list[Finding] = []
    view = ev.final
    state = State(view.header or {})
    unknown_config = 0
    where = "final log"
    for line in view.lines:
        names = [fact_name(f) for f in line.facts]
        writer = ev.launch(ev.writers.get(line.facts[0].get("seq")))
        current = writer.current if writer is not None else None
        if "user" in names:
            user = line.facts[names.index("user")]
            run = next((f for f in line.facts if fact_name(f) == "runStarted"), None)
            if run is None or run["record"].get("inputEntryId") != user.get("id"):
                findings.append(Finding("a user entry written without its runStarted in the same transaction "
                                        "(SPEC §15.3 step 1)", where, line=line.number, seq=user.get("seq")))
            if state.current is not None:
                findings.append(Finding("a user entry written while an operation is open (SPEC §12)", where,
                                        line=line.number, seq=user.get("seq")))
        for fact, name in zip(line.facts, names):
            seq = fact.get("seq")
            op = state.op

            def bad(message: str, call: str | None = None) -> None:
                findings.append(Finding(message, where, line=line.number, seq=seq, call=call))

            if name == "stepAttempt":
                rec = fact["record"]
                if current is None:
                    unknown_config += 1
                elif rec.get("configurationDigest") != current.get("configurationDigest"):
                    bad(f"stepAttempt records configurationDigest {rec.get('configurationDigest')} but the launch "
                        f"that wrote it was configured with {current.get('configurationDigest')}")
                step = state.latest_step()
                if rec.get("attempt") == 1 and op is not None and op.kind == "run" and step is not None:
                    open_calls = [c for c in state.unresolved() if c["entry"] == step.settled]
                    if open_calls:
                        bad("a new step started while calls of the previous answer are unresolved: "
                            + ", ".join(repr(c["id"]) for c in open_calls) + " (SPEC §12, P7.3)")
            elif name == "toolStarted":
                rec = fact["record"]
                call_id = rec.get("toolCallId")
                if rec.get("assistantEntryId") != state.settled_entry():
                    bad("toolStarted for an assistant entry that is not the current step's settled answer", call_id)
                for other in _pending_of(state, rec.get("assistantEntryId")):
                    answer = state.entries.get(rec.get("assistantEntryId"), {})
                    bad(f"toolStarted for call {call_id!r} (index {rec.get('toolIndex')}) of the assistant entry at "
                        f"line {answer.get('_line')} while call {other.get('toolCallId')!r} (index "
                        f"{other.get('toolIndex')}) of the same answer is pending since line {other.get('_line')} "
                        "(SPEC §14.4 P7.1: pending calls first, no untouched call starts while one is pending)",
                        call_id)
                calls = state.message(rec.get("assistantEntryId")).get("tool_calls") or []
                index = rec.get("toolIndex")
                text = calls[index]["function"]["arguments"] if isinstance(index, int) and index < len(calls) else None
                parsed = _parse_arguments(text)
                if parsed is None or parsed != rec.get("arguments"):
                    bad(f"toolStarted.arguments {_clip(rec.get('arguments'))} do not equal the parsed call text "
                        f"{_clip(text)}", call_id)
                if current is None:
                    unknown_config += 1
                else:
                    decl = _decl(current, rec.get("toolName"))
                    if decl is None:
                        bad(f"toolStarted for {rec.get('toolName')!r}, a tool the writing launch does not offer", call_id)
                    elif (decl.get("replay"), decl.get("replayKey")) != (rec.get("replay"), rec.get("replayKey")):
                        bad(f"toolStarted declares replay {rec.get('replay')}/{rec.get('replayKey')} but the launch was "
                            f"configured with {decl.get('replay')}/{decl.get('replayKey')}", call_id)
                    if rec.get("environmentIdentity") != current.get("environmentIdentity"):
                        bad(f"toolStarted records environmentIdentity {rec.get('environmentIdentity')!r} but the "
                            f"launch's identity was {current.get('environmentIdentity')!r}", call_id)
            elif name in ("assistant", "toolResult") and op is not None and op.abort:
                bad(f"a live {name} written after abortRequested (SPEC §15.5: no further live writes)")
            elif name == "synthetic":
                entry = fact["entry"]
                reason = entry.get("result", {}).get("reason")
                call_id = entry.get("message", {}).get("tool_call_id")
                aborting = op is not None and op.abort
                step = state.steps.get(entry.get("stepId"))
                if reason == "interrupted":
                    started = state.started.get(entry.get("toolStartedId"), {})
                    if not aborting and started.get("replay") != "never":
                        bad(f"interrupted result for a {started.get('replay')} tool without an abort (only never "
                            "tools are interrupted, P7.1.4)", call_id)
                elif reason == "aborted" and not aborting:
                    bad("aborted synthetic without abortRequested (SPEC §12)", call_id)
                elif reason != "aborted" and aborting:
                    bad(f"{reason} synthetic written after abortRequested (P1.2 writes aborted/interrupted)", call_id)
                elif reason == "truncated" and (step is None or step.stop_reason != "length"):
                    bad("truncated synthetic for an answer that did not stop with length (SPEC §12)", call_id)
                elif reason == "unknownTool" and step is not None and entry.get("toolName") in {
                        t.get("name") for t in step.latest.snapshot.get("tools", [])}:
                    bad(f"unknownTool synthetic for {entry.get('toolName')!r}, which the attempt offered", call_id)
                elif reason == "invalidArguments":
                    calls = state.message(entry.get("assistantEntryId")).get("tool_calls") or []
                    index = entry.get("toolIndex")
                    text = calls[index]["function"]["arguments"] if isinstance(index, int) and index < len(calls) else None
                    if _parse_arguments(text) is not None:
                        bad(f"invalidArguments synthetic for valid argument text {_clip(text)}", call_id)
            elif name == "stepFailed":
                code = fact["record"].get("error", {}).get("code")
                if code == "aborted" and not (op is not None and op.abort):
                    bad("stepFailed(aborted) without abortRequested")
            elif name == "operationFinished":
                rec = fact["record"]
                outcome = rec.get("outcome")
                step = state.latest_step()
                if outcome in ("aborted", "failed") or rec.get("completion") == "truncated":
                    open_calls = [c for c in state.unresolved() if step is not None and c["entry"] == step.settled]
                    if open_calls:
                        bad(f"operationFinished({outcome}) with unresolved calls "
                            + ", ".join(repr(c["id"]) for c in open_calls) + " (SPEC §12)")
                code = (rec.get("error") or {}).get("code")
                if outcome == "failed" and code == _MODEL_ERROR and (step is None or step.status != "failed"):
                    bad("finished failed with model_error but the step did not fail")
                if outcome == "failed" and code == _TRUNCATED_RESPONSE and (
                        step is None or step.stop_reason != "length"
                        or state.message(step.settled or "").get("tool_calls")):
                    bad("finished failed with truncated_response but the answer is not a length answer without calls")
                if outcome == "failed" and code == _EMPTY_RESPONSE and (
                        step is None or step.stop_reason != "stop"
                        or (state.message(step.settled or "").get("content") or "").strip()):
                    bad("finished failed with empty_response but the answer is not a blank stop")
            elif name == "compaction":
                entry = fact["entry"]
                op_rec = op.record if op is not None else {}
                compacted = op_rec.get("compactedEntryIds") or []
                if compacted and entry.get("compactedThroughEntryId") != compacted[-1]:
                    bad("compaction entry's compactedThroughEntryId is not the last of compactedEntryIds (SPEC §12)")
                tail = [t.get("sourceEntryId") for t in entry.get("retainedTail") or []]
                if tail != list(op_rec.get("retainedEntryIds") or []):
                    bad("compaction entry's retainedTail does not match compactionStarted.retainedEntryIds (SPEC §12)")
            state.apply(fact, line.number)
    notes = [f"writer obligations over {len(view.lines)} transactions"]
    if unknown_config:
        notes.append(f"{unknown_config} fact(s) not checked against the configuration (unknown for their launch)")
    return findings, notes


def _pending_of(state: State, assistant_entry: str | None) -> list[dict]:
    """The started calls of ``assistant_entry`` that have no result yet (pending, SPEC §14.3), in index order."""
    pending = [s for s in state.started.values()
               if s["_status"] == "pending" and s.get("assistantEntryId") == assistant_entry]
    return sorted(pending, key=lambda s: (s.get("toolIndex") if isinstance(s.get("toolIndex"), int) else -1))


def _request_snapshots(ev: Evidence, checked: list[str]) -> list[Finding]:
    """Each answered model request must carry the model, system prompt, tools and output options that its
    stepAttempt's configurationSnapshot records (SPEC §15.3: the snapshot is computed from what is really sent)."""
    from agent.session import digests

    findings: list[Finding] = []
    steps = _steps_by_position(ev.final.state(), ev.prompts)
    n = 0
    for req in ev.requests:
        body = req.get("body")
        position = (req.get("run"), req.get("turn"))
        if not isinstance(body, dict) or not isinstance(req.get("turn"), int) or position not in steps:
            continue
        step = steps[position]
        snapshots = {a.digest: a.snapshot for a in step.attempts}
        messages = body.get("messages") or []
        system = next((m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "system"), "")
        tools = body.get("tools") or []
        try:
            seen = {
                "model": body.get("model"),
                "systemPromptDigest": digests.system_prompt_digest(system if isinstance(system, str) else ""),
                "tools": [{"name": t["function"]["name"], "definitionDigest": digests.definition_digest(t)}
                          for t in tools],
                "outputOptionsDigest": digests.output_options_digest(
                    {k: v for k, v in body.items() if k not in ("model", "messages", "tools")}),
            }
        except (KeyError, TypeError, ValueError) as exc:
            findings.append(Finding(f"request body cannot be identified: {exc}", f"request {req.get('seq')}",
                                    request=req.get("seq")))
            continue
        n += 1
        if not any(all(snap.get(k) == v for k, v in seen.items()) for snap in snapshots.values()):
            recorded = step.latest.snapshot
            diff = [k for k, v in seen.items() if recorded.get(k) != v]
            findings.append(Finding(f"the request for run {position[0]} turn {position[1]} differs from its "
                                    f"stepAttempt's configurationSnapshot in {', '.join(diff)}",
                                    f"request {req.get('seq')}", request=req.get("seq")))
    checked.append(f"{n} model request(s) carry their attempt's configuration")
    return findings


# --------------------------------------------------------------------------------------------------------------
# 2. acknowledged-durable


def acknowledged_durable(ev: Evidence) -> InvariantResult:
    """Every transaction acknowledged at after-sync is still in the log byte for byte (final log and every later
    kill snapshot), and every offset the agent reported matches the file where it was measured: at each barrier the
    agent waited at (one it was told not to wait at — docs/protocol.md, ``wait`` — is read after it may have written
    on, so its size is not taken)."""
    findings: list[Finding] = []
    for ack in ev.acknowledged:
        where = f"transaction {ack.tx} (seq {ack.seq_first}..{ack.seq_last}, launch {ack.launch})"
        if ack.end - ack.start != len(ack.data) or not ack.data.endswith(b"\n") or ack.data.count(b"\n") != 1:
            findings.append(Finding(f"acknowledged bytes [{ack.start}, {ack.end}) are not one complete line as read "
                                    f"at after-sync ({len(ack.data)} bytes read)", where, seq=ack.seq_first))
        if ack.file_size is not None and ack.file_size != ack.end:
            findings.append(Finding(f"after-sync reported offset {ack.end} but the file had {ack.file_size} bytes",
                                    where, seq=ack.seq_first))
        if ack.synced_offset != ack.end:
            findings.append(Finding(f"after-sync reported syncedOffset {ack.synced_offset}, not the offset {ack.end} "
                                    "it acknowledged", where, seq=ack.seq_first))
        try:
            value = json.loads(ack.data)
            facts = value if isinstance(value, list) else [value]
            seqs = [f.get("seq") for f in facts]
        except (ValueError, AttributeError, RecursionError):  # not JSON, not facts, or nested deeper than json parses
            seqs = []
        if seqs != list(range(ack.seq_first, ack.seq_last + 1)):
            findings.append(Finding(f"acknowledged bytes hold seqs {seqs}, the barrier announced "
                                    f"{ack.seq_first}..{ack.seq_last}", where, seq=ack.seq_first))
        if ev.final_log[ack.start: ack.end] != ack.data:
            findings.append(Finding("an acknowledged transaction is not in the final log byte for byte "
                                    f"(bytes [{ack.start}, {ack.end}))", f"{where}, final log", seq=ack.seq_first,
                                    line=ev.final_log[: ack.start].count(b"\n") + 1))
        for i, kill in enumerate(ev.kills):
            barrier_index = _kill_barrier(ev, i)
            if barrier_index is not None and barrier_index < _ack_barrier(ev, ack):
                continue  # the kill came before this acknowledgement (a kill AT its after-sync comes after it)
            if kill.snapshot[ack.start: ack.end] != ack.data:
                findings.append(Finding("an acknowledged transaction is missing from the log the restart found",
                                        f"{where}, {ev.kill_name(i)}", seq=ack.seq_first))
    for b in ev.barriers:
        if b.file_size is not None and b.file_size != b.offset:
            findings.append(Finding(f"{b.phase} barrier reported offset {b.offset} but the file had {b.file_size} "
                                    "bytes", f"barrier {b.index} (launch {b.launch})", seq=b.seq_first))
    measured = sum(1 for b in ev.barriers if b.file_size is not None)
    checked = [f"{len(ev.acknowledged)} acknowledged transaction(s) against the final log and "
               f"{len(ev.kills)} kill snapshot(s)", f"offsets of {measured} barrier(s) against the file's size"]
    return _result("acknowledged-durable", findings, checked)


def _ack_barrier(ev: Evidence, ack: Ack) -> int:
    """Index of the after-sync barrier of ``ack`` (its position among barrier events)."""
    for b in ev.barriers:
        if b.phase == "after-sync" and b.launch == ack.launch and b.seq_first == ack.seq_first:
            return b.index
    return -1


def _kill_barrier(ev: Evidence, i: int) -> int | None:
    """Index of the barrier where kill ``i`` fired (recorded, else the last barrier announced by the killed launch)."""
    if ev.kills[i].barrier is not None:
        return ev.kills[i].barrier
    launch = ev.kills[i].launch
    indices = [b.index for b in ev.barriers if b.launch == launch]
    return max(indices) if indices else None


# --------------------------------------------------------------------------------------------------------------
# 3. converges


def blocked_justification(state: State, current: Mapping | None, reason: str) -> str | None:
    """Why the durable state justifies ``blocked: reason`` under ``current`` (None when it does not). Pure.

    Checked from the facts, independently of the planner: configuration_changed needs an attempt whose digest
    differs from the current one, or a started/untouched call whose tool is gone or redefined; environment_changed
    needs a recorded identity that differs; replay_declaration_changed a pending safe call whose declaration
    changed; attempts_exhausted an open attempt 2. Nothing justifies blocking an operation with an abort requested.
    """
    op = state.op
    if op is None:
        return None
    if op.abort:
        return None
    step = state.latest_step(op)
    if step is None:
        return None
    attempting = step.status in ("attempting", "failed")
    if reason == "attempts_exhausted":
        return "attempt 2 is open" if step.status == "attempting" and step.latest.number == 2 else None
    if current is None:
        return "(configuration unknown: accepted on the shape of the state)" if attempting or state.unresolved() else None
    digest, env = current.get("configurationDigest"), current.get("environmentIdentity")
    snapshot_tools = {t.get("name"): t for t in step.latest.snapshot.get("tools", [])}
    settled = state.settled_entry()
    pending = [s for s in state.started.values() if s["_status"] == "pending" and s.get("assistantEntryId") == settled]
    untouched = [c for c in state.unresolved() if c["entry"] == settled
                 and (c["entry"], c["index"]) not in state.started_at]

    def redefined(name: str) -> bool:
        decl = _decl(current, name)
        seen = snapshot_tools.get(name)
        return decl is None or seen is None or decl.get("definitionDigest") != seen.get("definitionDigest")

    if reason == "configuration_changed":
        if attempting and step.latest.digest != digest:
            return f"the open/failed attempt has digest {step.latest.digest}, the configuration is now {digest}"
        for s in pending:
            if redefined(s.get("toolName")):
                return f"pending call {s.get('toolCallId')!r}: tool {s.get('toolName')!r} removed or redefined"
            if s.get("replay") == "safe" and step.latest.digest != digest:
                return f"pending safe call {s.get('toolCallId')!r} under a changed configuration digest"
        for c in untouched:
            if c["name"] in snapshot_tools and _parse_arguments(c["arguments"]) is not None and redefined(c["name"]):
                return f"untouched call {c['id']!r}: tool {c['name']!r} removed or redefined"
        return None
    if reason == "environment_changed":
        if attempting and state.header.get("environmentIdentity") != env:
            return f"header environment {state.header.get('environmentIdentity')!r} differs from {env!r}"
        for s in pending:
            if s.get("environmentIdentity") != env:
                return f"pending call {s.get('toolCallId')!r} was started in environment {s.get('environmentIdentity')!r}"
        return None
    if reason == "replay_declaration_changed":
        for s in pending:
            decl = _decl(current, s.get("toolName"))
            if s.get("replay") == "safe" and decl is not None and (
                    decl.get("replay") != "safe" or decl.get("replayKey") != s.get("replayKey")):
                return f"pending safe call {s.get('toolCallId')!r}: declaration now {decl.get('replay')}/{decl.get('replayKey')}"
        return None
    return None


def _state_after_launch(ev: Evidence, launch: int) -> State:
    """The log as it stood when ``launch`` ended: every transaction announced by it or an earlier launch."""
    view = ev.final
    upto = 0
    for i, line in enumerate(view.lines):
        writer = ev.writers.get(line.facts[0].get("seq"))
        if writer is not None and writer > launch:
            break
        upto = i + 1
    return view.state(upto)


def converges(ev: Evidence) -> InvariantResult:
    """Final state idle, or blocked with a justified reason; every blocked exit justified; one more resume changes
    nothing."""
    findings: list[Finding] = []
    checked: list[str] = []
    final = ev.final.state()
    last = ev.last_exit
    checked.append("final state is idle or justifiably blocked")
    for launch in ev.launches:
        if launch.killed or launch.returncode != BLOCKED_EXIT:
            continue
        reason = _blocked_reason(launch)
        where = f"launch {launch.index} ({launch.role})"
        checked.append(f"{where} blocked {reason}: justified")
        if reason is None:
            findings.append(Finding("exited blocked (3) without a {\"blocked\": REASON} line on stdout", where))
            continue
        if blocked_justification(_state_after_launch(ev, launch.index), launch.current, reason) is None:
            findings.append(Finding(f"blocked {reason}, but the durable prefix does not justify it", where))
    if not final.idle:
        op = final.op
        step = final.latest_step(op)
        what = f"{op.kind} operation {op.id} still open" if op else "operation open"
        if step is not None:
            what += f", latest step {step.status} (attempt {step.latest.number})"
        pending = [s for s in final.started.values() if s["_status"] == "pending"]
        if pending:
            what += ", pending " + ", ".join(repr(s.get("toolCallId")) for s in pending)
        if last is None or last.returncode != BLOCKED_EXIT:
            code = "no launch ended by itself" if last is None else f"the last launch ({last.role}) exited {last.returncode}"
            findings.append(Finding(f"the session did not converge: {what}; {code}", "final log"))
    for i, probe in enumerate(ev.probes):
        where = f"probe {i + 1} (resume)"
        checked.append(f"{where} changes nothing")
        if probe.returncode is None:
            findings.append(Finding("resume did not end within the limit", where))
        if probe.sha_before != probe.sha_after:
            findings.append(Finding(f"resume changed the log ({probe.size_before} -> {probe.size_after} bytes) "
                                    "although the case had ended", where))
        blocked = last is not None and last.returncode == BLOCKED_EXIT
        expected = 0 if final.idle else BLOCKED_EXIT if blocked else None  # else: non-convergence reported above
        if probe.returncode is not None and expected is not None and probe.returncode != expected:
            findings.append(Finding(f"resume exited {probe.returncode}, expected {expected} for a "
                                    f"{'idle' if final.idle else 'blocked'} session", where))
        if blocked:
            before, now = _blocked_reason(last), _blocked_reason(LaunchInfo(-1, "probe", probe.returncode,
                                                                             stdout=probe.stdout))
            if before != now:
                findings.append(Finding(f"blocked reason changed from {before!r} to {now!r} on resume", where))
    return _result("converges", findings, checked)


# --------------------------------------------------------------------------------------------------------------
# 4. transcript-legal


def transcript_legal(ev: Evidence) -> InvariantResult:
    """Each tool call has at most one result, and one unless the case ended blocked; every request was
    provider-legal and carried the durable result of every tool call it mentions."""
    findings: list[Finding] = []
    state = ev.final.state()
    calls = state.calls()
    blocked = not state.idle and ev.last_exit is not None and ev.last_exit.returncode == BLOCKED_EXIT
    durable: dict[str, str] = {}
    for call in calls:
        if len(call["results"]) > 1:
            lines = [state.entries[r]["_line"] for r in call["results"]]
            findings.append(Finding(f"{len(call['results'])} results for one tool call (lines {lines})", "final log",
                                    line=lines[1], call=call["id"]))
        elif not call["results"]:
            if not blocked:
                findings.append(Finding("tool call has no result and the case did not end blocked", "final log",
                                        line=state.entries[call["entry"]]["_line"], call=call["id"]))
        else:
            durable[call["id"]] = state.message(call["results"][0]).get("content")
    for req in ev.requests:
        where = f"request {req.get('seq')}"
        if req.get("kind") in ("illegal", "bad-request"):
            findings.append(Finding(f"the server rejected the request as a real provider would: {req.get('finding')}",
                                    where, request=req.get("seq")))
        body = req.get("body")
        if not isinstance(body, dict):
            continue
        for message in body.get("messages") or []:
            if isinstance(message, dict) and message.get("role") == "tool":
                call_id = message.get("tool_call_id")
                if call_id in durable and message.get("content") != durable[call_id]:
                    findings.append(Finding(f"the model was sent {_clip(message.get('content'))!r} as the result but "
                                            f"the log records {_clip(durable[call_id])!r}", where, call=call_id,
                                            request=req.get("seq")))
    checked = [f"{len(calls)} tool call(s) in the final transcript", f"{len(ev.requests)} server request(s)"]
    return _result("transcript-legal", findings, checked)


# --------------------------------------------------------------------------------------------------------------
# 5. effects-at-most-once


def witness_counts(lines: Sequence[str]) -> Counter:
    """Effects per provider call id: the first word of each non-empty witness line."""
    return Counter(line.split()[0] for line in lines if line.strip())


def effects_at_most_once(ev: Evidence) -> InvariantResult:
    """From the witnesses: never-tool effects at most once per call (exactly once with a real result when the
    baseline shows the call leaves a witness); no effect without durable intent; re-execution by a later process only
    for safe reads, in the environment that recorded the intent, with the content the baseline read."""
    findings: list[Finding] = []
    counts = witness_counts(ev.witness)
    state = ev.final.state()
    by_call: dict[str, list[dict]] = {}
    for started in state.started.values():
        by_call.setdefault(started.get("toolCallId"), []).append(started)
    witnessed = set(ev.baseline.witnesses) if ev.baseline is not None else set()
    for call_id, n in sorted(counts.items()):
        intents = by_call.get(call_id, [])
        if not intents:
            findings.append(Finding(f"{n} effect(s) witnessed but no toolStarted is durable for the call (an effect "
                                    "without intent)", "witness file", call=call_id))
            continue
        if any(s.get("replay") == "never" for s in intents) and n > 1:
            findings.append(Finding(f"a never tool's effect happened {n} times", "witness file", call=call_id))
    for call_id, intents in sorted(by_call.items()):
        for started in intents:
            result = state.entries.get(started.get("_result") or "", {})
            real = result.get("_name") == "toolResult"
            if started.get("replay") == "never" and real and call_id in witnessed and counts.get(call_id, 0) != 1:
                findings.append(Finding(f"the log records a real result but the effect was witnessed "
                                        f"{counts.get(call_id, 0)} time(s), not once", "final log",
                                        line=result.get("_line"), call=call_id))
            if not real:
                continue
            intent_by = ev.writers.get(started.get("_seq"))
            result_by = ev.writers.get(result.get("_seq"))
            if intent_by is None or result_by is None or intent_by == result_by:
                continue
            # A result written by another process than the intent: the tool was run again after a crash (replay).
            launch = ev.launch(result_by)
            decl = _decl(launch.current if launch else None, started.get("toolName"))
            if started.get("replay") != "safe":
                findings.append(Finding(f"the {started.get('replay')} tool {started.get('toolName')!r} started by launch "
                                        f"{intent_by} was re-run by launch {result_by} (only safe reads may be replayed)",
                                        "final log", line=result.get("_line"), call=call_id))
            elif decl is not None and (decl.get("replay") != "safe" or decl.get("replayKey") != started.get("replayKey")):
                findings.append(Finding(f"replayed by launch {result_by}, whose declaration for "
                                        f"{started.get('toolName')!r} is {decl.get('replay')}/{decl.get('replayKey')}",
                                        "final log", line=result.get("_line"), call=call_id))
            elif launch is not None and launch.current is not None and (
                    launch.current.get("environmentIdentity") != started.get("environmentIdentity")):
                # P7.1.1: a replay re-reads "the same" file only in the environment that started the call; elsewhere
                # it files another machine's content as the old call's result (no witness or expectation shows it).
                findings.append(Finding(f"replayed by launch {result_by} in environment "
                                        f"{launch.current.get('environmentIdentity')!r}, but the intent was recorded "
                                        f"in {started.get('environmentIdentity')!r} (P7.1.1)",
                                        "final log", line=result.get("_line"), call=call_id))
            elif ev.baseline is not None and call_id in ev.baseline.results and not _after_unknown_effect(state, result):
                content = result.get("message", {}).get("content")
                if content != ev.baseline.results[call_id]:
                    findings.append(Finding(f"replayed read returned {_clip(content)!r}, the crash-free run read "
                                            f"{_clip(ev.baseline.results[call_id])!r} (not the recorded arguments?)",
                                            "final log", line=result.get("_line"), call=call_id))
    checked = [f"{sum(counts.values())} witnessed effect(s) over {len(counts)} call(s)",
               f"{len(state.started)} tool intent(s)"]
    if ev.baseline is None:
        checked.append("no baseline: exactly-once not checked")
    return _result("effects-at-most-once", findings, checked)


def _after_unknown_effect(state: State, result: Mapping) -> bool:
    """True when an interrupted never tool precedes ``result``: the workspace may then differ from the baseline's."""
    for started in state.started.values():
        if started.get("replay") == "safe":  # a read changes no file, whether or not it ran before its crash
            continue
        res = state.entries.get(started.get("_result") or "", {})
        if res.get("_name") == "synthetic" and (res.get("_seq") or 0) < (result.get("_seq") or 0):
            return True
    return False


# --------------------------------------------------------------------------------------------------------------
# 6. attempts-bounded


def _steps_by_position(state: State, prompts: Sequence[str]) -> dict[tuple[int, int | str], _Step]:
    """Map the scripted server's positions to steps: run r (by prompt) turn t is that run's t-th step; a compaction
    is ``(r, "summary")`` for the run it follows."""
    out: dict[tuple[int, int | str], _Step] = {}
    last_run: int | None = None
    for op_id in state.order:
        op = state.ops[op_id]
        if op.kind == "run":
            last_run = prompts.index(op.prompt) if op.prompt in prompts else None
            if last_run is None:
                continue
            for t, step_id in enumerate(op.steps):
                out[(last_run, t)] = state.steps[step_id]
        elif last_run is not None and op.steps:
            out[(last_run, "summary")] = state.steps[op.steps[-1]]
    return out


def attempts_bounded(ev: Evidence) -> InvariantResult:
    """Per step: at most 2 requests, no more than the durable attempts, a second only after a kill left attempt 1
    open, none after the step's live failure, none without a durable attempt."""
    findings: list[Finding] = []
    state = ev.final.state()
    steps = _steps_by_position(state, ev.prompts)
    per_position: dict[tuple, list[Mapping]] = {}
    for req in ev.requests:
        if req.get("run") is not None and req.get("turn") is not None:
            per_position.setdefault((req["run"], req["turn"]), []).append(req)
    open_at_kill: set[str] = set()
    for view in ev.kill_views:
        kstate = view.state()
        step = kstate.latest_step()
        if step is not None and step.status == "attempting" and step.latest.number == 1:
            open_at_kill.add(step.id)
    for position, reqs in sorted(per_position.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        where = f"run {position[0]} turn {position[1]}"
        seqs = [r.get("seq") for r in reqs]
        step = steps.get(position)
        if step is None:
            findings.append(Finding(f"{len(reqs)} request(s) {seqs} but no stepAttempt for this step is durable "
                                    "(a request without its intent)", where, request=seqs[0]))
            continue
        attempts = len(step.attempts)
        if len(reqs) > 2:
            findings.append(Finding(f"{len(reqs)} requests {seqs} for one step (at most 2)", where, request=seqs[2]))
        elif len(reqs) > attempts:
            findings.append(Finding(f"{len(reqs)} requests {seqs} but only {attempts} durable attempt(s): a request "
                                    "was re-sent without a crash-unknown attempt", where, request=seqs[-1]))
        failed = next((a for a in step.attempts if a.status == "failed" and (a.error or {}).get("code") != "aborted"),
                      None)
        if failed is not None and len(reqs) > failed.number:
            findings.append(Finding(f"request {seqs[failed.number]} after the step's live failure "
                                    f"({(failed.error or {}).get('code')}) in attempt {failed.number}", where,
                                    request=seqs[failed.number]))
    crash_like = [a for a in ev.faults if a == "ioerror"]  # a failed fsync leaves the attempt as unknown as a kill
    for step in state.steps.values():
        if len(step.attempts) > 1 and step.id not in open_at_kill and not crash_like:
            findings.append(Finding(f"attempt {step.attempts[1].number} of step {step.id} was started although no "
                                    "kill left attempt 1 open", "final log", line=step.attempts[1].line))
    checked = [f"{len(per_position)} step position(s) with {sum(len(v) for v in per_position.values())} request(s)",
               f"{len(state.steps)} durable step(s)"]
    return _result("attempts-bounded", findings, checked)


# --------------------------------------------------------------------------------------------------------------
# 7. outcome


def final_outcome(ev: Evidence, state: State) -> str:
    """How the agent's recovery ended: ``completed`` / ``aborted`` / ``failed:<code>`` of the last operation, or
    ``blocked:<reason>`` — also when an ``abort`` launch then reconciled the blocked operation (``then = "abort"``)."""
    if not state.idle:
        last = ev.last_exit
        if last is not None and last.returncode == BLOCKED_EXIT:
            return f"blocked:{_blocked_reason(last)}"
        return f"unfinished:{state.op.kind if state.op else '?'}"
    if not state.order:
        return "none"
    blocked = _blocked_before_abort(ev)
    if blocked is not None:
        return f"blocked:{_blocked_reason(blocked)}"
    op = state.ops[state.order[-1]]
    if op.outcome == "failed":
        return f"failed:{(op.error or {}).get('code')}"
    return str(op.outcome)


def _blocked_before_abort(ev: Evidence) -> LaunchInfo | None:
    """The launch that ended blocked right before the last ``abort`` launch, if the case used the way out."""
    ended = ev.ended
    for previous, launch in zip(ended, ended[1:]):
        if launch.role == "abort" and previous.returncode == BLOCKED_EXIT and launch is ended[-1]:
            return previous
    return None


def _outcome_matches(expected: str, actual: str) -> bool:
    if expected == "failed":
        return actual.startswith("failed:")
    return expected == actual


def decisive_state(ev: Evidence) -> tuple[Mapping | None, str]:
    """The durable state the scenario's expectations are keyed by, and what it is.

    It is the log as the restart found it after the last crash: the last SIGKILL (its snapshot), or a failed
    write/fsync (``ioerror``: the agent exits and is resumed like after a crash; the log it left is every transaction
    written up to then). None when nothing crashed the agent.
    """
    view, decisive, _ = _decisive(ev)
    return (view.reduction if view is not None else None), decisive


def _decisive(ev: Evidence) -> tuple[LogView | None, str, int | None]:
    """``decisive_state`` as a log view, with the index of the launch the last crash hit (None: unknown)."""
    last = None
    for f in ev.fired:
        if f.action in _KILL_ACTIONS or f.action == "ioerror":
            last = f
    if last is None:
        if ev.kills:  # evidence without fault records: the kills alone
            return ev.kill_views[-1], ev.kill_name(len(ev.kills) - 1), ev.kills[-1].launch
        return None, "no crash", None
    if last.action in _KILL_ACTIONS and ev.kills:
        return ev.kill_views[-1], ev.kill_name(len(ev.kills) - 1), ev.kills[-1].launch
    end = 0
    for line in ev.final.lines:
        writer = ev.writers.get(line.facts[0].get("seq"))
        if writer is not None and writer > last.launch:
            break
        end = line.end
    return LogView(ev.final_log[:end]), f"{last.fault} (the log its launch left)", last.launch


def condition_context(ev: Evidence, view: LogView | None, crashed: int | None) -> dict:
    """What the scenario conditions need beyond the log at the last crash (``chaos.scenario.condition_holds``).

    ``current``: the configuration of the launch that recovered from the crash (the first launch after the one it
    hit). Restart changes apply only after a SIGKILL, and work may have been recorded after they applied, so the
    configuration the in-flight work was recorded under is compared with *this* one, not assumed (SPEC §14.4 P3,
    P7.1). ``ended``: the outcome of the latest operation when the crash found the log idle after it (e.g. an
    ``agent abort`` killed after its terminal record: that run ended aborted, whatever the next launch does).
    """
    after = [l for l in ev.launches if crashed is not None and l.index > crashed]
    context: dict = {"current": after[0].current if after else None, "ended": None}
    if view is not None and view.reduces:
        state = view.state()
        if state.idle and state.order:
            op = state.ops[state.order[-1]]
            context["ended"] = f"failed:{(op.error or {}).get('code')}" if op.outcome == "failed" else op.outcome
    return context


def _interrupts(ev: Evidence, state: State) -> list[tuple[Fired, _Op]]:
    """Every SIGINT (``int``) that fired after the last crash, with the operation that was open when it fired (one
    whose operation is not known is left out: nothing to hold it to)."""
    after: list[Fired] = []
    for f in ev.fired:
        if f.action in _KILL_ACTIONS or f.action == "ioerror":
            after = []
        elif f.action == "int":
            after.append(f)
    out = []
    for fired in after:
        barrier = next((b for b in ev.barriers if b.index == fired.barrier), None)
        op = None if barrier is None else next(
            (state.ops[o] for o in state.order if state.ops[o].seq <= barrier.seq_last
             and (state.ops[o].finish_seq is None or state.ops[o].finish_seq > barrier.seq_last)), None)
        if op is not None:
            out.append((fired, op))
    return out


def _durable_abort(view: LogView | None, state: State) -> tuple[_Op | None, set[str]]:
    """What the log at the last crash says of aborts: (the latest operation, as the final log has it, if its
    ``abortRequested`` was durable — still open then, or already ended aborted — else None; the ids of the runs that
    had already ended aborted). Once that record is durable an operation ends aborted whatever else is open (SPEC
    §14.4 P1, "abort wins over everything below"): e.g. a SIGINT answered by ``abortRequested``, then a kill inside
    the abort or after it (``int:…+tx:N@…``), where the SIGINT is no longer the last word (``_interrupts``). A run
    that ended aborted has no final answer, whatever came after it."""
    if view is None or view.reduction is None:
        return None, set()
    then = view.state()
    ended = {o for o in then.order if then.ops[o].kind == "run" and then.ops[o].outcome == "aborted"}
    op = then.ops[then.order[-1]] if then.order else None
    if op is None or not op.abort or op.outcome not in (None, "aborted"):
        return None, ended
    return state.ops.get(op.id), ended


def outcome(ev: Evidence) -> InvariantResult:
    """The final outcome, answer, files and effects equal the expectation for the state at the last crash; an
    interrupted operation ends aborted; every run was performed; nothing unscripted was requested; and the
    differential check against the baseline."""
    findings: list[Finding] = []
    checked: list[str] = []
    state = ev.final.state()
    view, decisive, crashed = _decisive(ev)
    reduction = view.reduction if view is not None else None
    if decisive != "no crash" and reduction is None:
        checked.append(f"the state at {decisive} does not reduce: default expectations used")
    context = condition_context(ev, view, crashed)
    resolved = ev.expect.resolve(reduction, context) if ev.expect is not None else None
    actual = final_outcome(ev, state)
    # Operations that must end aborted whatever the script would have done, each with what is checked and what a
    # finding says: those a SIGINT hit after the last crash (a user's abort), and the latest one at the crash if its
    # abortRequested was durable then (SPEC §14.4 P1) — unless the scenario's expectation for that state is written
    # for an aborted run (its outcome is aborted, or its rule names abort-requested): then it stands, files and
    # effects included. Any other expectation, like the defaults, describes a run nobody aborted.
    owed: list[tuple[str, str, _Op]] = [
        (f"{fired.fault}: the interrupted {op.kind} operation ended aborted",
         f"SIGINT ({fired.fault}) hit {op.kind} operation {op.id}", op) for fired, op in _interrupts(ev, state)]
    durable, ended_aborted = _durable_abort(view, state)
    for_an_abort = resolved is not None and (resolved.outcome == "aborted" or "abort-requested" in resolved.conditions)
    if durable is not None and not for_an_abort and all(durable is not hit for _, _, hit in owed):
        owed.append((f"abortRequested durable at {decisive}: the {durable.kind} operation ended aborted (P1)",
                     f"abortRequested of {durable.kind} operation {durable.id} was durable at {decisive} (P1: abort "
                     "wins)", durable))
    for what, finding, op in owed:
        checked.append(what)
        if op.outcome != "aborted" or not op.abort:
            findings.append(Finding(f"{finding}, which ended {op.outcome or 'unfinished'}"
                                    f"{'' if op.abort else ' without abortRequested'}", "final log", line=op.line))
    aborted = {op.id for _, _, op in owed}
    if aborted and state.order and state.order[-1] in aborted:
        resolved = None  # the scenario's expectations describe an uninterrupted run
    elif aborted and resolved is not None:  # a later operation ended normally; the aborted runs' files and effects
        runs = [o for o in state.order if state.ops[o].kind == "run"]  # are moot, and the answer if the last run's
        resolved = replace(resolved, files={}, effects={}, answer=None if runs and runs[-1] in aborted
                           else resolved.answer)
    if resolved is not None and resolved.answer is not None and not for_an_abort:
        # The last run had already ended aborted at the crash (a compaction after it, say): no answer can be its.
        runs = [o for o in state.order if state.ops[o].kind == "run"]
        if runs and runs[-1] in ended_aborted:
            resolved = replace(resolved, answer=None)
    if resolved is not None:
        rule = f"rule expect.when[{resolved.rule}] ({', '.join(resolved.conditions)})" if resolved.rule is not None \
            else "the default expectation"
        checked.append(f"outcome {actual} against {resolved.outcome} ({rule}, state at {decisive})")
        if not _outcome_matches(resolved.outcome, actual):
            findings.append(Finding(f"final outcome is {actual}, expected {resolved.outcome} by {rule} "
                                    f"(state at {decisive})", "final log"))
            findings.append(_covering_rule(reduction, context, actual, decisive))
        aborter = _blocked_before_abort(ev)
        if aborter is not None:
            last_op = state.ops[state.order[-1]] if state.order else None
            checked.append("the abort after the block reconciled the operation")
            if last_op is None or last_op.outcome != "aborted":
                findings.append(Finding(f"`abort` after blocked {_blocked_reason(aborter)} did not finish the "
                                        f"operation aborted (last outcome {last_op.outcome if last_op else None})",
                                        "final log"))
        if resolved.answer is not None and resolved.outcome == "completed":
            answer = _final_answer(state)
            checked.append("final answer")
            if answer != resolved.answer:
                findings.append(Finding(f"final answer is {_show(answer)}, expected {_show(resolved.answer)}",
                                        "final log"))
        for path, want in sorted(resolved.files.items()):
            have = ev.files.get(path)
            checked.append(f"file {path}")
            if want is True and have is None or want is False and have is not None or (
                    isinstance(want, str) and have != want):
                desc = "absent" if have is None else repr(_clip(have))
                findings.append(Finding(f"workspace file {path!r} is {desc}, expected "
                                        f"{'present' if want is True else 'absent' if want is False else repr(want)}",
                                        "workspace"))
        counts = witness_counts(ev.witness)
        for call_id, (lo, hi) in sorted(resolved.effects.items()):
            checked.append(f"effects of {call_id}")
            if not lo <= counts.get(call_id, 0) <= hi:
                findings.append(Finding(f"effect witnessed {counts.get(call_id, 0)} time(s), expected "
                                        f"{lo if lo == hi else f'{lo}..{hi}'}", "witness file", call=call_id))
    if state.idle and ev.prompts:
        performed = [state.ops[o].prompt for o in state.order if state.ops[o].kind == "run"]
        checked.append(f"{len(performed)} of {len(ev.prompts)} run(s) performed")
        if performed != list(ev.prompts):
            findings.append(Finding(f"runs performed {[_clip(p) for p in performed]} are not the scenario's "
                                    f"{[_clip(p) for p in ev.prompts]}", "final log"))
    for req in ev.requests:
        if req.get("kind") == "unknown":
            findings.append(Finding(f"unscripted request: {req.get('finding')}", f"request {req.get('seq')}",
                                    request=req.get("seq")))
    findings += _differential(ev, reduction, checked)
    return _result("outcome", findings, checked)


def conditions_at(reduction: Mapping | None, context: Mapping | None = None) -> list[str]:
    """The conditions of the scenario vocabulary (``chaos.scenario.condition_holds``) that hold for ``reduction``,
    each in its most specific form (``run:1``, ``settled:stop``, ``pending:bash``, ``ended:completed``): what an
    ``[[expect.when]]`` rule for exactly this state says. ``changed`` only when the recovering configuration is
    known (unknown, it holds vacuously and would say nothing). Pure."""
    from chaos.scenario import KNOWN_TOOLS, condition_holds

    if reduction is None:
        return ["no-kill"]
    context = context or {}
    op = reduction["operation"]
    step = op.get("step") or {}
    out: list[str] = []
    runs = sum(1 for m in reduction.get("transcript", []) if m.get("role") == "user")
    for cond in ("idle", f"ended:{context.get('ended')}", f"run:{runs}", "compaction", "no-step",
                 f"open-attempt:{step.get('attempt')}", "failed-step", f"settled:{step.get('stopReason')}"):
        try:
            if condition_holds(cond, reduction, context):
                out.append(cond)
        except ValueError:  # e.g. open-attempt:None outside a step: not a condition of this state
            continue
    named = [t.get("toolName") for t in op.get("toolCalls", []) if t.get("toolName")]
    tools = list(dict.fromkeys([*KNOWN_TOOLS, *named]))
    for name in ("pending", "untouched", "interrupted"):
        out += [f"{name}:{tool}" for tool in tools if condition_holds(f"{name}:{tool}", reduction, context)]
    if condition_holds("abort-requested", reduction, context):
        out.append("abort-requested")
    if context.get("current") is not None and condition_holds("changed", reduction, context):
        out.append("changed")
    return out


def _covering_rule(reduction: Mapping | None, context: Mapping, actual: str, decisive: str) -> Finding:
    """The evidence an ``outcome`` failure needs to be acted on: the conditions that held at the decisive state and
    the ``[[expect.when]]`` rule that would expect the actual outcome there — to add to the scenario only if that
    outcome is right for this state (else the agent is wrong, and the rule says what it did)."""
    from chaos.scenario import outcome_problem

    conds = conditions_at(reduction, context)
    held = ", ".join(conds) if conds else "(none of the vocabulary)"
    if outcome_problem(actual) is not None:
        return Finding(f"conditions that held at {decisive}: {held}; no expectation rule can accept {actual} "
                       "(not a terminal outcome: the agent did not finish)", "scenario")
    when = ", ".join(json.dumps(c) for c in conds if c != "no-kill")
    rule = f'[[expect.when]] when = [{when}] outcome = "{actual}"' if when else f'[expect] outcome = "{actual}"'
    return Finding(f"conditions that held at {decisive}: {held}; if {actual} is right there, this rule covers "
                   f"it: {rule}", "scenario")


def _final_answer(state: State) -> str | None:
    runs = [state.ops[o] for o in state.order if state.ops[o].kind == "run"]
    if not runs or runs[-1].final_entry is None:
        return None
    return state.message(runs[-1].final_entry).get("content")


def _differential(ev: Evidence, reduction: Mapping | None, checked: list[str]) -> list[Finding]:
    if ev.baseline is None:
        return []
    if not ev.baseline.ok:
        checked.append("differential skipped: the baseline itself failed")
        return []
    if any(action not in _KILL_ACTIONS for action in ev.faults):
        checked.append("differential not applicable: the schedule has non-kill faults")
        return []
    if ev.kills and ev.restart_changes:
        checked.append("differential not applicable: restart changes apply")
        return []
    if reduction is not None:
        from chaos.scenario import condition_holds

        # Every kill, not only the last: an earlier kill with an attempt open or a tool pending legitimately changes
        # the log (an attempt-2 record, an interrupted result) even when the last kill leaves a clean state
        # (e.g. stepAttempt@after-sync#1+assistant@after-sync#1, or any depth-2 case after such a first kill).
        views = [v.reduction for v in ev.kill_views]
        if any(r is not None and (condition_holds("open-attempt", r) or condition_holds("pending", r))
               for r in views):
            checked.append("differential not applicable: a kill left an open attempt or a pending tool")
            return []
    elif ev.kills:
        checked.append("differential not applicable: the state at the last kill does not reduce")
        return []
    mine = normalize_log(ev.final)
    base = ev.baseline.normalized
    checked.append(f"differential: {len(mine)} transaction(s) against the baseline's {len(base)}")
    if mine == base:
        return []
    index = next((i for i, (a, b) in enumerate(zip(mine, base)) if a != b), min(len(mine), len(base)))
    have = _clip(mine[index]) if index < len(mine) else "(end of log)"
    want = _clip(base[index]) if index < len(base) else "(end of log)"
    return [Finding(f"differs from the crash-free baseline at transaction {index + 1} (usage ignored, ids renamed): "
                    f"have {have}, baseline {want}", "final log", line=index + 2)]


# --------------------------------------------------------------------------------------------------------------

CHECKS: dict[str, Callable[[Evidence], InvariantResult]] = {
    "log-reduces": log_reduces,
    "acknowledged-durable": acknowledged_durable,
    "converges": converges,
    "transcript-legal": transcript_legal,
    "effects-at-most-once": effects_at_most_once,
    "attempts-bounded": attempts_bounded,
    "outcome": outcome,
}


def check(ev: Evidence) -> list[InvariantResult]:
    """Every invariant over ``ev``, in the documented order."""
    return [CHECKS[name](ev) for name in INVARIANTS]


def baseline_facts(ev: Evidence, results: Sequence[InvariantResult]) -> BaselineFacts:
    """What a crash-free run's evidence leaves for the cases' differential and witness checks."""
    state = ev.final.state()
    real: dict[str, str] = {}
    for call in state.calls():
        if call["results"]:
            entry = state.entries[call["results"][0]]
            if entry.get("_name") == "toolResult":
                real[call["id"]] = entry.get("message", {}).get("content")
    return BaselineFacts(normalize_log(ev.final), dict(witness_counts(ev.witness)), real,
                         all(r.ok for r in results))
