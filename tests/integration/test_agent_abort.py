"""Integration tests of abort (SPEC §15.5) with real signals delivered to a real agent subprocess.

Signals are sent at deterministic moments, never after a sleep: when the stub has received the model request, when
the bash tool has written its "started" witness, or from the checkpoint supervisor while the agent is parked at an
``after-sync`` barrier (the issue's definition of "abort during the model call / during a tool").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_agent_run import REPO, Supervisor, names, records, state_of
from tests.openai_stub import OpenAIStub, Reply, completion, tool_call

DEADLINE = 30.0  # seconds; a hung agent fails the test instead of hanging it


def wait_for(condition, what: str) -> None:
    """Poll ``condition`` until true (a short poll, no fixed sleeps); fail after DEADLINE."""
    end = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class AgentProcess:
    """``python -m agent run`` as a real subprocess in a fresh workspace; always reaped."""

    def __init__(self, tmp_path: Path, base_url: str, env: dict | None = None):
        self.workspace = tmp_path / "ws"
        self.sessions = tmp_path / "sessions"
        self.workspace.mkdir()
        environ = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "k", **(env or {})}
        environ.pop("AGENT_BUGS", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent", "run", "--session-dir", str(self.sessions), "--workspace",
             str(self.workspace), "work"],
            cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=DEADLINE)
        return self.proc.returncode, out, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()

    @property
    def path(self) -> Path:
        [path] = self.sessions.iterdir()
        return path


@pytest.fixture
def spawn(tmp_path):
    started = []

    def make(base_url, env=None):
        process = AgentProcess(tmp_path, base_url, env)
        started.append(process)
        return process

    yield make
    for process in started:
        process.kill()


class TestSignalDuringWork:
    @pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
    def test_signal_during_model_call(self, spawn, signum):
        """A signal while the request is in flight cancels it and reconciles: abortRequested(model), stepFailed
        aborted, finish aborted, exit 130."""
        with OpenAIStub([Reply(200, completion("too late"), delay=DEADLINE)]) as stub:
            agent = spawn(stub.base_url)
            wait_for(lambda: stub.requests, "the model request")
            agent.proc.send_signal(signum)
            status, out, err = agent.finish()
        assert status == 130, err
        assert "Traceback" not in err
        assert names(agent.path)[-3:] == [("abortRequested",), ("stepFailed",), ("operationFinished",)]
        assert records(agent.path, "abortRequested")[0]["phase"] == "model"
        assert records(agent.path, "stepFailed")[0]["error"]["code"] == "aborted"
        assert records(agent.path, "operationFinished")[0]["outcome"] == "aborted"
        assert state_of(agent.path)["operation"] == {"kind": "idle"}

    def test_sigint_during_bash_kills_its_group(self, spawn, tmp_path):
        """SIGINT while bash runs kills the command's process group and writes interrupted + aborted results."""
        marker = tmp_path / "bash.pid"
        command = f"echo $$ > {marker}; sleep {DEADLINE}; echo never >> {marker}"
        script = [completion(tool_calls=[tool_call("b1", "bash", {"command": command}),
                                         tool_call("b2", "bash", {"command": f"echo ran >> {marker}"})])]
        with OpenAIStub(script) as stub:
            agent = spawn(stub.base_url)
            wait_for(lambda: marker.exists() and marker.read_text().strip(), "the bash command to start")
            bash_pid = int(marker.read_text())
            agent.proc.send_signal(signal.SIGINT)
            status, _, err = agent.finish()
        assert status == 130, err
        requested = records(agent.path, "abortRequested")[0]
        assert (requested["phase"], requested["toolCallId"]) == ("tool", "b1")
        synthetic = [t for t in names(agent.path) if t and t[0] == "synthetic"]
        assert synthetic == [("synthetic", "synthetic")]  # interrupted b1 + aborted b2, one transaction
        tool_messages = [m["content"] for m in state_of(agent.path)["transcript"] if m["role"] == "tool"]
        assert tool_messages == [
            "Operation interrupted after execution status became unknown; the tool was not replayed.",
            "Operation aborted before execution.",
        ]
        assert marker.read_text().split() == [str(bash_pid)]  # neither "never" nor b2's "ran"
        with pytest.raises(ProcessLookupError):
            os.kill(bash_pid, 0)


class TestSignalAtBarrier:
    def _run_with_signal_at(self, spawn, tmp_path, stub_script, facts):
        """Run the agent under a supervisor that sends SIGINT while the agent is parked at FACTS@after-sync."""
        holder = {}

        def decide(message):
            if "hello" in message:
                holder["pid"] = message["hello"]["pid"]
            checkpoint = message.get("checkpoint")
            if checkpoint and checkpoint["phase"] == "after-sync" and checkpoint["facts"] == facts \
                    and "sent" not in holder:
                holder["sent"] = True
                os.kill(holder["pid"], signal.SIGINT)
            return {"action": "continue"}

        supervisor = Supervisor(tmp_path, decide)
        try:
            with OpenAIStub(stub_script) as stub:
                agent = spawn(stub.base_url, {"CHAOS_CONTROL": supervisor.path})
                status, out, err = agent.finish()
                requests = len(stub.requests)
        finally:
            supervisor.close()
        return agent, status, err, requests, supervisor.messages

    def test_sigint_at_step_attempt_sends_no_request(self, spawn, tmp_path):
        """SIGINT at the stepAttempt after-sync barrier: the request is never sent, the abort is phase model."""
        agent, status, err, requests, messages = self._run_with_signal_at(
            spawn, tmp_path, [completion("unused")], ["stepAttempt"])
        assert status == 130, err
        assert requests == 0
        assert names(agent.path) == [("user", "runStarted"), ("stepAttempt",), ("abortRequested",), ("stepFailed",),
                                     ("operationFinished",)]
        # Every commit after the signal still went through its three barriers.
        phases = [m["checkpoint"]["phase"] for m in messages if "checkpoint" in m]
        assert len(phases) == 3 * len(names(agent.path))

    def test_sigint_at_tool_started_runs_no_tool(self, spawn, tmp_path):
        """SIGINT at the toolStarted after-sync barrier: the tool never runs, the abort is phase tool."""
        witness = tmp_path / "witness"
        script = [completion(tool_calls=[tool_call("w1", "bash", {"command": f"echo ran > {witness}"})])]
        agent, status, err, requests, _ = self._run_with_signal_at(spawn, tmp_path, script, ["toolStarted"])
        assert status == 130, err
        assert not witness.exists()
        requested = records(agent.path, "abortRequested")[0]
        assert (requested["phase"], requested["toolCallId"]) == ("tool", "w1")
        assert records(agent.path, "operationFinished")[0]["outcome"] == "aborted"
        assert json.loads(json.dumps(state_of(agent.path)["operation"])) == {"kind": "idle"}
