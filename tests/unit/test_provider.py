"""Tests of agent.provider against a real HTTP server on 127.0.0.1 (tests/openai_stub.py)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from agent.provider import (
    CANCELLED,
    SUMMARY_SYSTEM_PROMPT,
    Cancelled,
    ChatClient,
    Completion,
    LiveError,
    ProviderError,
    Summary,
    map_usage,
)
from tests.openai_stub import OpenAIStub, Reply, completion, is_summary_request, tool_call

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
CALL = tool_call("call_1", "read", {"path": "a.txt"})


def ask(script, body=BODY, **kwargs):
    """Send one chat request to a stub answering from ``script``; return (outcome, stub)."""
    with OpenAIStub(script) as stub:
        outcome = ChatClient(stub.base_url, "sk-test", **kwargs).chat(body)
    return outcome, stub


class TestRequest:
    def test_posts_body_to_chat_completions_with_bearer_key(self):
        """The body is POSTed unchanged to {base_url}/chat/completions with a Bearer Authorization header."""
        body = {"model": "m", "messages": [{"role": "user", "content": "é"}], "tools": [], "temperature": 0.5}
        _, stub = ask([completion("ok")], body)
        (request,) = stub.requests
        assert request.method == "POST"
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer sk-test"
        assert request.headers["content-type"] == "application/json"
        assert request.json == body

    def test_environment_supplies_base_url_and_key(self):
        """OPENAI_BASE_URL and OPENAI_API_KEY are used when no explicit values are given."""
        with OpenAIStub([completion("ok")]) as stub:
            env = {"OPENAI_BASE_URL": stub.base_url + "/", "OPENAI_API_KEY": "sk-env"}
            outcome = ChatClient(environ=env).chat(BODY)
        assert isinstance(outcome, Completion)
        assert stub.requests[0].headers["authorization"] == "Bearer sk-env"
        assert stub.requests[0].path == "/v1/chat/completions"

    def test_explicit_values_beat_environment(self):
        """Explicit base URL and key win over the environment variables."""
        with OpenAIStub([completion("ok")]) as stub:
            env = {"OPENAI_BASE_URL": "http://127.0.0.1:1/nowhere", "OPENAI_API_KEY": "sk-env"}
            ChatClient(stub.base_url, "sk-flag", environ=env).chat(BODY)
        assert stub.requests[0].headers["authorization"] == "Bearer sk-flag"

    def test_no_key_sends_no_authorization(self):
        """Without any API key no Authorization header is sent (local servers need none)."""
        with OpenAIStub([completion("ok")]) as stub:
            ChatClient(stub.base_url, environ={}).chat(BODY)
        assert "authorization" not in stub.requests[0].headers

    def test_default_base_url_is_openai(self):
        """With neither flag nor variable the base URL is OpenAI's."""
        assert ChatClient(environ={}).base_url == "https://api.openai.com/v1"

    @pytest.mark.parametrize("url", ["ftp://127.0.0.1/v1", "127.0.0.1:8080", "http://", "http://h:notaport/v1"])
    def test_unusable_base_url_is_a_provider_error(self, url):
        """A base URL that is not http(s)://HOST... raises ProviderError naming it."""
        with pytest.raises(ProviderError, match="invalid base URL"):
            ChatClient(url, environ={})

    def test_repr_hides_the_key(self):
        """The client's repr never shows the API key."""
        assert "sk-secret" not in repr(ChatClient("http://127.0.0.1:1/v1", "sk-secret"))

    @pytest.mark.parametrize("url, shown", [
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
        ("https://bob:secret@api.example/v1", "https://api.example/v1"),
        ("http://[::1]:9/v1", "http://[::1]:9/v1"),
    ], ids=["port-path", "userinfo", "ipv6"])
    def test_address_shows_the_url_without_credentials(self, url, shown):
        """The address shown to a person is the base URL without a user:password part, IPv6 hosts bracketed."""
        assert ChatClient(url, "sk-secret", environ={}).address == shown

    @pytest.mark.parametrize("url", ["ftp://bob:secret@h/v1", "http://bob:secret@h:notaport/v1",
                                     "http://bob:secret@h/v1?x=1"], ids=["scheme", "port", "query"])
    def test_a_refused_url_is_named_without_its_password(self, url):
        """The error naming a base URL it refuses shows the URL with its user:password part as '…@'."""
        with pytest.raises(ProviderError) as caught:
            ChatClient(url, environ={})
        assert "secret" not in str(caught.value) and "…@h" in str(caught.value)

    def test_repr_hides_a_password_in_the_url(self):
        """The client's repr shows its address, never a user:password part of the URL."""
        assert "secret" not in repr(ChatClient("http://bob:secret@127.0.0.1:1/v1", environ={}))

    def test_callable_script_answers_from_the_request(self):
        """A callable script computes each answer from the recorded request; chat requests are not summaries."""
        def script(request):
            return completion(request.json["messages"][-1]["content"].upper())

        outcome, stub = ask(script, {"model": "m", "messages": [{"role": "user", "content": "shout"}]})
        assert outcome.message["content"] == "SHOUT" and not is_summary_request(stub.requests[0])

    def test_exhausted_script_answers_500(self):
        """A request beyond the end of a list script gets HTTP 500, so an extra request fails loudly."""
        outcome, _ = ask([])
        assert outcome == LiveError("server_error", "HTTP 500: stub script exhausted")

    def test_keep_alive_stub_serves_several_requests(self):
        """Several requests in a row each get their own scripted answer."""
        with OpenAIStub([completion("one"), completion("two")]) as stub:
            client = ChatClient(stub.base_url, "k")
            first, second = client.chat(BODY), client.chat(BODY)
        assert (first.message["content"], second.message["content"]) == ("one", "two")
        assert len(stub.requests) == 2

    def test_url_without_a_port_uses_port_80(self):
        """http://127.0.0.1/v1 (no port) is asked on port 80, http's default, like http.client would."""
        try:
            stub = OpenAIStub([completion("x")], port=80)
        except OSError as e:  # a privileged port: not every machine lets the tests listen on it
            pytest.skip(f"cannot listen on 127.0.0.1:80 here: {e.strerror}")
        with stub:
            outcome = ChatClient("http://127.0.0.1/v1", "k").chat(BODY)
        assert isinstance(outcome, Completion) and outcome.message["content"] == "x", outcome

    def test_first_request_to_an_ascii_host_skips_the_idna_codec(self):
        """A fresh process's first request to 127.0.0.1 succeeds without importing encodings.idna (its first use
        costs ~3 ms per launch: the host is passed to getaddrinfo as bytes)."""
        code = ("import sys; from agent.provider import ChatClient, Completion; "
                f"r = ChatClient(sys.argv[1], 'k').chat({BODY!r}); "
                "print(type(r).__name__, 'encodings.idna' in sys.modules)")
        with OpenAIStub([completion("x")]) as stub:
            proc = subprocess.run([sys.executable, "-c", code, stub.base_url], capture_output=True, text=True,
                                  timeout=30)
        assert proc.stdout.split() == ["Completion", "False"], proc.stdout + proc.stderr


class TestFinishReasonMapping:
    @pytest.mark.parametrize(
        "finish, calls, stop_reason",
        [
            ("stop", False, "stop"),
            ("stop", True, "toolUse"),
            ("tool_calls", True, "toolUse"),
            ("length", False, "length"),
            ("length", True, "length"),
        ],
    )
    def test_settled_combinations(self, finish, calls, stop_reason):
        """finish_reason and the presence of calls map to stopReason exactly as SPEC §15.4 says."""
        outcome, _ = ask([completion("t", tool_calls=[CALL] if calls else None, finish_reason=finish)])
        assert isinstance(outcome, Completion)
        assert outcome.stop_reason == stop_reason
        assert ("tool_calls" in outcome.message) is calls

    @pytest.mark.parametrize(
        "finish, calls", [("tool_calls", False), ("content_filter", False), ("content_filter", True), (None, False),
                          ("function_call", True)]
    )
    def test_unmappable_combinations_are_invalid_response(self, finish, calls):
        """tool_calls without calls, and any other finish_reason, are the live error invalid_response."""
        body = completion("t", tool_calls=[CALL] if calls else None)
        body["choices"][0]["finish_reason"] = finish
        outcome, _ = ask([body])
        assert isinstance(outcome, LiveError) and outcome.code == "invalid_response"
        assert outcome.message

    def test_message_keeps_call_fields_and_raw_arguments(self):
        """The assistant message keeps id, type, function.name and the raw arguments text, and nothing else."""
        raw = '{"path":  "a.txt" }'
        call = {"id": "c9", "type": "function", "function": {"name": "read", "arguments": raw, "extra": 1},
                "index": 0}
        outcome, _ = ask([completion(None, tool_calls=[call])])
        assert outcome.message == {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "read", "arguments": raw}}],
        }

    def test_empty_tool_calls_array_counts_as_absent(self):
        """An empty tool_calls array is no calls: the message has no tool_calls member and stop stays stop."""
        outcome, _ = ask([completion("done", tool_calls=[], finish_reason="stop")])
        assert outcome.stop_reason == "stop" and outcome.message == {"role": "assistant", "content": "done"}

    def test_missing_content_is_null(self):
        """A message without a content member settles with content null."""
        body = completion(None, tool_calls=[CALL])
        del body["choices"][0]["message"]["content"]
        outcome, _ = ask([body])
        assert outcome.message["content"] is None

    @pytest.mark.parametrize(
        "call",
        [
            {"id": "", "type": "function", "function": {"name": "read", "arguments": "{}"}},
            {"id": "c", "type": "function", "function": {"name": "", "arguments": "{}"}},
            {"id": "c", "type": "function", "function": {"name": "read", "arguments": {"path": "x"}}},
            {"id": "c", "type": "function", "function": {"name": "read"}},
            {"id": "c", "type": "custom", "function": {"name": "read", "arguments": "{}"}},
            {"id": 7, "type": "function", "function": {"name": "read", "arguments": "{}"}},
        ],
    )
    def test_invalid_call_is_invalid_response(self, call):
        """Empty id or name, non-string arguments or a foreign call type make the response invalid_response."""
        outcome, _ = ask([completion(None, tool_calls=[call])])
        assert isinstance(outcome, LiveError) and outcome.code == "invalid_response"

    def test_duplicate_call_id_is_invalid_response(self):
        """Two calls with one id make the response invalid_response, never a rejected commit."""
        outcome, _ = ask([completion(None, tool_calls=[CALL, tool_call("call_1", "bash", {"command": "ls"})])])
        assert isinstance(outcome, LiveError) and outcome.code == "invalid_response"
        assert "duplicated" in outcome.message

    def test_non_string_content_is_invalid_response(self):
        """Content that is neither a string nor null is invalid_response."""
        outcome, _ = ask([completion([{"type": "text", "text": "x"}])])
        assert isinstance(outcome, LiveError) and outcome.code == "invalid_response"


class TestLiveErrors:
    @pytest.mark.parametrize(
        "status, code", [(429, "rate_limited"), (500, "server_error"), (503, "server_error"), (400, "bad_request"),
                         (404, "bad_request"), (301, "invalid_response")]
    )
    def test_http_status_codes(self, status, code):
        """429, 5xx and other 4xx map to rate_limited, server_error and bad_request; the provider's text is kept."""
        outcome, stub = ask([Reply(status, {"error": {"message": "slow down please"}})])
        assert outcome == LiveError(code, f"HTTP {status}: slow down please")
        assert len(stub.requests) == 1  # never retried

    def test_error_with_non_json_body_keeps_a_snippet(self):
        """A non-JSON error body contributes a short one-line snippet to the message."""
        outcome, _ = ask([Reply(502, "<html>\n bad   gateway </html>")])
        assert outcome == LiveError("server_error", "HTTP 502: <html> bad gateway </html>")

    def test_long_error_message_is_shortened(self):
        """An enormous error text is cut to a short message."""
        outcome, _ = ask([Reply(500, {"error": {"message": "x" * 10000}})])
        assert outcome.code == "server_error" and len(outcome.message) <= 300

    def test_timeout_via_delayed_response(self):
        """A response slower than the request timeout is the live error timeout."""
        start = time.monotonic()
        outcome, _ = ask([Reply(200, completion("late"), delay=5.0)], timeout=0.3)
        assert isinstance(outcome, LiveError) and outcome.code == "timeout"
        assert time.monotonic() - start < 4.0

    def test_timeout_is_total_not_per_read(self):
        """A server trickling its body byte by byte is cut off at the total deadline."""
        # Every single read completes well within the timeout; only a total deadline can stop this answer
        # (it would take ~5 s to arrive).
        start = time.monotonic()
        outcome, _ = ask([Reply(200, completion("late"), action="trickle", trickle_interval=0.03)], timeout=0.5)
        assert isinstance(outcome, LiveError) and outcome.code == "timeout"
        assert time.monotonic() - start < 3.0

    @pytest.mark.parametrize("action", ["reset", "close", "truncate"])
    def test_connection_lost_mid_response(self, action):
        """A reset, a close before the status line, and a close mid-body are connection_error."""
        outcome, _ = ask([Reply(200, completion("x" * 1000), action=action)])
        assert isinstance(outcome, LiveError) and outcome.code == "connection_error", outcome

    def test_connection_refused(self):
        """A port nobody listens on is connection_error."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        outcome = ChatClient(f"http://127.0.0.1:{port}/v1", "k").chat(BODY)
        assert isinstance(outcome, LiveError) and outcome.code == "connection_error"

    def test_https_to_a_plain_http_server_fails_as_connection_error(self):
        """An https base URL speaks TLS; a TLS failure is connection_error."""
        with OpenAIStub([completion("x")]) as stub:
            outcome = ChatClient(f"https://127.0.0.1:{stub.port}/v1", "k", timeout=5).chat(BODY)
        assert isinstance(outcome, LiveError) and outcome.code == "connection_error"

    @pytest.mark.parametrize("body", [b"{not json", b"[1,2]", b'{"choices": []}', b'{"choices": [{}]}', b""])
    def test_malformed_body_is_invalid_response(self, body):
        """A 200 answer that is not a usable chat completion is invalid_response."""
        outcome, _ = ask([Reply(200, body)])
        assert isinstance(outcome, LiveError) and outcome.code == "invalid_response"

    def test_live_error_exposes_step_failed_error_object(self):
        """LiveError.error() is the stepFailed error object with non-empty code and message."""
        assert LiveError("timeout", "slow").error() == {"code": "timeout", "message": "slow"}


class TestUsage:
    def test_usage_mapping_with_cache_details(self):
        """cacheRead/cacheWrite come from prompt_tokens_details and are subtracted from input (SPEC §7)."""
        usage = {"prompt_tokens": 100, "completion_tokens": 7,
                 "prompt_tokens_details": {"cached_tokens": 30, "cache_write_tokens": 20}}
        outcome, _ = ask([completion("x", usage=usage)])
        assert outcome.usage == {"input": 50, "output": 7, "cacheRead": 30, "cacheWrite": 20}

    def test_usage_without_details(self):
        """Without details the cache counters are 0 and input is prompt_tokens."""
        assert map_usage({"prompt_tokens": 12, "completion_tokens": 3}) == {
            "input": 12, "output": 3, "cacheRead": 0, "cacheWrite": 0}

    def test_input_never_goes_negative(self):
        """Cache counters larger than prompt_tokens give input 0, not a negative count."""
        assert map_usage({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}})["input"] == 0

    def test_uncountable_counters_are_zero(self):
        """Counters that are not non-negative integers count as 0 (usage is accounting only)."""
        assert map_usage({"prompt_tokens": -3, "completion_tokens": 1.5, "prompt_tokens_details": None}) == {
            "input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}

    def test_no_usage_object_gives_none(self):
        """A response without usage yields usage None (no usage fact is written)."""
        outcome, _ = ask([completion("x")])
        assert outcome.usage is None

    def test_usage_is_kept_with_invalid_response(self):
        """Usage reported together with an unusable answer is carried on the LiveError."""
        outcome, _ = ask([completion("x", finish_reason="content_filter", usage={"prompt_tokens": 4})])
        assert outcome.code == "invalid_response"
        assert outcome.usage == {"input": 4, "output": 0, "cacheRead": 0, "cacheWrite": 0}


class TestSanitizing:
    def test_lone_surrogate_escapes_are_replaced(self):
        """Lone surrogates arriving as JSON escapes become U+FFFD in content, ids, names and arguments."""
        raw = (b'{"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":"a\\ud800b",'
               b'"tool_calls":[{"id":"c\\udfff","type":"function","function":{"name":"r\\udc00",'
               b'"arguments":"{\\"p\\": \\"\\ud83d\\"}"}}]}}]}')
        outcome, _ = ask([Reply(200, raw)])
        assert outcome.message["content"] == "a\ufffdb"
        call = outcome.message["tool_calls"][0]
        assert call["id"] == "c\ufffd" and call["function"]["name"] == "r\ufffd"
        assert call["function"]["arguments"] == '{"p": "\ufffd"}'
        json.dumps(outcome.message, ensure_ascii=False).encode("utf-8")  # strictly encodable now

    def test_valid_surrogate_pair_escapes_are_kept(self):
        """A surrogate pair escape is one valid character and stays as it is."""
        outcome, _ = ask([Reply(200, b'{"choices":[{"finish_reason":"stop","message":{"content":"\\ud83d\\ude00"}}]}')])
        assert outcome.message["content"] == "\U0001f600"

    def test_invalid_utf8_bytes_are_replaced(self):
        """Raw bytes that are not UTF-8 are decoded with replacement characters."""
        outcome, _ = ask([Reply(200, b'{"choices":[{"finish_reason":"stop","message":{"content":"a\xff\xfeb"}}]}')])
        assert outcome.message["content"] == "a\ufffd\ufffdb"


class TestCancel:
    def test_cancel_from_signal_handler_aborts_in_flight_request(self):
        """cancel() called from a real signal handler ends a hanging request at once with Cancelled."""
        with OpenAIStub([Reply(200, completion("late"), delay=10.0)]) as stub:
            client = ChatClient(stub.base_url, "k", timeout=8)
            previous = signal.signal(signal.SIGALRM, lambda *_: client.cancel())
            try:
                signal.setitimer(signal.ITIMER_REAL, 0.2)
                start = time.monotonic()
                outcome = client.chat(BODY)
                elapsed = time.monotonic() - start
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
        assert outcome is CANCELLED and isinstance(outcome, Cancelled)
        assert elapsed < 5.0

    def test_cancel_is_sticky(self):
        """After cancel() no further request is sent and every call returns Cancelled."""
        with OpenAIStub([completion("x")]) as stub:
            client = ChatClient(stub.base_url, "k")
            client.cancel()
            assert client.chat(BODY) is CANCELLED
            assert client.summarize("m", []) is CANCELLED
        assert stub.requests == [] and client.cancelled


class TestSummarize:
    def test_summary_request_and_answer(self):
        """summarize() sends SUMMARY_SYSTEM_PROMPT first, the transcript as text, and returns the summary text."""
        messages = [
            {"role": "user", "content": "fix the bug"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "file text"},
        ]
        with OpenAIStub([completion("the summary", usage={"prompt_tokens": 9, "completion_tokens": 2})]) as stub:
            outcome = ChatClient(stub.base_url, "k").summarize("m", messages, options={"temperature": 0})
        assert outcome == Summary("the summary", {"input": 9, "output": 2, "cacheRead": 0, "cacheWrite": 0})
        sent = stub.requests[0].json
        assert sent["model"] == "m" and sent["temperature"] == 0 and "tools" not in sent
        assert sent["messages"][0] == {"role": "system", "content": SUMMARY_SYSTEM_PROMPT}
        assert is_summary_request(stub.requests[0])
        text = sent["messages"][1]["content"]
        assert "fix the bug" in text and "file text" in text and "a.txt" in text

    def test_summary_with_tool_calls_is_invalid_response(self):
        """A summary answer that calls tools is invalid_response."""
        with OpenAIStub([completion("s", tool_calls=[CALL])]) as stub:
            outcome = ChatClient(stub.base_url, "k").summarize("m", [])
        assert isinstance(outcome, LiveError) and outcome.code == "invalid_response"

    def test_summary_http_error(self):
        """A failed summary request is a LiveError like any other."""
        with OpenAIStub([Reply(429, {"error": "busy"})]) as stub:
            outcome = ChatClient(stub.base_url, "k").summarize("m", [])
        assert outcome == LiveError("rate_limited", "HTTP 429: busy")


def test_import_does_not_load_http_client():
    """Importing agent.provider loads neither http.client nor urllib.parse's heavy friends (lazy imports)."""
    code = "import sys, agent.provider; print(sorted(m for m in ('http.client', 'ssl', 'email') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


class TestOutcomeValues:
    def test_outcomes_match_materialize_constructors(self):
        """as_outcome() gives exactly the values agent.session.materialize's constructors build."""
        from agent.session import materialize

        usage = {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0}
        message = {"role": "assistant", "content": "hi"}
        assert Completion(message, "stop", usage).as_outcome() == materialize.assistant_answer(message, "stop", usage)
        assert LiveError("timeout", "slow", usage).as_outcome() == materialize.step_failure("timeout", "slow", usage)
        assert Summary("s", None).as_outcome() == materialize.compaction_summary("s", None)


class TestHeadersThenBody:
    def test_body_arriving_after_headers_is_read(self):
        """A response whose body arrives after its headers (plain http.server) is read whole, every time."""
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                body = json.dumps(
                    {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()  # headers go out in their own write; the body follows in a second one
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            client = ChatClient(f"http://127.0.0.1:{server.server_address[1]}/v1", "k", timeout=5)
            outcomes = [client.chat({"model": "m", "messages": [{"role": "user", "content": "x"}]}) for _ in range(60)]
        finally:
            server.shutdown()
            server.server_close()
        assert all(isinstance(o, Completion) for o in outcomes), [o for o in outcomes if not isinstance(o, Completion)][:1]
