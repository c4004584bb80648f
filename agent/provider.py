"""OpenAI-compatible chat-completions client: one HTTP request in, one typed outcome out.

What it is for: the agent's only conversation with a model. ``ChatClient.chat(body)`` POSTs a request body (built by
``agent.config.request_body`` so that what is sent is exactly what the configuration snapshot describes, SPEC §8.4)
to ``{base_url}/chat/completions`` and returns one of:

- ``Completion(message, stop_reason, usage)``: a settled answer, already mapped per SPEC §15.4 and §7, whose
  ``message`` is a valid §5.1 assistant message (so committing it can never be a rejected transaction);
- ``LiveError(code, message, usage)``: a live failure with one of the six codes of §15.4, to be written as
  ``stepFailed`` (the run then finishes ``failed``);
- ``Cancelled()``: ``cancel()`` was called (the loop's SIGINT/SIGTERM path); the answer, if any, is discarded
  because after ``abortRequested`` the operation gets no further live writes (§15.5).

Invariants it protects:

- **Never retries.** One call of ``chat`` is at most one HTTP request: a retry is a planner decision (P3.3) that only
  a crash-unknown attempt gets.
- **Sanitized text.** Provider bytes are decoded as UTF-8 with replacement and every lone surrogate that arrives as a
  JSON escape (``"\\ud800"``) is replaced by U+FFFD before it can reach a fact (SPEC §13.3 step 3), because the store
  rejects facts that cannot be canonical JSON.
- **Stdlib only, lazily.** ``http.client`` (which imports ``ssl`` and ``email``) and ``urllib.parse`` are imported on
  first use, not at agent start (the agent is launched thousands of times per campaign).

Cancellation: ``cancel()`` may be called from a signal handler. Python runs handlers in the main thread between
bytecodes, and a blocking ``recv``/``poll``/``send`` interrupted by the signal returns EINTR, runs the handler, then
is retried (PEP 475). ``cancel()`` sets a sticky flag and ``shutdown(SHUT_RDWR)``s the in-flight socket, so the
retried call sees end-of-file or EPIPE at once and ``chat`` returns ``Cancelled``. The flag is checked after connect
and at every failure, so a signal that lands before the socket exists is not lost either. It is sticky: once
cancelled, every later ``chat``/``summarize`` on this client returns ``Cancelled`` without sending anything.
``cancel()`` is also safe to call from another thread.

What it does not do: build request bodies (``agent.config``), decide what to commit (the loop), retry, stream, or
keep connections alive across requests (one connection per request, so a server-closed idle connection can never
turn into a spurious ``connection_error``).
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import time
from dataclasses import dataclass

from agent.errors import AgentError

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = 120.0

# A response larger than this is not a chat completion we can use; refusing it bounds the agent's memory.
MAX_RESPONSE_BYTES = 32 * 1024 * 1024

# Error messages end up in stepFailed.error.message; keep them one short line.
MAX_ERROR_MESSAGE = 300

LIVE_ERROR_CODES = frozenset(
    {"rate_limited", "server_error", "bad_request", "timeout", "connection_error", "invalid_response"}
)

# The compaction summary request's system prompt. It is a fixed constant so the harness's scripted server can
# recognise a summary request from the request alone (its first message is this system message).
SUMMARY_SYSTEM_PROMPT = (
    "You are the compaction summarizer of a coding agent. You receive the earlier part of a conversation between a "
    "user, the agent and its tools. Write a concise summary that lets the agent continue the work without the "
    "original messages: the user's goals and constraints, decisions taken, files read or changed (with paths), "
    "commands run and their important results, and anything still open. Do not invent facts. Answer with the "
    "summary text only."
)

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class ProviderError(AgentError):
    """The provider client cannot be configured (for example an unusable base URL)."""


@dataclass(frozen=True)
class Completion:
    """A settled model answer: a §5.1 assistant ``message``, its §5.3 ``stop_reason``, §7 ``usage`` or None."""

    message: dict
    stop_reason: str  # "stop" | "toolUse" | "length"
    usage: dict | None

    def as_outcome(self) -> dict:
        """The settled-answer outcome value of ``agent.session.materialize`` (``assistant_answer``)."""
        return {"message": self.message, "stopReason": self.stop_reason, "usage": self.usage}


@dataclass(frozen=True)
class Summary:
    """A compaction summary answer: the summary ``text`` and §7 ``usage`` or None."""

    text: str
    usage: dict | None

    def as_outcome(self) -> dict:
        """The compaction-summary outcome value of ``agent.session.materialize`` (``compaction_summary``)."""
        return {"summary": self.text, "usage": self.usage}


@dataclass(frozen=True)
class LiveError:
    """A live provider failure (§15.4): ``code`` in LIVE_ERROR_CODES, a short non-empty ``message``, usage if any."""

    code: str
    message: str
    usage: dict | None = None

    def error(self) -> dict:
        """The ``stepFailed.error`` object for this failure."""
        return {"code": self.code, "message": self.message}

    def as_outcome(self) -> dict:
        """The provider-failure outcome value of ``agent.session.materialize`` (``step_failure``)."""
        return {"error": self.error(), "usage": self.usage}


@dataclass(frozen=True)
class Cancelled:
    """The request was cancelled by ``ChatClient.cancel()``; nothing from it may be committed."""


CANCELLED = Cancelled()


def sanitize_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (SPEC §13.3 step 3); valid pairs are untouched."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def sanitize(value: object) -> object:
    """A copy of parsed JSON ``value`` whose strings (member names included) carry no lone surrogates."""
    if isinstance(value, str):
        return sanitize_text(value)
    if isinstance(value, list):
        return [sanitize(item) for item in value]
    if isinstance(value, dict):
        return {sanitize_text(k): sanitize(v) for k, v in value.items()}
    return value


def _counter(value: object) -> int:
    # Usage is accounting only (§7): a counter a server reports in a form we cannot count is 0, not a failure.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def map_usage(usage: object) -> dict | None:
    """The §7 usage counters for an OpenAI-compatible ``usage`` object, or None when there is none."""
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict):
        details = {}
    cache_read = _counter(details.get("cached_tokens"))
    cache_write = _counter(details.get("cache_write_tokens"))
    return {
        "input": max(0, _counter(usage.get("prompt_tokens")) - cache_read - cache_write),
        "output": _counter(usage.get("completion_tokens")),
        "cacheRead": cache_read,
        "cacheWrite": cache_write,
    }


def _short(text: str) -> str:
    text = " ".join(sanitize_text(text).split())
    if len(text) > MAX_ERROR_MESSAGE:
        text = text[: MAX_ERROR_MESSAGE - 1] + "…"
    return text or "(no detail)"


def _decode_json(data: bytes) -> object:
    """Parse a response body: UTF-8 with replacement, then JSON, then surrogate sanitizing. Raises ValueError."""
    return sanitize(json.loads(data.decode("utf-8", errors="replace")))


def _invalid(message: str, usage: dict | None = None) -> LiveError:
    return LiveError("invalid_response", _short(message), usage)


def _first_choice(data: bytes) -> tuple[dict, dict | None] | LiveError:
    """The first choice of a 2xx body and the mapped usage, or invalid_response."""
    try:
        body = _decode_json(data)
    except ValueError as exc:  # JSONDecodeError is a ValueError
        return _invalid(f"response body is not JSON: {exc}")
    if not isinstance(body, dict):
        return _invalid("response body is not a JSON object")
    usage = map_usage(body.get("usage"))
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return _invalid("response has no choices", usage)
    return choices[0], usage


def _map_calls(raw: object) -> list[dict] | str:
    """The §5.1 ``tool_calls`` for the provider's calls (empty when absent), or a reason they are invalid."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        return "tool_calls is not an array"
    calls: list[dict] = []
    seen: set[str] = set()
    for index, call in enumerate(raw):
        if not isinstance(call, dict):
            return f"tool call {index} is not an object"
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            return f"tool call {index} has an empty id"
        if call_id in seen:
            return f"tool call id {call_id!r} is duplicated"
        seen.add(call_id)
        # Some compatible servers omit "type"; anything present must be "function", the only kind we offer.
        if call.get("type", "function") != "function":
            return f"tool call {index} has type {call.get('type')!r}"
        function = call.get("function")
        if not isinstance(function, dict):
            return f"tool call {index} has no function"
        name = function.get("name")
        if not isinstance(name, str) or not name:
            return f"tool call {index} has an empty name"
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            return f"tool call {index} has non-string arguments"
        # Keep the raw arguments text: the planner parses it (§14.3), never us.
        calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
    return calls


def _first_message(data: bytes) -> tuple[dict, dict, dict | None] | LiveError:
    """(first choice, its message, usage) of a 2xx body, or the ``invalid_response`` LiveError."""
    first = _first_choice(data)
    if isinstance(first, LiveError):
        return first
    choice, usage = first
    message = choice.get("message")
    if not isinstance(message, dict):
        return _invalid("choice has no message", usage)
    return choice, message, usage


def map_completion(data: bytes) -> Completion | LiveError:
    """Map a 2xx chat-completions body to a Completion or an ``invalid_response`` LiveError (SPEC §15.4)."""
    first = _first_message(data)
    if isinstance(first, LiveError):
        return first
    choice, message, usage = first
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return _invalid("message content is neither a string nor null", usage)
    calls = _map_calls(message.get("tool_calls"))
    if isinstance(calls, str):
        return _invalid(calls, usage)
    finish = choice.get("finish_reason")
    if finish == "length":
        stop_reason = "length"
    elif finish in ("stop", "tool_calls") and calls:
        # §15.4: some compatible servers report "stop" together with calls; calls decide.
        stop_reason = "toolUse"
    elif finish == "stop":
        stop_reason = "stop"
    elif finish == "tool_calls":
        return _invalid("finish_reason tool_calls without tool calls", usage)
    else:
        return _invalid(f"unsupported finish_reason {finish!r}", usage)
    out: dict = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = calls
    return Completion(out, stop_reason, usage)


def map_summary(data: bytes) -> Summary | LiveError:
    """Map a 2xx body answering a summary request to a Summary, or ``invalid_response``."""
    first = _first_message(data)
    if isinstance(first, LiveError):
        return first
    choice, message, usage = first
    content = message.get("content")
    if not isinstance(content, str):
        return _invalid("summary content is not a string", usage)
    if message.get("tool_calls"):
        return _invalid("summary answer contains tool calls", usage)
    if choice.get("finish_reason") not in ("stop", "length"):
        return _invalid(f"unsupported finish_reason {choice.get('finish_reason')!r}", usage)
    return Summary(content, usage)


def map_http_error(status: int, data: bytes) -> LiveError:
    """The LiveError for a non-2xx status: 429 rate_limited, 5xx server_error, other 4xx bad_request."""
    detail = ""
    usage = None
    try:
        body = _decode_json(data)
    except ValueError:
        body = None
    if isinstance(body, dict):
        usage = map_usage(body.get("usage"))
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            detail = error["message"]
        elif isinstance(error, str):
            detail = error
        elif isinstance(body.get("message"), str):
            detail = body["message"]
    if not detail and body is None:
        detail = data[:MAX_ERROR_MESSAGE].decode("utf-8", errors="replace")
    if status == 429:
        code = "rate_limited"
    elif 500 <= status <= 599:
        code = "server_error"
    elif 400 <= status <= 499:
        code = "bad_request"
    else:  # 1xx/3xx: we follow no redirects, so this answer cannot be used
        code = "invalid_response"
    return LiveError(code, _short(f"HTTP {status}" + (f": {detail}" if detail else "")), usage)


def render_transcript(messages: list[dict]) -> str:
    """A plain-text rendering of ``messages`` for the summary request (any server accepts plain user text)."""
    parts = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            parts.append(f"[tool result for {message.get('tool_call_id')}]\n{message.get('content') or ''}")
            continue
        text = message.get("content") or ""
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            text += f"\n[tool call {call.get('id')}: {function.get('name')} {function.get('arguments')}]"
        parts.append(f"[{role}]\n{text.strip()}")
    return "\n\n".join(parts)


def summary_body(model: str, messages: list[dict], options: dict | None = None) -> dict:
    """The request body asking ``model`` to summarize ``messages`` (first message: SUMMARY_SYSTEM_PROMPT)."""
    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
            {"role": "user", "content": "Summarize this conversation:\n\n" + render_transcript(messages)},
        ],
    }
    body.update(options or {})
    return body


class ChatClient:
    """Sends chat-completions requests to one endpoint; see the module docstring for outcomes and cancellation."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT, environ: dict | None = None):
        env = os.environ if environ is None else environ
        # Explicit parameters win, then the ecosystem's variables, as OpenAI's own clients do.
        url = base_url or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.api_key = api_key if api_key is not None else (env.get("OPENAI_API_KEY") or None)
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ProviderError(f"request timeout must be a positive number of seconds, not {timeout!r}")
        self.timeout = float(timeout)
        self.base_url = url.rstrip("/")
        self._scheme, self._host, self._port, self._path = split_base_url(self.base_url)
        self._cancelled = False
        self._sock: socket.socket | None = None

    def __repr__(self) -> str:  # never show the API key
        return f"ChatClient({self.address!r}, timeout={self.timeout})"

    @property
    def address(self) -> str:
        """The base URL to show a person: without a ``user:password@`` part, which a URL may carry."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{self._scheme}://{host}{'' if self._port is None else f':{self._port}'}{self._path}"

    @property
    def cancelled(self) -> bool:
        """True once ``cancel()`` was called."""
        return self._cancelled

    def cancel(self) -> None:
        """Abort the in-flight request, if any, and every later one. Safe in a signal handler or another thread."""
        self._cancelled = True
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # not connected yet, or already closed: the flag alone is enough
                pass

    def chat(self, body: dict) -> Completion | LiveError | Cancelled:
        """POST ``body`` to ``/chat/completions`` once; map the answer per SPEC §15.4."""
        result = self._post(body)
        if isinstance(result, tuple):
            status, data = result
            return map_completion(data) if 200 <= status <= 299 else map_http_error(status, data)
        return result

    def summarize(self, model: str, messages: list[dict], *, options: dict | None = None) -> Summary | LiveError | Cancelled:
        """Ask ``model`` for a compaction summary of ``messages`` (one request, never retried)."""
        result = self._post(summary_body(model, messages, options))
        if isinstance(result, tuple):
            status, data = result
            return map_summary(data) if 200 <= status <= 299 else map_http_error(status, data)
        return result

    def _post(self, body: dict) -> tuple[int, bytes] | LiveError | Cancelled:
        if self._cancelled:
            return CANCELLED
        import http.client  # lazily: it pulls in ssl and email (see module docstring)

        # Messages come from the log and hold no lone surrogates; "replace" only guards against a caller's bug.
        payload = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8", errors="replace")
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "killpoint-agent/0.1",
            "Connection": "close",
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        deadline = time.monotonic() + self.timeout
        if self._scheme == "https":
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        try:
            if self._scheme == "http" and self._host.isascii():
                # getaddrinfo encodes a str host with the "idna" codec, whose first use imports encodings.idna,
                # stringprep and unicodedata: ~3 ms on a launch's first request (measured), for nothing when the
                # host is ASCII (127.0.0.1, localhost). As bytes it skips the codec; http.client uses a socket
                # already set on the connection as it would its own.
                # conn.port, not self._port: http.client fills in the default (80) for a URL without a port.
                conn.sock = socket.create_connection((self._host.encode("ascii"), conn.port), self.timeout)
            else:
                conn.connect()
            sock = self._sock = conn.sock
            # http.client sends a body over 2,000 bytes in a second write after the headers; with Nagle on, that
            # write waits for the ACK of the first, which a loopback peer delays ~40 ms (measured: 30-40 ms per
            # scripted request). The request is complete when written: nothing is gained by coalescing.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._cancelled:  # a signal landed while connecting, before there was a socket to shut down
                return CANCELLED
            # Socket timeouts bound each operation, and http.client loops over many recv calls (header lines,
            # buffered body reads): a server trickling bytes would never time out. The wrapper re-arms every
            # recv with the time left, which makes the request timeout a total deadline.
            conn.sock = _DeadlineSocket(sock, deadline)
            conn.request("POST", self._path + "/chat/completions", body=payload, headers=headers)
            response = conn.getresponse()
            chunks = []
            size = 0
            while True:
                chunk = response.read(65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    return LiveError("invalid_response", f"response body exceeds {MAX_RESPONSE_BYTES} bytes")
                chunks.append(chunk)
            if response.length:
                # read(amt) returns short at EOF instead of raising: a body shorter than its Content-Length is
                # a connection closed mid-response.
                raise http.client.IncompleteRead(b"".join(chunks), response.length)
            if self._cancelled:
                return CANCELLED
            return response.status, b"".join(chunks)
        except TimeoutError:  # socket.timeout is TimeoutError since 3.10
            if self._cancelled:
                return CANCELLED
            return LiveError("timeout", f"no complete response within {self.timeout:g} s")
        except (http.client.IncompleteRead, ConnectionError) as exc:
            # IncompleteRead: closed mid-body; RemoteDisconnected is a ConnectionResetError (closed before status).
            if self._cancelled:
                return CANCELLED
            return LiveError("connection_error", _short(f"{type(exc).__name__}: {exc}"))
        except http.client.HTTPException as exc:
            if self._cancelled:
                return CANCELLED
            return LiveError("invalid_response", _short(f"malformed HTTP response: {type(exc).__name__}: {exc}"))
        except OSError as exc:  # DNS failure, unreachable network, TLS failure (ssl.SSLError is an OSError)
            if self._cancelled:
                return CANCELLED
            return LiveError("connection_error", _short(f"{type(exc).__name__}: {exc}"))
        finally:
            self._sock = None
            conn.close()
            if conn.sock is None and "sock" in locals():  # conn.close() only reached the wrapper (see close())
                sock.close()


def _arm(sock: socket.socket, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("request deadline passed")
    sock.settimeout(remaining)


class _DeadlineReader(io.RawIOBase):
    """Raw reader over a socket whose every recv gets only the time left before ``deadline``."""

    def __init__(self, sock: socket.socket, deadline: float):
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        _arm(self._sock, self._deadline)
        return self._sock.recv_into(buffer)


class _DeadlineSocket:
    """The connected socket as http.client sees it: sends and reads bounded by one total deadline."""

    def __init__(self, sock: socket.socket, deadline: float):
        self._sock = sock
        self._deadline = deadline

    def __getattr__(self, name):  # fileno, setsockopt...: the real socket's
        return getattr(self._sock, name)

    def close(self) -> None:
        # http.client closes its socket as soon as it has read the headers of a "Connection: close" response,
        # before the body is read. socket.makefile() defers the real close until the file is closed (_io_refs);
        # our makefile() bypasses that, so a real close here would pull the fd from under the body read (EBADF,
        # seen as a spurious connection_error). _post() closes the real socket itself when it is done.
        pass

    def sendall(self, data) -> None:
        _arm(self._sock, self._deadline)
        self._sock.sendall(data)

    def makefile(self, mode: str = "rb", *args, **kwargs):
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))


def split_base_url(url: str) -> tuple[str, str, int | None, str]:
    """(scheme, host, port or None, path prefix) of a base URL; ProviderError when it is not http(s)://HOST..."""
    from urllib.parse import urlsplit  # lazily, like http.client

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ProviderError(f"invalid base URL {redact_url(url)!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProviderError(f"invalid base URL {redact_url(url)!r}: expected http://HOST[:PORT][/PATH] or https://…")
    if parts.query or parts.fragment:
        raise ProviderError(f"invalid base URL {redact_url(url)!r}: a query or fragment is not allowed")
    host = parts.hostname
    if ":" in host:  # IPv6 literal: http.client wants it without brackets
        host = host.strip("[]")
    return parts.scheme, host, port, parts.path.rstrip("/")


def redact_url(url: str) -> str:
    """``url`` with its ``user:password@`` part, if any, shown as ``…@``: for what a person or a log reads."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    ends = [i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0]
    at = rest.rfind("@", 0, min(ends) if ends else len(rest))
    return url if at < 0 else f"{scheme}://…@{rest[at + 1:]}"
