"""The supervisor: runs one case — launch the agent, serve its checkpoint channel, fire faults at barriers, restart.

Modelled on a test-runner's worker controller: the subject (the agent) may hang, crash or lie, and every such
behaviour becomes a *verdict* in the returned ``CaseRun``, never an exception or a hung harness.

The loop, single-threaded around one selector (listening socket, one connection per agent process, one pidfd per
process):

1. Launch a *generation* (one process; K for ``dresume(K)``) with ``CHAOS_CONTROL`` naming our Unix socket.
2. Each connection sends ``hello`` then barrier messages; every message is answered by one line, and the agent
   blocks until it arrives (the hello's answer it may read a moment later, before it acts: docs/protocol.md) — so at
   a barrier the agent is paused exactly there and a SIGKILL lands precisely. An agent that offers it (``oneway``
   in its hello) is told to wait only at the phases where this case can act (``wait_phases``: after-sync, and the
   phases of the faults still to fire); its other barriers are read, numbered and recorded as any, unanswered
   (docs/protocol.md).
3. At each barrier the ``Matcher`` (chaos.faults) says which fault fires: ``kill``/``torn``/``powerloss``/``dresume``
   SIGKILL the agent's whole session (no answer) and, for torn/powerloss, cut the file before anything restarts;
   ``int`` sends SIGINT then answers continue; ``ioerror`` answers ``fail``. After-sync barriers are recorded as
   acknowledged with the transaction's bytes read from the file at that moment.
4. When every process of the generation has ended: a fault killed one (or answered ``fail``) → the next generation
   is ``resume`` (K at once after ``dresume(K)``); ended blocked and an abort command is configured → ``abort``;
   ended otherwise → the command's next step, or the end of the case.
   Siblings of a ``dresume`` generation run in *lockstep*, as far as the OS lets us see: each hello is held until
   all have said it, and every barrier's answer is held, then decided once per loop turn (after every ready message
   was read): released together when no sibling is still on its way to a barrier — each is held, has a message we
   have not read yet, has ended, or is asleep with all its processes (``chaos.process.is_runnable``: blocked on the
   program's own lock, say) — or after ``Limits.hold_seconds``. So "K processes resume one state at once" holds on a
   loaded two-core machine too, instead of one sibling finishing before the others were scheduled. Best effort by
   design: a sibling asleep for another reason (a model request, a timer) lets the others go on.
5. Watchdog: per-case wall clock and per-barrier silence → ``hang``; at the end no process of any launch's session
   may survive (psutil sweep; stragglers are killed and reported).

Not here: what the agent command is (``AgentCommand``, built by the case layer), judging the files (chaos.oracle).
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import socket
import struct
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import psutil

from chaos import records
from chaos.errors import ChaosError
from chaos.faults import PHASES, BarrierOrderError, Fault, Matcher, format_fault, parse_schedule
from chaos.process import (
    AgentProcess, Launcher, SubprocessLauncher, descendants, is_runnable, kill_processes, proc_info, session_members,
)
from chaos.records import Acknowledged, BarrierEvent, CaseRun, FaultRecord, Launch, Straggler

PROTOCOL_VERSION = 1
SESSION = "{session}"  # placeholder in argv, replaced by the session path the first hello announced
# AF_UNIX: sun_path is 108 bytes on Linux, including the terminating NUL.
_SUN_PATH_MAX = 107
_POLL = 0.01  # process-exit polling period when no pidfd is available
_HOLD_POLL = 0.002  # how often a held dresume barrier looks again at its siblings
_CONTINUE = {"action": "continue"}  # the usual answer, sent as the line below (no JSON encoding per barrier)
_CONTINUE_LINE = b'{"action":"continue"}\n'


class SupervisorError(ChaosError):
    """The supervisor itself cannot run the case (e.g. the control socket cannot be created)."""


@dataclass(frozen=True)
class Step:
    """One command of a case (a run, a compaction...). ``again`` re-issues it when a fault destroyed all its work.

    "All its work destroyed" = the step's own process wrote no transaction that is still complete in the file when
    the fault's process has ended (killed at its first before-write, or its first write cut by torn/powerloss, or
    rolled back by ioerror): recovery then has nothing of the step to finish, so the case would silently skip it.
    """

    argv: tuple[str, ...]
    again: tuple[str, ...] | None = None


@dataclass(frozen=True)
class AgentCommand:
    """How to drive one agent implementation through a case.

    ``steps[0].argv`` creates the session; later argvs (and ``resume``/``abort``) may contain ``{session}``, the
    path the agent announced in its hello. ``env`` is added to the supervisor's environment. ``settled_exits``
    are the exit codes meaning "ended by itself in a durable terminal state"; any other ends the case.
    """

    steps: tuple[Step, ...]
    resume: tuple[str, ...]
    abort: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None  # default: the case directory
    settled_exits: frozenset[int] = frozenset({0, 3, 4, 130})
    blocked_exit: int | None = 3
    locked_exit: int = 6  # the refused process of a dresume pair

    @classmethod
    def single(cls, first: Sequence[str], resume: Sequence[str], abort: Sequence[str] | None = None, **kw):
        """A one-step command."""
        return cls(steps=(Step(tuple(first)),), resume=tuple(resume), abort=tuple(abort) if abort else None, **kw)


@dataclass(frozen=True)
class Limits:
    """Watchdog limits (seconds)."""

    case_seconds: float = 120.0  # wall clock for the whole case
    silence_seconds: float = 30.0  # a live process says nothing for this long after its launch or our last answer
    kill_seconds: float = 5.0  # how long psutil may take to confirm a SIGKILLed session gone
    hold_seconds: float = 2.0  # longest a dresume sibling's barrier waits for its running siblings (0: never)
    max_line: int = 1 << 20  # a protocol line longer than this is a protocol error


@dataclass
class _Conn:
    sock: socket.socket
    ident: int
    pid: int
    launch: int | None
    buf: bytes = b""
    hello: bool = False
    held: bool = False  # answer withheld (dresume lockstep: a hello, or the barrier held_event)
    held_since: float = 0.0
    held_event: BarrierEvent | None = None
    tx_start: int = 0  # offset announced at the current transaction's before-write
    closed: bool = False
    wait: frozenset[str] | None = None  # the phases this agent waits at for an answer (the hello's); None: every one


class _Stop(Exception):
    """Internal: a verdict was reached; unwind to the case's cleanup."""


class Supervisor:
    """Runs cases of one agent command. ``run(schedule)`` returns a ``CaseRun``; agent misbehaviour is a verdict."""

    def __init__(
        self,
        command: AgentCommand,
        case_dir: Path | str,
        *,
        launcher: Launcher | None = None,
        limits: Limits = Limits(),
        label: str = "",
    ):
        self.command = command
        self.case_dir = Path(case_dir)
        self.launcher = launcher or SubprocessLauncher()
        self.limits = limits
        self.label = label

    def run(self, schedule: Sequence[Fault] | str = ()) -> CaseRun:
        """Run the case under ``schedule`` (faults or their ``+``-joined text) and return what happened."""
        faults = parse_schedule(schedule) if isinstance(schedule, str) else tuple(schedule)
        return _Case(self, faults).run()


def run_case(command: AgentCommand, schedule: Sequence[Fault] | str, case_dir: Path | str, **kw) -> CaseRun:
    """Convenience: ``Supervisor(command, case_dir, **kw).run(schedule)``."""
    return Supervisor(command, case_dir, **kw).run(schedule)


def wait_phases(pending: Sequence[Fault]) -> frozenset[str]:
    """The phases an agent must wait at for an answer, given the faults still to fire: those the faults name (the
    agent must be parked there for a SIGKILL, a SIGINT or a failed write to land exactly), and ``after-sync`` always
    — an acknowledgement's bytes are read from the file while the agent waits, before it can write again."""
    return frozenset({"after-sync", *(fault.point.phase for fault in pending)})


def life_end(now: float, reaped: float | None, t0: float) -> float:
    """When a reaped process's life ended, in seconds since the case began at ``t0`` (time.monotonic()): its
    reaper's word where it has one (``reaped``: the zygote reports when it reaped a launch), else ``now`` (when the
    supervisor saw it); never after ``now`` nor before the case."""
    return now if reaped is None else max(0.0, min(now, round(reaped - t0, 6)))


class _Case:
    """The state of one supervised case; used once."""

    def __init__(self, sup: Supervisor, schedule: tuple[Fault, ...]):
        self.sup = sup
        self.cmd = sup.command
        self.limits = sup.limits
        self.matcher = Matcher(schedule)
        self.dir = sup.case_dir
        self.run_rec = CaseRun(
            label=sup.label, schedule=[format_fault(f) for f in schedule], case_dir=str(self.dir), socket=""
        )
        self.t0 = time.monotonic()
        self.sel = selectors.DefaultSelector()
        self.procs: dict[int, AgentProcess] = {}
        self.live: set[int] = set()
        self.conns: dict[int, _Conn] = {}
        self.activity: dict[int, float] = {}  # launch -> monotonic time of its last message or our last answer
        self.generation: list[int] = []
        self.gen_number = 0
        self.gen_faults: list[Fault] = []
        self.step = 0
        self.step_launch: int | None = None  # the step's latest own launch ("step" or "again")
        self._tmp_sock_dir: str | None = None
        self.env: dict[str, str] | None = None  # every launch's environment (launchers never change it)
        self._next_conn = 0
        # Launches whose session was seen empty after their leader ended. It stays empty for good: a process's
        # session is inherited from its parent at fork and setsid only ever makes a new one, so no process can
        # enter an existing session (and a SIGKILLed leader forks no more). The end-of-case sweep need not scan
        # /proc for them again. (Launch indices, not session ids: a freed id may be a later launch's.)
        self.emptied: set[int] = set()

    # ---- the case ------------------------------------------------------------------------------------------------

    def run(self) -> CaseRun:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "launches").mkdir(exist_ok=True)
        self.listener = self._listen()
        try:
            self._launch_generation([("step", self.cmd.steps[0].argv)])
            while True:  # left through _Stop: every ending is a verdict
                if self.live:
                    self._tick()
                else:
                    self._next_generation()
        except _Stop:
            pass
        finally:
            self._shutdown()
        self.run_rec.unreached = [format_fault(f) for f in self.matcher.pending]
        self.run_rec.duration = round(time.monotonic() - self.t0, 6)
        return self.run_rec

    def _verdict(self, verdict: str, detail: str) -> NoReturn:
        """Record the verdict (the first one wins) and stop the case."""
        if not self.run_rec.verdict:
            self.run_rec.verdict = verdict
            self.run_rec.detail = detail
        raise _Stop

    def _now(self) -> float:
        return round(time.monotonic() - self.t0, 6)

    def _ended(self, proc: AgentProcess) -> float:
        return life_end(self._now(), proc.ended, self.t0)

    # ---- socket --------------------------------------------------------------------------------------------------

    def _listen(self) -> socket.socket:
        path = self.dir / "c.sock"
        if len(os.fsencode(str(path))) > _SUN_PATH_MAX:
            # The case directory is too deep for sun_path: bind in a short private temp dir instead.
            self._tmp_sock_dir = tempfile.mkdtemp(prefix="kp-", dir="/tmp" if os.path.isdir("/tmp") else None)
            path = Path(self._tmp_sock_dir) / "c.sock"
            if len(os.fsencode(str(path))) > _SUN_PATH_MAX:
                raise SupervisorError(f"no control socket path fits in {_SUN_PATH_MAX} bytes: {path}")
        try:
            path.unlink()  # a socket file left by an earlier run of this case directory: bind() would fail
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            sock.listen(16)
        except OSError as e:
            sock.close()
            raise SupervisorError(f"cannot listen on control socket {path}: {e.strerror}") from e
        sock.setblocking(False)
        self.sel.register(sock, selectors.EVENT_READ, ("listen", None))
        self.run_rec.socket = str(path)
        return sock

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            # SO_PEERCRED: the kernel's word for which process connected (pid, uid, gid), not the message's.
            pid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
            try:
                sid = os.getsid(pid)
            except OSError:  # already gone: its death is seen through its launch; nothing to serve
                sock.close()
                continue
            launch = next((i for i, p in self.procs.items() if p.session_id == sid), None)
            conn = _Conn(sock, self._next_conn, pid, launch)
            self._next_conn += 1
            self.conns[conn.ident] = conn
            self.sel.register(sock, selectors.EVENT_READ, ("conn", conn.ident))
            if launch is None or launch not in self.live:
                self._verdict(
                    records.PROTOCOL_ERROR, f"connection from pid {pid} (session {sid}), not a live agent of this case"
                )

    def _close(self, conn: _Conn) -> None:
        conn.held, conn.held_event = False, None  # nothing can be answered any more (nor waited for)
        if not conn.closed:
            conn.closed = True
            self.sel.unregister(conn.sock)
            conn.sock.close()

    def _read(self, conn: _Conn) -> None:
        while not conn.closed:
            try:
                data = conn.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ECONNRESET: the peer died; its exit is handled through its process
                data = b""
            if not data:
                self._close(conn)
                return
            conn.buf += data
            while b"\n" in conn.buf and not conn.closed:
                line, conn.buf = conn.buf.split(b"\n", 1)
                self._on_message(conn, line)
            if len(conn.buf) > self.limits.max_line:
                self._protocol_error(conn, f"line longer than {self.limits.max_line} bytes without a newline")

    def _send(self, conn: _Conn, answer: dict) -> bool:
        if conn.launch is not None:
            self.activity[conn.launch] = time.monotonic()
        try:
            conn.sock.sendall(_CONTINUE_LINE if answer is _CONTINUE else
                              json.dumps(answer, separators=(",", ":")).encode() + b"\n")
            return True
        except OSError:  # the agent died before reading its answer; its exit is handled through its process
            return False

    # ---- messages ------------------------------------------------------------------------------------------------

    def _protocol_error(self, conn: _Conn, detail: str) -> NoReturn:
        self._verdict(records.PROTOCOL_ERROR, f"launch {conn.launch} (pid {conn.pid}): {detail}")

    def _on_message(self, conn: _Conn, line: bytes) -> None:
        assert conn.launch is not None
        self.activity[conn.launch] = time.monotonic()
        try:
            msg = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: [[[… deeper than json parses
            self._protocol_error(conn, f"malformed line {_clip(line)}")
        if not isinstance(msg, dict) or len(msg) != 1 or next(iter(msg)) not in ("hello", "checkpoint"):
            self._protocol_error(conn, f"expected {{\"hello\":…}} or {{\"checkpoint\":…}}, got {_clip(line)}")
        kind, body = next(iter(msg.items()))
        if not isinstance(body, dict):
            self._protocol_error(conn, f"{kind} must be an object, got {_clip(line)}")
        if not conn.hello:
            if kind != "hello":
                self._protocol_error(conn, "first message must be hello")
            self._on_hello(conn, body)
        elif kind == "hello":
            self._protocol_error(conn, "second hello on one connection")
        else:
            self._on_checkpoint(conn, body)

    def _on_hello(self, conn: _Conn, body: dict) -> None:
        version = body.get("protocol")
        if not _is_int(version) or version != PROTOCOL_VERSION:
            self._protocol_error(conn, f"protocol version {version!r} (this supervisor speaks {PROTOCOL_VERSION})")
        if not _is_int(body.get("pid")) or body["pid"] != conn.pid:
            self._protocol_error(conn, f"hello pid {body.get('pid')!r} is not the connecting process {conn.pid}")
        session = body.get("session")
        if not isinstance(session, str) or not session or "\0" in session:
            # No path holds a NUL byte (every os call on it raises ValueError): a foreign agent's bad hello is a
            # protocol error of the case, not an error of the harness.
            self._protocol_error(conn, f"hello session must be a non-empty path, got {session!r}")
        path = os.path.join(self.cmd.cwd or self.dir, session)  # a relative path is relative to the agent's cwd
        if self.run_rec.session is None:
            self.run_rec.session = path
        elif os.path.realpath(path) != os.path.realpath(self.run_rec.session):
            self._protocol_error(
                conn, f"hello names session {session!r}, the case's session is {self.run_rec.session!r}"
            )
        if "oneway" in body and not isinstance(body["oneway"], bool):
            self._protocol_error(conn, f"hello oneway must be true or false, got {body['oneway']!r}")
        conn.hello = True
        self.run_rec.launches[conn.launch].hello = dict(body)
        # dresume: hold the first hello until its sibling has said hello too or ended, so the pair really overlaps
        # (the agent holds the session lock while it waits for this answer) instead of racing by luck.
        if len(self.generation) > 1 and any(i in self.live and not self._said_hello(i) for i in self.generation):
            self._hold(conn, None)
            return
        self._release_held(barriers=False)
        wait = wait_phases(self.matcher.pending) if body.get("oneway") and len(self.generation) == 1 else None
        if wait is None or len(wait) == len(PHASES):
            self._send(conn, _CONTINUE)
            return
        conn.wait = wait
        self._send(conn, {"action": "continue", "wait": [p for p in PHASES if p in wait]})

    def _said_hello(self, launch: int) -> bool:
        return any(c.hello for c in self.conns.values() if c.launch == launch)

    def _hold(self, conn: _Conn, event: BarrierEvent | None) -> None:
        conn.held, conn.held_since, conn.held_event = True, time.monotonic(), event

    def _release_held(self, *, barriers: bool) -> None:
        """Answer the held hellos (and, with ``barriers``, the held barriers too) with continue."""
        now = time.monotonic()
        for c in list(self.conns.values()):
            if c.held and not c.closed and (barriers or c.held_event is None):
                c.held = False
                if c.held_event is not None:
                    c.held_event.held = round(now - c.held_since, 6)
                    c.held_event.answer = {"action": "continue"}
                    c.held_event = None
                self._send(c, _CONTINUE)

    def _sibling_running(self) -> bool:
        """True when a live launch of this dresume generation that is not held is on its way to a barrier: it has
        a message we have not read yet, or one of its processes (the launched one and its descendants, e.g. a tool's
        subprocess, and any connected one) is runnable. The held ones must not run ahead of it."""
        for i in self.generation:
            if i not in self.live:
                continue
            conns = [c for c in self.conns.values() if c.launch == i and not c.closed]
            if any(c.held for c in conns):
                continue
            # A sibling blocked in recv on our socket has sent a message we have not read: it is at a barrier, and
            # will be held at the next turn; until then it must count as on its way, or the held would run ahead.
            if any(b"\n" in c.buf or _readable(c.sock) for c in conns):
                return True
            leader = self.procs[i].pid
            pids = {leader, *(c.pid for c in conns), *(p.pid for p in descendants(leader))}
            if any(is_runnable(pid) for pid in pids):
                return True
        return False

    def _recheck_held(self) -> None:
        """Release the held barriers together once no sibling is running toward one (or one waited too long)."""
        held = [c for c in self.conns.values() if c.held and not c.closed and c.held_event is not None]
        if not held:
            return
        limit = time.monotonic() - self.limits.hold_seconds
        if any(c.held_since <= limit for c in held) or not self._sibling_running():
            self._release_held(barriers=True)

    def _on_checkpoint(self, conn: _Conn, cp: dict) -> None:
        phase, facts = cp.get("phase"), cp.get("facts")
        nums = {k: cp.get(k) for k in ("seqFirst", "seqLast", "offset", "syncedOffset")}
        if phase not in PHASES:
            self._protocol_error(conn, f"checkpoint phase {phase!r}")
        if not isinstance(facts, list) or not facts or not all(isinstance(f, str) and f for f in facts):
            self._protocol_error(conn, f"checkpoint facts must be a non-empty list of names, got {facts!r}")
        bad = [k for k, v in nums.items() if not _is_int(v) or v < 0]
        if bad:
            self._protocol_error(conn, f"checkpoint {', '.join(bad)} must be non-negative integers")
        if nums["seqLast"] - nums["seqFirst"] + 1 != len(facts):
            self._protocol_error(
                conn, f"checkpoint seq {nums['seqFirst']}..{nums['seqLast']} does not match {len(facts)} facts"
            )
        if nums["syncedOffset"] > nums["offset"]:
            self._protocol_error(conn, f"checkpoint syncedOffset {nums['syncedOffset']} beyond offset {nums['offset']}")
        try:
            barrier, fault = self.matcher.observe(conn.ident, phase, facts)
        except BarrierOrderError as e:
            self._protocol_error(conn, str(e))
        # A fault never fires where the agent does not wait: only the first pending fault can fire, and the wait set
        # of every open connection holds the phases of all faults pending at its hello (wait_phases).
        waited = conn.wait is None or phase in conn.wait
        # What the file holds is taken before the agent is answered (after the answer it may write again); the
        # records are made after a plain "continue": the agent waits for nothing it does not need (~30 barriers a
        # case, each a round trip on its path). At a barrier it does not wait at, it may have written on already:
        # its file size is not measured there.
        at, size = self._now(), self._file_size() if waited else None
        data = self._read_range(conn.tx_start, nums["offset"]) if phase == "after-sync" else b""
        lockstep = len(self.generation) > 1 and self.limits.hold_seconds > 0
        if fault is None and not lockstep and waited:
            self._send(conn, _CONTINUE)
        event = BarrierEvent(
            index=len(self.run_rec.barriers),
            launch=conn.launch,
            pid=conn.pid,
            phase=phase,
            facts=list(facts),
            seq_first=nums["seqFirst"],
            seq_last=nums["seqLast"],
            offset=nums["offset"],
            synced_offset=nums["syncedOffset"],
            tx=barrier.tx,
            ordinals=dict(barrier.ordinals),
            file_size=size,
            at=at,
            fault=format_fault(fault) if fault else None,
            waited=waited,
        )
        self.run_rec.barriers.append(event)
        if phase == "before-write":
            conn.tx_start = event.offset
        elif phase == "after-sync":
            # Acknowledged: the agent says these bytes are durable. Keep them exactly as the file has them now.
            self.run_rec.acknowledged.append(
                Acknowledged(
                    tx=event.tx,
                    launch=event.launch,
                    barrier=event.index,
                    facts=list(facts),
                    seq_first=event.seq_first,
                    seq_last=event.seq_last,
                    start=conn.tx_start,
                    end=event.offset,
                    synced_offset=event.synced_offset,
                    file_size=event.file_size,
                    data=data,
                )
            )
        if fault is None:
            if lockstep:
                # dresume lockstep (module docstring): decided by _recheck_held at the end of this loop turn, once
                # every message that is already here has been read, so siblings that arrive together go together.
                self._hold(conn, event)
                return
            if waited:
                event.answer = {"action": "continue"}  # sent above (if the agent was still there to read it)
            return
        self.gen_faults.append(fault)
        if fault.kills:
            self._kill_at(conn, event, fault)
        elif fault.action == "int":
            self._interrupt(conn, event, fault)
        else:  # ioerror
            event.answer = {"action": "fail", "errno": fault.errno}
            self._record_fault(event, fault, errno=fault.errno)
            self._send(conn, event.answer)

    # ---- faults --------------------------------------------------------------------------------------------------

    def _record_fault(self, event: BarrierEvent, fault: Fault, **kw) -> FaultRecord:
        rec = FaultRecord(
            fault=format_fault(fault), action=fault.action, barrier=event.index, launch=event.launch, pid=event.pid,
            at=self._now(), **kw,
        )
        self.run_rec.faults.append(rec)
        return rec

    def _interrupt(self, conn: _Conn, event: BarrierEvent, fault: Fault) -> None:
        proc = self.procs[conn.launch]
        if proc.poll() is not None:
            # It ended by itself after sending this barrier (read after its death): there is nobody to interrupt, so
            # the fault did not happen (_kill_at's rule); _on_exit judges the end it had.
            self.matcher.withdraw(fault)
            self.gen_faults.remove(fault)
            self._close(conn)
            return
        # The signal is pending in the agent before it reads our answer, so it acts on it at its next decision.
        if conn.pid == proc.pid:
            proc.send_signal(signal.SIGINT)  # via Popen: never signals a reaped (recyclable) pid
        else:
            os.kill(conn.pid, signal.SIGINT)  # the agent runs under a wrapper; the kernel vouched for this pid
        self._record_fault(event, fault, signal="SIGINT")
        event.answer = {"action": "continue"}
        self._send(conn, event.answer)

    def _kill_at(self, conn: _Conn, event: BarrierEvent, fault: Fault) -> None:
        launch = self.run_rec.launches[conn.launch]
        # The log is measured, cut and copied only once every process of the session is gone: the leader was parked
        # at this barrier, but another of its threads, a child or a wrapped agent could still write (measured: done
        # while the kernel tore the leader down, the copy missed such writes in 9-17 of 30 runs of a test agent).
        report = self.procs[conn.launch].kill_session(self.limits.kill_seconds)
        rc = self.procs[conn.launch].poll()
        if rc is not None:  # reaped: its life ends here, not after the bookkeeping below
            launch.ended = self._ended(self.procs[conn.launch])
        if rc is not None and rc != -signal.SIGKILL:
            # The leader ended by itself before the SIGKILL landed: it crashed, or exited without waiting at this
            # barrier, after sending it (read from the socket after its death; a zygote relays an exit a little
            # later). That end is what happened, not the fault: _on_exit judges it (a crash by a signal it did not
            # get from us), and the fault is unfired (an exit by itself then leaves it not reached, never a pass).
            self.matcher.withdraw(fault)
            self.gen_faults.remove(fault)
            self._close(conn)
            return
        if not report.survivors:
            self.emptied.add(conn.launch)
        launch.killed_by = "fault"
        self._close(conn)
        rec = self._record_fault(
            event, fault, signal="SIGKILL",
            killed=[p.to_json() for p in report.killed], survivors=[p.to_json() for p in report.survivors],
        )
        if report.survivors:
            rec.note = "processes survived SIGKILL within the limit; the restart may race them"
        session = self.run_rec.session
        rec.size_at_kill = self._file_size()
        if fault.action in ("torn", "powerloss"):
            # SIGKILL keeps written-but-unsynced bytes (they are in the page cache); a power loss would not.
            # Simulate it now, while nothing of the case runs: keep the synced prefix (+ B bytes of the tail if torn).
            unsynced = event.offset - event.synced_offset
            keep = 0 if fault.action == "powerloss" else fault.bytes
            if keep >= unsynced or rec.size_at_kill is None:
                rec.note = f"{fault.action} keeps {keep} bytes of an unsynced range of {unsynced}: nothing to cut"
                self._snapshot(rec, session)
                self._verdict(records.NOT_APPLICABLE, f"{format_fault(fault)}: {rec.note}")
            rec.cut_to = event.synced_offset + keep
            os.truncate(session, rec.cut_to)
        self._snapshot(rec, session)

    def _snapshot(self, rec: FaultRecord, session: str | None) -> None:
        if session is None or not os.path.exists(session):
            return
        dest = self.dir / "kills" / f"{len(self.run_rec.faults):02d}-{rec.action}.jsonl"
        dest.parent.mkdir(exist_ok=True)  # made on the first snapshot: most cases of a campaign are removed unread
        shutil.copyfile(session, dest)
        rec.snapshot, rec.snapshot_size = str(dest), dest.stat().st_size

    def _file_size(self) -> int | None:
        try:
            return os.stat(self.run_rec.session).st_size if self.run_rec.session else None
        except OSError:
            return None

    def _read_range(self, start: int, end: int) -> bytes:
        try:  # one pread (no buffered file object): this is on an agent's path at every after-sync
            fd = os.open(self.run_rec.session, os.O_RDONLY | os.O_CLOEXEC)
        except (OSError, TypeError):
            return b""
        try:
            return os.pread(fd, max(0, end - start), start)
        except OSError:
            return b""
        finally:
            os.close(fd)

    # ---- processes -----------------------------------------------------------------------------------------------

    def _launch_generation(self, items: list[tuple[str, Sequence[str]]]) -> None:
        self.gen_number += 1
        self.generation = []
        self.gen_faults = []
        for role, argv in items:
            self.generation.append(self._launch(role, argv))

    def _launch(self, role: str, argv: Sequence[str]) -> int:
        index = len(self.run_rec.launches)
        if any(SESSION in a for a in argv):
            if self.run_rec.session is None:
                self._verdict(records.LAUNCH_ERROR, f"{role} command needs {SESSION} but no hello announced a session")
            argv = [a.replace(SESSION, self.run_rec.session) for a in argv]
        base = self.dir / "launches" / f"{index:02d}-{role}"
        out, err = base.with_suffix(".stdout"), base.with_suffix(".stderr")
        if self.env is None:  # once per case (the launcher copies it again): ~50 µs less between kill and restart
            self.env = {**os.environ, **self.cmd.env, "CHAOS_CONTROL": self.run_rec.socket}
        try:
            proc = self.sup.launcher.launch(list(argv), self.env, Path(self.cmd.cwd or self.dir), out, err)
        except OSError as e:
            self._verdict(records.LAUNCH_ERROR, f"cannot start {role} command {list(argv)}: {e.strerror or e}")
        self.procs[index] = proc
        self.live.add(index)
        self.activity[index] = time.monotonic()
        self.run_rec.launches.append(
            Launch(index=index, role=role, step=self.step, generation=self.gen_number, argv=list(argv), pid=proc.pid,
                   stdout=str(out), stderr=str(err), started=min(self._now(), round(proc.created - self.t0, 6)))
        )
        if role in ("step", "again"):
            self.step_launch = index
        fd = proc.exit_fd()
        if fd is not None:
            self.sel.register(fd, selectors.EVENT_READ, ("exit", index))
        return index

    def _tick(self) -> None:
        now = time.monotonic()
        deadlines = [self.t0 + self.limits.case_seconds]
        held = {c.launch for c in self.conns.values() if c.held and not c.closed}
        deadlines += [self.activity[i] + self.limits.silence_seconds for i in self.live if i not in held]
        timeout = max(0.0, min(deadlines) - now)
        if any(self.procs[i].exit_fd() is None for i in self.live):
            timeout = min(timeout, _POLL)
        if any(c.held_event is not None and not c.closed for c in self.conns.values()):
            timeout = min(timeout, _HOLD_POLL)
        for key, _ in self.sel.select(timeout):
            kind, ident = key.data
            if kind == "listen":
                self._accept()
            elif kind == "conn" and ident in self.conns and not self.conns[ident].closed:
                self._read(self.conns[ident])
        for index in sorted(self.live):
            rc = self.procs[index].poll()
            if rc is not None:
                self._on_exit(index, rc)
        self._recheck_held()
        self._watchdog()

    def _watchdog(self) -> None:
        now = time.monotonic()
        if now > self.t0 + self.limits.case_seconds:
            self._verdict(records.HANG, f"case wall-clock limit of {self.limits.case_seconds:g}s exceeded")
        held = {c.launch for c in self.conns.values() if c.held and not c.closed}
        for i in sorted(self.live - held):
            if now - self.activity[i] > self.limits.silence_seconds:
                last = next((b for b in reversed(self.run_rec.barriers) if b.launch == i), None)
                where = f"after barrier {last.points()[0]}" if last else "since its launch"
                self._verdict(records.HANG, f"launch {i} (pid {self.procs[i].pid}) silent for "
                                            f"{self.limits.silence_seconds:g}s {where}")

    def _on_exit(self, index: int, rc: int) -> None:
        for conn in [c for c in self.conns.values() if c.launch == index and not c.closed]:
            self._read(conn)  # whatever it wrote before dying is already in the socket buffer
            self._close(conn)
        launch = self.run_rec.launches[index]
        launch.returncode = rc
        if launch.ended is None:
            launch.ended = self._ended(self.procs[index])
        self.live.discard(index)
        proc = self.procs[index]
        if proc.exit_fd() is not None:
            self.sel.unregister(proc.exit_fd())
        proc.close()
        # A dresume sibling that exited (refused) no longer holds its partners' hellos; held barriers are decided
        # by _recheck_held at the end of this turn.
        self._release_held(barriers=False)
        if launch.killed_by is None:
            if self._sweep(proc.session_id, index, "after-exit", grace=0.2):
                self.emptied.add(index)
            if rc < 0:
                name = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
                self._verdict(
                    records.CRASH, f"launch {index} ({launch.role}) died by {name}, not sent by the supervisor"
                )

    def _sweep(self, session_id: int, launch: int | None, found: str, grace: float = 0.0) -> bool:
        """Kill and record processes left in a session whose leader has ended (and been reaped); True when the
        session is empty afterwards."""
        if psutil.pid_exists(session_id):
            # Linux frees a pid number only when no process uses it as pid, pgid or sid: while any member of our
            # session lives, the number cannot be reused. A live process with that pid (our leader is reaped)
            # therefore means our session is empty and the number now belongs to someone else: leave it alone.
            return True
        deadline = time.monotonic() + grace
        while session_members(session_id) and time.monotonic() < deadline:
            time.sleep(0.01)  # e.g. a tool group the agent just SIGKILLed is still being torn down
        left = session_members(session_id)
        if not left:
            return True
        infos = {p.pid: proc_info(p.pid) for p in left}
        emptied = not kill_processes(lambda: session_members(session_id), self.limits.kill_seconds).survivors
        for info in infos.values():
            self.run_rec.stragglers.append(
                Straggler(info.pid, info.name, list(info.cmdline), session_id, launch, found)
            )
        return emptied

    # ---- what next -----------------------------------------------------------------------------------------------

    def _next_generation(self) -> None:
        """Decide what to launch once the whole generation has ended (or end the case with a verdict)."""
        launches = [self.run_rec.launches[i] for i in self.generation]
        fault_killed = any(l.killed_by == "fault" for l in launches)
        if fault_killed or any(f.action == "ioerror" for f in self.gen_faults):
            concurrent = max((f.resumes for f in self.gen_faults if f.action == "dresume"), default=0)
            if concurrent:
                self._launch_generation([("dresume", self.cmd.resume)] * concurrent)
            else:
                self._launch_generation([("resume", self.cmd.resume)])
            return
        code = self._generation_code(launches)
        roles = {l.role for l in launches}
        if code == self.cmd.blocked_exit and self.cmd.abort and roles != {"abort"}:
            self._launch_generation([("abort", self.cmd.abort)])
            return
        if code not in self.cmd.settled_exits:
            last = launches[-1]
            self._verdict(records.exit_verdict(code), f"launch {last.index} ({last.role}) exited {code}")
        if self._step_lost():
            # Recovery is over and nothing of the step survived: issue it again, as its user would.
            self._launch_generation([("again", self.cmd.steps[self.step].again)])
            return
        if self.step + 1 < len(self.cmd.steps):
            self.step += 1
            self._launch_generation([("step", self.cmd.steps[self.step].argv)])
            return
        if self.matcher.pending:
            self._verdict(records.NOT_REACHED, "the agent finished before "
                          + ", ".join(format_fault(f) for f in self.matcher.pending) + " was reached")
        self._verdict(records.exit_verdict(code), f"all steps done; last launch exited {code}")

    def _generation_code(self, launches: list[Launch]) -> int:
        codes = [l.returncode for l in launches if l.returncode is not None]
        if len(launches) > 1:  # dresume: the refused sibling's "locked" exit is expected, not the outcome
            others = [c for c in codes if c != self.cmd.locked_exit]
            codes = others or codes
        return next((c for c in codes if c != 0), 0)

    def _step_lost(self) -> bool:
        """True when a fault hit the step's latest own launch before any transaction of it became durable.

        Durable here means "in the file after the fault": a write survives a plain SIGKILL (page cache) but not a
        torn/powerloss cut below its end; an ioerror at before-write rolls the write back. Each re-issue needs a
        fault of its own to be lost again, so this cannot loop.
        """
        if self.cmd.steps[self.step].again is None or self.step_launch is None:
            return False
        hit = [f for f in self.run_rec.faults if f.launch == self.step_launch and f.action != "int"]
        if not hit:
            return False
        writes = [b for b in self.run_rec.barriers if b.launch == self.step_launch and b.phase == "after-write"]
        if not writes:
            return True
        cut = next((f.cut_to for f in hit if f.cut_to is not None), None)
        return cut is not None and cut < writes[0].offset

    # ---- cleanup -------------------------------------------------------------------------------------------------

    def _shutdown(self) -> None:
        for index in sorted(self.live):
            launch = self.run_rec.launches[index]
            launch.killed_by = launch.killed_by or "watchdog"
            self.procs[index].kill_session(self.limits.kill_seconds)
            launch.returncode = self.procs[index].poll()
            launch.ended = self._ended(self.procs[index])
            if self.procs[index].exit_fd() is not None:
                self.sel.unregister(self.procs[index].exit_fd())
            self.procs[index].close()
        self.live.clear()
        for index, proc in self.procs.items():  # no process of the case outlives the case
            if index not in self.emptied:  # a session seen empty stays empty (see __init__)
                self._sweep(proc.session_id, None, "end")
        for conn in list(self.conns.values()):
            self._close(conn)
        self.sel.unregister(self.listener)
        self.listener.close()
        self.sel.close()
        try:
            os.unlink(self.run_rec.socket)
        except OSError:
            pass
        if self._tmp_sock_dir:
            shutil.rmtree(self._tmp_sock_dir, ignore_errors=True)


def _readable(sock: socket.socket) -> bool:
    """True when ``sock`` has bytes (or its end) waiting to be read; never blocks."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)  # a byte, or b"" for the peer's end: both are news
        return True
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:  # reset: there is an end to read
        return True


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _clip(line: bytes, n: int = 120) -> str:
    text = line.decode("utf-8", "replace")
    return repr(text if len(text) <= n else text[:n] + "…")
