"""Tests of chaos.fakellm: position-pure answers, transcript legality, faults, routes — over real HTTP on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import socket
import textwrap
import threading
import time

import pytest

from agent.provider import SUMMARY_SYSTEM_PROMPT
from chaos.errors import ScriptedServerError
from chaos.fakellm import DEFAULT_CASE, HOST, Script, ScriptedServer, serve, transcript_problem
from chaos.scenario import parse_scenario

SCENARIO = textwrap.dedent("""\
    name = "fake"
    description = "two runs, a compaction, faults"

    [[runs]]
    prompt = "Read the readme."
    [[runs.turns]]
    tool_calls = [{ id = "call_a", name = "read", arguments = { path = "README.md" } },
                  { id = "call_b", name = "bash", arguments = '{"command": "ech' }]
    usage = { prompt_tokens = 11, completion_tokens = 3, cached_tokens = 2 }
    [[runs.turns]]
    content = "It says hello."
    [runs.compact]
    summary = "The user read the readme."

    [[runs]]
    prompt = "Anything else?"
    [[runs.turns]]
    content = "No."
    finish_reason = "length"
    [runs.compact]
    summary = "Nothing else."
    """)

PROMPT1 = "Read the readme."
PROMPT2 = "Anything else?"


def with_fault(fault: str, turn_text: str = 'content = "It says hello."') -> str:
    """SCENARIO with ``fault`` (an inline table) attached to run 0, turn 1."""
    return SCENARIO.replace(turn_text, f"{turn_text}\nfault = {fault}", 1)


def first_answer() -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": '{"path": "README.md"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ech'}}]}


def turn1_messages() -> list[dict]:
    """Run 0 after its first answer and two (synthetic-looking) tool results: the position of turn 1."""
    return [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": PROMPT1}, first_answer(),
            {"role": "tool", "tool_call_id": "call_a", "content": "hello"},
            {"role": "tool", "tool_call_id": "call_b", "content": "Operation interrupted ..."}]


def post(port: int, path: str, body: object, *, conn: http.client.HTTPConnection | None = None,
         timeout: float = 10) -> tuple[int, bytes]:
    """POST JSON (or raw bytes) and return (status, body bytes)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection(HOST, port, timeout=timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        if own:
            conn.close()


PATH = "/case/default/v1/chat/completions"


class TestTranscriptProblem:
    def test_legal_transcript(self):
        """Calls each followed by exactly one result, then more messages, is legal."""
        assert transcript_problem(turn1_messages() + [{"role": "assistant", "content": "done"}]) is None

    @pytest.mark.parametrize(("messages", "needle"), [
        ([{"role": "user", "content": "p"}, first_answer()], "ends with assistant tool call(s) 'call_a', 'call_b'"),
        ([{"role": "user", "content": "p"}, first_answer(), {"role": "tool", "tool_call_id": "call_a", "content": ""},
          {"role": "user", "content": "q"}], "'call_b' have no tool result"),
        ([{"role": "user", "content": "p"}, first_answer(), {"role": "tool", "tool_call_id": "call_z", "content": ""}],
         "tool result for unknown call id 'call_z'"),
        ([{"role": "user", "content": "p"}, first_answer(), {"role": "tool", "tool_call_id": "call_a", "content": ""},
          {"role": "tool", "tool_call_id": "call_a", "content": ""}], "duplicate tool result for call id 'call_a'"),
        ([{"role": "user", "content": "p"}, {"role": "tool", "tool_call_id": "call_a", "content": ""}],
         "does not follow an assistant message with tool_calls"),
        ([{"content": "no role"}], "not a message object with a role"),
    ])
    def test_illegal_transcripts(self, messages, needle):
        """Each kind of pairing a real provider rejects is named."""
        problem = transcript_problem(messages)
        assert problem is not None and needle in problem

    def test_result_for_an_earlier_assistant_is_unknown(self):
        """A tool result may only answer the immediately preceding assistant's calls."""
        messages = turn1_messages() + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_c", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_a", "content": "again"}]
        assert "unknown call id 'call_a'" in transcript_problem(messages)


class TestScriptDecide:
    def setup_method(self):
        self.script = Script(parse_scenario(SCENARIO), SUMMARY_SYSTEM_PROMPT)

    def test_first_request_of_a_run_gets_turn_zero(self):
        """The latest user message picks the run; no assistant message after it means turn 0."""
        decision = self.script.decide({"model": "m", "messages": [{"role": "user", "content": PROMPT1}]})
        assert (decision.kind, decision.status, decision.run, decision.turn) == ("answer", 200, 0, 0)
        choice = decision.body["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["tool_calls"][1]["function"]["arguments"] == '{"command": "ech'
        assert decision.body["usage"] == {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14,
                                          "prompt_tokens_details": {"cached_tokens": 2}}
        assert decision.body["model"] == "m"

    def test_same_body_same_answer(self):
        """Deciding the same body twice gives equal decisions (no call counting)."""
        body = {"model": "m", "messages": turn1_messages()}
        assert self.script.decide(body) == self.script.decide(json.loads(json.dumps(body)))

    def test_after_tool_results_the_next_turn(self):
        """After the first answer and its tool results the request is turn 1."""
        decision = self.script.decide({"messages": turn1_messages()})
        assert (decision.run, decision.turn) == (0, 1)
        assert decision.body["choices"][0]["message"] == {"role": "assistant", "content": "It says hello."}
        assert decision.body["model"] == "scripted/model"

    def test_second_run_is_found_by_its_prompt(self):
        """A later run is identified by the latest user message even with earlier runs in the context."""
        messages = turn1_messages() + [{"role": "assistant", "content": "It says hello."},
                                       {"role": "user", "content": [{"type": "text", "text": PROMPT2}]}]
        decision = self.script.decide({"messages": messages})
        assert (decision.run, decision.turn) == (1, 0)
        assert decision.body["choices"][0]["finish_reason"] == "length"

    def test_unknown_prompt_and_turn_past_the_script(self):
        """A prompt no run has, and a turn beyond the run's script, are rejected with the reason."""
        unknown = self.script.decide({"messages": [{"role": "user", "content": "Who are you?"}]})
        assert (unknown.kind, unknown.status) == ("unknown", 400)
        assert "matches no prompt of scenario 'fake': 'Who are you?'" in unknown.finding
        past = self.script.decide({"messages": [{"role": "user", "content": PROMPT2},
                                                {"role": "assistant", "content": "No."}]})
        assert (past.kind, past.run, past.turn) == ("unknown", 1, 1)
        assert "has 1 scripted turn(s); this request is turn 1" in past.finding

    def test_summary_request_gets_the_following_compaction(self):
        """A summary request (its system prompt) gets the summary after the latest run it mentions."""
        def summary_request(text: str) -> dict:
            return {"messages": [{"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
                                 {"role": "user", "content": "Summarize this conversation:\n\n" + text}]}
        first = self.script.decide(summary_request(f"[user]\n{PROMPT1}\n\n[assistant]\nIt says hello."))
        assert (first.kind, first.run, first.turn) == ("summary", 0, "summary")
        assert first.body["choices"][0]["message"]["content"] == "The user read the readme."
        second = self.script.decide(summary_request(f"[user]\n[Compacted history]\nx\n\n[user]\n{PROMPT2}"))
        assert second.run == 1 and second.body["choices"][0]["message"]["content"] == "Nothing else."
        assert self.script.decide(summary_request("[user]\nsomething else")).kind == "unknown"

    @pytest.mark.parametrize("body", [[], {"messages": []}, {"messages": "x"},
                                      {"messages": [{"role": "user", "content": PROMPT1}], "stream": True}])
    def test_bad_requests(self, body):
        """Bodies that are not chat-completions requests, and streaming requests, are bad requests."""
        decision = self.script.decide(body)
        assert (decision.kind, decision.status) == ("bad-request", 400) and decision.finding


class TestServer:
    def test_binds_loopback_and_answers_by_position(self):
        """The server is on 127.0.0.1; a re-sent request gets the identical answer, the next position the next turn."""
        with serve(parse_scenario(SCENARIO)) as server:
            assert server.base_url().startswith(f"http://127.0.0.1:{server.port}/case/default/v1")
            first = post(server.port, PATH, {"messages": [{"role": "user", "content": PROMPT1}]})
            again = post(server.port, "/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT1}]})
            assert first == again and first[0] == 200
            status, data = post(server.port, PATH, {"messages": turn1_messages()})
            assert status == 200 and json.loads(data)["choices"][0]["message"]["content"] == "It says hello."
            records = server.requests()
            assert [(r.seq, r.run, r.turn, r.attempt, r.kind, r.status) for r in records] == [
                (1, 0, 0, 1, "answer", 200), (2, 0, 0, 2, "answer", 200), (3, 0, 1, 1, "answer", 200)]
            assert records[2].body == {"messages": turn1_messages()}

    def test_keep_alive_connection_serves_many_requests(self):
        """One HTTP/1.1 connection carries several requests (keep-alive)."""
        with serve(parse_scenario(SCENARIO)) as server:
            conn = http.client.HTTPConnection(HOST, server.port, timeout=10)
            for _ in range(5):
                status, _ = post(server.port, PATH, {"messages": turn1_messages()}, conn=conn)
                assert status == 200
            sock = conn.sock
            post(server.port, PATH, {"messages": turn1_messages()}, conn=conn)
            assert conn.sock is sock  # not reconnected
            conn.close()

    def test_http_fault_hits_first_request_only(self):
        """A 429 fault answers the first request for its position; the retry gets the scripted answer."""
        with serve(parse_scenario(with_fault('{ kind = "http", status = 429 }'))) as server:
            status, data = post(server.port, PATH, {"messages": turn1_messages()})
            assert status == 429 and json.loads(data)["error"]["code"] == "rate_limit_exceeded"
            assert post(server.port, PATH, {"messages": turn1_messages()})[0] == 200
            assert [(r.kind, r.status, r.attempt) for r in server.requests()] == [
                ("fault:http", 429, 1), ("answer", 200, 2)]

    @pytest.mark.parametrize("status", [500, 400, 503])
    def test_repeated_http_fault_hits_every_request(self, status):
        """With repeat = true the fault answers every request for the position, with its status."""
        with serve(parse_scenario(with_fault(f'{{ kind = "http", status = {status}, repeat = true }}'))) as server:
            for _ in range(3):
                code, data = post(server.port, PATH, {"messages": turn1_messages()})
                assert code == status and "error" in json.loads(data)
            # other positions are unaffected
            assert post(server.port, PATH, {"messages": [{"role": "user", "content": PROMPT1}]})[0] == 200

    def test_delay_fault_answers_after_the_delay(self):
        """A delay fault holds the answer at least the given time, then answers normally."""
        with serve(parse_scenario(with_fault('{ kind = "delay", seconds = 0.2 }'))) as server:
            started = time.monotonic()
            status, data = post(server.port, PATH, {"messages": turn1_messages()})
            assert time.monotonic() - started >= 0.2
            assert status == 200 and json.loads(data)["choices"][0]["message"]["content"] == "It says hello."
            assert server.requests()[0].kind == "fault:delay"

    def test_timeout_fault_outlasts_the_client(self):
        """A timeout fault never answers: the client times out; the next attempt is answered."""
        with serve(parse_scenario(with_fault('{ kind = "timeout" }'))) as server:
            with pytest.raises(TimeoutError):
                post(server.port, PATH, {"messages": turn1_messages()}, timeout=0.3)
            assert post(server.port, PATH, {"messages": turn1_messages()})[0] == 200
            assert [(r.kind, r.status) for r in server.requests()] == [("fault:timeout", None), ("answer", 200)]

    def test_stop_releases_a_held_request(self):
        """Stopping the server ends a request held by a timeout fault (the client sees the connection close)."""
        server = ScriptedServer().start()
        server.add_case(DEFAULT_CASE, parse_scenario(with_fault('{ kind = "timeout", seconds = 60 }')))
        outcome: list[object] = []

        def client() -> None:
            try:
                outcome.append(post(server.port, PATH, {"messages": turn1_messages()}, timeout=60))
            except (ConnectionError, http.client.HTTPException) as exc:
                outcome.append(exc)

        thread = threading.Thread(target=client)
        thread.start()
        while not server.requests():
            time.sleep(0.01)
        server.stop()
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert isinstance(outcome[0], (ConnectionError, http.client.RemoteDisconnected))

    def test_drop_fault_processes_then_closes(self):
        """A drop fault records the request and closes the connection before any response."""
        with serve(parse_scenario(with_fault('{ kind = "drop" }'))) as server:
            with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
                post(server.port, PATH, {"messages": turn1_messages()})
            records = server.requests()
            assert [(r.kind, r.status, r.run, r.turn) for r in records] == [("fault:drop", None, 0, 1)]
            assert records[0].body["messages"] == turn1_messages()

    @pytest.mark.parametrize(("fault", "expected"), [
        ('{ kind = "malformed" }', None),
        ('{ kind = "malformed", body = "{\\"choices\\": []}" }', b'{"choices": []}'),
    ])
    def test_malformed_fault_sends_the_body(self, fault, expected):
        """A malformed fault answers 200 with truncated JSON, or with the scripted body."""
        with serve(parse_scenario(with_fault(fault))) as server:
            status, data = post(server.port, PATH, {"messages": turn1_messages()})
            assert status == 200
            if expected is None:
                with pytest.raises(json.JSONDecodeError):
                    json.loads(data)
            else:
                assert data == expected

    def test_summary_fault(self):
        """A fault on a compaction applies to its summary request."""
        text = SCENARIO.replace('summary = "Nothing else."', 'summary = "Nothing else."\nfault = { kind = "http", '
                                                              'status = 500 }')
        body = {"messages": [{"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
                             {"role": "user", "content": f"[user]\n{PROMPT2}"}]}
        with serve(parse_scenario(text), summary_prompt=SUMMARY_SYSTEM_PROMPT) as server:
            assert post(server.port, PATH, body)[0] == 500
            assert post(server.port, PATH, body)[0] == 200
            assert [(r.run, r.turn, r.kind) for r in server.requests()] == [(1, "summary", "fault:http"),
                                                                              (1, "summary", "summary")]

    def test_illegal_transcript_is_a_recorded_finding(self):
        """An illegal transcript gets HTTP 400 and is listed in findings, with the reason."""
        with serve(parse_scenario(SCENARIO)) as server:
            status, data = post(server.port, PATH, {"messages": turn1_messages()[:-1]})
            assert status == 400
            assert json.loads(data)["error"]["code"] == "illegal_transcript"
            findings = server.findings()
            assert len(findings) == 1 and findings[0].kind == "illegal"
            assert "'call_b' that have no tool result" in findings[0].finding

    def test_unknown_position_and_non_json_are_findings(self):
        """A request for no scripted run and a body that is not JSON are 400 findings."""
        with serve(parse_scenario(SCENARIO)) as server:
            assert post(server.port, PATH, {"messages": [{"role": "user", "content": "nope"}]})[0] == 400
            assert post(server.port, PATH, b"{not json")[0] == 400
            assert [(r.kind, r.body) for r in server.findings()] == [
                ("unknown", {"messages": [{"role": "user", "content": "nope"}]}), ("bad-request", "{not json")]

    def test_request_log_file(self, tmp_path):
        """Every request is appended to the case's JSONL log as it is recorded."""
        log = tmp_path / "requests.jsonl"
        with serve(parse_scenario(SCENARIO), log_path=log) as server:
            post(server.port, PATH, {"messages": [{"role": "user", "content": PROMPT1}]})
            post(server.port, PATH, {"messages": [{"role": "user", "content": "nope"}]})
            lines = [json.loads(line) for line in log.read_text().splitlines()]
            assert lines == [r.to_json() for r in server.requests()]
            assert [(line["kind"], line["run"], line["turn"]) for line in lines] == [("answer", 0, 0),
                                                                                    ("unknown", None, None)]


class TestRoutes:
    def test_cases_share_one_server(self):
        """Two cases on one server each get their own script, counters and log; keys may hold any character."""
        other = parse_scenario(SCENARIO.replace('name = "fake"', 'name = "other"').replace("It says hello.", "Other."))
        with ScriptedServer() as server:
            key = "fake::toolStarted@after-sync#1+tx:3@before-write"
            url_a = server.add_case(key, parse_scenario(with_fault('{ kind = "http", status = 500 }')))
            url_b = server.add_case("other", other)
            path_a = url_a.split(str(server.port), 1)[1] + "/chat/completions"
            path_b = url_b.split(str(server.port), 1)[1] + "/chat/completions"
            assert "#" not in path_a
            assert post(server.port, path_a, {"messages": turn1_messages()})[0] == 500
            status, data = post(server.port, path_b, {"messages": turn1_messages()})
            assert status == 200 and json.loads(data)["choices"][0]["message"]["content"] == "Other."
            assert [r.case for r in server.requests(key)] == [key]
            assert [r.kind for r in server.requests("other")] == ["answer"]
            removed = server.remove_case(key)
            assert len(removed) == 1
            assert post(server.port, path_a, {"messages": turn1_messages()})[0] == 404
            assert [r.kind for r in server.unrouted] == ["no-route"]

    def test_route_errors(self):
        """Registering a key twice, or asking for a case that is not served, raises ScriptedServerError."""
        with ScriptedServer() as server:
            server.add_case("a", parse_scenario(SCENARIO))
            with pytest.raises(ScriptedServerError):
                server.add_case("a", parse_scenario(SCENARIO))
            with pytest.raises(ScriptedServerError):
                server.requests("b")
            with pytest.raises(ScriptedServerError):
                server.remove_case("b")
        with pytest.raises(ScriptedServerError):
            _ = ScriptedServer().port

    def test_concurrent_clients_on_many_cases(self):
        """Concurrent clients on several cases each get their position's answer, and every request is recorded once."""
        cases = [f"case-{i}" for i in range(4)]
        errors: list[str] = []
        with ScriptedServer() as server:
            for key in cases:
                server.add_case(key, parse_scenario(SCENARIO))

            def client(key: str) -> None:
                conn = http.client.HTTPConnection(HOST, server.port, timeout=10)
                path = f"/case/{key}/v1/chat/completions"
                for i in range(20):
                    messages = turn1_messages() if i % 2 else [{"role": "user", "content": PROMPT1}]
                    status, data = post(server.port, path, {"messages": messages}, conn=conn)
                    message = json.loads(data)["choices"][0]["message"]
                    if status != 200 or (i % 2 == 1) != (message.get("content") == "It says hello."):
                        errors.append(f"{key} request {i}: {status} {message}")
                conn.close()

            threads = [threading.Thread(target=client, args=(key,)) for key in cases for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == []
            for key in cases:
                records = server.requests(key)
                assert sorted(r.seq for r in records) == list(range(1, 41))
                assert sorted(r.attempt for r in records if r.turn == 1) == list(range(1, 21))

    def test_unix_socket_free_plain_tcp_on_loopback_only(self):
        """The listening socket is bound to 127.0.0.1, not a wildcard address."""
        with ScriptedServer() as server:
            with socket.create_connection((HOST, server.port), timeout=5):
                pass
            assert server.address[0] == "127.0.0.1"
