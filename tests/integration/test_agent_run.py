"""Integration tests of live agent runs: real store files, real HTTP to the in-test OpenAI stub on 127.0.0.1, real
tools, real Unix sockets for the checkpoint protocol.

Most runs call ``agent.cli.main`` in-process (a run costs milliseconds); subprocesses are used only where the
behaviour is about the process itself (exit 7 is ``os._exit``). The helpers at the top are shared with the other
``test_agent_*`` modules.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent import cli
from agent.session.reducer import reduce_session
from agent.session.store import fact_name
from tests.openai_stub import OpenAIStub, Reply, completion, tool_call

REPO = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------------------------------------------
# Shared helpers
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One agent command: exit status, stdout, stderr, and the session file it used."""

    status: int
    out: str
    err: str
    path: Path | None


class AgentHarness:
    """A workspace, a sessions directory and an environment pointing at one stub; runs agent commands in-process."""

    def __init__(self, tmp_path: Path, stub: OpenAIStub, capsys, *, extra_env: dict | None = None):
        self.tmp = tmp_path
        self.workspace = tmp_path / "ws"
        self.sessions = tmp_path / "sessions"
        self.workspace.mkdir(exist_ok=True)
        self.stub = stub
        self.capsys = capsys
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OPENAI_BASE_URL": stub.base_url,
                    "OPENAI_API_KEY": "test-key", **(extra_env or {})}

    def cli(self, argv: list[str], env: dict | None = None) -> Outcome:
        """Run one command in-process."""
        self.capsys.readouterr()
        status = cli.main([str(a) for a in argv], environ={**self.env, **(env or {})})
        out, err = self.capsys.readouterr()
        return Outcome(status, out, err, None)

    def run(self, prompt: str, *flags, env: dict | None = None) -> Outcome:
        """``run --session-dir … --workspace …`` in a fresh session; the outcome carries its path."""
        before = set(self.sessions.iterdir()) if self.sessions.exists() else set()
        result = self.cli(["run", "--session-dir", self.sessions, "--workspace", self.workspace, *flags, prompt],
                          env)
        created = set(self.sessions.iterdir()) - before if self.sessions.exists() else set()
        result.path = created.pop() if created else None
        return result

    def again(self, path: Path, prompt: str, *flags, env: dict | None = None) -> Outcome:
        """``run --session FILE PROMPT``."""
        result = self.cli(["run", "--session", path, *flags, prompt], env)
        result.path = path
        return result

    def command(self, name: str, path: Path, *flags, env: dict | None = None) -> Outcome:
        """``resume`` / ``abort`` / ``compact`` FILE."""
        result = self.cli([name, path, *flags], env)
        result.path = path
        return result


def transactions(path: Path) -> list[list[dict]]:
    """The committed transactions of a session file (header excluded), each as a list of facts."""
    lines = path.read_bytes().split(b"\n")[1:-1]
    out = []
    for raw in lines:
        value = json.loads(raw)
        out.append(value if isinstance(value, list) else [value])
    return out


def names(path: Path) -> list[tuple[str, ...]]:
    """The kill-point names of each transaction (the checkpoint protocol's `facts`)."""
    return [tuple(fact_name(f) for f in txn) for txn in transactions(path)]


def records(path: Path, record_type: str) -> list[dict]:
    """Every record of one type, in commit order."""
    return [f["record"] for txn in transactions(path) for f in txn
            if f["kind"] == "record" and f["record"]["type"] == record_type]


def state_of(path: Path):
    """The reduced state of a session file (raises CorruptionError if it does not reduce)."""
    return reduce_session(path.read_bytes())


def prefix(path: Path, count: int, dest: Path) -> Path:
    """A copy of ``path`` cut after its first ``count`` transactions (a crash at a transaction boundary)."""
    dest.mkdir(parents=True, exist_ok=True)
    lines = path.read_bytes().split(b"\n")
    target = dest / path.name  # same name: the file name must keep matching the header id
    target.write_bytes(b"\n".join(lines[: count + 1]) + b"\n")
    return target


def cut_after(path: Path, predicate, dest: Path, occurrence: int = 1) -> Path:
    """A prefix ending with the ``occurrence``-th transaction whose names satisfy ``predicate``."""
    seen = 0
    for index, txn in enumerate(names(path), start=1):
        if predicate(txn):
            seen += 1
            if seen == occurrence:
                return prefix(path, index, dest)
    raise AssertionError(f"no transaction #{occurrence} matching in {names(path)}")


def usage(prompt: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens}


@pytest.fixture
def stub():
    """An empty-script stub; tests set ``stub._script`` or use ``scripted``."""
    with OpenAIStub([]) as server:
        yield server


def script(stub: OpenAIStub, items) -> None:
    """Replace the stub's script (a list consumed in order, or a callable)."""
    stub._script = items if callable(items) else list(items)


@pytest.fixture
def agent(tmp_path, stub, capsys):
    return AgentHarness(tmp_path, stub, capsys)


# ----------------------------------------------------------------------------------------------------------------
# Full runs
# ----------------------------------------------------------------------------------------------------------------


class TestFullRun:
    def test_run_with_tools_durable_order(self, agent, stub):
        """A run with read, write and bash writes exactly the spec's live order and prints the final answer."""
        (agent.workspace / "notes.txt").write_text("alpha\n")
        witness = agent.tmp / "witness"
        script(stub, [
            completion(tool_calls=[
                tool_call("c1", "read", {"path": "notes.txt"}),
                tool_call("c2", "write", {"path": "out.txt", "content": "beta\n"}),
                tool_call("c3", "bash", {"command": f'echo "$AGENT_TOOL_CALL_ID $AGENT_TOOL_STARTED_ID" >> {witness}'}),
            ], usage=usage(10, 3)),
            completion("all done", usage=usage(30, 2)),
        ])
        result = agent.run("please work")
        assert result.status == 0
        assert result.out == "all done\n"
        assert f"session {result.path}" in result.err
        assert "input=40 output=5" in result.err
        assert names(result.path) == [
            ("user", "runStarted"), ("stepAttempt",), ("assistant", "usage"),
            ("toolStarted",), ("toolResult",), ("toolStarted",), ("toolResult",), ("toolStarted",), ("toolResult",),
            ("stepAttempt",), ("assistant", "usage"), ("operationFinished",),
        ]
        assert (agent.workspace / "out.txt").read_text() == "beta\n"
        started = records(result.path, "toolStarted")
        c3_intent = next(f for txn in transactions(result.path) for f in txn
                         if f["kind"] == "record" and f["record"].get("toolCallId") == "c3")
        assert witness.read_text().split() == ["c3", c3_intent["id"]]  # AGENT_TOOL_CALL_ID, AGENT_TOOL_STARTED_ID
        assert [t["replay"] for t in started] == ["safe", "never", "never"]
        state = state_of(result.path)
        assert state["operation"] == {"kind": "idle"}
        assert state["usage"] == {"input": 40, "output": 5, "cacheRead": 0, "cacheWrite": 0}
        # The second request re-sends the durable context: user, assistant with calls, three results.
        second = stub.requests[1].json["messages"]
        assert second[0]["role"] == "system"
        assert [m["role"] for m in second[1:]] == ["user", "assistant", "tool", "tool", "tool"]
        assert second[3]["content"] == "alpha\n"
        finished = records(result.path, "operationFinished")[0]
        assert finished["outcome"] == "completed" and finished["completion"] == "normal"

    def test_request_matches_snapshot(self, agent, stub):
        """The stepAttempt snapshot describes the request actually sent (model, tools, system prompt digest)."""
        from agent.session import digests

        script(stub, [completion("ok")])
        result = agent.run("hi", "--model", "m-1", "--tools", "read,bash")
        assert result.status == 0
        attempt = records(result.path, "stepAttempt")[0]
        body = stub.requests[0].json
        snap = attempt["configurationSnapshot"]
        assert body["model"] == snap["model"] == "m-1"
        assert [t["function"]["name"] for t in body["tools"]] == [t["name"] for t in snap["tools"]] == ["read", "bash"]
        assert snap["systemPromptDigest"] == digests.system_prompt_digest(body["messages"][0]["content"])
        assert attempt["configurationDigest"] == digests.configuration_digest(snap)

    def test_run_again_in_the_same_session(self, agent, stub):
        """`run --session FILE` appends a second run whose context holds the first run's messages."""
        script(stub, [completion("first answer"), completion("second answer")])
        first = agent.run("one")
        second = agent.again(first.path, "two")
        assert second.status == 0 and second.out == "second answer\n"
        assert [m["content"] for m in stub.requests[1].json["messages"][1:]] == ["one", "first answer", "two"]
        assert len(records(first.path, "runStarted")) == 2

    def test_pre_execution_rules_live(self, agent, stub):
        """Unknown tools and non-object arguments get their synthetics live; schema violations are error results."""
        script(stub, [
            completion(tool_calls=[
                tool_call("u", "launch_rockets", {}),
                tool_call("i", "read", "[1, 2]"),
                tool_call("s", "read", {"path": 7}),
            ]),
            completion("fine"),
        ])
        result = agent.run("go")
        assert result.status == 0
        assert names(result.path)[3:7] == [("synthetic",), ("synthetic",), ("toolStarted",), ("toolResult",)]
        tool_messages = [m for m in state_of(result.path)["transcript"] if m["role"] == "tool"]
        assert tool_messages[0]["content"] == "Error: Unknown tool; the tool was not executed."
        assert tool_messages[1]["content"] == "Error: Tool arguments were invalid; the tool was not executed."
        assert "must be a string" in tool_messages[2]["content"]
        entries = [f["entry"] for t in transactions(result.path) for f in t if f["kind"] == "entry"]
        assert entries[-2]["result"] == {"type": "error"}

    def test_length_with_calls_completes_truncated(self, agent, stub):
        """A `length` answer with calls gets truncated synthetics for all of them and finishes truncated."""
        script(stub, [completion("partial", tool_calls=[tool_call("a", "read", {"path": "x"}),
                                                        tool_call("b", "bash", '{"command": "ec')],
                                 finish_reason="length")])
        result = agent.run("go")
        assert result.status == 0 and result.out == "partial\n"
        assert names(result.path)[3] == ("synthetic", "synthetic")
        assert records(result.path, "operationFinished")[0]["completion"] == "truncated"

    @pytest.mark.parametrize("answer,code", [
        (completion("   "), "empty_response"),
        (completion("cut", finish_reason="length"), "truncated_response"),
    ])
    def test_dead_end_answers_fail(self, agent, stub, answer, code):
        """A blank stop and a length answer without calls finish failed with the planner's fixed errors."""
        script(stub, [answer])
        result = agent.run("go")
        assert result.status == 4 and code in result.err
        assert records(result.path, "operationFinished")[0]["error"]["code"] == code

    def test_workspace_confinement(self, agent, stub):
        """Paths leaving the workspace (../, absolute, symlink escape) are error results and touch nothing."""
        outside = agent.tmp / "outside.txt"
        outside.write_text("secret\n")
        (agent.workspace / "link").symlink_to(agent.tmp)
        script(stub, [
            completion(tool_calls=[
                tool_call("a", "read", {"path": "../outside.txt"}),
                tool_call("b", "read", {"path": str(outside)}),
                tool_call("c", "read", {"path": "link/outside.txt"}),
                tool_call("d", "write", {"path": "link/outside.txt", "content": "pwned"}),
            ]),
            completion("refused"),
        ])
        result = agent.run("escape")
        assert result.status == 0
        entries = [f["entry"] for t in transactions(result.path) for f in t
                   if f["kind"] == "entry" and f["entry"].get("toolName")]
        assert [e["result"]["type"] for e in entries] == ["error"] * 4
        assert all("secret" not in e["message"]["content"] for e in entries)
        assert outside.read_text() == "secret\n"

    def test_provider_text_is_sanitized(self, agent, stub):
        """A lone surrogate escape from the provider is stored as U+FFFD instead of being rejected."""
        script(stub, [Reply(200, b'{"choices":[{"message":{"role":"assistant","content":"bad \\ud800 text"},'
                                 b'"finish_reason":"stop"}]}')])
        result = agent.run("go")
        assert result.status == 0
        assert state_of(result.path)["transcript"][-1]["content"] == "bad \ufffd text"


class TestLiveErrors:
    @pytest.mark.parametrize("reply,code", [
        (Reply(429, {"error": {"message": "slow down"}}), "rate_limited"),
        (Reply(503, {"error": {"message": "overloaded"}}), "server_error"),
        (Reply(400, {"error": {"message": "bad"}}), "bad_request"),
        (Reply(200, completion("late"), delay=3.0), "timeout"),
        (Reply(action="reset"), "connection_error"),
        (Reply(200, b"{not json"), "invalid_response"),
        (completion(None, finish_reason="tool_calls"), "invalid_response"),
        (completion("x", finish_reason="content_filter"), "invalid_response"),
    ], ids=["429", "5xx", "4xx", "timeout", "reset", "malformed", "tool_calls-without-calls", "other-finish"])
    def test_live_error_is_step_failed_and_never_retried(self, agent, stub, reply, code):
        """Each live error is one stepFailed with its specific code, one request, and a failed run (exit 4) whose
        line on stderr says which live error it was and which model server was asked."""
        script(stub, [reply])
        result = agent.run("go", "--request-timeout", "0.5")
        assert result.status == 4
        assert len(stub.requests) == 1
        [failed] = records(result.path, "stepFailed")
        assert failed["error"]["code"] == code
        finished = records(result.path, "operationFinished")[0]
        assert finished["outcome"] == "failed"
        assert finished["error"] == {"code": "model_error", "message": "provider request failed"}
        assert (f"run failed: model_error: provider request failed ({code}: {failed['error']['message']}); "
                f"model server {stub.base_url}" in result.err)


class TestStepBudget:
    def test_budget_finishes_failed(self, agent, stub):
        """With --max-steps 2 a tool-calling model gets exactly two steps, then the run fails with the budget code."""
        script(stub, lambda request: completion(tool_calls=[tool_call(f"c{len(stub.requests)}", "read",
                                                                      {"path": "nothing"})]))
        result = agent.run("loop forever", "--max-steps", "2")
        assert result.status == 4
        assert len(stub.requests) == 2
        finished = records(result.path, "operationFinished")[0]
        assert finished["error"]["code"] == "step_budget_exhausted"
        assert "step_budget_exhausted" in result.err

    def test_budget_counts_from_the_log(self, agent, stub, tmp_path):
        """After a crash the step count comes from the log: resuming with the same budget sends no request."""
        script(stub, lambda request: completion(tool_calls=[tool_call(f"c{len(stub.requests)}", "read",
                                                                      {"path": "nothing"})]))
        full = agent.run("loop", "--max-steps", "2")
        crashed = cut_after(full.path, lambda n: n == ("toolResult",), tmp_path / "crash", occurrence=2)
        before = len(stub.requests)
        resumed = agent.command("resume", crashed, "--max-steps", "2")
        assert resumed.status == 4 and len(stub.requests) == before
        assert records(crashed, "operationFinished")[0]["error"]["code"] == "step_budget_exhausted"


class TestCompaction:
    def test_compact_keeps_the_latest_user_turn(self, agent, stub):
        """`compact` summarizes everything before the latest user turn and keeps that turn verbatim."""
        from tests.openai_stub import is_summary_request

        script(stub, lambda r: completion("SUMMARY", usage=usage(5, 1)) if is_summary_request(r)
               else completion(f"answer {len(stub.requests)}"))
        first = agent.run("one")
        agent.again(first.path, "two")
        result = agent.command("compact", first.path)
        assert result.status == 0
        assert names(first.path)[-4:] == [("compactionStarted",), ("stepAttempt",), ("compaction", "usage"),
                                          ("operationFinished",)]
        state = state_of(first.path)
        assert state["activeContext"][0] == {"role": "user", "content": "[Compacted history]\nSUMMARY"}
        assert [m["content"] for m in state["activeContext"][1:]] == ["two", "answer 2"]
        summary_request = stub.requests[-1].json["messages"][1]["content"]
        assert "one" in summary_request and "answer 1" in summary_request and "two" not in summary_request
        # The next run sends the compacted context.
        agent.again(first.path, "three")
        assert stub.requests[-1].json["messages"][1]["content"] == "[Compacted history]\nSUMMARY"

    def test_nothing_to_compact(self, agent, stub):
        """A session holding only one user turn starts no compaction operation."""
        script(stub, [completion("only")])
        first = agent.run("one")
        before = first.path.read_bytes()
        result = agent.command("compact", first.path)
        assert result.status == 0 and "nothing to compact" in result.err
        assert first.path.read_bytes() == before


# ----------------------------------------------------------------------------------------------------------------
# Exit statuses of the session file and the writer lock
# ----------------------------------------------------------------------------------------------------------------


class TestSessionFileStatuses:
    def test_locked_session_exits_6(self, agent, stub):
        """A second writer on a locked session exits 6 and appends nothing."""
        script(stub, [completion("x")])
        first = agent.run("one")
        before = first.path.read_bytes()
        with open(first.path, "rb") as holder:
            fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
            result = agent.again(first.path, "two")
        assert result.status == 6 and "session is locked by another process" in result.err
        assert first.path.read_bytes() == before

    def test_corrupt_log_exits_5(self, agent, stub):
        """A log that does not reduce exits 5 naming code, line and seq, and is left untouched."""
        script(stub, [completion("x")])
        first = agent.run("one")
        with open(first.path, "ab") as handle:
            handle.write(b'{"kind":"usage","seq":99}\n')
        before = first.path.read_bytes()
        result = agent.command("resume", first.path)
        assert result.status == 5
        assert "code SEQ_MISMATCH, line 6, seq 99" in result.err
        assert first.path.read_bytes() == before

    def test_name_mismatch_exits_5(self, agent, stub, tmp_path):
        """A session file whose name carries another id than its header exits 5."""
        script(stub, [completion("x")])
        first = agent.run("one")
        other = tmp_path / first.path.name.replace(first.path.name[-10:-6], "aaaa")
        shutil.copy(first.path, other)
        result = agent.command("resume", other)
        assert result.status == 5 and "header id" in result.err

    def test_rejected_own_transaction_exits_70(self, agent, stub, tmp_path):
        """A transaction the store rejects (here via unbounded-retry: attempt 3) exits 70 with code/line/seq."""
        script(stub, [completion("x")])
        first = agent.run("one")
        crashed = cut_after(first.path, lambda n: n == ("stepAttempt",), tmp_path / "crash")
        agent.command("resume", crashed, "--max-steps", "5")  # attempt 2 re-sent, answered
        # Build "attempt 2 open": cut right after the retry's stepAttempt.
        again = cut_after(crashed, lambda n: n == ("stepAttempt",), tmp_path / "crash2", occurrence=2)
        before = again.read_bytes()
        result = agent.command("resume", again, env={"AGENT_BUGS": "unbounded-retry"})
        assert result.status == 70
        assert "code INVALID_FACT, line 5, seq 5" in result.err
        assert again.read_bytes() == before


# ----------------------------------------------------------------------------------------------------------------
# Checkpoint protocol through a real agent
# ----------------------------------------------------------------------------------------------------------------


class Supervisor:
    """A Unix-socket supervisor that records every message and answers with ``decide(message) -> answer|None``."""

    def __init__(self, directory: Path, decide=None):
        self.path = str(directory / "control.sock")
        self.decide = decide or (lambda message: {"action": "continue"})
        self.messages: list[dict] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn, conn.makefile("rb") as reader:
                for raw in reader:
                    message = json.loads(raw)
                    self.messages.append(message)
                    answer = self.decide(message)
                    if answer is None:
                        break
                    conn.sendall(json.dumps(answer).encode() + b"\n")

    def close(self):
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked in the serving thread (Linux)
        except OSError:
            pass
        self.server.close()
        self.thread.join(5)


class TestCheckpointProtocol:
    def test_hello_and_three_barriers_per_commit(self, agent, stub, tmp_path):
        """The agent says hello, then reports before-write/after-write/after-sync for every transaction."""
        script(stub, [completion(tool_calls=[tool_call("c1", "read", {"path": "nothing"})]), completion("done")])
        supervisor = Supervisor(tmp_path)
        try:
            result = agent.run("go", env={"CHAOS_CONTROL": supervisor.path})
        finally:
            supervisor.close()
        assert result.status == 0
        hello, *barriers = supervisor.messages
        assert hello == {"hello": {"pid": os.getpid(), "session": str(result.path), "protocol": 1, "oneway": True}}
        size = len(result.path.read_bytes().split(b"\n")[0]) + 1  # the header is not a barrier
        line_ends = []
        offset = size
        for raw in result.path.read_bytes().split(b"\n")[1:-1]:
            offset += len(raw) + 1
            line_ends.append(offset)
        assert len(barriers) == 3 * len(line_ends)
        previous = size
        for index, names_ in enumerate(names(result.path)):
            before, written, synced = (b["checkpoint"] for b in barriers[3 * index: 3 * index + 3])
            assert [before["phase"], written["phase"], synced["phase"]] == ["before-write", "after-write",
                                                                            "after-sync"]
            assert before["facts"] == written["facts"] == synced["facts"] == list(names_)
            assert (before["offset"], before["syncedOffset"]) == (previous, previous)
            assert (written["offset"], written["syncedOffset"]) == (line_ends[index], previous)
            assert (synced["offset"], synced["syncedOffset"]) == (line_ends[index], line_ends[index])
            assert synced["seqLast"] - synced["seqFirst"] + 1 == len(names_)
            previous = line_ends[index]

    @pytest.mark.parametrize("phase,errno_name", [("before-write", "ENOSPC"), ("after-write", "EIO")])
    def test_injected_failure(self, agent, stub, tmp_path, phase, errno_name):
        """A fail answer makes that write/fsync fail inside the store: exit 74, the stepAttempt not acknowledged."""
        script(stub, [completion("never asked")])

        def decide(message):
            checkpoint = message.get("checkpoint")
            if checkpoint and checkpoint["phase"] == phase and checkpoint["facts"] == ["stepAttempt"]:
                return {"action": "fail", "errno": errno_name}
            return {"action": "continue"}

        supervisor = Supervisor(tmp_path, decide)
        try:
            result = agent.run("go", env={"CHAOS_CONTROL": supervisor.path})
        finally:
            supervisor.close()
        assert result.status == 74 and "writing the session failed" in result.err
        assert len(stub.requests) == 0
        if phase == "before-write":
            assert names(result.path) == [("user", "runStarted")]  # rolled back to the pre-commit length
        last = supervisor.messages[-1]["checkpoint"]
        assert (last["phase"], last["facts"]) == (phase, ["stepAttempt"])

    def test_lost_channel_exits_7_writing_nothing_more(self, tmp_path):
        """A supervisor that vanishes at a barrier makes the agent exit 7 at once, with nothing more written."""
        workspace = tmp_path / "ws"
        workspace.mkdir()
        sessions = tmp_path / "sessions"

        def decide(message):
            checkpoint = message.get("checkpoint")
            if checkpoint and checkpoint["facts"] == ["stepAttempt"] and checkpoint["phase"] == "after-write":
                return None  # close the connection instead of answering
            return {"action": "continue"}

        supervisor = Supervisor(tmp_path, decide)
        with OpenAIStub([completion("never")]) as server:
            try:
                env = {**os.environ, "CHAOS_CONTROL": supervisor.path, "OPENAI_BASE_URL": server.base_url}
                proc = subprocess.run(
                    [sys.executable, "-m", "agent", "run", "--session-dir", str(sessions), "--workspace",
                     str(workspace), "go"], capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
            finally:
                supervisor.close()
            assert proc.returncode == 7
            assert "checkpoint channel lost" in proc.stderr and "Traceback" not in proc.stderr
            assert len(server.requests) == 0
        [path] = sessions.iterdir()
        # The stepAttempt line was written (not synced) when the channel broke; nothing after it.
        assert names(path) == [("user", "runStarted"), ("stepAttempt",)]
