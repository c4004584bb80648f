"""A Hypothesis state machine over the real store: nothing acknowledged is ever lost, nothing rejected is written.

Model: the list of lines of the file that are acknowledged (returned by ``commit``), plus the header. Actions:
commit the next valid transaction of a tool-calling run; commit a candidate the reducer rejects; fail the write
(ENOSPC injected at before-write, or a real write() that lands half the line and then fails); fail the fsync (EIO injected at after-write, which poisons the store) and then
"crash" with or without losing the unsynced line; crash in the middle of a write (a prefix of the next line is left
after the last LF, or the whole line without its acknowledgement); reopen. After every step the file holds exactly
the modelled lines and the store's state equals a fresh reduction of the file.

Everything is real: files in a temp dir, fsync, flock; ``os.write`` is replaced only inside the one rule that needs
a disk filling up mid-line. A "crash" is the store being closed without further writes
(the kernel would release the lock the same way) and, for a torn write, the bytes a cut-short write() would have
left, appended directly.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agent.session.errors import CorruptionError, StorePoisonedError
from agent.session.reducer import reduce_session
from agent.session.store import AFTER_WRITE, BEFORE_WRITE, SessionStore
from tests.unit.session.test_store import HEADER, RunScript


def _line_of(store: SessionStore, facts: list[dict]) -> bytes:
    """The bytes the store would write for ``facts`` (seq/timestamp/id filled as commit fills them)."""
    seq = store.reducer.next_seq
    filled = [dict(f, seq=seq + i, timestamp=1710000000000, id=f.get("id") or store.allocate_id())
              for i, f in enumerate(facts)]
    payload = filled[0] if len(filled) == 1 else filled
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="store-machine-")
        self.inject: dict[str, int] = {}
        self.store = SessionStore.create(self.dir, hook=self._hook, **HEADER)
        self.path = self.store.path
        self.lines: list[bytes] = [self.path.read_bytes()]
        self.facts = 0
        self.script = RunScript()

    def _hook(self, checkpoint) -> int | None:
        return self.inject.pop(checkpoint.phase, None)

    def _reopen(self) -> None:
        self.store.close()
        self.store = SessionStore.open(self.path, hook=self._hook)
        assert self.store.state == reduce_session(self.path.read_bytes())

    def _acknowledge(self, line: bytes) -> None:
        self.lines.append(line)
        value = json.loads(line)
        self.facts += len(value) if isinstance(value, list) else 1
        self.script.accept()

    # ------------------------------------------------------------------------------------------------ rules

    @rule()
    def commit(self):
        before = self.store.offset
        committed = self.store.commit(self.script.propose(self.store))
        line = self.path.read_bytes()[before:]
        assert [f["seq"] for f in committed] == list(range(self.facts + 1, self.facts + 1 + len(committed)))
        self._acknowledge(line)

    @rule(kind=st.sampled_from(["unknown-kind", "valid-then-invalid", "duplicate-id", "lone-surrogate", "nan"]))
    def commit_rejected(self, kind):
        proposal = self.script.propose(self.store)
        if kind == "unknown-kind":
            candidate = [{"kind": "bogus"}]
        elif kind == "valid-then-invalid":
            candidate = proposal + [{"kind": "record", "record": {"type": "nope"}}]
        elif kind == "duplicate-id" and self.facts > 0:
            candidate = [dict(proposal[0], id=self._last_fact_id())]
        elif kind == "lone-surrogate":
            candidate = [{"kind": "entry", "entry": {"type": "message",
                                                     "message": {"role": "user", "content": "\udc00"}}}]
        elif kind == "nan":
            candidate = [{"kind": "usage", "usage": {"input": float("nan")}}]
        else:
            candidate = [{"kind": "bogus"}]
        line = self.store.reducer.next_line
        try:
            self.store.commit(candidate)
        except CorruptionError as exc:
            assert exc.line == line
            if kind in ("lone-surrogate", "nan"):
                assert (exc.code, exc.seq) == ("MALFORMED_JSON", None)
            elif kind == "duplicate-id" and self.facts > 0:
                assert (exc.code, exc.seq) == ("DUPLICATE_ID", self.facts + 1)
        else:
            raise AssertionError(f"the store accepted an invalid candidate ({kind})")

    def _last_fact_id(self) -> str:
        value = json.loads(self.lines[-1])
        return (value[-1] if isinstance(value, list) else value)["id"]

    @rule(partial=st.booleans())
    def write_fails(self, partial):
        proposal = self.script.propose(self.store)
        real_write = os.write
        if partial:
            # A disk filling up mid-line: part of the line lands, then write() fails with ENOSPC.
            def half_then_enospc(fd, data):
                if fd != self.store._fd:
                    return real_write(fd, data)
                if len(data) > 1:
                    return real_write(fd, bytes(data[: len(data) // 2]))
                raise OSError(errno.ENOSPC, "No space left on device")

            os.write = half_then_enospc
        else:
            self.inject[BEFORE_WRITE] = errno.ENOSPC
        try:
            self.store.commit(proposal)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        else:
            raise AssertionError("ENOSPC did not fail the commit")
        finally:
            os.write = real_write
        assert not self.store.poisoned

    @rule(power_loss=st.booleans())
    def fsync_fails_then_crash(self, power_loss):
        before = self.store.offset
        proposal = self.script.propose(self.store)
        self.inject[AFTER_WRITE] = errno.EIO
        try:
            self.store.commit(proposal)
        except OSError as exc:
            assert exc.errno == errno.EIO
        else:
            raise AssertionError("injected EIO did not fail the commit")
        assert self.store.poisoned
        try:
            self.store.commit(proposal)
        except StorePoisonedError:
            pass
        else:
            raise AssertionError("a poisoned store accepted a commit")
        written = self.path.read_bytes()[before:]
        self.store.close()
        if power_loss:
            # The line never reached the disk: what a power cut after a failed fsync may leave.
            with open(self.path, "r+b") as f:
                f.truncate(before)
        self._reopen()
        if not power_loss:
            # Unacknowledged but present, as after a crash: from now on it is part of the log.
            self._acknowledge(written)

    @rule(fraction=st.floats(min_value=0.0, max_value=1.0))
    def crash_mid_write(self, fraction):
        line = _line_of(self.store, self.script.propose(self.store))
        cut = max(1, round(fraction * len(line)))
        self.store.close()
        with open(self.path, "ab") as f:
            f.write(line[:cut])  # what a SIGKILL-shortened write() leaves: any prefix, possibly the whole line
        self._reopen()
        if cut == len(line):
            self._acknowledge(line)

    @rule()
    def reopen(self):
        self._reopen()

    # -------------------------------------------------------------------------------------------- invariants

    @invariant()
    def file_is_exactly_the_acknowledged_lines(self):
        data = self.path.read_bytes()
        assert data == b"".join(self.lines)
        assert self.store.offset == self.store.synced_offset == len(data)
        assert self.store.reducer.next_seq == self.facts + 1

    @precondition(lambda self: len(self.lines) % 5 == 0)
    @invariant()
    def state_equals_a_fresh_reduction(self):
        assert self.store.state == reduce_session(self.path.read_bytes())

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.__doc__ = "Acknowledged lines survive every sequence of commits, rejections, failures, tears and reopens."
