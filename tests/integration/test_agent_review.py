"""Review tests of the agent's durable order, recovery and provider mapping (SPEC §7, §15.2-§15.6, issue [2/7]).

The OpenAI stub (real loopback socket) and the bash tool look at the session FILE at the moment the request arrives
or the effect runs, so "intent before effect" is observed from outside the agent, not inferred from the final log.
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

INTERRUPTED = "Operation interrupted after execution status became unknown; the tool was not replayed."
ABORTED = "Operation aborted before execution."


def plans(err: str) -> list[dict]:
    return [json.loads(line.split("plan ", 1)[1]) for line in err.splitlines() if line.startswith("agent: plan ")]


def session_file(agent: AgentHarness):
    [path] = agent.sessions.iterdir()
    return path


def observed(agent: AgentHarness, answers: list):
    """A stub script that records the durable log's last transaction when each request arrives, then answers."""
    seen: list[list[tuple[str, ...]]] = []
    queue = list(answers)

    def answer(request):
        seen.append(names(session_file(agent)))
        return queue.pop(0) if queue else Reply(500, {"error": "exhausted"})

    return seen, answer


def crash(agent, path, predicate, occurrence=1):
    return cut_after(path, predicate, agent.tmp / f"crash-{len(list(agent.tmp.iterdir()))}", occurrence)


# ------------------------------------------------------------------------------------------------ durable order


def test_step_attempt_durable_before_every_request(agent, stub):
    """Each provider request arrives only after its stepAttempt is the last durable transaction of the log."""
    seen, answer = observed(agent, [completion(tool_calls=[tool_call("c1", "read", {"path": "n.txt"})]),
                                    completion("done")])
    (agent.workspace / "n.txt").write_text("x")
    script(stub, answer)
    result = agent.run("go")
    assert result.status == 0
    assert len(seen) == 2
    assert seen[0] == [("user", "runStarted"), ("stepAttempt",)]
    assert seen[1][-1] == ("stepAttempt",) and seen[1][-2] == ("toolResult",)


def test_tool_started_durable_before_bash_effect(agent, stub):
    """When bash runs, the log already holds its toolStarted (id = AGENT_TOOL_STARTED_ID) and not yet its result."""
    witness = agent.tmp / "witness"
    command = (f'f=$(ls {agent.sessions}/*.jsonl); '
               f'grep -c "\\"id\\":\\"$AGENT_TOOL_STARTED_ID\\",\\"kind\\":\\"record\\"" "$f" > {witness}; '
               f'grep -c "\\"toolStartedId\\":\\"$AGENT_TOOL_STARTED_ID\\"" "$f" >> {witness}; true')
    script(stub, [completion(tool_calls=[tool_call("c1", "bash", {"command": command})]), completion("ok")])
    result = agent.run("go")
    assert result.status == 0
    assert witness.read_text().split() == ["1", "0"]
    started = records(result.path, "toolStarted")[0]
    assert started["replay"] == "never" and started["toolCallId"] == "c1"


def test_user_and_run_started_are_one_transaction_first(agent, stub):
    """A new run commits [user entry, runStarted] as its first transaction, runStarted citing that entry."""
    script(stub, [completion("hi")])
    result = agent.run("prompt text")
    [first, *_] = transactions(result.path)
    assert [f["kind"] for f in first] == ["entry", "record"]
    assert first[0]["entry"]["message"] == {"role": "user", "content": "prompt text"}
    assert first[1]["record"]["inputEntryId"] == first[0]["id"]


def test_retry_attempt_two_resends_identical_body(agent, stub):
    """A crash-unknown first attempt is retried as attempt 2 with the byte-identical request JSON and no new user entry."""
    script(stub, [completion("lost answer")])
    full = agent.run("question")
    original = stub.requests[0].json
    cut = crash(agent, full.path, lambda n: n == ("stepAttempt",))
    script(stub, [completion("answer two")])
    result = agent.command("resume", cut)
    assert result.status == 0 and result.out == "answer two\n"
    assert stub.requests[-1].json == original
    assert plans(result.err)[0] == {"type": "startStep", "stepKind": "assistant", "attempt": 2,
                                    "stepId": records(cut, "stepAttempt")[0]["stepId"],
                                    "contextThroughEntryId": records(cut, "runStarted")[0]["inputEntryId"]}


# ------------------------------------------------------------------------------------------------ resume / exit codes


def test_resume_idle_and_blocked_write_nothing(agent, stub):
    """resume of an idle session exits 0 and of a blocked one exits 3, each leaving the file byte-identical."""
    script(stub, [completion("ok")])
    full = agent.run("q")
    before = full.path.read_bytes()
    idle = agent.command("resume", full.path)
    assert idle.status == 0 and full.path.read_bytes() == before and plans(idle.err) == []
    cut = crash(agent, full.path, lambda n: n == ("stepAttempt",))
    cut_bytes = cut.read_bytes()
    for _ in range(2):
        blocked = agent.command("resume", cut, "--model", "other")
        assert blocked.status == 3 and json.loads(blocked.out) == {"blocked": "configuration_changed"}
        assert cut.read_bytes() == cut_bytes


def test_failed_run_exit_4_and_model_error(agent, stub):
    """A live 500 is one stepFailed(server_error), then finish failed model_error, exit 4."""
    script(stub, [Reply(500, {"error": {"message": "down"}})])
    result = agent.run("q")
    assert result.status == 4
    assert records(result.path, "stepFailed")[0]["error"]["code"] == "server_error"
    assert records(result.path, "operationFinished")[0]["error"] == {"code": "model_error",
                                                                    "message": "provider request failed"}
    assert len(stub.requests) == 1


# ------------------------------------------------------------------------------------------------ abort phases


def test_abort_with_pending_tool_phase_and_results(agent, stub):
    """abort on a pending started call writes phase tool with its call id, then interrupted + aborted in one transaction."""
    (agent.workspace / "n.txt").write_text("x")
    script(stub, [completion(tool_calls=[tool_call("c1", "read", {"path": "n.txt"}),
                                         tool_call("c2", "read", {"path": "n.txt"})]), completion("done")])
    full = agent.run("q")
    cut = crash(agent, full.path, lambda n: n == ("toolStarted",))
    sent = len(stub.requests)
    result = agent.command("abort", cut)
    assert result.status == 0 and len(stub.requests) == sent
    assert names(cut)[-3:] == [("abortRequested",), ("synthetic", "synthetic"), ("operationFinished",)]
    record = records(cut, "abortRequested")[0]
    assert (record["phase"], record["toolCallId"]) == ("tool", "c1")
    contents = [m["content"] for m in state_of(cut)["transcript"] if m["role"] == "tool"]
    assert contents == [INTERRUPTED, ABORTED]
    started = records(cut, "toolStarted")[0]
    assert transactions(cut)[-2][0]["id"] == started["resultEntryId"]


@pytest.mark.parametrize("point,tail", [
    (("user", "runStarted"), [("abortRequested",), ("operationFinished",)]),
    (("stepAttempt",), [("abortRequested",), ("stepFailed",), ("operationFinished",)]),
])
def test_abort_phase_model(agent, stub, point, tail):
    """abort with no started tool writes phase model (no toolCallId), closes an open attempt, finishes aborted."""
    script(stub, [completion("ok")])
    full = agent.run("q")
    cut = crash(agent, full.path, lambda n: n == point)
    result = agent.command("abort", cut)
    assert result.status == 0
    assert names(cut)[-len(tail):] == tail
    record = records(cut, "abortRequested")[0]
    assert record["phase"] == "model" and "toolCallId" not in record
    assert records(cut, "operationFinished")[-1] == {"type": "operationFinished",
                                                     "operationId": record["operationId"],
                                                     "operationKind": "run", "outcome": "aborted"}


# ------------------------------------------------------------------------------------------------ §15.4 mapping


@pytest.mark.parametrize("body,expect", [
    (completion(None, tool_calls=[tool_call("c1", "ghost", {})], finish_reason="stop"), "toolUse"),
    (completion("x", finish_reason="tool_calls"), "invalid_response"),
    (completion("x", finish_reason="content_filter"), "invalid_response"),
    ({"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": None}]},
     "invalid_response"),
    ({"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]}, "invalid_response"),
    (completion("x", tool_calls=[tool_call("c1", "read", '{"pa')], finish_reason="length"), "length"),
    (completion("x", tool_calls=[tool_call("c1", "read", "{}"), tool_call("c1", "read", "{}")]), "invalid_response"),
    (completion("x", tool_calls=[tool_call("", "read", "{}")]), "invalid_response"),
    (completion("x", tool_calls=[{"id": "c1", "type": "function", "function": {"name": "read", "arguments": {}}}]),
     "invalid_response"),
])
def test_finish_reason_mapping(agent, stub, body, expect):
    """finish_reason and the presence of calls map to stopReason, or to stepFailed invalid_response, per §15.4."""
    script(stub, [body, completion("after")])
    result = agent.run("q")
    if expect == "invalid_response":
        assert result.status == 4
        assert records(result.path, "stepFailed")[0]["error"]["code"] == "invalid_response"
        assert len(stub.requests) == 1
    else:
        entries = [f["entry"] for t in transactions(result.path) for f in t
                   if f["kind"] == "entry" and f["entry"].get("attemptId")]
        assert entries[0]["stopReason"] == expect
        assert result.status == 0


# ------------------------------------------------------------------------------------------------ §7 usage


def test_usage_mapping_and_transaction(agent, stub):
    """OpenAI usage maps to input = prompt - cached - cacheWrite, in the assistant entry's transaction with its attemptId."""
    script(stub, [completion("ok", usage={"prompt_tokens": 100, "completion_tokens": 7,
                                          "prompt_tokens_details": {"cached_tokens": 30, "cache_write_tokens": 20}})])
    result = agent.run("q")
    txn = transactions(result.path)[2]
    assert [f["kind"] for f in txn] == ["entry", "usage"]
    attempt = records(result.path, "stepAttempt")[0]
    assert txn[1]["usage"] == {"input": 50, "output": 7, "cacheRead": 30, "cacheWrite": 20}
    assert txn[1]["attemptId"] == attempt["attemptId"] and "toolStartedId" not in txn[1]
    assert txn[1]["operationId"] == attempt["operationId"]


def test_usage_omitted_without_usage_and_on_overflow(agent, stub):
    """No usage object writes no usage fact; a counter that would overflow the ledger omits the fact, the run completes."""
    script(stub, [completion(tool_calls=[tool_call("c1", "ghost", {})],
                             usage={"prompt_tokens": 2**53 - 1, "completion_tokens": 1}),
                  completion("ok", usage={"prompt_tokens": 5, "completion_tokens": 1})])
    result = agent.run("q")
    assert result.status == 0
    assert names(result.path)[2] == ("assistant", "usage")
    assert names(result.path)[-2] == ("assistant",)
    assert state_of(result.path)["usage"]["input"] == 2**53 - 1
    script(stub, [completion("plain")])
    again = agent.again(result.path, "more")
    assert again.status == 0 and names(result.path)[-2] == ("assistant",)


def test_usage_with_step_failed(agent, stub):
    """A provider error body that reports usage is committed as [stepFailed, usage] in one transaction."""
    script(stub, [Reply(429, {"error": {"message": "slow"}, "usage": {"prompt_tokens": 3, "completion_tokens": 0}})])
    result = agent.run("q")
    assert result.status == 4
    assert names(result.path)[2] == ("stepFailed", "usage")


# ------------------------------------------------------------------------------------------------ sanitizing


def test_lone_surrogates_and_invalid_bytes_are_sanitized(agent, stub):
    """Lone surrogate escapes from the provider and invalid UTF-8 from a tool become U+FFFD; the run completes."""
    # json.dumps (the stub's encoder) writes lone surrogates as \\udXXX escapes: exactly what a provider can send.
    command = "printf '\\355\\240\\200x\\377'"
    script(stub, [completion("a\ud800b", tool_calls=[tool_call("c\udc01", "bash", {"command": command})]),
                  completion("fin\udfff")])
    result = agent.run("q")
    assert result.status == 0, result.err
    transcript = state_of(result.path)["transcript"]
    assert transcript[1]["content"] == "a\ufffdb"
    assert transcript[1]["tool_calls"][0]["id"] == "c\ufffd"
    assert transcript[2]["tool_call_id"] == "c\ufffd"
    assert "\ufffd" in transcript[2]["content"] and "x" in transcript[2]["content"]
    assert transcript[3]["content"] == "fin\ufffd"


def test_surrogate_escape_inside_argument_text_is_invalid_arguments(agent, stub):
    """A \\ud800 escape inside the call's argument TEXT fails strict parsing: invalidArguments, no tool runs."""
    script(stub, [completion(tool_calls=[tool_call("c1", "read", '{"path":"\\ud800"}')]), completion("ok")])
    result = agent.run("q")
    assert result.status == 0
    assert names(result.path)[3] == ("synthetic",)
    assert records(result.path, "toolStarted") == []


# ------------------------------------------------------------------------------------------------ §8.4 snapshot


def test_snapshot_describes_the_request_sent(agent, stub):
    """Every snapshot field is computed from the request actually sent: definitions, output options, identities."""
    from agent.session import digests

    script(stub, [completion("ok")])
    result = agent.run("hi", "--model", "m-9", "--tools", "bash,read")
    body = stub.requests[0].json
    snap = records(result.path, "stepAttempt")[0]["configurationSnapshot"]
    assert snap["tools"] == [{"name": t["function"]["name"], "definitionDigest": digests.definition_digest(t)}
                             for t in body["tools"]]
    options = {k: v for k, v in body.items() if k not in ("model", "messages", "tools")}
    assert snap["outputOptionsDigest"] == digests.output_options_digest(options)
    assert snap["adapterIdentity"] == "openai:chat-completions:v1"
    assert snap["routingIdentity"] == "openai:m-9"
    header = json.loads(result.path.read_bytes().split(b"\n")[0])
    assert header["provider"] == "openai" and header["model"] == "m-9"
    assert header["cwd"] == header["environmentIdentity"] == str(agent.workspace.resolve())


def test_retry_request_arrives_after_attempt_two_is_durable(agent, stub):
    """On resume, the retried request arrives only after the attempt-2 stepAttempt is the last durable transaction."""
    script(stub, [completion("first")])
    full = agent.run("q")
    cut = crash(agent, full.path, lambda n: n == ("stepAttempt",))
    seen = []

    def answer(request):
        seen.append(records(cut, "stepAttempt")[-1]["attempt"])
        seen.append(names(cut)[-1])
        return completion("second")

    script(stub, answer)
    assert agent.command("resume", cut).status == 0
    assert seen == [2, ("stepAttempt",)]


def test_prompt_lone_surrogate_is_sanitized(agent, stub):
    """A prompt carrying a lone surrogate (undecodable argv byte) is committed with U+FFFD instead of being rejected."""
    script(stub, [completion("ok")])
    result = agent.run("bad\udcffbyte")
    assert result.status == 0
    assert state_of(result.path)["transcript"][0]["content"] == "bad\ufffdbyte"


def test_resume_completing_a_crashed_abort(agent, stub):
    """A crash after abortRequested is reconciled by resume through P1 (no request, no new abortRequested)."""
    script(stub, [completion("ok")])
    full = agent.run("q")
    cut = crash(agent, full.path, lambda n: n == ("stepAttempt",))
    assert agent.command("abort", cut).status == 0
    crashed = crash(agent, cut, lambda n: n == ("abortRequested",))
    sent = len(stub.requests)
    result = agent.command("resume", crashed)
    assert len(stub.requests) == sent
    assert names(crashed)[-3:] == [("abortRequested",), ("stepFailed",), ("operationFinished",)]
    assert [p["type"] for p in plans(result.err)] == ["closeAttempt", "finish"]
    assert result.status == 130  # docs/agent.md: resume completing an abort that a crash interrupted
