"""A scriptable OpenAI-compatible HTTP server for tests: real socket on 127.0.0.1, ephemeral port.

What it is for: tests of the provider client and of the agent loop talk to a real HTTP server (the project's
standard: no mocked transport). The server answers each request from a *script*:

- a list: each request consumes the next item; when the list is exhausted the server answers HTTP 500
  ``stub script exhausted`` (so a test that sends one request too many fails loudly instead of hanging);
- a callable ``script(request) -> item``: the answer is computed from the recorded request (as the harness's
  request-pure scripted server does).

An item is a ``dict`` (sent as a 200 JSON body) or a ``Reply`` (status, body, headers, delay, and an ``action`` that
misbehaves on purpose: ``reset`` closes with a TCP RST, ``close`` closes without answering, ``truncate`` sends
headers announcing the full body and only half of it, ``trickle`` sends the body one byte per
``trickle_interval``). Every request is recorded in ``stub.requests``
(``Request``: method, path, headers, raw body, parsed JSON).

Keep-alive is supported (HTTP/1.1) with Nagle disabled: ``http.server`` otherwise waits ~44 ms per keep-alive
answer (delayed ACK against Nagle), which would dominate fast tests.

Usage::

    with OpenAIStub([completion("hi")]) as stub:
        ChatClient(stub.base_url, "k").chat({...})
        assert stub.requests[0].json["model"] == "m"

What it does not do: streaming, any endpoint semantics beyond answering from the script.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


@dataclass
class Reply:
    """One scripted answer. ``body``: dict/list (JSON), str (UTF-8) or bytes (sent as is)."""

    status: int = 200
    body: object = None
    headers: dict = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (cut short when the stub stops)
    action: str = "respond"  # "respond" | "reset" | "close" | "truncate" | "trickle"
    trickle_interval: float = 0.05  # "trickle": seconds between body bytes


@dataclass
class Request:
    """One request as the stub received it."""

    method: str
    path: str
    headers: dict  # lower-case names
    body: bytes
    json: object  # parsed body, or None when it is not JSON


def tool_call(call_id: str, name: str, arguments: object) -> dict:
    """A chat-completions tool call; ``arguments`` that are not a str are JSON-encoded."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def completion(content: str | None = None, *, tool_calls: list | None = None, finish_reason: str | None = None,
               usage: dict | None = None, model: str = "stub-model") -> dict:
    """A chat-completions response body; ``finish_reason`` defaults to tool_calls/stop by the calls' presence."""
    message: dict = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    if finish_reason is None:
        finish_reason = "tool_calls" if tool_calls else "stop"
    body = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def is_summary_request(request: Request) -> bool:
    """True when ``request`` is the agent's compaction summary request (its first message is the summary prompt)."""
    from agent.provider import SUMMARY_SYSTEM_PROMPT

    body = request.json
    messages = body.get("messages") if isinstance(body, dict) else None
    return bool(messages) and isinstance(messages[0], dict) and messages[0].get("content") == SUMMARY_SYSTEM_PROMPT


Script = list | Callable[[Request], "Reply | dict"]


class OpenAIStub:
    """The server; a context manager that starts it on enter and stops it (and its delays) on exit."""

    def __init__(self, script: Script = (), port: int = 0):
        self._script = script if callable(script) else list(script)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.requests: list[Request] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)  # 0: an ephemeral port
        self._server.daemon_threads = True
        self._server.stub = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port the server listens on (ephemeral unless one was asked for)."""
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, the value for OPENAI_BASE_URL / --base-url."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "OpenAIStub":
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="openai-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; pending delays end at once."""
        self._stop.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> "OpenAIStub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _next(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            if callable(self._script):
                item = self._script(request)
            elif self._script:
                item = self._script.pop(0)
            else:
                item = Reply(500, {"error": {"message": "stub script exhausted"}})
        return item if isinstance(item, Reply) else Reply(200, item)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True

    def log_message(self, format, *args):  # noqa: A002 - keep test output clean
        pass

    def do_GET(self):
        self._answer()

    def do_POST(self):
        self._answer()

    def _answer(self):
        stub: OpenAIStub = self.server.stub  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, raw, parsed)
        reply = stub._next(request)
        if reply.delay and stub._stop.wait(reply.delay):
            self.close_connection = True
            return
        if isinstance(reply.body, bytes):
            body = reply.body
        elif isinstance(reply.body, str):
            body = reply.body.encode("utf-8")
        elif reply.body is None:
            body = b""
        else:
            body = json.dumps(reply.body).encode("utf-8")
        try:
            if reply.action == "reset":
                # SO_LINGER {on, 0}: close() sends RST instead of FIN. Close the real fd here: socketserver would
                # shutdown(SHUT_WR) first, which sends a FIN and turns the reset into an orderly close.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.rfile.close()
                self.connection.close()
                return
            if reply.action == "close":
                self.close_connection = True
                return
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if reply.action == "truncate":
                self.wfile.write(body[: len(body) // 2])
                self.close_connection = True
                return
            if reply.action == "trickle":
                for index in range(len(body)):
                    if stub._stop.wait(reply.trickle_interval):
                        break
                    self.wfile.write(body[index:index + 1])
                return
            self.wfile.write(body)
        except OSError:  # the client gave up (timeout test): nothing to answer to
            self.close_connection = True
