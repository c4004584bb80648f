"""The scripted model server: a real OpenAI-compatible chat-completions endpoint on 127.0.0.1 whose answer is chosen
from the request body alone.

Why request-pure: after a SIGKILL the agent re-sends a request (attempt 2) or continues after synthetic tool
results. A fake that counts calls would give the re-sent request the *next* answer; this one computes the position
from the transcript in the request, so a retried request gets the same answer and a run that received synthetic
results gets the next scripted turn:

- the **run** is the scenario run whose prompt equals the latest ``user`` message (prompts are distinct);
- the **turn** is the number of ``assistant`` messages after that user message (0-based index into the run's turns);
- a **compaction summary** request is recognised by its system prompt (the target's, from its ``describe`` answer:
  ``chaos.target.describe``; without one no request is taken for a summary) and answered with the summary of the compaction that follows the latest run whose prompt the request mentions.

Only provider *faults* depend on history: a fault hits the first request for its position, unless ``repeat``.

Invariants it protects: every request is recorded (body, position, time, what was answered) before it is answered;
a request whose transcript a real provider would reject (an assistant ``tool_calls`` message not followed by a tool
result for each id, a tool result for an id the preceding assistant did not request, a duplicate result) is answered
with HTTP 400 and recorded as a *finding* — the harness reports it as a defect of the agent, not as a crash. So is a
request for a position the script does not have.

The server binds 127.0.0.1 and an ephemeral port only (never another address). One server may be shared by the
cases of a worker: each case is a route ``/case/<key>/v1/chat/completions`` (``base_url(key)`` gives the agent its
``OPENAI_BASE_URL``); ``/v1/chat/completions`` is the route of the ``default`` case. Served by ``chaos.httploop`` (one
thread; HTTP/1.1 keep-alive, Nagle disabled): the script is decided and the request recorded on that thread, a delay
or a timeout fault waits in the loop without holding it.

It does not stream, authenticate, or check tool schemas, and it does not judge the answers' effect on the agent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from chaos.errors import ScriptedServerError
from chaos.httploop import HttpLoop, Reply, Request

if TYPE_CHECKING:  # pydantic stays out of this module's import: the scenario object is handed in ready-made
    from chaos.scenario import ProviderFault, Scenario, Turn, Usage

HOST = "127.0.0.1"
DEFAULT_CASE = "default"
CREATED = 1_700_000_000  # a fixed `created`: answers must not depend on the clock
# A `timeout` fault without `seconds` holds the request until the client gives up; this bounds it regardless.
MAX_HANG_SECONDS = 600.0
DEFAULT_MALFORMED_BODY = '{"id": "chatcmpl-malformed", "object": "chat.completion", "choices": [{"index": 0, "mess'
MAX_BODY_BYTES = 64 * 1024 * 1024


# --------------------------------------------------------------------------------------------------------------
# Pure part: what a request body means and what the script answers


def _text(content: object) -> str:
    """Message content as text: a string, or the text parts of a content array (OpenAI allows both)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def transcript_problem(messages: list[Any]) -> str | None:
    """Why a real provider would reject this message list, or None (checks tool-call/result pairing only)."""
    group: list[str] | None = None  # call ids of the assistant message whose results are being collected
    answered: set[str] = set()
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return f"messages[{index}] is not a message object with a role"
        role = message["role"]
        if role == "tool":
            call_id = message.get("tool_call_id")
            if group is None:
                return (f"messages[{index}]: tool result for {call_id!r} does not follow an assistant message with "
                        "tool_calls")
            if call_id not in group:
                return (f"messages[{index}]: tool result for unknown call id {call_id!r} (the preceding assistant "
                        f"requested {', '.join(map(repr, group))})")
            if call_id in answered:
                return f"messages[{index}]: duplicate tool result for call id {call_id!r}"
            answered.add(call_id)
            continue
        if group is not None and answered != set(group):
            missing = [c for c in group if c not in answered]
            return (f"messages[{index}] ({role}): assistant tool call(s) {', '.join(map(repr, missing))} have no tool "
                    "result")
        group = None
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls:
            if not isinstance(calls, list):
                return f"messages[{index}].tool_calls is not an array"
            ids = [c.get("id") if isinstance(c, dict) else None for c in calls]
            if not all(isinstance(i, str) and i for i in ids):
                return f"messages[{index}]: a tool call has no id"
            if len(set(ids)) != len(ids):
                return f"messages[{index}]: duplicate tool call ids in one assistant message"
            group, answered = ids, set()
    if group is not None and answered != set(group):
        missing = [c for c in group if c not in answered]
        return f"the request ends with assistant tool call(s) {', '.join(map(repr, missing))} that have no tool result"
    return None


@dataclass(frozen=True)
class Decision:
    """What a request body means for the script: its position and the answer (before any fault is applied)."""

    kind: str  # "answer" | "summary" | "illegal" | "unknown" | "bad-request"
    status: int
    body: dict
    run: int | None = None
    turn: int | str | None = None  # 0-based turn index, or "summary"
    finding: str | None = None


def _usage(usage: Usage) -> dict:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def _error_body(message: str, kind: str, code: str | None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _reject(kind: str, message: str, run: int | None = None, turn: int | str | None = None) -> Decision:
    code = {"illegal": "illegal_transcript", "unknown": "unscripted_request"}.get(kind, "bad_request")
    return Decision(kind, 400, _error_body(message, "invalid_request_error", code), run, turn, message)


class Script:
    """A scenario compiled for answering: prompt → run index, and the pure ``decide(body)``."""

    def __init__(self, scenario: Scenario, summary_prompt: str | None = None) -> None:
        self.scenario = scenario
        self.summary_prompt = summary_prompt
        self.prompts = {run.prompt: index for index, run in enumerate(scenario.runs)}
        self.faults: dict[tuple[int, int | str], ProviderFault] = scenario.fault_map()

    def decide(self, body: object) -> Decision:
        """The answer to a request with this (parsed JSON) body. Pure: the same body always gets the same decision."""
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            return _reject("bad-request", "the request body must be a JSON object with a non-empty 'messages' array")
        if body.get("stream"):
            return _reject("bad-request", "streaming is not supported by the scripted model server")
        messages = body["messages"]
        problem = transcript_problem(messages)
        if problem:
            return _reject("illegal", f"illegal transcript: {problem}")
        model = body.get("model") if isinstance(body.get("model"), str) else self.scenario.agent.model
        if self.summary_prompt is not None and any(
                m.get("role") in ("system", "developer") and _text(m.get("content")) == self.summary_prompt
                for m in messages):
            return self._summary(messages, model)
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users:
            return _reject("unknown", "the request has no user message, so it belongs to no scripted run")
        latest = users[-1]
        prompt = _text(messages[latest].get("content"))
        run = self.prompts.get(prompt)
        if run is None:
            return _reject("unknown", f"the latest user message matches no prompt of scenario "
                                      f"{self.scenario.name!r}: {_short(prompt)!r}")
        turn = sum(1 for m in messages[latest + 1:] if m.get("role") == "assistant")
        turns = self.scenario.runs[run].turns
        if turn >= len(turns):
            return _reject("unknown", f"run {run} ({_short(prompt)!r}) has {len(turns)} scripted turn(s); this "
                                      f"request is turn {turn} ({turn} assistant message(s) after the prompt)", run, turn)
        return Decision("answer", 200, completion_body(model, run, turn, turns[turn]), run, turn)

    def _summary(self, messages: list[dict], model: str) -> Decision:
        compacting = [i for i, run in enumerate(self.scenario.runs) if run.compact is not None]
        if len(compacting) == 1:
            run = compacting[0]
        else:
            # The summary request carries the conversation so far (as messages or rendered as text): the latest run
            # whose prompt it mentions is the run this compaction follows.
            text = "\n".join(_text(m.get("content")) for m in messages)
            found = [i for i in compacting if self.scenario.runs[i].prompt.strip() in text]
            if not found:
                return _reject("unknown", "compaction summary request, but it mentions no prompt of a run followed "
                                          f"by a compaction in scenario {self.scenario.name!r}", turn="summary")
            run = found[-1]
        compaction = self.scenario.runs[run].compact
        assert compaction is not None
        body = {
            "id": f"chatcmpl-r{run}-summary",
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": compaction.summary},
                         "finish_reason": "stop"}],
            "usage": _usage(compaction.usage),
        }
        return Decision("summary", 200, body, run, "summary")


def completion_body(model: str, run: int, turn: int, scripted: Turn) -> dict:
    """The chat.completion JSON for one scripted turn."""
    message: dict[str, Any] = {"role": "assistant", "content": scripted.content}
    if scripted.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_text}}
            for c in scripted.tool_calls
        ]
    return {
        "id": f"chatcmpl-r{run}-t{turn}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": scripted.effective_finish_reason}],
        "usage": _usage(scripted.usage),
    }


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


# --------------------------------------------------------------------------------------------------------------
# The server


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it and what it answered.

    ``kind``: ``answer``, ``summary``, ``fault:<http|delay|timeout|drop|malformed>``, ``illegal``, ``unknown``,
    ``bad-request`` or ``no-route``. ``attempt`` counts the requests for the same position (1-based).
    ``status`` is the HTTP status sent, None when no response was sent (drop, timeout).
    """

    case: str
    seq: int
    time: float
    monotonic: float
    path: str
    body: Any  # the parsed JSON body, or the raw text when it was not JSON
    run: int | None
    turn: int | str | None
    attempt: int | None
    kind: str
    status: int | None
    finding: str | None

    def to_json(self) -> dict:
        """A JSON-serialisable dict (one line of the request log). Shallow: the body is already plain JSON data and
        is never mutated, and ``asdict`` would deep-copy every request's transcript (~1.5 ms each, per case)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class _Route:
    """One case's script, fault counters and request log."""

    def __init__(self, key: str, scenario: Scenario, log_path: Path | None, summary_prompt: str | None) -> None:
        self.key = key
        self.script = Script(scenario, summary_prompt)
        self.log_path = log_path
        self.lock = threading.Lock()
        self.counts: dict[tuple[int, int | str], int] = {}
        self.records: list[RecordedRequest] = []
        self.closed = threading.Event()  # set when the case is removed or the server stops: releases held requests

    def record(self, **fields: Any) -> RecordedRequest:
        with self.lock:
            entry = RecordedRequest(case=self.key, seq=len(self.records) + 1, **fields)
            self.records.append(entry)
            if self.log_path is not None:
                write_log(self.log_path, [entry])
            return entry

    def count(self, position: tuple[int, int | str]) -> int:
        with self.lock:
            self.counts[position] = self.counts.get(position, 0) + 1
            return self.counts[position]


def write_log(path: str | Path, records: Sequence[RecordedRequest], *, append: bool = True) -> None:
    """Write ``records`` to the request log at ``path``, one JSON line each (``RecordedRequest.to_json``): appended,
    or (``append=False``) as the whole log, replacing what the file held (writing it again writes the same)."""
    with open(path, "a" if append else "w", encoding="utf-8") as log:
        log.write("".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in records))


_HTTP_FAULT = {
    429: ("rate_limit_error", "rate_limit_exceeded", "Rate limit reached (scripted fault)"),
    400: ("invalid_request_error", "bad_request", "Bad request (scripted fault)"),
}


def _json_reply(status: int, body: dict | str, headers: dict[str, str] | None = None, **kw: Any) -> Reply:
    data = (body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)).encode("utf-8")
    return Reply(status, data, headers, **kw)


class ScriptedServer:
    """The scripted model server. ``start()``/``stop()`` or use as a context manager; thread-safe.

    ``add_case(key, scenario)`` registers a route and returns the base URL to give the agent; ``requests(key)``
    and ``findings(key)`` read its log; ``remove_case(key)`` ends it (releasing any held request) and returns it.
    """

    def __init__(self) -> None:
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()
        self._loop: HttpLoop | None = None
        self.unrouted: list[RecordedRequest] = []  # requests to a path or case the server does not know

    # -- lifecycle
    def start(self) -> ScriptedServer:
        """Bind 127.0.0.1 on an ephemeral port and serve in a background thread."""
        if self._loop is not None:
            raise ScriptedServerError("the scripted server is already started")
        self._loop = HttpLoop(HOST, self._respond, name="scripted-model", max_body=MAX_BODY_BYTES).start()
        return self

    def stop(self) -> None:
        """Stop serving, release held requests and close every connection. Idempotent."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        with self._lock:
            for route in self._routes.values():
                route.closed.set()
        loop.stop()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (only while started)."""
        return self.address[1]

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port) (only while started)."""
        if self._loop is None:
            raise ScriptedServerError("the scripted server is not started")
        return self._loop.address

    # -- cases
    def add_case(self, key: str, scenario: Scenario, *, log_path: str | Path | None = None,
                 summary_prompt: str | None = None) -> str:
        """Serve ``scenario`` under ``key``; requests are also appended to ``log_path`` (JSONL) as they are recorded,
        before they are answered (a case that only needs the log when it is kept writes it afterwards instead:
        ``write_log`` of ``remove_case``'s records, the same lines). Returns the base URL.

        ``summary_prompt``: the system prompt by which the target under test asks for a compaction summary."""
        with self._lock:
            if key in self._routes:
                raise ScriptedServerError(f"case {key!r} is already served")
            self._routes[key] = _Route(key, scenario, Path(log_path) if log_path is not None else None,
                                       summary_prompt)
        return self.base_url(key)

    def remove_case(self, key: str) -> list[RecordedRequest]:
        """Stop serving ``key`` (a held request is released and dropped); returns its recorded requests."""
        with self._lock:
            route = self._routes.pop(key, None)
        if route is None:
            raise ScriptedServerError(f"case {key!r} is not served")
        route.closed.set()
        loop = self._loop  # once: stop() may clear it meanwhile
        if loop is not None:
            loop.wake()  # a request it holds is dropped now
        with route.lock:
            return list(route.records)

    def base_url(self, key: str = DEFAULT_CASE) -> str:
        """``http://127.0.0.1:PORT/case/<key>/v1`` — what the agent gets as OPENAI_BASE_URL / --base-url."""
        return f"http://{HOST}:{self.port}/case/{quote(key, safe='')}/v1"

    def requests(self, key: str = DEFAULT_CASE) -> list[RecordedRequest]:
        """A snapshot of the requests recorded for ``key``, in arrival order."""
        route = self._route(key)
        with route.lock:
            return list(route.records)

    def findings(self, key: str = DEFAULT_CASE) -> list[RecordedRequest]:
        """The recorded requests a real provider would have rejected or the script does not cover."""
        return [r for r in self.requests(key) if r.finding is not None]

    def _route(self, key: str) -> _Route:
        with self._lock:
            route = self._routes.get(key)
        if route is None:
            raise ScriptedServerError(f"case {key!r} is not served")
        return route

    # -- one request
    @staticmethod
    def _route_key(path: str) -> str | None:
        path = urlsplit(path).path
        if path in ("/v1/chat/completions", "/chat/completions"):
            return DEFAULT_CASE
        parts = path.split("/")
        # ['', 'case', '<key>', 'v1', 'chat', 'completions']
        if len(parts) == 6 and parts[1] == "case" and parts[3:] == ["v1", "chat", "completions"]:
            return unquote(parts[2])
        return None

    def _respond(self, request: Request) -> Reply:
        """What the loop answers to one request (on the loop's thread)."""
        now, mono = time.time(), time.monotonic()
        if request.method != "POST":
            status = 404 if request.method == "GET" else 501
            return _json_reply(status, _error_body("only POST …/v1/chat/completions is served",
                                                   "invalid_request_error", None))
        raw = request.body
        try:
            body: Any = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = None
        key = self._route_key(request.path)
        with self._lock:
            route = self._routes.get(key) if key is not None else None
        if route is None:
            message = f"no scripted case is served at {request.path!r}"
            with self._lock:
                self.unrouted.append(RecordedRequest(key or "", len(self.unrouted) + 1, now, mono, request.path,
                                                     body, None, None, None, "no-route", 404, message))
            return _json_reply(404, _error_body(message, "invalid_request_error", "no_route"))
        if body is None:
            decision = _reject("bad-request", "the request body is not JSON")
            body = raw.decode("utf-8", errors="replace")
        else:
            decision = route.script.decide(body)

        fault = None
        attempt = None
        if decision.kind in ("answer", "summary"):
            position = (decision.run, decision.turn)
            attempt = route.count(position)  # type: ignore[arg-type]
            candidate = route.script.faults.get(position)  # type: ignore[arg-type]
            if candidate is not None and (candidate.repeat or attempt == 1):
                fault = candidate
        kind = decision.kind if fault is None else f"fault:{fault.kind}"
        status: int | None = decision.status
        if fault is not None:
            status = {"http": fault.status, "delay": 200, "malformed": 200}.get(fault.kind)
        # Recorded before answering: a drop or a hang must still leave its evidence, and the agent may be killed
        # while it waits.
        route.record(time=now, monotonic=mono, path=request.path, body=body, run=decision.run, turn=decision.turn,
                     attempt=attempt, kind=kind, status=status, finding=decision.finding)

        if fault is None:
            return _json_reply(decision.status, decision.body)
        if fault.kind == "http":
            assert fault.status is not None
            kind_name, code, message = _HTTP_FAULT.get(
                fault.status, ("server_error" if fault.status >= 500 else "invalid_request_error", None,
                               f"HTTP {fault.status} (scripted fault)"))
            headers = {"Retry-After": "1"} if fault.status == 429 else None
            return _json_reply(fault.status, _error_body(message, kind_name, code), headers)
        if fault.kind == "delay":
            assert fault.seconds is not None
            # Answered after the delay, unless the case ends first: then the connection is dropped.
            return _json_reply(decision.status, decision.body, after=mono + fault.seconds,
                               released=route.closed.is_set)
        if fault.kind == "timeout":
            # Held unanswered until the seconds pass, the client gives up, or the case/server ends; then dropped.
            return Reply(None, hold_until=mono + (fault.seconds or MAX_HANG_SECONDS), released=route.closed.is_set)
        if fault.kind == "drop":
            return Reply(None)  # closed before any response: the client sees the peer close
        # malformed
        return _json_reply(200, fault.body if fault.body is not None else DEFAULT_MALFORMED_BODY)


@contextmanager
def serve(scenario: Scenario, *, log_path: str | Path | None = None,
          summary_prompt: str | None = None) -> Iterator[ScriptedServer]:
    """A started server with ``scenario`` as its ``default`` case (``server.base_url()``); stopped on exit."""
    server = ScriptedServer().start()
    try:
        server.add_case(DEFAULT_CASE, scenario, log_path=log_path, summary_prompt=summary_prompt)
        yield server
    finally:
        server.stop()
