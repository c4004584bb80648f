"""The injected probe: turns every durable write of an unmodified Python program into a checkpoint barrier.

A program that does not write the session contract (an agent framework on SQLite, a workflow on files) cannot
announce its own commits. ``install()`` — called by the runner ``python -m chaos.probe.run`` before the program's
own imports — wraps the few calls through which a Python program makes state durable and announces each one over
``CHAOS_CONTROL`` with the checkpoint protocol (docs/protocol.md), so the supervisor can SIGKILL the program exactly
there. Barriers and their facts (docs/probe.md has the whole table):

- an ``sqlite3`` transaction commit: ``commit`` plus every table the transaction wrote (seen by an authorizer on a
  ``factory=`` subclass of ``sqlite3.Connection``; ``sqlite3.connect`` is wrapped to use it);
- ``os.fsync``/``os.fdatasync``: ``fsync`` plus the file's name; ``os.replace``/``os.rename``: ``rename`` plus the
  destination's name;
- ``write``/``close`` of a file opened for writing under a declared state path (``open``, ``io.open``, hence
  ``Path.write_bytes``/``write_text``): ``write``/``close`` plus the file's name;
- ``point("name")``: ``point`` plus ``name`` — the three-line API a program may use for its own points.

A name becomes a fact by ``fact_name`` (``status.json`` → ``status_json``) so that it fits ``FACT@PHASE#N``.
Every barrier sends the protocol's three phases: ``before-write`` and ``after-write`` immediately before the
durable call (the same moment: the probe cannot stop inside it), ``after-sync`` immediately after it returned.
Offsets are 0 (there is no single session file whose bytes the supervisor could check), seq numbers count the
process's announced facts. A ``fail`` answer makes the wrapped call raise without doing its work.

Invariant protected: a durable write made through a wrapped call is never invisible — the probe announces it, and
while the supervisor has not answered, the writing thread is parked before (or after) it. Each thread has its own
connection (its own barrier stream), so a barrier blocks only the thread that writes. A lost channel fails closed
(exit 7, one line on stderr), as the protocol requires.

Also: it refuses every ``connect`` of an IP socket to a non-loopback address (``OSError(ENETUNREACH)``, one line on
stderr): a program under test must not phone home.

Not here: what to kill (``chaos.supervisor``), judging the state (``chaos.properties``). Not covered: SQLite in
autocommit mode (``isolation_level=None``: each statement commits by itself, unannounced), ``RELEASE`` of an
outermost savepoint, ``os.write`` on raw descriptors, references to the wrapped functions taken before
``install()``, UDP ``sendto`` (DNS). Stdlib only, imports nothing else of chaos: it runs inside the program.
"""

from __future__ import annotations

import builtins
import errno as errno_mod
import io
import ipaddress
import json
import os
import re
import socket
import sqlite3
import sys
import threading

PHASES = ("before-write", "after-write", "after-sync")
# The probe's own fact words; a target's vocabulary adds its tables, file names and point names (``vocabulary``).
PROBE_FACTS = ("commit", "fsync", "rename", "write", "close", "point")
ERRNOS = {"ENOSPC": errno_mod.ENOSPC, "EIO": errno_mod.EIO}
_SQLITE_WRITES = {2: "create table", 9: "delete", 18: "insert", 23: "update"}  # authorizer action codes
_SQLITE_TRANSACTION = 22
_LINE_MAX = 4096  # protocol: a longer answer line is a protocol error


def fact_name(text: str) -> str:
    """A file, table or point name as a fact name: ``[A-Za-z][A-Za-z0-9_]*`` (other characters become ``_``)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", os.path.basename(str(text).rstrip("/")) or "_")
    return name if name[0].isalpha() else "f_" + name


def vocabulary(tables=(), files=(), points=()) -> tuple[str, ...]:
    """A probe target's fact vocabulary: the probe's words plus its tables, files and points as fact names."""
    names = [*PROBE_FACTS, *(fact_name(n) for n in (*tables, *files, *points))]
    return tuple(dict.fromkeys(names))


class _Probe:
    """The installed probe's state: declared paths, one channel per thread, a fact counter."""

    def __init__(self, state: tuple[str, ...], session: str):
        self.state = tuple(os.path.realpath(p) for p in state)
        self.session = session
        self.control = os.environ.get("CHAOS_CONTROL") or None
        self.local = threading.local()
        self.seq_lock = threading.Lock()
        self.seq = 0
        self.refused: list[str] = []

    # ---- the channel ---------------------------------------------------------------------------------------------

    def _channel(self):
        chan = getattr(self.local, "chan", None)
        if chan is None and self.control:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                _ORIGINAL["connect"](sock, self.control)
            except OSError as exc:
                _fail_closed(f"cannot connect to CHAOS_CONTROL {self.control}: {exc.strerror or exc}")
            chan = self.local.chan = (sock, sock.makefile("rb"))
            # `state`: what this probe watches (recorded with the launch; the supervisor ignores members it does
            # not know).
            self._exchange({"hello": {"pid": os.getpid(), "session": self.session, "protocol": 1,
                                      "state": list(self.state)}}, None)
        return chan

    def _exchange(self, message: dict, phase: str | None) -> str | None:
        sock, reader = self.local.chan
        try:
            sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            line = reader.readline(_LINE_MAX + 1)
        except OSError as exc:
            _fail_closed(f"checkpoint channel lost: {exc.strerror or exc}")
        if not line.endswith(b"\n"):
            _fail_closed("checkpoint channel lost" if not line else "checkpoint answer longer than 4 KiB")
        try:
            answer = json.loads(line)
        except ValueError:
            _fail_closed(f"checkpoint answer is not JSON: {line[:80]!r}")
        if answer == {"action": "continue"}:
            return None
        if (isinstance(answer, dict) and set(answer) == {"action", "errno"} and answer["action"] == "fail"
                and answer["errno"] in ERRNOS and phase in ("before-write", "after-write")):
            return answer["errno"]
        _fail_closed(f"checkpoint protocol error: answer {line[:80]!r} to {phase or 'hello'}")

    def barrier(self, phase: str, facts: tuple[str, ...]) -> str | None:
        """Announce one barrier and wait for the answer; the errno of a ``fail`` answer, else None."""
        if not self.control or getattr(self.local, "busy", False):
            return None  # no supervisor, or a durable call made by the probe's own barrier: not announced
        self.local.busy = True
        try:
            self._channel()
            if phase == "before-write":
                with self.seq_lock:
                    self.local.first = self.seq + 1
                    self.seq += len(facts)
            first = getattr(self.local, "first", 1)
            cp = {"phase": phase, "facts": list(facts), "seqFirst": first, "seqLast": first + len(facts) - 1,
                  "offset": 0, "syncedOffset": 0}
            return self._exchange({"checkpoint": cp}, phase)
        finally:
            self.local.busy = False

    def before(self, facts: tuple[str, ...]) -> str | None:
        """``before-write`` then ``after-write`` (the same moment, before the call); the errno to fail with."""
        return self.barrier("before-write", facts) or self.barrier("after-write", facts)

    def after(self, facts: tuple[str, ...]) -> None:
        self.barrier("after-sync", facts)

    def forget_channel(self) -> None:
        """In a forked child: the parent's connection is not ours; the child connects (and says hello) itself."""
        self.local = threading.local()

    def under_state(self, path) -> bool:
        try:
            real = os.path.realpath(os.fspath(path))
        except TypeError:  # a file descriptor: not a path under a state directory
            return False
        return any(real == p or real.startswith(p.rstrip("/") + "/") for p in self.state)


_PROBE: _Probe | None = None
_ORIGINAL: dict = {}


def _fail_closed(message: str):
    sys.stderr.write(f"chaos probe: {message}\n")
    sys.stderr.flush()
    os._exit(7)  # the protocol's fail-closed exit: nothing more may be written


def _raise_errno(name: str, what: str):
    code = ERRNOS[name]
    raise OSError(code, f"{os.strerror(code)} (injected by chaos at {what})")


def point(name: str) -> None:
    """A named kill point of the program's own (facts ``point`` and ``name``); nothing when no probe is installed.

    The three-line API: ``from chaos.probe import point`` … ``point("effected")``."""
    if _PROBE is not None:
        facts = ("point", fact_name(name))
        _PROBE.before(facts)
        _PROBE.after(facts)


def refused() -> list[str]:
    """The non-loopback connections refused so far in this process (``host:port``)."""
    return list(_PROBE.refused) if _PROBE else []


# ---- sqlite3 ---------------------------------------------------------------------------------------------------


class _Transaction:
    """Per connection: the tables its open transaction wrote, and whether a commit is announced but unfinished."""

    def __init__(self):
        self.tables: dict[str, None] = {}
        self.pending: tuple[str, ...] | None = None


def _probe_connection_class(base: type) -> type:
    """A subclass of ``base`` (``sqlite3.Connection`` or the program's own factory) that announces its commits."""

    class ProbeConnection(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._chaos_tx = _Transaction()
            self._chaos_user_authorizer = None
            base.set_authorizer(self, self._chaos_authorize)

        def set_authorizer(self, callback):
            # The program's own authorizer is chained behind ours, never replaces it.
            self._chaos_user_authorizer = callback

        def _chaos_authorize(self, action, arg1, arg2, db, trigger):
            tx = self._chaos_tx
            if action in _SQLITE_WRITES and arg1 and not arg1.startswith("sqlite_"):
                tx.tables.setdefault(arg1, None)
            elif action == _SQLITE_TRANSACTION and arg1 in ("COMMIT", "END") and self.in_transaction:
                # The COMMIT statement is being prepared: nothing of the transaction is durable yet.
                facts = ("commit", *(fact_name(t) for t in tx.tables))
                tx.tables = {}
                if _PROBE.before(facts):
                    return sqlite3.SQLITE_DENY  # the commit fails (sqlite3.DatabaseError: not authorized)
                tx.pending = facts
            elif action == _SQLITE_TRANSACTION and arg1 == "ROLLBACK":
                tx.tables = {}
            user = self._chaos_user_authorizer
            return sqlite3.SQLITE_OK if user is None else user(action, arg1, arg2, db, trigger)

        def _chaos_settle(self):
            # Called when a call that may have committed returns: the commit it announced is now done.
            tx = self._chaos_tx
            if tx.pending is not None and not self.in_transaction:
                facts, tx.pending = tx.pending, None
                _PROBE.after(facts)
            elif tx.pending is not None:
                tx.pending = None  # the COMMIT failed (busy, denied): the transaction is still open, nothing done
            if not self.in_transaction:
                tx.tables = {}  # a statement outside a transaction (DDL, autocommit) is no later commit's write

        def _chaos_call(self, method, *args, **kwargs):
            try:
                return method(*args, **kwargs)
            finally:
                self._chaos_settle()

        def commit(self):
            return self._chaos_call(super().commit)

        def execute(self, *args, **kwargs):
            return self._chaos_call(super().execute, *args, **kwargs)

        def executemany(self, *args, **kwargs):
            return self._chaos_call(super().executemany, *args, **kwargs)

        def executescript(self, *args, **kwargs):
            return self._chaos_call(super().executescript, *args, **kwargs)

        def __exit__(self, *exc):
            return self._chaos_call(super().__exit__, *exc)

        def cursor(self, factory=sqlite3.Cursor):
            return super().cursor(_probe_cursor_class(factory))

    ProbeConnection.__name__ = ProbeConnection.__qualname__ = f"Probe{base.__name__}"
    return ProbeConnection


_CLASSES: dict[type, type] = {}


def _probe_cursor_class(base: type) -> type:
    if base not in _CLASSES:

        class ProbeCursor(base):
            def execute(self, *args, **kwargs):
                return self.connection._chaos_call(super().execute, *args, **kwargs)

            def executemany(self, *args, **kwargs):
                return self.connection._chaos_call(super().executemany, *args, **kwargs)

            def executescript(self, *args, **kwargs):
                return self.connection._chaos_call(super().executescript, *args, **kwargs)

        _CLASSES[base] = ProbeCursor
    return _CLASSES[base]


_CONNECT_ARGS = ("timeout", "detect_types", "isolation_level", "check_same_thread", "factory", "cached_statements",
                 "uri")  # sqlite3.connect's positional parameters after `database`


def _connect(database, *args, **kwargs):
    kwargs.update(zip(_CONNECT_ARGS, args))  # a factory given by position is still the program's factory
    base = kwargs.pop("factory", None) or sqlite3.Connection
    if base not in _CLASSES:
        _CLASSES[base] = _probe_connection_class(base)
    # Cached statements are not prepared again, so the authorizer would miss the tables of a reused statement.
    kwargs["cached_statements"] = 0
    return _ORIGINAL["sqlite3.connect"](database, factory=_CLASSES[base], **kwargs)


# ---- os and files -----------------------------------------------------------------------------------------------


def _fd_name(fd) -> str:
    fd = fd.fileno() if hasattr(fd, "fileno") else fd
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd{fd}"


def _fsync_wrapper(original, word):
    def wrapper(fd):
        facts = ("fsync", fact_name(_fd_name(fd)))
        failed = _PROBE.before(facts)
        if failed:
            _raise_errno(failed, f"{word} before-write")
        result = original(fd)
        _PROBE.after(facts)
        return result

    wrapper.__name__ = original.__name__
    return wrapper


def _rename_wrapper(original):
    def wrapper(src, dst, *args, **kwargs):
        facts = ("rename", fact_name(os.fspath(dst) if not isinstance(dst, int) else str(dst)))
        failed = _PROBE.before(facts)
        if failed:
            _raise_errno(failed, f"{original.__name__} before-write")
        result = original(src, dst, *args, **kwargs)
        _PROBE.after(facts)
        return result

    wrapper.__name__ = original.__name__
    return wrapper


class _StateFile:
    """A file opened for writing under a state path: its ``write``/``writelines``/``close`` are barriers."""

    def __init__(self, raw, name: str):
        self._chaos_raw = raw
        self._chaos_name = fact_name(name)

    def _chaos_around(self, word, method, *args):
        facts = (word, self._chaos_name)
        failed = _PROBE.before(facts)
        if failed:
            _raise_errno(failed, f"{word} before-write")
        result = method(*args)
        _PROBE.after(facts)
        return result

    def write(self, data):
        return self._chaos_around("write", self._chaos_raw.write, data)

    def writelines(self, lines):
        return self._chaos_around("write", self._chaos_raw.writelines, lines)

    def close(self):
        if self._chaos_raw.closed:
            return None
        return self._chaos_around("close", self._chaos_raw.close)

    def __enter__(self):
        self._chaos_raw.__enter__()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __iter__(self):
        return iter(self._chaos_raw)

    def __getattr__(self, name):
        return getattr(self._chaos_raw, name)


def _open_wrapper(original):
    def wrapper(file, mode="r", *args, **kwargs):
        handle = original(file, mode, *args, **kwargs)
        if any(c in mode for c in "wax+") and _PROBE.under_state(file):
            return _StateFile(handle, os.fspath(file))
        return handle

    wrapper.__name__ = "open"
    return wrapper


# ---- network ------------------------------------------------------------------------------------------------------


def _loopback(address) -> bool:
    host = address[0] if isinstance(address, tuple) and address else address
    if not isinstance(host, str):
        return False
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False  # a name other than localhost: resolving it would already be traffic; refuse


def _connect_wrapper(original):
    def wrapper(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address):
            where = f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) > 1 else str(address)
            _PROBE.refused.append(where)
            sys.stderr.write(f"chaos probe: refused a network connection to {where} (not loopback)\n")
            code = errno_mod.ENETUNREACH
            if original.__name__ == "connect_ex":
                return code
            raise OSError(code, f"{os.strerror(code)} (chaos probe: only loopback connections are allowed)")
        return original(self, address)

    wrapper.__name__ = original.__name__
    return wrapper


# ---- installing -----------------------------------------------------------------------------------------------------


def install(state=(), session: str | None = None) -> None:
    """Install the probe in this process (idempotent): ``state`` are the declared state paths (files or
    directories) whose writes are barriers; ``session`` is the path the hello announces (default: a path under the
    working directory that never exists, so the supervisor's byte-level checks of a session file stay inert)."""
    global _PROBE
    if _PROBE is not None:
        return
    _PROBE = _Probe(tuple(state), os.path.abspath(session or ".chaos-probe-session"))
    _ORIGINAL.update({"connect": socket.socket.connect, "connect_ex": socket.socket.connect_ex,
                      "sqlite3.connect": sqlite3.connect})
    sqlite3.connect = _connect
    sqlite3.dbapi2.connect = _connect
    os.fsync = _fsync_wrapper(os.fsync, "fsync")
    if hasattr(os, "fdatasync"):
        os.fdatasync = _fsync_wrapper(os.fdatasync, "fdatasync")
    os.replace = _rename_wrapper(os.replace)
    os.rename = _rename_wrapper(os.rename)
    if _PROBE.state:
        opener = _open_wrapper(io.open)
        builtins.open = opener
        io.open = opener
    socket.socket.connect = _connect_wrapper(socket.socket.connect)
    socket.socket.connect_ex = _connect_wrapper(socket.socket.connect_ex)
    os.register_at_fork(after_in_child=_PROBE.forget_channel)
    if _PROBE.control:
        # Say hello now, before the program runs: after dresume(K) the supervisor holds each sibling's hello until
        # every sibling has said hello, and a restart inspects the state before it installs the probe — so every
        # sibling's inspection is finished before any of them runs the program (none copies a state another is
        # already writing).
        _PROBE._channel()
