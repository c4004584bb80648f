"""The session store: the only code that touches a session file (SPEC §13, §16.4).

Invariant it protects: every transaction acknowledged by ``commit`` (that is, returned) is in the file and survives
power loss; nothing the reducer would reject is ever written; a crash at any instant leaves a file whose committed
prefix reduces (at worst with a torn tail that ``open`` removes).

How:
- ``create`` makes ``<stamp>_<id>.jsonl`` with ``O_EXCL|O_NOFOLLOW`` (never overwrites, never follows a link), mode
  0600 even under a permissive umask, writes the header with one ``write``, fsyncs the file and its directory.
- ``open`` refuses links and non-regular files, takes the writer lock, reduces, checks the file name against the
  header, and truncates a torn tail (fsync'd).
- ``commit`` fills ``seq``/``timestamp``/``id``, serializes, validates the exact bytes with the in-memory reducer in
  trial mode (``Reducer.stage``), then ``write`` (looping on short writes), ``fsync``, and only then adopts the staged
  state. Cost is O(transaction): no re-read, no re-reduce, no copy of the whole state (SPEC §13.4).
- One writer per file across processes: ``flock(LOCK_EX|LOCK_NB)`` held for the store's lifetime. The kernel drops
  it when the process dies, even by SIGKILL, so a crashed agent never leaves a stale lock behind.

A hook (plain callable, no-op by default) observes three points of every commit — ``before-write``,
``after-write``, ``after-sync`` — and may inject an errno at the first two; that is how the chaos harness tests
rollback and poisoning through a real agent. Without a hook no ``Checkpoint`` is even built.

What this module does not do: it does not decide what to write (planner, loop), does not sanitize external text
(the executor must, SPEC §13.3 step 3), and never deletes a session file it did not just create. Standard library
only: the agent's start path imports it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pathlib
import stat
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from agent.session import framing
from agent.session.errors import (
    CorruptionError,
    SessionFileError,
    SessionLockedError,
    StoreClosedError,
    StoreError,
    StorePoisonedError,
)
from agent.session.ids import allocate_id
from agent.session.reducer import Reducer, Reduction

BEFORE_WRITE = "before-write"
AFTER_WRITE = "after-write"
AFTER_SYNC = "after-sync"

# SPEC §13.2 step 2 / §13.5 step 1. O_NOFOLLOW makes the kernel refuse a symlink in the last component (ELOOP)
# instead of writing through it; O_CLOEXEC keeps the descriptor (and with it the flock) out of tool subprocesses,
# which would otherwise hold the writer lock after the agent died.
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND | os.O_CLOEXEC
_OPEN_FLAGS = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC

_HEX = frozenset("0123456789abcdef")

# SPEC §13.3 step 3: compact, sorted members, raw non-ASCII, no NaN/Infinity. One encoder object for the process:
# building a JSONEncoder per commit is measurable next to a ~100 µs fsync.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Checkpoint:
    """What the hook sees at one observation point of a commit (SPEC §13.3, checkpoint protocol of issue 3).

    ``offset`` is the file size before the write at ``before-write`` and after it otherwise; ``synced_offset`` is the
    size known durable at that moment.
    """

    phase: str
    facts: tuple[str, ...]
    seq_first: int
    seq_last: int
    offset: int
    synced_offset: int

    def to_json(self) -> dict:
        """The ``checkpoint`` member of the protocol message (camelCase keys, as docs/protocol.md specifies)."""
        return {
            "phase": self.phase,
            "facts": list(self.facts),
            "seqFirst": self.seq_first,
            "seqLast": self.seq_last,
            "offset": self.offset,
            "syncedOffset": self.synced_offset,
        }


# Returns None (continue) or an errno to inject: at before-write the write fails with it (rollback), at after-write
# the fsync fails with it (poison). The return value at after-sync is ignored: the transaction is already durable.
Hook = Callable[[Checkpoint], Optional[int]]


def fact_name(fact: dict) -> str:
    """The kill-point name of a fact: record type, or user/assistant/toolResult/synthetic/compaction/usage."""
    kind = fact.get("kind")
    if kind == "record":
        return str(fact.get("record", {}).get("type"))
    if kind == "usage":
        return "usage"
    if kind == "entry":
        entry = fact.get("entry", {})
        if entry.get("type") == "compaction":
            return "compaction"
        role = entry.get("message", {}).get("role")
        if role == "tool":
            # Both pre-execution synthetics (§5.5) and interrupted results (§5.4) are "synthetic": no tool ran.
            return "synthetic" if entry.get("result", {}).get("type") == "synthetic" else "toolResult"
        return str(role)
    return str(kind)


def _name_id(name: str) -> str | None:
    """SPEC §13.1: the UUID of a name of the form ``*_<uuid7>.jsonl`` (lowercase, §2.7), else None.

    String operations rather than a regex: compiling that pattern costs ~2 ms, paid by every agent start.
    """
    if not name.endswith(".jsonl"):
        return None
    _, sep, candidate = name[:-6].rpartition("_")
    if (
        not sep
        or len(candidate) != 36
        or [i for i, c in enumerate(candidate) if c == "-"] != [8, 13, 18, 23]
        or not set(candidate.replace("-", "")) <= _HEX
        or candidate[14] != "7"
        or candidate[19] not in "89ab"
    ):
        return None
    return candidate


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _stamp(epoch_ms: int) -> str:
    """SPEC §13.1: UTC ISO-8601 with milliseconds, ':' and '.' replaced by '-' (2026-08-03T03-55-50-062Z)."""
    seconds, millis = divmod(epoch_ms, 1000)
    return time.strftime("%Y-%m-%dT%H-%M-%S", time.gmtime(seconds)) + f"-{millis:03d}Z"


def _serialize(payload: object, line: int) -> tuple[str, bytes]:
    """Compact sorted JSON text and its UTF-8 bytes; anything unserializable is MALFORMED_JSON at ``line``."""
    try:
        text = _ENCODER.encode(payload)
        # Strict UTF-8: a lone surrogate (which json.dumps happily emits raw with ensure_ascii=False) raises here.
        data = text.encode("utf-8")
    except (ValueError, TypeError, RecursionError) as exc:
        # ValueError covers NaN/Infinity, lone surrogates (UnicodeEncodeError), circular references and integers
        # beyond Python's 4300-digit str limit; TypeError covers non-JSON types and unsortable keys.
        raise CorruptionError("MALFORMED_JSON", line) from exc
    return text, data + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    """One write() of the whole line; continue with the remainder only if the kernel returns short (SPEC §13.3 5).

    A regular-file write can come back short on a nearly full disk or when a signal interrupts it after some
    pages were copied; SIGKILL can likewise cut it, which is why a torn tail exists at all.
    """
    view = memoryview(data)
    done = 0
    while done < len(data):
        # os.write looked up at call time on purpose: tests replace it to force short writes.
        n = os.write(fd, view[done:])
        if n <= 0:
            raise OSError(errno.EIO, "write() made no progress")
        done += n


def _fsync_dir(directory: pathlib.Path) -> None:
    """fsync a directory so that an entry created (or removed) in it survives power loss."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _ensure_dir(directory: pathlib.Path) -> None:
    """SPEC §13.2 step 1: create missing directories with mode 0700, fsyncing each new entry's parent."""
    missing = []
    current = directory
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for new in reversed(missing):
        try:
            os.mkdir(new, 0o700)
        except FileExistsError:
            continue  # another process created it between our check and mkdir: fine, it is a directory now
        except OSError as exc:
            raise SessionFileError(f"{new}: cannot create the sessions directory: {exc.strerror}") from exc
        # mkdir's mode is filtered by the umask; chmod states the mode exactly, as fchmod does for the file.
        os.chmod(new, 0o700)
        _fsync_dir(new.parent)


def _lock(fd: int) -> None:
    """SPEC §13.5 step 2: exclusive, non-blocking flock on the descriptor, held until it is closed."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SessionLockedError("session is locked by another process") from None


def _read_all(fd: int) -> bytes:
    chunks = []
    position = 0
    while True:
        chunk = os.pread(fd, 1 << 20, position)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        position += len(chunk)


def _reduce_into(data: bytes) -> tuple[Reducer, int, dict]:
    """Reduce a whole file into a live Reducer (the loop of reduce_session, keeping the Reducer).

    Returns the reducer, ``repairedLength`` and the header.
    """
    lines, repaired_length = framing.committed_lines(data)
    reducer = Reducer()
    header = framing.parse_line(lines[0], 1)
    reducer.apply_header(header, 1)
    for number in range(2, len(lines) + 1):
        reducer.apply(framing.parse_line(lines[number - 1], number), number)
    return reducer, repaired_length, header


class SessionStore:
    """An open session file with its writer lock, its in-memory Reducer and its durable offsets.

    Build it with ``SessionStore.create`` or ``SessionStore.open``; ``close`` (or the ``with`` block) releases the
    lock. Commits are serialized by an in-process lock.
    """

    def __init__(self, path: pathlib.Path, fd: int, reducer: Reducer, committed_length: int, size: int,
                 clock: Callable[[], int] | None, hook: Hook | None) -> None:
        self.path = path
        self.reducer = reducer
        self._fd = fd
        self._clock = clock or _now_ms
        self._hook = hook
        self._offset = size
        self._synced_offset = size
        self._committed_length = committed_length
        self._state: Reduction | None = None
        self._lock = threading.RLock()
        self._committing = False
        self._closed = False
        self._poisoned: str | None = None

    # ---------------------------------------------------------------- construction

    @classmethod
    def create(cls, session_dir, *, cwd: str, provider: str, model: str, environment_identity: str,
               clock: Callable[[], int] | None = None, hook: Hook | None = None) -> "SessionStore":
        """Create a new session file in ``session_dir`` and return its store (SPEC §13.2, header per §8.5)."""
        clock = clock or _now_ms
        session_dir = pathlib.Path(session_dir)
        session_id = allocate_id()
        created_at = clock()
        header = {
            "kind": "header", "version": 2, "id": session_id, "createdAt": created_at,
            "cwd": cwd, "provider": provider, "model": model, "environmentIdentity": environment_identity,
        }
        # Validate the header exactly as a reader will before any byte exists on disk: a bad header must not leave
        # an unopenable file behind.
        text, data = _serialize(header, 1)
        reducer = Reducer()
        reducer.apply_header(framing.parse_line(text, 1), 1)

        _ensure_dir(session_dir)
        path = session_dir / f"{_stamp(created_at)}_{session_id}.jsonl"
        try:
            fd = os.open(path, _CREATE_FLAGS, 0o600)
        except FileExistsError:
            # O_EXCL: never overwrite, and never unlink what we did not create.
            raise SessionFileError(f"{path}: already exists; refusing to overwrite a session file") from None
        except OSError as exc:
            raise SessionFileError(f"{path}: cannot create: {exc.strerror}") from exc
        try:
            os.fchmod(fd, 0o600)  # the umask may have narrowed or (if odd) the open mode; state it exactly
            _lock(fd)
            _write_all(fd, data)
            os.fsync(fd)
            # The file's data is durable, but its name is not until the directory entry is (SPEC §13.2 step 5).
            _fsync_dir(session_dir)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(path)
                _fsync_dir(session_dir)
            except OSError:
                pass  # best effort (SPEC §13.2 step 6); the original error is the one worth reporting
            raise
        return cls(path, fd, reducer, len(data), len(data), clock, hook)

    @classmethod
    def open(cls, path, *, clock: Callable[[], int] | None = None, hook: Hook | None = None,
             repair: bool = True, check: Callable[[dict], None] | None = None) -> "SessionStore":
        """Open an existing session for writing (SPEC §13.5).

        ``check`` is called with the header once the file is locked and reduced, before the torn-tail repair (the
        first byte this open may change): a caller that refuses its own input for this session (a flag that does
        not fit it) raises there, and the file is left as it was found, as for a corrupt prefix.

        ``repair=False`` skips the torn-tail truncation: it exists only for the ``no-torn-tail-repair`` known-bug
        switch, which lets the harness prove that it notices a writer appending after a torn tail.
        """
        path = pathlib.Path(path)
        # lstat first gives a precise refusal without opening anything: opening a FIFO or a device can block or
        # have side effects. The authoritative checks are O_NOFOLLOW and fstat below (the name may change between).
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise SessionFileError(f"{path}: no such file") from None
        except OSError as exc:
            raise SessionFileError(f"{path}: cannot stat: {exc.strerror}") from exc
        if stat.S_ISLNK(st.st_mode):
            raise SessionFileError(f"{path}: is a symbolic link; refusing to follow it")
        if not stat.S_ISREG(st.st_mode):
            raise SessionFileError(f"{path}: not a regular file")
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SessionFileError(f"{path}: is a symbolic link; refusing to follow it") from None
            if exc.errno == errno.EISDIR:
                raise SessionFileError(f"{path}: not a regular file") from None
            raise SessionFileError(f"{path}: cannot open: {exc.strerror}") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SessionFileError(f"{path}: not a regular file")
            try:
                os.fchmod(fd, 0o600)
            except OSError as exc:
                raise SessionFileError(f"{path}: cannot set mode 0600: {exc.strerror}") from exc
            _lock(fd)
            data = _read_all(fd)
            # A corrupt committed prefix raises CorruptionError here, before any byte is changed (SPEC §13.5 3).
            reducer, repaired_length, header = _reduce_into(data)
            named = _name_id(path.name)
            if named is not None and named != header["id"]:
                raise SessionFileError(
                    f"{path}: file name carries session id {named} but the header id is {header['id']}")
            if check is not None:
                check(header)
            size = len(data)
            if repair and size > repaired_length:
                # Torn tail: bytes after the last LF were never acknowledged (a crash cut the write). Truncating
                # never removes a complete line (SPEC §13.5 step 5).
                os.ftruncate(fd, repaired_length)
                size = repaired_length
            # fsync even without a repair: a killed predecessor may have left written-but-unsynced lines in the page
            # cache; after this, everything we reduced is durable and synced_offset == offset is true, not assumed.
            os.fsync(fd)
        except BaseException:
            os.close(fd)  # also drops the flock
            raise
        return cls(path, fd, reducer, repaired_length, size, clock, hook)

    # ---------------------------------------------------------------- accessors

    @property
    def offset(self) -> int:
        """The file size as this store knows it (end of the last written line, or of an unrepaired torn tail)."""
        return self._offset

    @property
    def synced_offset(self) -> int:
        """The file size known to be durable (fsync'd)."""
        return self._synced_offset

    @property
    def state(self) -> Reduction:
        """The exported SessionState (with ``.boundary``) of everything committed; exported lazily, cached."""
        if self._state is None:
            self._state = self.reducer.export(self._committed_length)
        return self._state

    @property
    def poisoned(self) -> bool:
        return self._poisoned is not None

    @property
    def closed(self) -> bool:
        return self._closed

    def allocate_id(self) -> str:
        """A fresh UUIDv7 for callers that must reference a fact before committing it (SPEC §13.3 step 2)."""
        return allocate_id()

    # ---------------------------------------------------------------- commit

    def commit(self, facts: list[dict]) -> list[dict]:
        """Append one transaction durably and return its facts with ``seq``, ``id``, ``timestamp`` (SPEC §13.3).

        Raises CorruptionError (nothing written, nothing changed) when the reducer would reject the line, OSError
        on a write failure (rolled back, store usable) or an fsync failure (store poisoned), StorePoisonedError /
        StoreClosedError when the store can no longer write.
        """
        with self._lock:
            if self._closed:
                raise StoreClosedError("session store is closed")
            if self._poisoned is not None:
                raise StorePoisonedError(f"session store is poisoned: {self._poisoned}")
            if self._committing:
                # Only reachable from the hook (same thread, re-entrant lock): a nested commit would interleave
                # two lines' bytes and seqs.
                raise StoreError("commit() called from inside the store's hook")
            self._committing = True
            try:
                return self._commit(facts)
            finally:
                self._committing = False

    def _commit(self, facts: list[dict]) -> list[dict]:
        if not isinstance(facts, (list, tuple)):
            raise TypeError(f"commit() takes a list of facts, not {type(facts).__name__}")
        reducer = self.reducer
        seq_first = reducer.next_seq
        line = reducer.next_line
        now = self._clock()

        # Step 2: complete the facts on copies; the caller's seq/timestamp are overwritten, its id kept if given.
        completed: list = []
        for index, fact in enumerate(facts):
            if isinstance(fact, dict):
                fact = dict(fact)
                fact["seq"] = seq_first + index
                fact["timestamp"] = now
                if fact.get("id") is None:
                    fact["id"] = allocate_id()
            completed.append(fact)  # a non-object is left as is: the reducer rejects it with INVALID_FACT
        seq_last = seq_first + len(completed) - 1

        # Steps 3-4: serialize, then validate exactly those bytes with the strict parser and a trial application.
        text, data = _serialize(completed[0] if len(completed) == 1 else completed, line)
        staged = reducer.stage(framing.parse_line(text, line), line)

        hook = self._hook
        names: tuple[str, ...] = ()
        if hook is not None:
            names = tuple(fact_name(f) for f in completed)
            injected = hook(Checkpoint(BEFORE_WRITE, names, seq_first, seq_last, self._offset,
                                       self._synced_offset))
        else:
            injected = None

        # Step 5: one write (loop on short writes); on failure put the file back to its pre-commit length.
        start = self._offset
        try:
            if injected:
                raise OSError(injected, f"{os.strerror(injected)} (injected at {BEFORE_WRITE})")
            _write_all(self._fd, data)
        except BaseException as exc:
            self._rollback(start, exc)
            raise
        self._offset = start + len(data)

        # Steps 6-7: fsync; any failure poisons — after a failed fsync the kernel may have dropped the dirty pages
        # and cleared the error, so a retry could "succeed" without the data ever reaching the disk.
        try:
            if hook is not None:
                injected = hook(Checkpoint(AFTER_WRITE, names, seq_first, seq_last, self._offset,
                                           self._synced_offset))
                if injected:
                    raise OSError(injected, f"{os.strerror(injected)} (injected at {AFTER_WRITE})")
            os.fsync(self._fd)
        except BaseException as exc:
            self._poisoned = f"fsync failed after writing seq {seq_first}..{seq_last}: {exc}"
            raise
        self._synced_offset = self._offset

        # Step 8: the trial state becomes the state. Adopted before the after-sync hook runs, so that a hook that
        # raises (or blocks until SIGKILL) cannot leave memory behind a line that is already durable.
        reducer.adopt(staged)
        self._committed_length = self._offset
        self._state = None
        if hook is not None:
            hook(Checkpoint(AFTER_SYNC, names, seq_first, seq_last, self._offset, self._synced_offset))
        return completed

    def _rollback(self, start: int, cause: BaseException) -> None:
        """SPEC §13.3 step 5: a failed write is cut back to the pre-commit length and fsync'd, or the store poisons."""
        try:
            os.ftruncate(self._fd, start)
            os.fsync(self._fd)
        except OSError as exc:
            self._poisoned = f"could not roll back a failed write ({cause}): {exc}"
            return
        self._offset = start
        self._synced_offset = start

    # ---------------------------------------------------------------- close

    def close(self) -> None:
        """Close the file and release the writer lock; idempotent. A poisoned store can (and should) be closed."""
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)

    def __enter__(self) -> "SessionStore":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        status = "closed" if self._closed else "poisoned" if self._poisoned else "open"
        return f"<SessionStore {self.path} {status} offset={self._offset} synced={self._synced_offset}>"
