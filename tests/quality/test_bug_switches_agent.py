"""Quality tests: every AGENT_BUGS switch re-introduces an observable defect in the real agent.

Each test runs the same situation twice — correct agent, then the agent with one switch — and asserts both the
correct behaviour and the defect (a repeated effect, an extra request, a stuck session, a log that no longer reduces).
A switch whose test could not tell the two apart would let the chaos harness "pass" without proving anything.
"""

from __future__ import annotations

import json

import pytest

from agent import bugs
from agent.session.errors import CorruptionError
from tests.integration.test_agent_run import (  # noqa: F401 - fixtures
    Supervisor,
    agent,
    cut_after,
    names,
    records,
    script,
    state_of,
    stub,
    transactions,
)
from tests.openai_stub import Reply, completion, tool_call

COVERED = set()


def covers(name):
    COVERED.add(name)
    return lambda f: f


def both(agent, build, run):
    """Build the same crash prefix twice and run ``run(path, env)`` correct then buggy; returns both results."""
    return run(build("good"), {}), run(build("bad"), None)


@pytest.fixture
def tool_run(agent, stub):
    """A completed run: read(notes.txt) and a witnessing bash, then "done"."""
    (agent.workspace / "notes.txt").write_text("alpha\n")
    agent.witness = agent.tmp / "witness"
    script(stub, [
        completion(tool_calls=[tool_call("c1", "read", {"path": "notes.txt"}),
                               tool_call("c2", "bash", {"command": f"echo $AGENT_TOOL_CALL_ID >> {agent.witness}"})]),
        completion("done"),
    ])
    result = agent.run("work")
    assert result.status == 0
    return result.path


@covers("stale-assistant-calls")
def test_stale_assistant_calls(agent, stub, tool_run):
    """Crash before the terminal record after tool step + stop: correct finishes; the bug wedges the session."""
    good = cut_after(tool_run, lambda n: n[0] == "assistant", agent.tmp / "good", occurrence=2)
    bad = cut_after(tool_run, lambda n: n[0] == "assistant", agent.tmp / "bad", occurrence=2)
    assert agent.command("resume", good).status == 0
    before = bad.read_bytes()
    for _ in range(2):  # wedged: every restart fails the same way, nothing is ever appended
        result = agent.command("resume", bad, env={"AGENT_BUGS": "stale-assistant-calls"})
        assert result.status == 70 and "rejected our own transaction [toolStarted]" in result.err
    assert bad.read_bytes() == before


@covers("pre-exec-synthetic-repeat")
def test_pre_exec_synthetic_repeat(agent, stub):
    """After an unknownTool synthetic, correct recovery starts the next call; the bug re-plans the synthetic."""
    script(stub, [completion(tool_calls=[tool_call("u", "nope", {}), tool_call("r", "read", {"path": "x"})]),
                  completion("ok")])
    full = agent.run("go").path
    good = cut_after(full, lambda n: n == ("synthetic",), agent.tmp / "good")
    bad = cut_after(full, lambda n: n == ("synthetic",), agent.tmp / "bad")
    script(stub, [completion("ok")])
    assert agent.command("resume", good).status == 0
    result = agent.command("resume", bad, env={"AGENT_BUGS": "pre-exec-synthetic-repeat"})
    assert result.status == 70 and "[synthetic]" in result.err and "INVALID_TRANSITION" in result.err


@covers("replay-never-tools")
def test_replay_never_tools(agent, stub, tool_run):
    """A crash after toolStarted(bash): correct writes interrupted; the bug runs the command a second time."""
    good = cut_after(tool_run, lambda n: n == ("toolStarted",), agent.tmp / "good", occurrence=2)
    bad = cut_after(tool_run, lambda n: n == ("toolStarted",), agent.tmp / "bad", occurrence=2)
    script(stub, [completion("done"), completion("done")])
    assert agent.command("resume", good).status == 0
    assert agent.witness.read_text().split() == ["c2"]
    assert agent.command("resume", bad, env={"AGENT_BUGS": "replay-never-tools"}).status == 0
    assert agent.witness.read_text().split() == ["c2", "c2"]  # the never-replay effect happened twice


@covers("effect-before-intent")
@pytest.mark.parametrize("switch", ["", "effect-before-intent"])
def test_effect_before_intent(agent, stub, tmp_path, switch):
    """A failure at toolStarted@before-write: correct ran nothing yet; the bug already ran it and, after
    recovery, runs it again."""
    witness = tmp_path / "w"
    seen = {}

    def decide(message):
        checkpoint = message.get("checkpoint")
        if checkpoint and checkpoint["facts"] == ["toolStarted"] and checkpoint["phase"] == "before-write" \
                and "at-intent" not in seen:
            seen["at-intent"] = witness.exists()
            return {"action": "fail", "errno": "ENOSPC"}  # the write of the intent is lost, like a kill
        return {"action": "continue"}

    script(stub, [completion(tool_calls=[tool_call("b", "bash", {"command": f"echo once >> {witness}"})]),
                  completion("done")])
    supervisor = Supervisor(tmp_path, decide)
    env = {"CHAOS_CONTROL": supervisor.path, "AGENT_BUGS": switch}
    try:
        crashed = agent.run("go", env=env)
    finally:
        supervisor.close()
    assert crashed.status == 74
    assert agent.command("resume", crashed.path, env={"AGENT_BUGS": switch}).status == 0
    if switch:
        assert seen["at-intent"] is True and witness.read_text().split() == ["once", "once"]
    else:
        assert seen["at-intent"] is False and witness.read_text().split() == ["once"]


@covers("retry-live-failures")
def test_retry_live_failures(agent, stub):
    """A 503: correct sends one request and fails the run; the bug re-sends it behind the log's back."""
    script(stub, [Reply(503, {"error": {"message": "busy"}}), completion("ok")])
    good = agent.run("go")
    assert good.status == 4 and len(stub.requests) == 1
    script(stub, [Reply(503, {"error": {"message": "busy"}}), completion("ok")])
    bad = agent.run("go", env={"AGENT_BUGS": "retry-live-failures"})
    assert bad.status == 0 and len(stub.requests) == 3
    assert len(records(bad.path, "stepAttempt")) == 1  # two requests for one durable attempt


@covers("unbounded-retry")
def test_unbounded_retry(agent, stub, tool_run):
    """Attempt 2 crash-unknown: correct blocks attempts_exhausted; the bug tries an attempt 3."""
    first = cut_after(tool_run, lambda n: n == ("stepAttempt",), agent.tmp / "c1")
    script(stub, [completion("done")])
    agent.command("resume", first)
    good = cut_after(first, lambda n: n == ("stepAttempt",), agent.tmp / "good", occurrence=2)
    bad = cut_after(first, lambda n: n == ("stepAttempt",), agent.tmp / "bad", occurrence=2)
    result = agent.command("resume", good)
    assert result.status == 3 and json.loads(result.out) == {"blocked": "attempts_exhausted"}
    result = agent.command("resume", bad, env={"AGENT_BUGS": "unbounded-retry"})
    assert result.status == 70 and '"attempt":3' in result.err


@covers("ignore-configuration-change")
def test_ignore_configuration_change(agent, stub, tool_run):
    """An open attempt under another model: correct blocks; the bug retries it with a different digest."""
    good = cut_after(tool_run, lambda n: n == ("stepAttempt",), agent.tmp / "good")
    bad = cut_after(tool_run, lambda n: n == ("stepAttempt",), agent.tmp / "bad")
    result = agent.command("resume", good, "--model", "other")
    assert result.status == 3 and json.loads(result.out) == {"blocked": "configuration_changed"}
    result = agent.command("resume", bad, "--model", "other", env={"AGENT_BUGS": "ignore-configuration-change"})
    assert result.status == 70 and '"attempt":2' in result.err


@covers("replay-ignores-environment")
def test_replay_ignores_environment(agent, stub, tool_run):
    """A pending read in a moved environment: correct blocks; the bug re-reads in the new environment."""
    good = cut_after(tool_run, lambda n: n == ("toolStarted",), agent.tmp / "good")
    bad = cut_after(tool_run, lambda n: n == ("toolStarted",), agent.tmp / "bad")
    result = agent.command("resume", good, "--environment-identity", "moved")
    assert result.status == 3 and json.loads(result.out) == {"blocked": "environment_changed"}
    script(stub, [completion("done")])
    result = agent.command("resume", bad, "--environment-identity", "moved",
                           env={"AGENT_BUGS": "replay-ignores-environment"})
    assert result.status == 0
    assert "replay" in result.err.splitlines()[0]


@covers("no-torn-tail-repair")
def test_no_torn_tail_repair(agent, stub, tool_run):
    """A torn tail: correct truncates it and continues; the bug appends after it and breaks the log."""
    def torn(name):
        path = cut_after(tool_run, lambda n: n == ("toolStarted",), agent.tmp / name)
        with open(path, "ab") as handle:
            handle.write(b'{"kind":"entry","seq":')  # a write cut short by SIGKILL
        return path

    good, bad = torn("good"), torn("bad")
    script(stub, [completion("done"), completion("done")])
    assert agent.command("resume", good).status == 0
    assert state_of(good)["operation"] == {"kind": "idle"}
    agent.command("resume", bad, env={"AGENT_BUGS": "no-torn-tail-repair"})
    with pytest.raises(CorruptionError) as error:
        state_of(bad)
    assert error.value.code == "MALFORMED_JSON"
    assert agent.command("resume", bad).status == 5  # the session can no longer be opened


@covers("start-untouched-while-pending")
def test_start_untouched_while_pending(agent, stub, tool_run):
    """The read pending, the bash untouched: correct replays the read first; the bug starts the bash ahead of it."""
    def order(path):  # ("start", call id) per toolStarted and ("result", call id) per tool message, in log order
        out = []
        for fact in (f for txn in transactions(path) for f in txn):
            if fact["kind"] == "record" and fact["record"]["type"] == "toolStarted":
                out.append(("start", fact["record"]["toolCallId"]))
            elif fact["kind"] == "entry" and fact["entry"].get("message", {}).get("role") == "tool":
                out.append(("result", fact["entry"]["message"]["tool_call_id"]))
        return out

    good = cut_after(tool_run, lambda n: n == ("toolStarted",), agent.tmp / "good")
    bad = cut_after(tool_run, lambda n: n == ("toolStarted",), agent.tmp / "bad")
    script(stub, [completion("done"), completion("done")])
    assert agent.command("resume", good).status == 0
    assert order(good) == [("start", "c1"), ("result", "c1"), ("start", "c2"), ("result", "c2")]
    # The store accepts the defective order: the session completes, only the order of the facts shows the defect.
    assert agent.command("resume", bad, env={"AGENT_BUGS": "start-untouched-while-pending"}).status == 0
    assert order(bad) == [("start", "c1"), ("start", "c2"), ("result", "c2"), ("result", "c1")]
    assert state_of(bad)["operation"] == {"kind": "idle"}


def test_every_switch_has_a_test():
    """Each of the ten switches listed by `python -m agent bugs` is covered above."""
    assert COVERED == set(bugs.BUGS)
