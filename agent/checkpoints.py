"""Agent side of the checkpoint protocol (docs/protocol.md): durable-log barriers reported to a chaos supervisor.

What it is for. The chaos harness kills the agent at *named* points of the durable log ("after the toolStarted
is written but before it is synced"). When ``CHAOS_CONTROL`` names a Unix socket, the agent connects after creating
or opening its session file, says hello (reading the answer only once its client and loop are built, before it
plans or runs anything, so the round trip overlaps that start-up), and then reports three barriers per commit
through the store's hook (``before-write``, ``after-write``, ``after-sync``). A message waits for the supervisor's
one-line answer, so the supervisor can SIGKILL the agent while it is parked exactly at the barrier, inject a
write/fsync failure (``fail``), or let it continue — at every barrier, unless the hello's answer names the phases
it will act at (``wait``): a barrier of another phase is then only reported, and the agent goes on at once (a round
trip is two wake-ups of two processes, ~0.14 ms, and a case has ~30 barriers of which one or two can fire).

Invariants it protects:

- **Fail closed.** If the connection cannot be made, breaks, closes, or the answer is not a valid protocol line,
  the agent exits 7 *at once* (``os._exit``: no ``finally`` block, no abort path, no flush of anything but the
  one stderr line runs), so a lost supervisor can never watch an agent write facts it cannot attribute.
- **No cost without the variable.** ``from_environ`` returns None and the store gets no hook: no socket, no
  import of ``socket``, nothing per commit.
- **Nothing at import time.** No socket, thread or signal handler is created by importing this module (the
  fork-server launcher of a later issue forks pre-imported agents).

What it does not do: decide anything about the session. It does not interpret ``fail`` beyond turning the errno
name into the number the store injects (the store implements the rollback / poisoning, SPEC §13.3 steps 5 and 7).
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Mapping

ENV_VAR = "CHAOS_CONTROL"
PROTOCOL_VERSION = 1
EXIT_CHANNEL_LOST = 7

# The only errnos the supervisor may inject (issue [2/7]): a full disk at write time, an I/O error at fsync time.
_FAILABLE = {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO}
# `fail` makes sense only where the store has an I/O call left to fail: the write, or the fsync after it.
_FAILABLE_PHASES = frozenset({"before-write", "after-write"})
# A supervisor answer is one short JSON line; anything longer is a broken peer, not a slow one.
_MAX_ANSWER = 4096
_PHASES = ("before-write", "after-write", "after-sync")


def _exit_lost(reason: str) -> None:
    """Default reaction to a lost channel: one line on stderr, then exit 7 without running any cleanup."""
    try:
        os.write(2, f"agent: checkpoint channel lost: {reason}\n".encode("utf-8", "replace"))
    finally:
        os._exit(EXIT_CHANNEL_LOST)


class CheckpointChannel:
    """One connection to the supervisor's Unix socket; ``hook`` is the store hook (SPEC §13.3 observation points)."""

    def __init__(self, path: str, *, on_lost: Callable[[str], None] = _exit_lost):
        self.path = path
        self._on_lost = on_lost  # tests inject a raising callable; production exits 7
        self._sock = None
        self._buffer = bytearray()
        self._wait: frozenset[str] | None = None  # the phases answered (the hello's "wait"); None: every phase
        self._hello_pending = False  # the hello is sent and its answer not read yet (see open)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], **kwargs) -> "CheckpointChannel | None":
        """A channel for ``environ[CHAOS_CONTROL]``, or None when the variable is unset or empty."""
        path = environ.get(ENV_VAR)
        return cls(path, **kwargs) if path else None

    def open(self, *, pid: int, session: str) -> None:
        """Connect and send the hello; called once the session file exists (the header is not a barrier). The hello's
        answer is read later (``settle``): before the agent plans or runs anything, else at the first barrier or when
        the channel closes."""
        import socket  # lazily: without CHAOS_CONTROL the agent never needs it

        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.path)
        except OSError as exc:
            self._lost(f"cannot connect to {self.path}: {exc.strerror or exc}")
            return
        self._sock = sock
        # "oneway": this agent can be told, in the hello's answer, at which phases to wait (docs/protocol.md).
        hello = {"hello": {"pid": pid, "session": session, "protocol": PROTOCOL_VERSION, "oneway": True}}
        # Not waited for here: the agent builds its client, runner and loop (no effect outside itself) and reads the
        # answer before it plans or runs anything (``settle``), so the round trip (~0.3 ms: the supervisor wakes,
        # checks the hello, answers) overlaps that start-up instead of stalling it (docs/protocol.md, Framing).
        self._hello_pending = self._send(hello)

    def settle(self) -> None:
        """Read and check the hello's answer if it is still unread; idempotent. The agent calls it before it plans or
        runs anything (a replayed tool, a planner command), so nothing with an effect happens under a supervisor
        that never answered; ``hook`` and ``close`` call it too. Strict alternation holds: no other message is sent
        before it."""
        if not self._hello_pending:
            return
        self._hello_pending = False
        raw = self._read_answer()
        if raw is None:
            return
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        wait = answer.get("wait") if isinstance(answer, dict) else None
        if (isinstance(answer, dict) and answer.get("action") == "continue" and set(answer) <= {"action", "wait"}
                and ("wait" not in answer or (isinstance(wait, list) and all(p in _PHASES for p in wait)))):
            self._wait = frozenset(wait) if wait is not None else None
            return
        self._lost(f"the hello may only be answered with continue (and the phases to wait at): {raw[:200]!r}")

    def hook(self, checkpoint) -> int | None:
        """Report one barrier and, at a phase the agent waits at, block for the answer: None to continue, or the errno
        the store must inject."""
        self.settle()
        phase = checkpoint.phase
        waits = self._wait is None or phase in self._wait
        message = {
            "checkpoint": {
                "phase": phase,
                "facts": list(checkpoint.facts),
                "seqFirst": checkpoint.seq_first,
                "seqLast": checkpoint.seq_last,
                "offset": checkpoint.offset,
                "syncedOffset": checkpoint.synced_offset,
            }
        }
        if not waits:  # reported only: the supervisor does not act here, and sends no answer
            self._send(message)
            return None
        injected = self._exchange(message)
        if injected is not None and phase not in _FAILABLE_PHASES:
            self._lost(f"fail is not allowed at {phase}")
        return injected

    def close(self) -> None:
        """Close the socket (end of process; the supervisor sees EOF and then the exit status). A hello whose answer
        is still unread has it read and checked first: a wrong one is refused (exit 7) as at a barrier."""
        self.settle()
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    # ----------------------------------------------------------------------------------------------------------

    def _exchange(self, message: dict) -> int | None:
        """Send one line, wait for one line; returns None for continue, an errno for fail."""
        raw = self._send_and_read(message)
        return None if raw is None else self._parse_answer(raw)

    def _send_and_read(self, message: dict) -> bytes | None:
        """Send one line and read the answer line; None once the channel is lost (``_lost`` was called)."""
        if not self._send(message):
            return None
        return self._read_answer()

    def _read_answer(self) -> bytes | None:
        """Read the one answer line to the message just sent; None once the channel is lost."""
        try:
            # recv interrupted by SIGINT/SIGTERM is retried after our flag-only handler (PEP 475): a signal at a
            # barrier never loses the barrier, the loop acts on the flag after the commit returns.
            raw = self._read_line()
        except OSError as exc:
            self._lost(f"{type(exc).__name__}: {exc.strerror or exc}")
            return None
        if raw is None:
            self._lost("connection closed by the supervisor")
        elif self._buffer:  # more than the one answer: the two sides disagree on which barriers are answered
            self._lost(f"a line no message asked for: {bytes(self._buffer[:200])!r}")
            return None
        return raw

    def _send(self, message: dict) -> bool:
        """Send one line; False once the channel is lost."""
        if self._sock is None:
            self._lost("not connected")
            return False
        # ensure_ascii: the line is pure ASCII, so any JSON parser in any language reads it.
        line = json.dumps(message, separators=(",", ":")).encode("ascii") + b"\n"
        try:
            self._sock.sendall(line)  # interrupted by a signal: retried (PEP 475), as recv
        except OSError as exc:
            self._lost(f"{type(exc).__name__}: {exc.strerror or exc}")
            return False
        return True

    def _read_line(self) -> bytes | None:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                raw = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return raw
            if len(self._buffer) > _MAX_ANSWER:
                return b""  # unparsable: reported as a protocol error by the caller
            chunk = self._sock.recv(4096)
            if not chunk:
                return None
            self._buffer += chunk

    def _parse_answer(self, raw: bytes) -> int | None:
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        action = answer.get("action") if isinstance(answer, dict) else None
        if action == "continue" and set(answer) == {"action"}:
            return None
        if action == "fail" and set(answer) == {"action", "errno"} and answer["errno"] in _FAILABLE:
            return _FAILABLE[answer["errno"]]
        self._lost(f"invalid answer {raw[:200]!r}")
        return None

    def _lost(self, reason: str) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
        self._on_lost(reason)

