"""Tests of agent.session.store: create, open + repair, validated fsync'd commit, lock, hook (SPEC §13, §16.4).

Real files, real fsync, real flock (across a real subprocess for the lock). The only replaced functions are
``os.write`` / ``os.ftruncate`` to force short writes and write failures: they test the store's loops and rollback,
not stand in for it.

``RunScript`` builds valid transactions of the real contract (a tool-calling run in the live durable order, with a
real configuration snapshot and digest); the store state machine in tests/property reuses it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.session import digests
from agent.session.errors import (
    CorruptionError,
    SessionFileError,
    SessionLockedError,
    StoreClosedError,
    StoreError,
    StorePoisonedError,
)
from agent.session.reducer import reduce_session
from agent.session.store import AFTER_SYNC, AFTER_WRITE, BEFORE_WRITE, Checkpoint, SessionStore, fact_name

MODEL = "test/model"
SYSTEM_PROMPT = "You are a careful test agent."
READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read",
        "description": "Read a file in the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
HEADER = {"cwd": "/workspace", "provider": "openai", "model": MODEL, "environment_identity": "test-env"}


def snapshot() -> dict:
    """The configuration snapshot (SPEC §8.2, §8.4) of a one-tool agent, with real digests."""
    return {
        "model": MODEL,
        "systemPromptDigest": digests.system_prompt_digest(SYSTEM_PROMPT),
        "tools": [{"name": "read", "definitionDigest": digests.definition_digest(READ_TOOL)}],
        "adapterIdentity": "openai:chat-completions:v1",
        "routingIdentity": f"openai:{MODEL}",
        "outputOptionsDigest": digests.output_options_digest({}),
    }


class RunScript:
    """Proposes the next valid transaction of endless runs, in the live durable order of SPEC §15.3.

    One run: [user, runStarted] · stepAttempt · [assistant(toolUse), usage] · toolStarted · [tool result, usage]
    · stepAttempt · [assistant(stop), usage] · operationFinished. ``propose`` allocates fresh IDs each time (a
    rejected or torn proposal never reached the log); ``accept`` makes the last proposal part of the history.
    """

    LENGTH = 8

    def __init__(self) -> None:
        self.position = 0
        self.runs = 0
        self.ids: dict[str, str] = {}
        self._pending: dict[str, str] = {}
        self._snapshot = snapshot()
        self._digest = digests.configuration_digest(self._snapshot)

    def propose(self, store: SessionStore) -> list[dict]:
        self._pending = {}
        ids = self.ids

        def new(name: str) -> str:
            self._pending[name] = store.allocate_id()
            return self._pending[name]

        call = f"call_{self.runs}"
        p = self.position
        if p == 0:
            user, op = new("user"), new("op")
            return [
                {"kind": "entry", "id": user,
                 "entry": {"type": "message", "message": {"role": "user", "content": f"run {self.runs}: read é ✓"}}},
                {"kind": "record", "record": {"type": "runStarted", "operationId": op, "operationKind": "run",
                                              "inputEntryId": user}},
            ]
        if p in (1, 5):
            step, attempt = new(f"step{p}"), new(f"attempt{p}")
            context = ids["user"] if p == 1 else ids["result"]
            return [{"kind": "record", "record": {
                "type": "stepAttempt", "operationId": ids["op"], "stepId": step, "attemptId": attempt,
                "stepKind": "assistant", "attempt": 1, "contextThroughEntryId": context,
                "configurationSnapshot": self._snapshot, "configurationDigest": self._digest}}]
        if p in (2, 6):
            entry = new(f"assistant{p}")
            step, attempt = ids[f"step{p - 1}"], ids[f"attempt{p - 1}"]
            if p == 2:
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call, "type": "function",
                     "function": {"name": "read", "arguments": "{\"path\":\"README.md\"}"}}]}
                stop = "toolUse"
            else:
                message = {"role": "assistant", "content": "done\u2028line two"}
                stop = "stop"
            return [
                {"kind": "entry", "id": entry, "entry": {"type": "message", "stepId": step, "attemptId": attempt,
                                                         "stopReason": stop, "message": message}},
                {"kind": "usage", "operationId": ids["op"], "attemptId": attempt,
                 "usage": {"input": 120, "output": 8, "cacheRead": 0, "cacheWrite": 0}},
            ]
        if p == 3:
            started, result = new("started"), new("result")
            return [{"kind": "record", "id": started, "record": {
                "type": "toolStarted", "operationId": ids["op"], "stepId": ids["step1"],
                "assistantEntryId": ids["assistant2"], "toolIndex": 0, "toolCallId": call, "toolName": "read",
                "arguments": {"path": "README.md"}, "replay": "safe", "replayKey": "builtin:read:v1",
                "environmentIdentity": "test-env", "resultEntryId": result}}]
        if p == 4:
            return [
                {"kind": "entry", "id": ids["result"], "entry": {
                    "type": "message", "stepId": ids["step1"], "toolStartedId": ids["started"], "toolName": "read",
                    "message": {"role": "tool", "tool_call_id": call, "content": "# README\n"},
                    "result": {"type": "success"}}},
                {"kind": "usage", "operationId": ids["op"], "toolStartedId": ids["started"],
                 "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}},
            ]
        return [{"kind": "record", "record": {
            "type": "operationFinished", "operationId": ids["op"], "operationKind": "run", "outcome": "completed",
            "completion": "normal", "finalEntryId": ids["assistant6"]}}]

    def accept(self) -> None:
        self.ids.update(self._pending)
        self._pending = {}
        self.position = (self.position + 1) % self.LENGTH
        if self.position == 0:
            self.runs += 1


def commit_next(store: SessionStore, script: RunScript) -> list[dict]:
    committed = store.commit(script.propose(store))
    script.accept()
    return committed


def run_steps(store: SessionStore, script: RunScript, count: int) -> None:
    for _ in range(count):
        commit_next(store, script)


@pytest.fixture
def store(tmp_path):
    s = SessionStore.create(tmp_path / "sessions", **HEADER)
    yield s
    s.close()


def file_bytes(store: SessionStore) -> bytes:
    return store.path.read_bytes()


# ------------------------------------------------------------------------------------------------------- create


class TestCreate:
    def test_writes_a_sorted_compact_header_under_a_stamped_name(self, tmp_path):
        """The file is <stamp>_<id>.jsonl and holds exactly the sorted, compact header line."""
        store = SessionStore.create(tmp_path, clock=lambda: 1710000000062, **HEADER)
        try:
            session_id = store.state["header"]["id"]
            assert store.path.name == f"2024-03-09T16-00-00-062Z_{session_id}.jsonl"
            expected = (
                '{"createdAt":1710000000062,"cwd":"/workspace","environmentIdentity":"test-env",'
                f'"id":"{session_id}","kind":"header","model":"test/model","provider":"openai","version":2}}\n'
            ).encode()
            assert file_bytes(store) == expected
            assert store.offset == store.synced_offset == len(expected)
            assert store.reducer.next_seq == 1
        finally:
            store.close()

    def test_file_mode_is_0600_whatever_the_umask(self, tmp_path):
        """The session file gets mode 0600 even under a permissive umask of 0."""
        old = os.umask(0)
        try:
            store = SessionStore.create(tmp_path, **HEADER)
        finally:
            os.umask(old)
        store.close()
        assert stat.S_IMODE(store.path.stat().st_mode) == 0o600

    def test_creates_missing_session_directories_with_mode_0700(self, tmp_path):
        """Missing sessions directories (nested too) are created with mode 0700."""
        old = os.umask(0o022)
        try:
            store = SessionStore.create(tmp_path / "a" / "b", **HEADER)
        finally:
            os.umask(old)
        store.close()
        for directory in (tmp_path / "a", tmp_path / "a" / "b"):
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert store.path.parent == tmp_path / "a" / "b"

    def test_invalid_header_is_refused_before_touching_the_disk(self, tmp_path):
        """A header the reducer would reject raises INVALID_HEADER and creates neither directory nor file."""
        with pytest.raises(CorruptionError) as info:
            SessionStore.create(tmp_path / "s", cwd="", provider="openai", model=MODEL, environment_identity="e")
        assert (info.value.code, info.value.line, info.value.seq) == ("INVALID_HEADER", 1, None)
        assert not (tmp_path / "s").exists()

    def test_unserializable_header_is_malformed_json_on_line_1(self, tmp_path):
        """A lone surrogate in a header value is MALFORMED_JSON at line 1 and writes nothing."""
        with pytest.raises(CorruptionError) as info:
            SessionStore.create(tmp_path, cwd="/w\ud800", provider="p", model="m", environment_identity="e")
        assert (info.value.code, info.value.line) == ("MALFORMED_JSON", 1)
        assert list(tmp_path.iterdir()) == []

    def test_never_overwrites_an_existing_file(self, tmp_path, monkeypatch):
        """A name collision fails with SessionFileError and leaves the existing file as it was."""
        from agent.session import store as store_module

        monkeypatch.setattr(store_module, "allocate_id", lambda: "018f0000-0000-7000-8000-000000000001")
        first = SessionStore.create(tmp_path, clock=lambda: 1710000000000, **HEADER)
        first.close()
        before = first.path.read_bytes()
        with pytest.raises(SessionFileError, match="already exists"):
            SessionStore.create(tmp_path, clock=lambda: 1710000000000, **HEADER)
        assert first.path.read_bytes() == before

    def test_uncreatable_session_directory_is_a_session_file_error(self, tmp_path):
        """A sessions directory that cannot be created (its parent is a file) is a SessionFileError naming it."""
        (tmp_path / "plain").write_text("not a directory")
        with pytest.raises(SessionFileError, match="cannot create the sessions directory"):
            SessionStore.create(tmp_path / "plain" / "sessions", **HEADER)

    def test_failed_header_write_leaves_no_file(self, tmp_path, monkeypatch):
        """When the header write fails, create raises and unlinks the half-made file."""
        real_write = os.write

        def failing_write(fd, data):
            if bytes(data[:13]) != b'{"createdAt":':
                return real_write(fd, data)  # only the header write fails; other descriptors are left alone
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "write", failing_write)
        with pytest.raises(OSError) as info:
            SessionStore.create(tmp_path, **HEADER)
        assert info.value.errno == errno.ENOSPC
        assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------------- commit


class TestCommit:
    def test_fills_seq_timestamp_and_missing_ids(self, tmp_path):
        """Commit numbers facts from the next seq, stamps the clock, keeps given ids and allocates missing ones."""
        store = SessionStore.create(tmp_path, clock=lambda: 1710000000500, **HEADER)
        script = RunScript()
        proposal = script.propose(store)
        proposal[0]["seq"], proposal[0]["timestamp"] = 99, 1  # caller values are overwritten
        committed = store.commit(proposal)
        script.accept()
        assert [f["seq"] for f in committed] == [1, 2]
        assert {f["timestamp"] for f in committed} == {1710000000500}
        assert committed[0]["id"] == proposal[0]["id"]
        assert committed[1]["id"] != committed[0]["id"] and "id" not in proposal[1]
        assert proposal[0]["seq"] == 99  # the caller's dicts are not mutated
        assert [f["seq"] for f in commit_next(store, script)] == [3]
        store.close()

    def test_writes_one_sorted_compact_line_per_transaction(self, store):
        """A single fact is an object line, several facts an array line; members sorted, non-ASCII raw."""
        script = RunScript()
        first = commit_next(store, script)
        second = commit_next(store, script)
        lines = file_bytes(store).split(b"\n")
        assert lines[-1] == b"" and len(lines) == 4
        assert lines[1] == json.dumps(first, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        assert lines[2] == json.dumps(second[0], sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        assert "é ✓".encode() in lines[1]

    def test_state_matches_a_fresh_reduction_of_the_file(self, store):
        """After every commit the store's state equals reduce_session over the file, boundary included."""
        script = RunScript()
        for _ in range(2 * RunScript.LENGTH + 3):
            commit_next(store, script)
            reduced = reduce_session(file_bytes(store))
            assert store.state == reduced
            assert store.state.boundary == reduced.boundary
            assert store.offset == store.synced_offset == len(file_bytes(store))

    def test_never_reads_the_file(self, store, monkeypatch):
        """Commit cost is proportional to the transaction: it neither re-reads nor re-reduces the log."""
        script = RunScript()
        run_steps(store, script, 3)

        def forbidden(*args, **kwargs):
            raise AssertionError("commit read the file")

        for name in ("read", "pread", "readv"):
            monkeypatch.setattr(os, name, forbidden)
        monkeypatch.setattr("agent.session.store.framing.committed_lines", forbidden)
        run_steps(store, script, RunScript.LENGTH)
        monkeypatch.undo()
        assert store.state == reduce_session(file_bytes(store))

    @pytest.mark.parametrize("bad", [
        pytest.param(lambda s, p: [{"kind": "bogus"}], id="unknown-kind"),
        pytest.param(lambda s, p: p + [{"kind": "bogus"}], id="valid-prefix-then-invalid"),
        pytest.param(lambda s, p: [dict(p[0], kind="record", record={"type": "operationFinished"})], id="bad-record"),
    ])
    def test_rejected_candidate_changes_nothing(self, store, bad):
        """A candidate the reducer rejects raises its error at the would-be line and leaves bytes, seq, state."""
        script = RunScript()
        run_steps(store, script, 3)
        before, seq, state = file_bytes(store), store.reducer.next_seq, json.dumps(store.state)
        line = store.reducer.next_line
        with pytest.raises(CorruptionError) as info:
            store.commit(bad(store, script.propose(store)))
        assert info.value.line == line
        assert info.value.seq is not None
        assert file_bytes(store) == before
        assert store.reducer.next_seq == seq and store.reducer.next_line == line
        assert json.dumps(store.state) == state
        assert store.offset == len(before)
        assert [f["seq"] for f in commit_next(store, script)] == [seq]  # the next valid transaction still fits

    @pytest.mark.parametrize("value", ["lone \ud83d surrogate", float("nan"), float("inf"), {1, 2}])
    def test_unserializable_candidate_is_malformed_json(self, store, value):
        """A candidate with a lone surrogate, a non-finite number or a non-JSON type is MALFORMED_JSON, unwritten."""
        script = RunScript()
        proposal = script.propose(store)
        proposal[0]["entry"]["message"]["content"] = value
        before = file_bytes(store)
        with pytest.raises(CorruptionError) as info:
            store.commit(proposal)
        assert (info.value.code, info.value.line, info.value.seq) == ("MALFORMED_JSON", 2, None)
        assert file_bytes(store) == before and store.reducer.next_seq == 1

    def test_loops_on_short_writes(self, store, monkeypatch):
        """A write that the kernel cuts short is continued until the whole line is in the file."""
        real_write = os.write
        sizes = []

        def one_byte_write(fd, data):
            if fd != store._fd:
                return real_write(fd, data)
            sizes.append(len(data))
            return real_write(fd, bytes(data[:1]))

        script = RunScript()
        proposal = script.propose(store)
        monkeypatch.setattr(os, "write", one_byte_write)
        store.commit(proposal)
        monkeypatch.undo()
        script.accept()
        data = file_bytes(store)
        line = data.split(b"\n")[1] + b"\n"
        assert sizes[0] == len(line)  # the first attempt is one write() of the whole line
        assert len(sizes) == len(line)
        assert reduce_session(data) == store.state
        run_steps(store, script, 2)
        assert reduce_session(file_bytes(store)) == store.state

    def test_failed_write_is_rolled_back_and_the_store_stays_usable(self, store, monkeypatch):
        """A write failing after a partial write is truncated back to the pre-commit length; later commits work."""
        real_write = os.write
        script = RunScript()
        run_steps(store, script, 2)
        before = file_bytes(store)

        def half_then_enospc(fd, data):
            if fd != store._fd:
                return real_write(fd, data)
            if len(data) > 10:
                return real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "write", half_then_enospc)
        with pytest.raises(OSError) as info:
            store.commit(script.propose(store))
        monkeypatch.undo()
        assert info.value.errno == errno.ENOSPC
        assert file_bytes(store) == before
        assert store.offset == store.synced_offset == len(before) and not store.poisoned
        run_steps(store, script, 3)
        assert reduce_session(file_bytes(store)) == store.state

    def test_failed_rollback_poisons_the_store(self, store, monkeypatch):
        """When truncating back after a failed write also fails, the store refuses every later commit."""
        script = RunScript()

        real_write, real_truncate = os.write, os.ftruncate

        def fail(real):
            def call(fd, arg):
                if fd != store._fd:
                    return real(fd, arg)
                raise OSError(errno.EIO, "Input/output error")
            return call

        monkeypatch.setattr(os, "write", fail(real_write))
        monkeypatch.setattr(os, "ftruncate", fail(real_truncate))
        with pytest.raises(OSError):
            store.commit(script.propose(store))
        monkeypatch.undo()
        assert store.poisoned
        with pytest.raises(StorePoisonedError):
            store.commit(script.propose(store))

    def test_refuses_a_bare_fact_instead_of_a_list(self, store):
        """Passing one fact dict instead of a list is a TypeError, and nothing is written."""
        before = file_bytes(store)
        with pytest.raises(TypeError):
            store.commit(RunScript().propose(store)[0])
        assert file_bytes(store) == before

    def test_empty_transaction_is_rejected(self, store):
        """An empty list of facts is EMPTY_TRANSACTION at the would-be line, without a seq."""
        with pytest.raises(CorruptionError) as info:
            store.commit([])
        assert (info.value.code, info.value.line, info.value.seq) == ("EMPTY_TRANSACTION", 2, None)

    def test_commit_on_a_closed_store_raises(self, store):
        """After close, commit raises StoreClosedError and close stays idempotent."""
        store.close()
        store.close()
        with pytest.raises(StoreClosedError):
            store.commit(RunScript().propose(store))


# --------------------------------------------------------------------------------------------------------- hook


class TestHook:
    def test_reports_three_checkpoints_with_names_seqs_and_offsets(self, tmp_path):
        """The hook sees before-write, after-write and after-sync with fact names, seq range and offsets."""
        seen: list[Checkpoint] = []
        store = SessionStore.create(tmp_path, hook=seen.append, **HEADER)
        size0 = store.offset
        store.commit(RunScript().propose(store))
        size1 = store.offset
        assert [c.phase for c in seen] == [BEFORE_WRITE, AFTER_WRITE, AFTER_SYNC]
        assert {c.facts for c in seen} == {("user", "runStarted")}
        assert {(c.seq_first, c.seq_last) for c in seen} == {(1, 2)}
        assert [(c.offset, c.synced_offset) for c in seen] == [(size0, size0), (size1, size0), (size1, size1)]
        assert seen[1].to_json() == {"phase": "after-write", "facts": ["user", "runStarted"], "seqFirst": 1,
                                     "seqLast": 2, "offset": size1, "syncedOffset": size0}
        store.close()

    def test_after_write_sees_the_bytes_in_the_file(self, tmp_path):
        """At after-write the line is already in the file, at before-write it is not."""
        sizes = {}
        holder = {}

        def hook(cp):
            sizes[cp.phase] = os.stat(holder["path"]).st_size

        store = SessionStore.create(tmp_path, hook=hook, **HEADER)
        holder["path"] = store.path
        start = store.offset
        store.commit(RunScript().propose(store))
        assert sizes == {BEFORE_WRITE: start, AFTER_WRITE: store.offset, AFTER_SYNC: store.offset}
        store.close()

    def test_injected_enospc_before_write_rolls_back(self, tmp_path):
        """An errno returned at before-write fails the write: nothing is written and the store stays usable."""
        inject = {}
        store = SessionStore.create(tmp_path, hook=lambda cp: inject.pop(cp.phase, None), **HEADER)
        script = RunScript()
        run_steps(store, script, 1)
        before, seq = file_bytes(store), store.reducer.next_seq
        inject[BEFORE_WRITE] = errno.ENOSPC
        with pytest.raises(OSError) as info:
            store.commit(script.propose(store))
        assert info.value.errno == errno.ENOSPC
        assert file_bytes(store) == before and store.reducer.next_seq == seq and not store.poisoned
        run_steps(store, script, RunScript.LENGTH)
        assert reduce_session(file_bytes(store)) == store.state
        store.close()

    def test_injected_eio_after_write_poisons(self, tmp_path):
        """An errno returned at after-write fails the fsync: the store is poisoned and refuses later commits."""
        inject = {}
        store = SessionStore.create(tmp_path, hook=lambda cp: inject.pop(cp.phase, None), **HEADER)
        script = RunScript()
        run_steps(store, script, 1)
        acknowledged, seq = file_bytes(store), store.reducer.next_seq
        inject[AFTER_WRITE] = errno.EIO
        with pytest.raises(OSError) as info:
            store.commit(script.propose(store))
        assert info.value.errno == errno.EIO
        assert store.poisoned and store.reducer.next_seq == seq
        with pytest.raises(StorePoisonedError):
            store.commit(script.propose(store))
        store.close()
        # As after a crash, the unacknowledged line may be present; everything acknowledged is.
        reopened = SessionStore.open(store.path)
        assert file_bytes(reopened).startswith(acknowledged)
        assert reopened.reducer.next_seq in (seq, seq + 1)
        reopened.close()

    def test_hook_raising_after_write_poisons(self, tmp_path):
        """A hook that raises between write and fsync leaves an unacknowledged line, so the store poisons."""
        def hook(cp):
            if cp.phase == AFTER_WRITE:
                raise ConnectionError("checkpoint channel lost")

        store = SessionStore.create(tmp_path, hook=hook, **HEADER)
        with pytest.raises(ConnectionError):
            store.commit(RunScript().propose(store))
        assert store.poisoned
        store.close()

    def test_commit_from_inside_the_hook_is_refused(self, tmp_path):
        """A hook that calls commit gets a StoreError instead of interleaving two lines."""
        errors = []
        holder = {}

        def hook(cp):
            if cp.phase == BEFORE_WRITE:
                try:
                    holder["store"].commit([{"kind": "bogus"}])
                except StoreError as exc:
                    errors.append(exc)

        store = SessionStore.create(tmp_path, hook=hook, **HEADER)
        holder["store"] = store
        store.commit(RunScript().propose(store))
        assert len(errors) == 1 and store.reducer.next_seq == 3
        store.close()


class TestFactName:
    def test_names_every_kind_of_fact(self):
        """Records are named by type; entries by role, result kind or compaction; usage as usage."""
        tool = {"type": "message", "message": {"role": "tool"}}
        assert fact_name({"kind": "record", "record": {"type": "toolStarted"}}) == "toolStarted"
        assert fact_name({"kind": "usage"}) == "usage"
        assert fact_name({"kind": "entry", "entry": {"type": "message", "message": {"role": "user"}}}) == "user"
        assert fact_name({"kind": "entry", "entry": {"type": "message", "message": {"role": "assistant"}}}) \
            == "assistant"
        assert fact_name({"kind": "entry", "entry": dict(tool, result={"type": "success"})}) == "toolResult"
        assert fact_name({"kind": "entry", "entry": dict(tool, result={"type": "error"})}) == "toolResult"
        assert fact_name({"kind": "entry", "entry": dict(tool, result={"type": "synthetic"})}) == "synthetic"
        assert fact_name({"kind": "entry", "entry": {"type": "compaction"}}) == "compaction"


# --------------------------------------------------------------------------------------------------------- open


class TestOpen:
    def test_reopen_continues_where_the_log_ends(self, store):
        """A reopened store has the same state and the next seq, and appends after the last line."""
        script = RunScript()
        run_steps(store, script, 5)
        store.close()
        reopened = SessionStore.open(store.path)
        assert reopened.state == reduce_session(file_bytes(reopened))
        assert reopened.reducer.next_seq == 9
        assert reopened.offset == reopened.synced_offset == len(file_bytes(reopened))
        run_steps(reopened, script, RunScript.LENGTH)
        assert reopened.state == reduce_session(file_bytes(reopened))
        reopened.close()

    def test_repairs_a_torn_tail_at_every_byte_of_the_last_line(self, store):
        """Any prefix of a line after the last LF is truncated away (and a complete line is kept)."""
        script = RunScript()
        run_steps(store, script, 6)
        store.close()
        data = file_bytes(store)
        cut = data.rindex(b"\n", 0, len(data) - 1) + 1
        committed, last = data[:cut], data[cut:]
        expected = reduce_session(committed)
        for k in range(len(last)):
            store.path.write_bytes(committed + last[:k])
            reopened = SessionStore.open(store.path)
            try:
                assert reopened.offset == reopened.synced_offset == len(committed)
                assert reopened.reducer.next_seq == next_seq_after(committed)
                assert reopened.state == expected
            finally:
                reopened.close()
            assert store.path.read_bytes() == committed, k
        store.path.write_bytes(data)
        whole = SessionStore.open(store.path)
        assert whole.offset == len(data) and whole.state == reduce_session(data)
        whole.close()

    def test_repair_is_truncate_then_fsync(self, store, monkeypatch):
        """The torn-tail truncation is followed by an fsync of the file (SPEC §16.4)."""
        run_steps(store, RunScript(), 1)
        store.close()
        with open(store.path, "ab") as f:
            f.write(b'{"kind":"ent')
        calls = []
        real_truncate, real_fsync = os.ftruncate, os.fsync
        monkeypatch.setattr(os, "ftruncate", lambda fd, n: (calls.append(("ftruncate", n)), real_truncate(fd, n))[1])
        monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", fd)), real_fsync(fd))[1])
        SessionStore.open(store.path).close()
        assert [c[0] for c in calls] == ["ftruncate", "fsync"]

    def test_repair_false_appends_after_the_torn_tail(self, store):
        """With repair disabled (the known-bug switch) the tail stays and the next commit glues onto it."""
        script = RunScript()
        run_steps(store, script, 1)
        store.close()
        with open(store.path, "ab") as f:
            f.write(b'{"kind":"ent')
        size = store.path.stat().st_size
        buggy = SessionStore.open(store.path, repair=False)
        assert buggy.offset == size
        commit_next(buggy, script)
        buggy.close()
        with pytest.raises(CorruptionError) as info:
            reduce_session(store.path.read_bytes())
        assert (info.value.code, info.value.line) == ("MALFORMED_JSON", 3)

    def test_corrupt_log_is_refused_and_left_untouched(self, store):
        """A committed prefix that does not reduce raises its CorruptionError; no byte changes, tail included."""
        run_steps(store, RunScript(), 2)
        store.close()
        data = file_bytes(store).replace(b'"seq":2', b'"seq":7') + b'{"torn'
        store.path.write_bytes(data)
        with pytest.raises(CorruptionError) as info:
            SessionStore.open(store.path)
        assert (info.value.code, info.value.line, info.value.seq) == ("SEQ_MISMATCH", 2, 7)
        assert store.path.read_bytes() == data

    def test_incomplete_create_is_missing_header_and_untouched(self, tmp_path):
        """A file left by a crash inside create (partial header, no LF) is MISSING_HEADER and kept as is."""
        path = tmp_path / "2024-03-09T16-00-00-000Z_018f0000-0000-7000-8000-000000000001.jsonl"
        path.write_bytes(b'{"createdAt":17')
        with pytest.raises(CorruptionError) as info:
            SessionStore.open(path)
        assert info.value.code == "MISSING_HEADER"
        assert path.read_bytes() == b'{"createdAt":17'

    def test_name_header_mismatch_is_refused_untouched(self, store):
        """A *_<uuid7>.jsonl name whose UUID differs from the header id is refused and not repaired."""
        run_steps(store, RunScript(), 2)
        store.close()
        other = store.path.with_name("2024-03-09T16-00-00-000Z_018f0000-0000-7000-8000-0000000000ff.jsonl")
        data = file_bytes(store) + b'{"torn'
        other.write_bytes(data)
        with pytest.raises(SessionFileError, match="header id"):
            SessionStore.open(other)
        assert other.read_bytes() == data

    @pytest.mark.parametrize("name, refused", [
        ("session.jsonl", False),
        ("018f0000-0000-7000-8000-0000000000ff.jsonl", False),  # no "_": not the *_<uuid7>.jsonl form
        ("x_018F0000-0000-7000-8000-0000000000FF.jsonl", False),  # uppercase is not a UUIDv7 of §2.7
        ("x_018f0000-0000-4000-8000-0000000000ff.jsonl", False),  # version 4
        ("x_018f0000-0000-7000-8000-0000000000ff.json", False),
        ("_018f0000-0000-7000-8000-0000000000ff.jsonl", True),
        ("a_b_018f0000-0000-7000-8000-0000000000ff.jsonl", True),  # the UUID after the last "_" counts
    ])
    def test_only_names_of_the_uuid_form_are_checked(self, store, name, refused):
        """Only a *_<uuid7>.jsonl name must carry the header id; any other name is accepted as it is."""
        store.close()
        other = store.path.with_name(name)
        other.write_bytes(file_bytes(store))
        if refused:
            with pytest.raises(SessionFileError, match="header id"):
                SessionStore.open(other)
        else:
            SessionStore.open(other).close()
        assert other.read_bytes() == file_bytes(store)

    def test_symlink_is_refused(self, store, tmp_path):
        """A symbolic link to a valid session is refused and its target is left alone."""
        run_steps(store, RunScript(), 1)
        store.close()
        link = tmp_path / "link.jsonl"
        link.symlink_to(store.path)
        before = file_bytes(store)
        with pytest.raises(SessionFileError, match="symbolic link"):
            SessionStore.open(link)
        assert file_bytes(store) == before

    def test_directory_is_refused(self, tmp_path):
        """A directory is not a session file."""
        with pytest.raises(SessionFileError, match="not a regular file"):
            SessionStore.open(tmp_path)

    def test_fifo_is_refused_without_blocking(self, tmp_path):
        """A FIFO is refused (and opening it does not hang waiting for a writer)."""
        fifo = tmp_path / "pipe.jsonl"
        os.mkfifo(fifo)
        with pytest.raises(SessionFileError, match="not a regular file"):
            SessionStore.open(fifo)

    def test_missing_file_is_refused(self, tmp_path):
        """A path that does not exist is a SessionFileError, not a bare OSError."""
        with pytest.raises(SessionFileError, match="no such file"):
            SessionStore.open(tmp_path / "nope.jsonl")

    def test_open_sets_mode_0600(self, store):
        """Opening narrows a widened file mode back to 0600."""
        store.close()
        os.chmod(store.path, 0o644)
        SessionStore.open(store.path).close()
        assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


def next_seq_after(committed: bytes) -> int:
    """The next seq after ``committed``: one more than the number of facts on its transaction lines."""
    count = 0
    for raw in committed.split(b"\n")[1:-1]:
        value = json.loads(raw)
        count += len(value) if isinstance(value, list) else 1
    return count + 1


# --------------------------------------------------------------------------------------------------------- lock


class TestLock:
    HOLDER = textwrap.dedent("""
        import sys, time
        from agent.session.store import SessionStore
        store = SessionStore.open(sys.argv[1])
        print("locked", flush=True)
        time.sleep(60)
    """)
    OPENER = textwrap.dedent("""
        import sys
        from agent.session.errors import SessionLockedError
        from agent.session.store import SessionStore
        try:
            SessionStore.open(sys.argv[1]).close()
        except SessionLockedError as exc:
            print(exc)
            sys.exit(6)
        print("opened")
    """)

    def test_second_process_is_refused_while_the_store_is_open(self, store):
        """Another process opening a session held by this one fails with 'session is locked by another process'."""
        done = subprocess.run([sys.executable, "-c", self.OPENER, str(store.path)],
                              capture_output=True, text=True, timeout=30)
        assert (done.returncode, done.stdout.strip()) == (6, "session is locked by another process")
        store.close()
        done = subprocess.run([sys.executable, "-c", self.OPENER, str(store.path)],
                              capture_output=True, text=True, timeout=30)
        assert (done.returncode, done.stdout.strip()) == (0, "opened")

    def test_sigkilled_holder_releases_the_lock(self, store):
        """A writer killed by SIGKILL leaves no stale lock: the kernel drops the flock with the process."""
        run_steps(store, RunScript(), 1)
        store.close()
        holder = subprocess.Popen([sys.executable, "-c", self.HOLDER, str(store.path)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "locked"
            with pytest.raises(SessionLockedError, match="session is locked by another process"):
                SessionStore.open(store.path)
        finally:
            holder.kill()
            holder.wait(timeout=30)
            holder.stdout.close()
        SessionStore.open(store.path).close()
