"""Unit tests of chaos.oracle over hand-built evidence: every invariant passes on a good case and fails, naming
itself and its evidence, on a case that breaks it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agent.session import digests
from chaos import oracle
from chaos.oracle import Ack, Barrier, Evidence, Kill, LaunchInfo, Probe
from chaos.scenario import parse_scenario

ENV = "chaos:unit"
SYSTEM = "You are a test agent."
TOOLS = [
    {"type": "function", "function": {"name": "read", "description": "Read.", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "bash", "description": "Run.", "parameters": {"type": "object"}}},
]
SNAPSHOT = {
    "model": "scripted/model",
    "systemPromptDigest": digests.system_prompt_digest(SYSTEM),
    "tools": [{"name": t["function"]["name"], "definitionDigest": digests.definition_digest(t)} for t in TOOLS],
    "adapterIdentity": "openai:chat-completions:v1",
    "routingIdentity": "openai:scripted/model",
    "outputOptionsDigest": digests.output_options_digest({}),
}
DIGEST = digests.configuration_digest(SNAPSHOT)
DECLARATIONS = {"read": ("safe", "builtin:read:v1"), "bash": ("never", "builtin:bash:v1")}
CURRENT = {
    "configurationDigest": DIGEST,
    "environmentIdentity": ENV,
    "tools": [{**s, "replay": DECLARATIONS[s["name"]][0], "replayKey": DECLARATIONS[s["name"]][1]}
              for s in SNAPSHOT["tools"]],
    "snapshot": SNAPSHOT,
}
SCENARIO = """
name = "unit"
description = "one bash call, then an answer"
[[runs]]
prompt = "Deploy."
[[runs.turns]]
tool_calls = [{ id = "call_1", name = "bash", arguments = { command = "deploy" } }]
[[runs.turns]]
content = "Done."
[expect]
outcome = "completed"
answer = "Done."
effects = { call_1 = 1 }
[[expect.when]]
when = "pending:bash"
effects = { call_1 = [0, 1] }
"""
EXPECT = parse_scenario(SCENARIO).expect


class Log:
    """Builds a valid session log transaction by transaction, remembering offsets for barriers/acks."""

    def __init__(self) -> None:
        self.count = 1
        self.seq = 0
        header = {"createdAt": 1, "cwd": "/w", "environmentIdentity": ENV, "id": self.new_id(), "kind": "header",
                  "model": "scripted/model", "provider": "openai", "version": 2}
        self.data = (json.dumps(header, sort_keys=True, separators=(",", ":")) + "\n").encode()
        self.txs: list[tuple[int, int, int, int, list[str]]] = []  # seq_first, seq_last, start, end, names
        self.boundary: str | None = None
        self.op = self.step = self.attempt_id = None
        self.entry: str | None = None

    def new_id(self) -> str:
        self.count += 1
        return f"018f0000-0000-7000-8000-{self.count:012x}"

    def commit(self, *facts: dict) -> None:
        first = self.seq + 1
        for fact in facts:
            self.seq += 1
            fact["seq"], fact["timestamp"] = self.seq, 1000 + self.seq
        value = facts[0] if len(facts) == 1 else list(facts)
        line = (json.dumps(value, sort_keys=True, separators=(",", ":")) + "\n").encode()
        start = len(self.data)
        self.data += line
        self.txs.append((first, self.seq, start, len(self.data), [oracle.fact_name(f) for f in facts]))

    def run(self, prompt: str = "Deploy.") -> None:
        user, self.op = self.new_id(), self.new_id()
        self.commit({"kind": "entry", "id": user, "entry": {"type": "message", "message": {"role": "user", "content": prompt}}},
                    {"kind": "record", "id": self.new_id(), "record": {"type": "runStarted", "operationId": self.op,
                                                                       "operationKind": "run", "inputEntryId": user}})
        self.boundary = user

    def attempt(self, number: int = 1) -> None:
        if number == 1:
            self.step = self.new_id()
            context = self.boundary
        else:
            context = self._context
        self.attempt_id = self.new_id()
        self._context = context
        self.commit({"kind": "record", "id": self.new_id(), "record": {
            "type": "stepAttempt", "operationId": self.op, "stepId": self.step, "attemptId": self.attempt_id,
            "stepKind": "assistant", "attempt": number, "contextThroughEntryId": context,
            "configurationSnapshot": SNAPSHOT, "configurationDigest": DIGEST}})

    def answer(self, content: str | None = None, calls: list[tuple[str, str, str]] = ()) -> None:
        self.entry = self.new_id()
        message: dict = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                     for i, n, a in calls]
        self.commit({"kind": "entry", "id": self.entry, "entry": {
            "type": "message", "stepId": self.step, "attemptId": self.attempt_id,
            "stopReason": "toolUse" if calls else "stop", "message": message}},
            {"kind": "usage", "id": self.new_id(), "operationId": self.op, "attemptId": self.attempt_id,
             "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0}})
        self.boundary = self.entry

    def started(self, call_id: str = "call_1", name: str = "bash", arguments: dict | None = None, index: int = 0,
                env: str = ENV) -> tuple[str, str]:
        ts, result = self.new_id(), self.new_id()
        replay, key = DECLARATIONS[name]
        self.commit({"kind": "record", "id": ts, "record": {
            "type": "toolStarted", "operationId": self.op, "stepId": self.step, "assistantEntryId": self.entry,
            "toolIndex": index, "toolCallId": call_id, "toolName": name,
            "arguments": {"command": "deploy"} if arguments is None else arguments, "replay": replay,
            "replayKey": key, "environmentIdentity": env, "resultEntryId": result}})
        return ts, result

    def result(self, ts: str, result: str, call_id: str = "call_1", name: str = "bash", content: str = "ok",
               interrupted: bool = False) -> None:
        if interrupted:
            content = "Operation interrupted after execution status became unknown; the tool was not replayed."
        self.commit({"kind": "entry", "id": result, "entry": {
            "type": "message", "stepId": self.step, "toolStartedId": ts, "toolName": name,
            "message": {"role": "tool", "tool_call_id": call_id, "content": content},
            "result": {"type": "synthetic", "reason": "interrupted"} if interrupted else {"type": "success"}}})
        self.boundary = result

    def finish(self, outcome: str = "completed", error: dict | None = None) -> None:
        record = {"type": "operationFinished", "operationId": self.op, "operationKind": "run", "outcome": outcome}
        if outcome == "completed":
            record.update(completion="normal", finalEntryId=self.entry)
        if error:
            record["error"] = error
        self.commit({"kind": "record", "id": self.new_id(), "record": record})


def good_log() -> Log:
    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_1", "bash", '{"command":"deploy"}')])
    ts, res = log.started()
    log.result(ts, res)
    log.attempt()
    log.answer("Done.")
    log.finish()
    return log


def request(seq: int, turn: int, messages: list[dict], kind: str = "answer", finding: str | None = None) -> dict:
    body = {"model": "scripted/model", "messages": [{"role": "system", "content": SYSTEM}, *messages], "tools": TOOLS}
    return {"seq": seq, "run": 0, "turn": turn, "attempt": 1, "kind": kind, "status": 200, "finding": finding,
            "body": body}


GOOD_REQUESTS = [
    request(1, 0, [{"role": "user", "content": "Deploy."}]),
    request(2, 1, [{"role": "user", "content": "Deploy."},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command":"deploy"}'}}]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]),
]


def evidence(log: Log, *, writers: dict[int, int] | None = None, launches: list[LaunchInfo] | None = None,
             **kw) -> Evidence:
    """Evidence of a case whose transactions were announced and acknowledged as ``log`` wrote them."""
    writers = writers or {}
    barriers, acks = [], []
    for tx, (first, last, start, end, names) in enumerate(log.txs, 1):
        launch = writers.get(first, 0)
        for phase, offset in (("before-write", start), ("after-write", end), ("after-sync", end)):
            barriers.append(Barrier(len(barriers), launch, phase, names, first, last, offset,
                                    start if phase != "after-sync" else end, offset))
        acks.append(Ack(tx, launch, first, last, start, end, end, end, log.data[start:end]))
    sha = oracle.sha(log.data)
    values = dict(
        case_id="unit::x", schedule=(), final_log=log.data, acknowledged=acks, barriers=barriers,
        launches=launches or [LaunchInfo(0, "step", 0, current=CURRENT)],
        requests=list(GOOD_REQUESTS), witness=["call_1"],
        probes=[Probe(0, "", sha, sha, len(log.data), len(log.data))] * 2,
        expect=EXPECT, prompts=["Deploy."], files={},
    )
    values.update(kw)
    return Evidence(**values)


def killed_after(log: Log, tx: int, fault: str = "kill", **kw) -> Evidence:
    """Evidence of a case SIGKILLed at the after-sync barrier of transaction ``tx`` (1-based) and resumed."""
    writers = {log.txs[i][0]: (0 if i < tx else 1) for i in range(len(log.txs))}
    launches = [LaunchInfo(0, "step", None, killed=True, current=CURRENT), LaunchInfo(1, "resume", 0, current=CURRENT)]
    kill = Kill(fault, 0, log.data[: log.txs[tx - 1][3]], barrier=3 * tx - 1)
    return evidence(log, writers=writers, launches=launches, kills=[kill], **kw)


def failing(ev: Evidence) -> dict[str, list[str]]:
    return {r.name: [f.text() for f in r.findings] for r in oracle.check(ev) if not r.ok}


def with_baseline(ev: Evidence) -> Evidence:
    ev.baseline = oracle.baseline_facts(ev, oracle.check(ev))
    return ev


# --------------------------------------------------------------------------------------------------------------


def test_a_correct_case_passes_every_invariant_and_says_what_it_checked():
    """A clean crash-free case passes all seven invariants, each with a non-empty list of what it checked."""
    ev = with_baseline(evidence(good_log()))
    results = oracle.check(ev)
    assert [r.name for r in results] == list(oracle.INVARIANTS)
    assert failing(ev) == {}
    assert all(r.checked for r in results)
    assert ev.baseline.ok and ev.baseline.witnesses == {"call_1": 1} and ev.baseline.results == {"call_1": "ok"}


# -- 1. log-reduces


@pytest.mark.parametrize("line", [b'{"not a fact"\n', b"[" * 100_000 + b"]" * 100_000 + b"\n"],
                         ids=["not-json", "nested-deeper-than-json-parses"])
def test_log_reduces_fails_on_a_corrupt_line_and_names_it(line):
    """A complete line that is not JSON (or nests deeper than the parser recurses) makes the final log fail to
    reduce, reported with code and line, never an exception of the harness."""
    log = good_log()
    data = log.data + line
    found = failing(evidence(log, final_log=data))["log-reduces"]
    assert any("does not reduce: MALFORMED_JSON" in f and "line 10" in f for f in found)


def test_log_reduces_fails_on_a_torn_tail_left_behind():
    """Bytes after the last LF at the end of the case mean the agent left a partial write."""
    log = good_log()
    found = failing(evidence(log, final_log=log.data + b'{"kind":'))["log-reduces"]
    assert any("after the last LF" in f for f in found)


def test_log_reduces_fails_when_tool_started_arguments_differ_from_the_call_text():
    """A toolStarted whose arguments are not the parsed call text breaks a writer obligation (SPEC §12)."""
    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_1", "bash", '{"command":"deploy"}')])
    ts, res = log.started(arguments={"command": "rm -rf /"})
    log.result(ts, res)
    log.attempt()
    log.answer("Done.")
    log.finish()
    found = failing(evidence(log))["log-reduces"]
    assert any("do not equal the parsed call text" in f and "call call_1" in f and "line 5" in f for f in found)


def test_log_reduces_fails_when_the_environment_identity_is_not_the_configured_one():
    """toolStarted.environmentIdentity must be the identity the writing launch was configured with."""
    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_1", "bash", '{"command":"deploy"}')])
    ts, res = log.started(env="somewhere-else")
    log.result(ts, res)
    log.attempt()
    log.answer("Done.")
    log.finish()
    found = failing(evidence(log))["log-reduces"]
    assert any("environmentIdentity 'somewhere-else'" in f for f in found)


def test_log_reduces_fails_on_a_prefix_that_is_not_well_formed():
    """A new step started while a call of the previous answer is untouched is a valid but ill-formed prefix."""
    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_1", "bash", '{"command":"deploy"}')])
    log.attempt()  # the reducer accepts this (untouched calls are not its business, SPEC §12)
    ev = evidence(log, kills=[Kill("tx:4@after-sync", 0, log.data)], requests=GOOD_REQUESTS[:1], witness=[])
    found = failing(ev)["log-reduces"]
    assert any("kill 1 (tx:4@after-sync): prefix is not well-formed" in f and "'call_1'" in f for f in found)
    assert any("a new step started while calls of the previous answer are unresolved" in f for f in found)


def test_log_reduces_fails_when_committed_bytes_at_a_kill_were_rewritten():
    """Recovery must only append: a kill snapshot whose committed bytes differ from the final log fails."""
    log = good_log()
    snapshot = bytearray(log.data[: log.txs[2][3]])
    snapshot[-10] = ord("X") if snapshot[-10] != ord("X") else ord("Y")
    ev = evidence(log, kills=[Kill("tx:3@after-sync", 0, bytes(snapshot))])
    found = failing(ev)["log-reduces"]
    assert any("not kept by recovery" in f or "does not reduce" in f for f in found)


@pytest.mark.parametrize("tx,torn", [(1, b""), (3, b""), (5, b'{"kind":"rec'), (8, b"")])
def test_a_kill_snapshot_the_final_log_extends_is_viewed_as_its_own_reduction_would_be(tx, torn):
    """A snapshot whose committed bytes begin the final log is reduced in the final log's pass, to the same view."""
    log = good_log()
    snapshot = log.data[: log.txs[tx - 1][3]] + torn
    ev = evidence(log, kills=[Kill(f"tx:{tx}@after-sync", 0, snapshot)])
    view, alone = ev.kill_views[0], oracle.LogView(snapshot)
    assert view.reduction is ev.final.prefixes[log.txs[tx - 1][3]]  # the final log's pass gave it
    assert view.reduction == alone.reduction and view.reduction.boundary == alone.reduction.boundary
    assert (view.error, view.committed, view.torn, view.header) == (alone.error, alone.committed, alone.torn,
                                                                      alone.header)
    assert [(l.number, l.facts, l.start, l.end) for l in view.lines] == [(l.number, l.facts, l.start, l.end)
                                                                          for l in alone.lines]
    assert vars(view.state()) == vars(alone.state())
    assert all(vars(view.state(upto)) == vars(alone.state(upto)) for upto in (-2, -1, 0, 1, 99))


def test_a_kill_snapshot_with_other_committed_bytes_is_reduced_on_its_own():
    """A snapshot that does not begin the final log (here: a corrupt line) is judged by its own bytes."""
    log = good_log()
    start, end = log.txs[1][3], log.txs[2][3]
    snapshot = log.data[:start] + b"X" + log.data[start + 1: end]  # same length: it ends where a final line does
    ev = evidence(log, kills=[Kill("tx:3@after-sync", 0, snapshot)])
    assert not ev.kill_views[0].reduces and end not in ev.final.prefixes and ev.final.data[end - 1:end] == b"\n"
    found = failing(ev)["log-reduces"]
    assert any("the log at the kill does not reduce: MALFORMED_JSON" in f for f in found)


def test_kill_snapshots_are_reduced_on_their_own_when_the_final_log_does_not_reduce():
    """A final log corrupt after the kill leaves the snapshot's own (clean) reduction standing."""
    log = good_log()
    snapshot = log.data[: log.txs[2][3]]
    ev = evidence(log, final_log=log.data + b'{"not a fact"\n', kills=[Kill("tx:3@after-sync", 0, snapshot)])
    assert not ev.final.reduces and ev.kill_views[0].reduces
    assert ev.kill_views[0].reduction == oracle.LogView(snapshot).reduction


# -- 2. acknowledged-durable


def test_acknowledged_durable_fails_when_an_acknowledged_transaction_is_gone():
    """A transaction acknowledged at after-sync that is missing from the final log is reported byte range and seq."""
    log = good_log()
    lost = log.data[: log.txs[-1][2]]  # the terminal record was acknowledged, then lost
    found = failing(evidence(log, final_log=lost))["acknowledged-durable"]
    assert any("not in the final log byte for byte" in f and "seq 11" in f for f in found)


def test_acknowledged_durable_fails_when_the_reported_offset_is_not_the_file_size():
    """An after-sync offset that does not match the file the supervisor saw is a lie about durability."""
    ev = evidence(good_log())
    ev.acknowledged[1] = replace(ev.acknowledged[1], file_size=ev.acknowledged[1].end - 3)
    found = failing(ev)["acknowledged-durable"]
    assert any("after-sync reported offset" in f for f in found)


def test_acknowledged_durable_fails_when_a_kill_snapshot_lost_an_acknowledged_transaction():
    """The log a restart finds must hold everything acknowledged before the kill."""
    log = good_log()
    ev = evidence(log, kills=[Kill("tx:5@after-sync", 0, log.data[: log.txs[3][3]])])
    ev.barriers = [b for b in ev.barriers if b.index <= 14]  # the kill fired at tx 5's after-sync (barrier 14)
    found = failing(ev)["acknowledged-durable"]
    assert any("missing from the log the restart found" in f and "kill 1" in f for f in found)


# -- 3. converges


def test_converges_fails_when_the_case_ends_with_an_open_operation():
    """An unfinished run after the last launch exited 0 is a session that did not converge."""
    log = Log()
    log.run()
    log.attempt()
    log.answer("Done.")
    ev = evidence(log, requests=GOOD_REQUESTS[:1], witness=[])
    found = failing(ev)["converges"]
    assert any("did not converge" in f and "exited 0" in f for f in found)


def test_converges_fails_on_a_blocked_reason_the_facts_do_not_justify():
    """Blocked configuration_changed with an open attempt whose digest equals the current one is unjustified."""
    log = Log()
    log.run()
    log.attempt()
    launches = [LaunchInfo(0, "step", None, killed=True, current=CURRENT),
                LaunchInfo(1, "resume", 3, stdout='{"blocked": "configuration_changed"}\n', current=CURRENT)]
    ev = evidence(log, launches=launches, requests=[], witness=[], kills=[Kill("tx:2@after-sync", 0, log.data)],
                  probes=[Probe(3, '{"blocked": "configuration_changed"}\n', "s", "s", 1, 1)])
    found = failing(ev)["converges"]
    assert any("blocked configuration_changed, but the durable prefix does not justify it" in f for f in found)
    changed = {**CURRENT, "configurationDigest": "sha256:" + "9" * 64}
    launches[1].current = changed
    assert "converges" not in failing(ev)


def test_converges_fails_when_a_later_resume_changes_the_log():
    """Resume after the case ended must append nothing."""
    ev = evidence(good_log())
    ev.probes = [Probe(0, "", "sha256:a", "sha256:b", 10, 20), ev.probes[1]]
    found = failing(ev)["converges"]
    assert any("probe 1 (resume): resume changed the log (10 -> 20 bytes)" in f for f in found)


def test_blocked_justification_recognises_each_reason_from_the_facts():
    """Each blocked reason is justified exactly by the facts that make the planner block for it."""
    log = Log()
    log.run()
    log.attempt()
    state = oracle.LogView(log.data).state()
    other = {**CURRENT, "configurationDigest": "sha256:" + "9" * 64}
    moved = {**CURRENT, "environmentIdentity": "elsewhere"}
    assert oracle.blocked_justification(state, other, "configuration_changed")
    assert not oracle.blocked_justification(state, CURRENT, "configuration_changed")
    assert oracle.blocked_justification(state, moved, "environment_changed")
    assert not oracle.blocked_justification(state, CURRENT, "environment_changed")
    assert not oracle.blocked_justification(state, CURRENT, "attempts_exhausted")
    log.attempt(2)
    assert oracle.blocked_justification(oracle.LogView(log.data).state(), CURRENT, "attempts_exhausted")
    safe = Log()
    safe.run()
    safe.attempt()
    safe.answer(calls=[("call_r", "read", '{"path":"a"}')])
    safe.started("call_r", "read", {"path": "a"})
    state = oracle.LogView(safe.data).state()
    redeclared = {**CURRENT, "tools": [{**t, "replay": "never"} if t["name"] == "read" else t for t in CURRENT["tools"]]}
    assert oracle.blocked_justification(state, redeclared, "replay_declaration_changed")
    assert not oracle.blocked_justification(state, CURRENT, "replay_declaration_changed")


# -- 4. transcript-legal


def test_transcript_legal_fails_on_a_request_a_real_provider_rejects():
    """A request the scripted server answered 400 as illegal is a finding naming the request."""
    ev = evidence(good_log())
    ev.requests = ev.requests + [request(3, 1, [], kind="illegal", finding="tool result for unknown call id 'x'")]
    found = failing(ev)["transcript-legal"]
    assert any(f.startswith("request 3:") and "unknown call id" in f for f in found)


def test_transcript_legal_fails_on_a_call_left_without_result_in_a_finished_session():
    """A run finished failed with an unresolved call leaves a call without a result (and breaks §12)."""
    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_1", "bash", '{"command":"deploy"}')])
    log.finish("failed", {"code": "step_budget_exhausted", "message": "budget"})
    ev = evidence(log, requests=GOOD_REQUESTS[:1], witness=[], expect=None)
    failures = failing(ev)
    assert any("tool call has no result" in f and "call call_1" in f for f in failures["transcript-legal"])
    assert any("operationFinished(failed) with unresolved calls" in f for f in failures["log-reduces"])


def test_transcript_legal_fails_when_the_model_was_sent_another_result_than_the_durable_one():
    """The tool result sent to the model must be the one in the log."""
    ev = evidence(good_log())
    body = json.loads(json.dumps(ev.requests[1]["body"]))
    body["messages"][-1]["content"] = "something else"
    ev.requests = [ev.requests[0], {**ev.requests[1], "body": body}]
    found = failing(ev)["transcript-legal"]
    assert any("the model was sent 'something else'" in f for f in found)


# -- 5. effects-at-most-once


def test_effects_fail_when_a_never_tool_ran_twice():
    """Two witnesses of one bash call violate at-most-once (and the exactly-once of a real result)."""
    ev = with_baseline(evidence(good_log()))
    ev.witness = ["call_1", "call_1"]
    found = failing(ev)["effects-at-most-once"]
    assert any("a never tool's effect happened 2 times" in f for f in found)
    assert any("witnessed 2 time(s), not once" in f for f in found)


def test_effects_fail_on_an_effect_without_durable_intent():
    """A witnessed effect for a call that has no toolStarted in the log is an effect before intent."""
    log = Log()
    log.run()
    log.attempt()
    log.answer("Done.")
    log.finish()
    ev = evidence(log, requests=GOOD_REQUESTS[:1], witness=["call_9"], expect=None)
    found = failing(ev)["effects-at-most-once"]
    assert any("no toolStarted is durable" in f and "call call_9" in f for f in found)


def test_effects_fail_when_another_process_re_ran_a_never_tool():
    """A real result for a never tool written by a later process than its intent is a forbidden replay."""
    log = good_log()
    result_seq = log.txs[4][0]
    writers = {log.txs[i][0]: (0 if i < 4 else 1) for i in range(len(log.txs))}
    launches = [LaunchInfo(0, "step", None, killed=True, current=CURRENT), LaunchInfo(1, "resume", 0, current=CURRENT)]
    snapshot = log.data[: log.txs[3][3]]
    ev = evidence(log, writers=writers, launches=launches, kills=[Kill("toolStarted@after-sync#1", 0, snapshot)])
    found = failing(ev)["effects-at-most-once"]
    assert any("never tool 'bash' started by launch 0 was re-run by launch 1" in f for f in found)
    assert ev.writers[result_seq] == 1


def replayed_read(content: str, *, interrupted_read_first: bool = False) -> Evidence:
    """The evidence of a read of `a` whose intent launch 0 made durable before its kill at that intent's after-sync,
    replayed by launch 1 returning ``content``, against a crash-free run that read "text";
    ``interrupted_read_first``: an interrupted (synthetic) read of `b` comes before it."""
    def log_of(read: str) -> Log:
        log = Log()
        log.run()
        log.attempt()
        first = [("call_a", "read", '{"path":"b"}')] if interrupted_read_first else []
        log.answer(calls=[*first, ("call_r", "read", '{"path":"a"}')])
        if interrupted_read_first:
            ts, res = log.started("call_a", "read", {"path": "b"})
            log.result(ts, res, "call_a", "read", interrupted=True)
        ts, res = log.started("call_r", "read", {"path": "a"}, index=len(first))
        log.result(ts, res, "call_r", "read", read)
        log.attempt()
        log.answer("Done.")
        log.finish()
        return log

    base = evidence(log_of("text"), witness=[], expect=None, requests=[])
    facts = oracle.baseline_facts(base, oracle.check(base))
    log = log_of(content)
    intent = 5 if interrupted_read_first else 3  # the transaction of call_r's toolStarted
    writers = {log.txs[i][0]: (0 if i <= intent else 1) for i in range(len(log.txs))}
    launches = [LaunchInfo(0, "step", None, killed=True, current=CURRENT), LaunchInfo(1, "resume", 0, current=CURRENT)]
    kill = f"toolStarted@after-sync#{2 if interrupted_read_first else 1}"
    return evidence(log, writers=writers, launches=launches, witness=[], expect=None, requests=[], baseline=facts,
                    kills=[Kill(kill, 0, log.data[: log.txs[intent][3]])])


def test_effects_accept_a_replayed_safe_read_with_the_baseline_content_only():
    """A replayed read passes when it returns what the crash-free run read, and fails otherwise."""
    ev = replayed_read("other text")
    assert any("replayed read returned 'other text'" in f for f in failing(ev)["effects-at-most-once"])
    ev = replayed_read("text")
    assert "effects-at-most-once" not in failing(ev)


def test_an_interrupted_read_before_a_replayed_read_does_not_excuse_its_content():
    """Only an interrupted never tool may have changed what a later replayed read sees: after an interrupted safe
    read, a replayed read that returns other than the crash-free run's content still fails."""
    ev = replayed_read("other text", interrupted_read_first=True)
    assert any("replayed read returned 'other text'" in f for f in failing(ev)["effects-at-most-once"])


# -- 6. attempts-bounded


def test_attempts_bounded_fails_on_a_re_sent_request_without_a_new_attempt():
    """Two requests for one step with one durable attempt is a retry the log does not show (e.g. a live retry)."""
    ev = evidence(good_log())
    ev.requests = [ev.requests[0], {**ev.requests[0], "seq": 2, "attempt": 2}, {**ev.requests[1], "seq": 3}]
    found = failing(ev)["attempts-bounded"]
    assert any(f.startswith("run 0 turn 0") and "only 1 durable attempt" in f for f in found)


def test_attempts_bounded_fails_on_attempt_2_without_a_kill_that_left_attempt_1_open():
    """Attempt 2 is only for a crash-unknown attempt 1: without such a kill it is a violation."""
    log = Log()
    log.run()
    log.attempt()
    open_prefix = log.data
    log.attempt(2)
    log.answer("Done.")
    log.finish()
    ev = evidence(log, requests=GOOD_REQUESTS[:1], witness=[], expect=None)
    assert any("no kill left attempt 1 open" in f for f in failing(ev)["attempts-bounded"])
    ev = evidence(log, requests=GOOD_REQUESTS[:1], witness=[], expect=None,
                  kills=[Kill("stepAttempt@after-sync#1", 0, open_prefix)])
    assert "attempts-bounded" not in failing(ev)


def test_attempts_bounded_fails_on_a_request_without_a_durable_attempt():
    """A model request for a step whose stepAttempt is not in the log broke intent-before-request."""
    ev = evidence(good_log())
    ev.requests = ev.requests + [request(3, 2, [])]
    found = failing(ev)["attempts-bounded"]
    assert any(f.startswith("run 0 turn 2") and "no stepAttempt" in f for f in found)


def test_attempts_bounded_fails_on_a_request_after_a_live_failure():
    """After a step failed live (stepFailed with a provider code) no request for it may follow."""
    log = Log()
    log.run()
    log.attempt()
    log.commit({"kind": "record", "id": log.new_id(), "record": {
        "type": "stepFailed", "operationId": log.op, "stepId": log.step, "attemptId": log.attempt_id,
        "error": {"code": "server_error", "message": "HTTP 500"}}})
    log.finish("failed", {"code": "model_error", "message": "provider request failed"})
    reqs = [GOOD_REQUESTS[0], {**GOOD_REQUESTS[0], "seq": 2, "attempt": 2}]
    ev = evidence(log, requests=reqs, witness=[], expect=None)
    found = failing(ev)["attempts-bounded"]
    assert any("after the step's live failure (server_error)" in f for f in found)


# -- 7. outcome


def test_outcome_fails_on_a_wrong_final_answer():
    """The final answer must be the scenario's."""
    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_1", "bash", '{"command":"deploy"}')])
    ts, res = log.started()
    log.result(ts, res)
    log.attempt()
    log.answer("Something else.")
    log.finish()
    found = failing(evidence(log))["outcome"]
    assert any("final answer is 'Something else.', expected 'Done.'" in f for f in found)


def test_outcome_uses_the_rule_that_matches_the_state_at_the_last_kill():
    """With no kill an unwitnessed effect fails (expected 1); after a kill with bash pending 0 is allowed."""
    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_1", "bash", '{"command":"deploy"}')])
    ts, res = log.started()
    pending = log.data
    log.result(ts, res, interrupted=True)
    log.attempt()
    log.answer("Done.")
    log.finish()
    no_kill = evidence(log, witness=[])
    no_kill.requests[1] = request(2, 1, [])
    assert any("effect witnessed 0 time(s), expected 1" in f for f in failing(no_kill)["outcome"])
    killed = evidence(log, witness=[], kills=[Kill("toolStarted@after-sync#1", 0, pending)])
    killed.requests[1] = request(2, 1, [])
    assert "outcome" not in failing(killed)


def test_outcome_fails_when_the_run_ended_otherwise_than_expected():
    """A failed run where the scenario expects completed names both outcomes."""
    log = Log()
    log.run()
    log.attempt()
    log.answer("")
    log.finish("failed", {"code": "empty_response", "message": "model returned an empty final answer"})
    found = failing(evidence(log, requests=GOOD_REQUESTS[:1], witness=[]))["outcome"]
    assert any("final outcome is failed:empty_response, expected completed" in f for f in found)


def test_an_outcome_failure_names_the_conditions_at_the_kill_and_the_rule_that_covers_them():
    """The evidence lists the conditions that held at the last kill and an [[expect.when]] rule for the outcome seen."""
    log = Log()
    log.run()
    log.attempt()
    log.answer("")
    log.finish("failed", {"code": "empty_response", "message": "model returned an empty final answer"})
    ev = killed_after(log, 2, requests=GOOD_REQUESTS[:1], witness=[])  # killed with the step's attempt open
    [rule] = [f for f in failing(ev)["outcome"] if "conditions that held" in f]
    assert "conditions that held at kill 1 (kill): run:1, open-attempt:1;" in rule
    assert rule.endswith('this rule covers it: [[expect.when]] when = ["run:1", "open-attempt:1"] '
                         'outcome = "failed:empty_response"')


def test_an_unfinished_run_has_no_covering_rule():
    """An outcome no expectation can accept (the run never finished) says so instead of proposing a rule."""
    log = Log()
    log.run()
    log.attempt()
    found = failing(evidence(log, requests=GOOD_REQUESTS[:1], witness=[]))["outcome"]
    assert any("no expectation rule can accept unfinished:run" in f and "conditions that held at no crash: no-kill"
               in f for f in found)


def test_conditions_at_names_each_condition_in_its_most_specific_form():
    """Pending tools, settled stop reasons and run numbers come with their argument; nothing vacuous is listed."""
    from agent.session.reducer import reduce_session

    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_1", "bash", '{"command":"deploy"}')])
    log.started()
    state = reduce_session(log.data)
    assert oracle.conditions_at(state) == ["run:1", "settled:toolUse", "pending:bash"]
    assert oracle.conditions_at(None) == ["no-kill"]


def test_evidence_text_is_never_cut():
    """A long argument text appears whole in the finding, not cut with an ellipsis."""
    long_text = '{"command":"' + "x" * 500 + '"}'
    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_1", "bash", long_text)])
    ts, res = log.started(arguments={"command": "y" * 500})
    log.result(ts, res)
    found = failing(evidence(log, witness=[]))["log-reduces"]
    assert any("y" * 500 in f and "x" * 500 in f and "…" not in f for f in found)


def test_outcome_differential_fails_when_the_recovered_log_differs_from_the_baseline():
    """With no open attempt and no pending tool at the kill, the final log must equal the baseline's (ids renamed)."""
    log = good_log()
    base = evidence(log)
    baseline = oracle.baseline_facts(base, oracle.check(base))
    ev = killed_after(log, 3, baseline=baseline)
    assert failing(ev) == {}
    other = Log()
    other.run()
    other.attempt()
    other.answer(calls=[("call_1", "bash", '{"command":"deploy"}')])
    ts, res = other.started()
    other.result(ts, res, content="ok, deployed twice")
    other.attempt()
    other.answer("Done.")
    other.finish()
    ev2 = killed_after(other, 3, baseline=baseline)
    ev2.requests[1] = request(2, 1, [])
    found = failing(ev2)["outcome"]
    assert any("differs from the crash-free baseline at transaction 5" in f for f in found)


def test_normalize_log_renames_ids_consistently_and_drops_usage():
    """Two logs of the same work with different ids normalize equal; a renamed-but-inconsistent id does not."""
    a, b = good_log(), good_log()
    b.data = b.data.replace(b"8000-0000000000", b"8000-00000000ff")  # shift every id: same structure
    assert oracle.normalize_log(a.data) == oracle.normalize_log(b.data)
    assert all(f.get("kind") != "usage" for tx in oracle.normalize_log(a.data) for f in tx)


@pytest.mark.parametrize("name", oracle.INVARIANTS)
def test_every_invariant_is_a_named_pure_function(name):
    """Each invariant is checked by its own function, which returns a result carrying its own name."""
    ev = evidence(good_log())
    assert oracle.CHECKS[name](ev).name == name


# -- expectations after SIGINT, ioerror and the abort way out of blocked

ABORT_SCENARIO = parse_scenario(SCENARIO.replace('[expect]', '''[restart]
model = "scripted/other"
then = "abort"
[expect]''') + '''
[[expect.when]]
when = "open-attempt"
outcome = "blocked:configuration_changed"
effects = {}
''')


def aborted_log() -> Log:
    log = Log()
    log.run()
    log.attempt()
    log.commit({"kind": "record", "id": log.new_id(), "record": {
        "type": "abortRequested", "operationId": log.op, "operationKind": "run", "phase": "model", "reason": "escape"}})
    log.commit({"kind": "record", "id": log.new_id(), "record": {
        "type": "stepFailed", "operationId": log.op, "stepId": log.step, "attemptId": log.attempt_id,
        "error": {"code": "aborted", "message": "Operation aborted"}}})
    log.finish("aborted")
    return log


def test_outcome_expects_the_interrupted_operation_to_end_aborted():
    """After a SIGINT the run must end aborted with abortRequested; the script's 'completed' no longer applies."""
    log = aborted_log()
    sigint = [oracle.Fired("int", "int:stepAttempt@after-sync#1", 0, barrier=5)]
    ev = evidence(log, fired=sigint, requests=[], witness=[], launches=[LaunchInfo(0, "step", 130, current=CURRENT)])
    assert failing(ev) == {}
    ignored = evidence(good_log(), fired=sigint)
    found = failing(ignored)["outcome"]
    assert any("SIGINT (int:stepAttempt@after-sync#1) hit run operation" in f and "ended completed without "
               "abortRequested" in f for f in found)


def test_outcome_expects_an_abort_durable_at_the_crash_to_end_aborted():
    """A kill after a SIGINT's abortRequested is durable: recovery must finish the run aborted (P1), not as scripted."""
    log = aborted_log()
    at_abort = log.data[: log.txs[2][3]]  # run, attempt, abortRequested: durable when the kill came
    sigint = [oracle.Fired("int", "int:stepAttempt@after-sync#1", 0, barrier=5),
              oracle.Fired("kill", "tx:4@before-write", 0, barrier=9)]
    launches = [LaunchInfo(0, "step", None, killed=True, current=CURRENT), LaunchInfo(1, "resume", 0, current=CURRENT)]
    writers = {log.txs[i][0]: (0 if i < 3 else 1) for i in range(len(log.txs))}
    kw = dict(writers=writers, fired=sigint, requests=[], witness=[], launches=launches)
    ev = evidence(log, kills=[Kill("tx:4@before-write", 0, at_abort, barrier=9)], **kw)
    assert "outcome" not in failing(ev)
    assert any("abortRequested durable at kill 1" in c for c in oracle.outcome(ev).checked)
    # The kill after the abort had ended it: the run's aborted ending is durable, the script's 'completed' moot.
    writers = {log.txs[i][0]: 0 for i in range(len(log.txs))}
    ended = evidence(log, kills=[Kill("tx:6@after-sync", 0, log.data, barrier=12)], **{**kw, "writers": writers})
    assert "outcome" not in failing(ended)
    # Planted: the recovery ignores the durable abort and completes the run as scripted.
    completed = Log()
    completed.run()
    completed.attempt()
    completed.commit({"kind": "record", "id": completed.new_id(), "record": {
        "type": "abortRequested", "operationId": completed.op, "operationKind": "run", "phase": "model",
        "reason": "escape"}})
    assert completed.data == at_abort
    completed.answer("Done.")
    completed.finish()
    writers = {completed.txs[i][0]: (0 if i < 3 else 1) for i in range(len(completed.txs))}
    ignored = evidence(completed, kills=[Kill("tx:4@before-write", 0, at_abort, barrier=9)],
                       **{**kw, "writers": writers})
    assert any("abortRequested of run operation" in f and "was durable at kill 1" in f and "which ended completed" in f
               for f in failing(ignored)["outcome"])


def test_an_expectation_written_for_an_aborted_run_stands_after_a_durable_abort():
    """A rule whose outcome is aborted keeps its files and effects after a kill inside the abort: a witnessed effect
    the rule forbids still fails (the P1 override applies only to expectations of an uninterrupted run)."""
    log = aborted_log()
    at_abort = log.data[: log.txs[2][3]]
    expect = parse_scenario(SCENARIO + '[[expect.when]]\nwhen = "open-attempt"\noutcome = "aborted"\n'
                            'effects = { call_1 = 0 }\n').expect
    launches = [LaunchInfo(0, "step", None, killed=True, current=CURRENT), LaunchInfo(1, "resume", 0, current=CURRENT)]
    writers = {log.txs[i][0]: (0 if i < 3 else 1) for i in range(len(log.txs))}
    kw = dict(writers=writers, requests=[], launches=launches, expect=expect,
              kills=[Kill("tx:4@before-write", 0, at_abort, barrier=9)])
    assert "outcome" not in failing(evidence(log, witness=[], **kw))
    found = failing(evidence(log, witness=["call_1"], **kw))["outcome"]
    assert any("effect witnessed 1 time(s), expected 0" in f for f in found)


def test_every_sigint_after_the_last_crash_holds_its_operation_to_an_abort():
    """Two SIGINTs on two runs: each run must end aborted, the second as much as the first."""
    log = Log()
    for prompt in ("Deploy.", "Again."):
        log.run(prompt)
        log.attempt()
        log.commit({"kind": "record", "id": log.new_id(), "record": {
            "type": "abortRequested", "operationId": log.op, "operationKind": "run", "phase": "model",
            "reason": "escape"}})
        log.commit({"kind": "record", "id": log.new_id(), "record": {
            "type": "stepFailed", "operationId": log.op, "stepId": log.step, "attemptId": log.attempt_id,
            "error": {"code": "aborted", "message": "Operation aborted"}}})
        log.finish("aborted")
    # Barrier 3(k-1)+2 is transaction k's after-sync (the evidence helper): each run's stepAttempt.
    sigints = [oracle.Fired("int", "int:stepAttempt@after-sync#1", 0, barrier=5),
               oracle.Fired("int", "int:stepAttempt@after-sync#2", 0, barrier=20)]
    result = oracle.outcome(evidence(log, fired=sigints, requests=[], witness=[], prompts=["Deploy.", "Again."]))
    assert sum("the interrupted run operation ended aborted" in c for c in result.checked) == 2 and result.ok


def test_outcome_forgets_a_sigint_whose_abort_a_kill_cut_short():
    """A kill before the SIGINT's abortRequested was durable leaves nothing to abort: the script's outcome applies."""
    log = good_log()
    sigint = [oracle.Fired("int", "int:stepAttempt@after-sync#1", 0, barrier=5),
              oracle.Fired("kill", "tx:3@before-write", 0, barrier=7)]
    launches = [LaunchInfo(0, "step", None, killed=True, current=CURRENT), LaunchInfo(1, "resume", 0, current=CURRENT)]
    writers = {log.txs[i][0]: (0 if i < 2 else 1) for i in range(len(log.txs))}
    ev = evidence(log, writers=writers, fired=sigint, launches=launches,
                  kills=[Kill("tx:3@before-write", 0, log.data[: log.txs[1][3]], barrier=7)])
    result = oracle.outcome(ev)
    assert result.ok and not any("abortRequested durable" in c for c in result.checked)


def test_outcome_keys_expectations_by_the_log_an_io_error_left():
    """A failed fsync crashes the agent like a kill: the rule for a pending bash call applies (0 effects allowed)."""
    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_1", "bash", '{"command":"deploy"}')])
    ts, res = log.started()
    log.result(ts, res, interrupted=True)
    log.attempt()
    log.answer("Done.")
    log.finish()
    writers = {log.txs[i][0]: (0 if i < 4 else 1) for i in range(len(log.txs))}
    launches = [LaunchInfo(0, "step", 74, current=CURRENT), LaunchInfo(1, "resume", 0, current=CURRENT)]
    reqs = [GOOD_REQUESTS[0], request(2, 1, [])]
    crashed = evidence(log, writers=writers, launches=launches, witness=[], requests=reqs,
                       fired=[oracle.Fired("ioerror", "ioerror(EIO):toolStarted@after-write#1", 0, barrier=10)])
    assert "outcome" not in failing(crashed)
    assert oracle.decisive_state(crashed)[1].startswith("ioerror(EIO)")
    unexplained = evidence(log, writers=writers, launches=launches, witness=[], requests=reqs)
    assert any("effect witnessed 0 time(s), expected 1" in f for f in failing(unexplained)["outcome"])


def test_outcome_reads_a_block_reconciled_by_abort_as_the_blocked_outcome():
    """With `then = "abort"`, a justified block followed by a reconciling abort is the expected blocked outcome."""
    log = aborted_log()
    open_attempt = log.data[: log.txs[1][3]]
    other = {**CURRENT, "configurationDigest": "sha256:" + "9" * 64}
    launches = [LaunchInfo(0, "step", None, killed=True, current=CURRENT),
                LaunchInfo(1, "resume", 3, stdout='{"blocked":"configuration_changed"}\n', current=other, restart=True),
                LaunchInfo(2, "abort", 0, current=other, restart=True)]
    writers = {log.txs[i][0]: (0 if i < 2 else 2) for i in range(len(log.txs))}
    ev = evidence(log, writers=writers, launches=launches, requests=[], witness=[], expect=ABORT_SCENARIO.expect,
                  kills=[Kill("stepAttempt@after-sync#1", 0, open_attempt, barrier=5)])
    assert failing(ev) == {}
    assert oracle.final_outcome(ev, ev.final.state()) == "blocked:configuration_changed"
    launches[1].stdout = '{"blocked":"environment_changed"}\n'
    found = failing(ev)
    assert any("expected blocked:configuration_changed" in f for f in found["outcome"])
    assert any("blocked environment_changed, but the durable prefix does not justify it" in f for f in found["converges"])


def test_outcome_ignores_the_refused_sibling_of_a_dresume_pair():
    """The `locked` exit of a dresume pair's refused process does not hide the block its sibling reported."""
    log = aborted_log()
    open_attempt = log.data[: log.txs[1][3]]
    other = {**CURRENT, "configurationDigest": "sha256:" + "9" * 64}
    for blocked, refused in ((1, 2), (2, 1)):  # which sibling wins the lock is a race
        launches = [LaunchInfo(0, "step", None, killed=True, current=CURRENT), None, None,
                    LaunchInfo(3, "abort", 0, current=other, restart=True)]
        launches[blocked] = LaunchInfo(blocked, "dresume", 3, stdout='{"blocked":"configuration_changed"}\n',
                                       current=other, restart=True)
        launches[refused] = LaunchInfo(refused, "dresume", oracle.LOCKED_EXIT, current=other, restart=True)
        writers = {log.txs[i][0]: (0 if i < 2 else 3) for i in range(len(log.txs))}
        ev = evidence(log, writers=writers, launches=launches, requests=[], witness=[], expect=ABORT_SCENARIO.expect,
                      kills=[Kill("dresume:stepAttempt@after-sync#1", 0, open_attempt, action="dresume", barrier=5)])
        assert oracle.final_outcome(ev, ev.final.state()) == "blocked:configuration_changed"
        assert "outcome" not in failing(ev)


def test_condition_context_names_the_recovering_configuration_and_the_ended_outcome():
    """The context of the conditions is the configuration of the launch after the last crash and, on an idle log,
    how the latest operation ended."""
    log = aborted_log()
    other = {**CURRENT, "configurationDigest": "sha256:" + "9" * 64}
    launches = [LaunchInfo(0, "step", None, killed=True, current=CURRENT),
                LaunchInfo(1, "resume", 0, current=other, restart=True)]
    ev = evidence(log, launches=launches, kills=[Kill("operationFinished@after-sync#1", 0, log.data)])
    view, _, crashed = oracle._decisive(ev)
    assert oracle.condition_context(ev, view, crashed) == {"current": other, "ended": "aborted"}
    busy = evidence(log, launches=launches, kills=[Kill("stepAttempt@after-sync#1", 0, log.data[: log.txs[1][3]])])
    view, _, crashed = oracle._decisive(busy)
    assert oracle.condition_context(busy, view, crashed) == {"current": other, "ended": None}


def test_effects_fail_when_a_read_is_replayed_in_another_environment():
    """A safe read replayed by a launch whose environment differs from the intent's re-read another machine (P7.1.1)."""
    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_r", "read", '{"path":"a"}')])
    ts, res = log.started("call_r", "read", {"path": "a"})
    log.result(ts, res, "call_r", "read", "text")
    log.attempt()
    log.answer("Done.")
    log.finish()
    moved = {**CURRENT, "environmentIdentity": "elsewhere"}
    writers = {log.txs[i][0]: (0 if i < 4 else 1) for i in range(len(log.txs))}
    launches = [LaunchInfo(0, "step", None, killed=True, current=CURRENT), LaunchInfo(1, "resume", 0, current=moved)]
    ev = evidence(log, writers=writers, launches=launches, witness=[], expect=None, requests=[],
                  kills=[Kill("toolStarted@after-sync#1", 0, log.data[: log.txs[3][3]], barrier=11)])
    found = failing(ev)["effects-at-most-once"]
    assert any("in environment 'elsewhere', but the intent was recorded in 'chaos:unit'" in f for f in found)


def two_calls_resumed(order: str) -> Evidence:
    """A read (index 0) and a bash deploy (index 1) in one answer, killed with the read pending, then resumed:
    ``replay-first`` replays the read before starting the deploy (P7.1), ``start-first`` starts the deploy first."""
    log = Log()
    log.run()
    log.attempt()
    log.answer(calls=[("call_r", "read", '{"path":"a"}'), ("call_1", "bash", '{"command":"deploy"}')])
    read_ts, read_res = log.started("call_r", "read", {"path": "a"})  # transaction 4: the kill lands after it
    if order == "replay-first":
        log.result(read_ts, read_res, "call_r", "read", "text")
        ts, res = log.started(index=1)
        log.result(ts, res)
    else:
        ts, res = log.started(index=1)
        log.result(ts, res)
        log.result(read_ts, read_res, "call_r", "read", "text")
    log.attempt()
    log.answer("Done.")
    log.finish()
    return killed_after(log, 4, "toolStarted@after-sync#1", expect=None, requests=[])


def test_log_reduces_fails_when_a_call_starts_while_another_call_of_its_answer_is_pending():
    """A toolStarted written while another call of the same answer is pending breaks SPEC §14.4 P7.1, named by line,
    answer and both calls, although the reducer accepts it and every other invariant passes."""
    ev = two_calls_resumed("start-first")
    assert ev.final.reduces
    found = failing(ev)
    assert set(found) == {"log-reduces"}, found
    [finding] = found["log-reduces"]
    assert finding.startswith("final log, line 6, seq 7, call call_1: toolStarted for call 'call_1' (index 1) of the "
                              "assistant entry at line 4 while call 'call_r' (index 0) of the same answer is pending "
                              "since line 5 (SPEC §14.4 P7.1"), finding


def test_log_reduces_accepts_a_pending_call_resolved_before_the_next_call_starts():
    """The correct recovery order (replay the pending read, then start the untouched deploy) passes every invariant."""
    assert failing(two_calls_resumed("replay-first")) == {}


def open_run_log() -> Log:
    log = Log()
    log.run()
    log.attempt()
    log.answer("Done.")
    return log


@pytest.mark.parametrize("case", ["passing", "killed", "unfinished", "effect-twice"])
def test_no_invariant_changes_the_state_it_reads(case):
    """The final state and each kill's state are made once and shared by the invariants: none may change them,
    on their passing paths or their failing ones."""
    ev = {"passing": lambda: with_baseline(evidence(good_log())),
          "killed": lambda: with_baseline(killed_after(good_log(), 3)),
          "unfinished": lambda: evidence(open_run_log(), requests=GOOD_REQUESTS[:1], witness=[]),
          "effect-twice": lambda: replace(with_baseline(evidence(good_log())), witness=["call_1", "call_1"])}[case]()
    failed = failing(ev)
    assert (failed == {}) is (case in ("passing", "killed"))
    for view in [ev.final, *ev.kill_views]:
        fresh = oracle.LogView(view.data)
        for upto in (None, *range(len(view.lines) + 1)):
            assert repr(vars(view.state(upto))) == repr(vars(fresh.state(upto))), upto
    assert ev.final.state() is ev.final.state()
