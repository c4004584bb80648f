"""Integration tests of recovery: every plan type executed by ``resume`` (and ``run --session``) from prefixes.

The prefixes are what a crash leaves: a real agent run, cut at a transaction boundary (SPEC §12 "well-formed
prefix"). Each test checks the plan the agent executed (its stderr line), the facts it appended, and what it did or
did not do outside the log (HTTP requests, tool effects).
"""

from __future__ import annotations

import json

import pytest

from tests.integration.test_agent_run import (  # noqa: F401 - fixtures
    AgentHarness,
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


def plans(err: str) -> list[dict]:
    """The plans a command reported on stderr (one `agent: plan {...}` line each)."""
    return [json.loads(line.split("plan ", 1)[1]) for line in err.splitlines() if line.startswith("agent: plan ")]


@pytest.fixture
def tool_run(agent: AgentHarness, stub):
    """A completed run: step 1 calls read(notes.txt) and a witnessing bash; step 2 answers "done"."""
    (agent.workspace / "notes.txt").write_text("alpha\n")
    witness = agent.tmp / "witness"
    script(stub, [
        completion(tool_calls=[tool_call("c1", "read", {"path": "notes.txt"}),
                               tool_call("c2", "bash", {"command": f"echo $AGENT_TOOL_CALL_ID >> {witness}"})]),
        completion("done"),
    ])
    result = agent.run("work")
    assert result.status == 0
    agent.witness = witness
    return result.path


def crash(agent, path, predicate, occurrence=1):
    return cut_after(path, predicate, agent.tmp / f"crash-{len(list(agent.tmp.iterdir()))}", occurrence)


class TestFinish:
    def test_idle_resume_writes_nothing(self, agent, tool_run):
        """Resuming an idle session plans the no-op finish and appends nothing."""
        before = tool_run.read_bytes()
        result = agent.command("resume", tool_run)
        assert result.status == 0 and tool_run.read_bytes() == before and plans(result.err) == []

    def test_finish_completed_after_final_answer(self, agent, stub, tool_run):
        """A crash between the final answer and its terminal record finishes completed, without a request."""
        cut = crash(agent, tool_run, lambda n: n == ("assistant",), occurrence=2)
        sent = len(stub.requests)
        result = agent.command("resume", cut)
        assert result.status == 0 and result.out == "done\n"
        assert [p["type"] for p in plans(result.err)] == ["finish"]
        assert len(stub.requests) == sent
        assert names(cut)[-1] == ("operationFinished",)

    def test_finish_failed_after_step_failed(self, agent, stub):
        """A crash after a live stepFailed finishes the run failed with model_error (P3.5), and the resume names the
        live error an earlier process recorded, but no model server: it asked none (the earlier one's may differ)."""
        script(stub, [Reply(500, {"error": {"message": "boom"}})])
        full = agent.run("go")
        cut = crash(agent, full.path, lambda n: n == ("stepFailed",))
        result = agent.command("resume", cut)
        assert result.status == 4
        assert records(cut, "operationFinished")[0]["error"]["code"] == "model_error"
        assert "run failed: model_error: provider request failed (server_error: " in result.err
        assert "model server" not in result.err

    def test_a_log_it_cannot_read_back_leaves_the_failure_as_it_is(self, agent, stub):
        """Left with a torn fragment glued to the next line (the no-torn-tail-repair switch), a run that fails for
        its model step still exits 4: naming the live error is a detail, never another exit status."""
        script(stub, [completion("first")])
        full = agent.run("go")
        cut = crash(agent, full.path, lambda n: n == ("stepAttempt",))
        with open(cut, "ab") as f:
            f.write(b'{"torn')
        script(stub, [Reply(500, {"error": {"message": "boom"}})])
        result = agent.command("resume", cut, env={"AGENT_BUGS": "no-torn-tail-repair"})
        assert result.status == 4, result.err
        assert "run failed: model_error: provider request failed" in result.err
        assert f"; model server {stub.base_url}" in result.err  # this process's own request failed: it says where


class TestStartStep:
    def test_first_step_after_run_started(self, agent, stub, tool_run):
        """A crash right after [user, runStarted] starts attempt 1 at the boundary and completes the run."""
        cut = crash(agent, tool_run, lambda n: n == ("user", "runStarted"))
        script(stub, [completion("fresh")])
        result = agent.command("resume", cut)
        assert result.status == 0 and result.out == "fresh\n"
        first = plans(result.err)[0]
        assert first["type"] == "startStep" and first["attempt"] == 1

    def test_retry_resends_the_same_context(self, agent, stub, tool_run):
        """A crash-unknown attempt 1 is retried once as attempt 2 with the identical request body."""
        cut = crash(agent, tool_run, lambda n: n == ("stepAttempt",), occurrence=2)
        original = stub.requests[1].json
        script(stub, [completion("retried")])
        result = agent.command("resume", cut)
        assert result.status == 0 and result.out == "retried\n"
        attempts = records(cut, "stepAttempt")
        assert [a["attempt"] for a in attempts] == [1, 1, 2]
        assert attempts[2]["stepId"] == attempts[1]["stepId"]
        assert stub.requests[-1].json == original

    def test_attempts_exhausted_blocks_then_abort_gets_out(self, agent, stub, tool_run):
        """Attempt 2 crash-unknown blocks (exit 3, nothing written); `abort` reconciles it (exit 0)."""
        cut = crash(agent, tool_run, lambda n: n == ("stepAttempt",), occurrence=2)
        script(stub, [completion("retried")])
        agent.command("resume", cut)
        twice = crash(agent, cut, lambda n: n == ("stepAttempt",), occurrence=3)
        before = twice.read_bytes()
        blocked = agent.command("resume", twice)
        assert blocked.status == 3 and json.loads(blocked.out) == {"blocked": "attempts_exhausted"}
        assert twice.read_bytes() == before
        aborted = agent.command("abort", twice)
        assert aborted.status == 0
        assert names(twice)[-3:] == [("abortRequested",), ("stepFailed",), ("operationFinished",)]
        assert records(twice, "abortRequested")[0]["phase"] == "model"
        assert records(twice, "operationFinished")[-1]["outcome"] == "aborted"

    @pytest.mark.parametrize("flags,reason", [
        (["--model", "another-model"], "configuration_changed"),
        (["--tools", "read"], "configuration_changed"),
        (["--environment-identity", "elsewhere"], "environment_changed"),
    ])
    def test_changed_configuration_blocks_a_retry(self, agent, stub, tool_run, flags, reason):
        """An open attempt is not retried under another configuration or environment (P3.1, P3.2)."""
        cut = crash(agent, tool_run, lambda n: n == ("stepAttempt",))
        before = cut.read_bytes()
        sent = len(stub.requests)
        result = agent.command("resume", cut, *flags)
        assert result.status == 3 and json.loads(result.out) == {"blocked": reason}
        assert cut.read_bytes() == before and len(stub.requests) == sent


class TestStartTool:
    def test_untouched_call_is_started(self, agent, stub, tool_run):
        """A crash after the tool-calling answer starts the calls in index order."""
        cut = crash(agent, tool_run, lambda n: n == ("assistant", ) or n == ("assistant", "usage"))
        script(stub, [completion("done again")])
        result = agent.command("resume", cut)
        assert result.status == 0
        kinds = [(p["type"], p.get("mode"), p.get("toolIndex")) for p in plans(result.err)[:2]]
        assert kinds == [("startTool", "start", 0), ("startTool", "start", 1)]
        assert agent.witness.read_text().split() == ["c2", "c2"]  # the original run and this recovery

    def test_pending_safe_read_is_replayed(self, agent, stub, tool_run):
        """A crash after toolStarted(read) replays the read with the recorded arguments into the reserved id."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        intent = records(cut, "toolStarted")[0]
        (agent.workspace / "notes.txt").write_text("changed\n")
        script(stub, [completion("done")])
        result = agent.command("resume", cut)
        assert result.status == 0
        first = plans(result.err)[0]
        assert (first["type"], first["mode"], first["arguments"]) == ("startTool", "replay", {"path": "notes.txt"})
        assert len(records(cut, "toolStarted")) == 2  # the replay wrote no new intent; call 1 got its own
        result_entry = transactions(cut)[4][0]  # after user+run, attempt, answer, intent
        assert result_entry["id"] == intent["resultEntryId"]
        assert result_entry["entry"]["message"]["content"] == "changed\n"

    def test_pending_never_tool_is_interrupted(self, agent, stub, tool_run):
        """A crash after toolStarted(bash) writes the interrupted synthetic and never re-runs the command."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",), occurrence=2)
        script(stub, [completion("done")])
        result = agent.command("resume", cut)
        assert result.status == 0
        first = plans(result.err)[0]
        assert first["type"] == "appendSynthetic" and first["results"][0]["reason"] == "interrupted"
        assert agent.witness.read_text().split() == ["c2"]  # only the original run's effect

    @pytest.mark.parametrize("flags,reason", [
        (["--environment-identity", "moved"], "environment_changed"),
        (["--replay", "read=never"], "replay_declaration_changed"),
        (["--replay", "read=safe:builtin:read:v2"], "replay_declaration_changed"),
        (["--tools", "read,bash", "--model", "other"], "configuration_changed"),
    ])
    def test_pending_read_gates(self, agent, stub, tool_run, flags, reason):
        """A pending read is replayed only with the same environment, declaration and configuration (P7.1)."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        before = cut.read_bytes()
        result = agent.command("resume", cut, *flags)
        assert result.status == 3 and json.loads(result.out) == {"blocked": reason}
        assert cut.read_bytes() == before

    def test_run_session_recovers_first(self, agent, stub, tool_run):
        """`run --session` finishes the crashed operation before it starts the new run."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        script(stub, [completion("old run done"), completion("new run done")])
        result = agent.again(cut, "next task")
        assert result.status == 0 and result.out == "new run done\n"
        assert [r["outcome"] for r in records(cut, "operationFinished")] == ["completed", "completed"]
        assert len(records(cut, "runStarted")) == 2


class TestAppendSynthetic:
    def test_unknown_tool_and_invalid_arguments(self, agent, stub):
        """After a crash the unknown-tool and invalid-argument calls get their pre-execution synthetics."""
        script(stub, [completion(tool_calls=[tool_call("u", "nope", {}), tool_call("i", "read", "{bad")]),
                      completion("ok")])
        full = agent.run("go")
        cut = crash(agent, full.path, lambda n: n == ("assistant",) or n == ("assistant", "usage"))
        script(stub, [completion("ok")])
        result = agent.command("resume", cut)
        assert result.status == 0
        reasons = [p["results"][0]["reason"] for p in plans(result.err) if p["type"] == "appendSynthetic"]
        assert reasons == ["unknownTool", "invalidArguments"]

    def test_length_answer_gets_truncated_results(self, agent, stub):
        """A crash after a `length` answer with calls appends all truncated results at once, then finishes."""
        script(stub, [completion("partial", tool_calls=[tool_call("a", "read", {"path": "x"}),
                                                        tool_call("b", "read", {"path": "y"})],
                                 finish_reason="length")])
        full = agent.run("go")
        cut = crash(agent, full.path, lambda n: n[0] == "assistant")
        result = agent.command("resume", cut)
        assert result.status == 0 and result.out == "partial\n"
        assert [p["type"] for p in plans(result.err)] == ["appendSynthetic", "finish"]
        assert names(cut)[-2] == ("synthetic", "synthetic")


class TestAbortPlans:
    def test_close_attempt_then_finish_aborted(self, agent, stub, tool_run):
        """A crash after abortRequested with an open attempt closes it (stepFailed aborted), then finishes."""
        cut = crash(agent, tool_run, lambda n: n == ("stepAttempt",))
        agent.command("abort", cut)
        mid = crash(agent, cut, lambda n: n == ("abortRequested",))
        result = agent.command("resume", mid)
        assert result.status == 130
        assert [p["type"] for p in plans(result.err)] == ["closeAttempt", "finish"]
        assert records(mid, "stepFailed")[0]["error"] == {"code": "aborted", "message": "Operation aborted"}

    def test_abort_with_pending_tool(self, agent, stub, tool_run):
        """`abort` on a pending tool writes phase tool, interrupted for it and aborted for the untouched call."""
        cut = crash(agent, tool_run, lambda n: n == ("toolStarted",))
        result = agent.command("abort", cut)
        assert result.status == 0
        requested = records(cut, "abortRequested")[0]
        assert (requested["phase"], requested["toolCallId"]) == ("tool", "c1")
        synthetic = [p for p in plans(result.err) if p["type"] == "appendSynthetic"][0]
        assert [r["reason"] for r in synthetic["results"]] == ["interrupted", "aborted"]
        assert state_of(cut)["operation"] == {"kind": "idle"}

    def test_abort_idle_is_nothing(self, agent, tool_run):
        """`abort` on an idle session writes nothing and says so."""
        before = tool_run.read_bytes()
        result = agent.command("abort", tool_run)
        assert result.status == 0 and "nothing to abort" in result.err and tool_run.read_bytes() == before


class TestCompactionRecovery:
    def test_abort_of_a_compaction(self, agent, stub):
        """`abort` on a crashed compaction writes phase compact, closes the attempt and finishes aborted."""
        from tests.openai_stub import is_summary_request

        script(stub, lambda r: completion("SUM") if is_summary_request(r) else completion("answer"))
        first = agent.run("one")
        agent.again(first.path, "two")
        agent.command("compact", first.path)
        cut = crash(agent, first.path, lambda n: n == ("stepAttempt",), occurrence=3)
        result = agent.command("abort", cut)
        assert result.status == 0
        assert records(cut, "abortRequested")[0]["phase"] == "compact"
        assert 'agent: abort {"phase":"compact"}' in result.err
        assert [p["type"] for p in plans(result.err)] == ["closeAttempt", "finish"]
        state = state_of(cut)
        assert state["operation"] == {"kind": "idle"}
        assert state["activeContext"] == state["transcript"]  # the compaction never happened


    @pytest.mark.parametrize("cut_at,plan_types", [
        (("compactionStarted",), ["startStep", "finish"]),
        (("stepAttempt",), ["startStep", "finish"]),  # the summary attempt is retried (attempt 2)
        (("compaction", "usage"), ["finish"]),
    ])
    def test_compaction_resumes(self, agent, stub, cut_at, plan_types):
        """A compaction cut at each of its transactions resumes to a completed compaction."""
        from tests.openai_stub import is_summary_request

        script(stub, lambda r: completion("SUM", usage={"prompt_tokens": 1, "completion_tokens": 1})
               if is_summary_request(r) else completion("answer"))
        first = agent.run("one")
        agent.again(first.path, "two")
        assert agent.command("compact", first.path).status == 0
        occurrence = 3 if cut_at == ("stepAttempt",) else 1
        cut = crash(agent, first.path, lambda n: n == cut_at, occurrence)
        result = agent.command("resume", cut)
        assert result.status == 0
        assert [p["type"] for p in plans(result.err)] == plan_types
        assert state_of(cut)["activeContext"][0]["content"] == "[Compacted history]\nSUM"
