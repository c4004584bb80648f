"""SIGINT/SIGTERM end a real agent within 1 s whatever tool is running, with exit 130 (issue 13).

Each file tool is pointed at a FIFO in the workspace (a blocking open of a FIFO used to hang the agent where no
signal could reach it); ``bash`` runs ``sleep 30``. The signal is sent once the tool is known to be running or done:
for bash when the command wrote its marker, for the file tools when the next model request arrived (the tool
returned) or, at the latest, 1 s after the tool's ``toolStarted`` intent became durable (the tool is stuck).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.integration.test_agent_abort import DEADLINE, spawn, wait_for  # noqa: F401 - spawn is a fixture
from tests.integration.test_agent_run import records, state_of
from tests.openai_stub import OpenAIStub, Reply, completion, tool_call

EXIT_WITHIN = 1.0  # seconds from the signal to the agent's exit (the bound)

FILE_TOOLS = {
    "read": {"path": "pipe"},
    "write": {"path": "pipe", "content": "into the pipe"},
    "edit": {"path": "pipe", "old_string": "a", "new_string": "b"},
}


def session_has(agent, text: str) -> bool:
    """True once the agent's session file exists and contains ``text``."""
    try:
        return text in agent.path.read_text(encoding="utf-8", errors="replace")
    except (ValueError, FileNotFoundError):  # no session file yet (iterdir found none)
        return False


def signal_and_time(agent, signum) -> tuple[int, float, str]:
    """Send ``signum`` and return (exit status, seconds until the process exited, stderr)."""
    sent = time.monotonic()
    agent.proc.send_signal(signum)
    try:
        agent.proc.wait(timeout=DEADLINE)
    except Exception:
        raise AssertionError(f"the agent did not exit within {DEADLINE} s of the signal") from None
    elapsed = time.monotonic() - sent
    _, err = agent.proc.communicate()
    return agent.proc.returncode, elapsed, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("tool", sorted(FILE_TOOLS))
def test_file_tool_on_a_fifo_never_blocks_the_signal(spawn, tool, signum):  # noqa: F811 - pytest fixture
    """A file tool aimed at a FIFO is refused, and a signal ends the agent within 1 s with exit 130."""
    script = [completion(tool_calls=[tool_call("f1", tool, FILE_TOOLS[tool])]),
              Reply(200, completion("too late"), delay=DEADLINE)]
    with OpenAIStub(script) as stub:
        agent = spawn(stub.base_url)
        os.mkfifo(agent.workspace / "pipe")
        wait_for(lambda: session_has(agent, "toolStarted"), "the tool's intent to be durable")
        started = time.monotonic()
        # The next request means the tool returned; a tool still running after 1 s is stuck (the defect).
        while len(stub.requests) < 2 and time.monotonic() - started < 1.0 and agent.proc.poll() is None:
            time.sleep(0.005)
        returned = len(stub.requests) >= 2
        status, elapsed, err = signal_and_time(agent, signum)
    assert returned, f"{tool} on a FIFO did not return within 1 s"
    assert status == 130, err
    assert elapsed < EXIT_WITHIN, f"the agent took {elapsed:.2f} s to exit"
    assert "Traceback" not in err
    results = [m["content"] for m in state_of(agent.path)["transcript"] if m["role"] == "tool"]
    assert len(results) == 1 and "not a regular file" in results[0], results
    assert records(agent.path, "operationFinished")[-1]["outcome"] == "aborted"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_long_bash_ends_within_a_second(spawn, tmp_path, signum):  # noqa: F811 - pytest fixture
    """A signal during `sleep 30` in bash kills its group and ends the agent within 1 s with exit 130."""
    marker = tmp_path / "bash.started"
    script = [completion(tool_calls=[tool_call("b1", "bash", {"command": f"touch {marker}; sleep 30"})])]
    with OpenAIStub(script) as stub:
        agent = spawn(stub.base_url)
        wait_for(marker.exists, "the bash command to start")
        status, elapsed, err = signal_and_time(agent, signum)
    assert status == 130, err
    assert elapsed < EXIT_WITHIN, f"the agent took {elapsed:.2f} s to exit"
    requested = records(agent.path, "abortRequested")[0]
    assert (requested["phase"], requested["toolCallId"]) == ("tool", "b1")
