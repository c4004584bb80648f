"""A small HTTP/1.1 server loop: one thread, one selector, every connection non-blocking (the scripted model's
transport, ``chaos.fakellm``).

Why not ``http.server``. Its ``ThreadingHTTPServer`` starts a thread per connection and parses headers with the
``email`` package. Measured with a forked agent's ``ChatClient`` in another process: a scripted model request took
2.1–2.4 ms end to end and 0.82–0.93 ms of the server process's CPU; with this loop 1.9–2.1 ms and 0.60–0.67 ms. A
case sends two to four, and every agent of a worker talks to its one server.

What it serves: a request line, headers (names case-insensitive), and a body of ``Content-Length`` bytes, which
every POST must have (411 otherwise, as before); ``Expect: 100-continue`` is answered; ``Transfer-Encoding`` bodies
are not (411). HTTP/1.1 connections are kept alive unless the request says ``Connection: close`` (HTTP/1.0: closed
after each answer). What to answer is the ``respond`` callback's (``Reply``): an answer at once, an answer not before
a time (a delay), nothing then a close (a drop), or nothing until a deadline, the client's close or a release (a
hold, then a drop). Requests of one connection are answered in order; one that waits holds the connection's later ones.
A malformed request line or header block (a folded header, two Content-Lengths that disagree) gets 400 and a close;
a head over 64 KiB, 431; a Content-Length over ``max_body``, 413 before any of the body is read; each with a close.
A defect met on one connection (``respond`` raised) is a traceback on stderr and a 500 with a close for that
connection; the loop serves every other on. A HEAD request gets the head of its answer only. A client that closes its
end is never read again (its socket would always be ready): what it asked is answered, then the connection closed.

Loopback only is the caller's choice of ``host``; TCP_NODELAY is set on every connection (a delayed ACK would
otherwise stall each keep-alive answer ~40 ms).
"""

from __future__ import annotations

import json
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

MAX_HEAD_BYTES = 64 * 1024
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass
class Request:
    """One complete request."""

    method: str
    path: str
    version: str  # "HTTP/1.1"
    headers: dict[str, str]  # names lower-cased; a repeated header keeps its last value
    body: bytes


@dataclass
class Reply:
    """What to do with one request: answer ``status`` with the JSON ``body`` and ``headers`` (``status`` None:
    close without an answer, a drop), then close the connection when ``close`` (the loop also closes it, and says
    so, when the request asked for that).

    ``after`` (a ``time.monotonic()`` value): answer not before then (a delay). ``hold_until``: answer nothing until
    then, or until the client closes its end, then close (a hold; ``status`` is ignored). ``released``: checked on
    every turn of the loop while the reply waits (and after ``HttpLoop.wake``): once true, the connection is closed
    without an answer (the case it belongs to ended)."""

    status: int | None
    body: bytes = b""
    headers: dict[str, str] | None = None
    close: bool = False
    after: float | None = None
    hold_until: float | None = None
    released: Callable[[], bool] | None = None


def response(status: int, body: bytes, headers: dict[str, str] | None = None, *, close: bool = False) -> bytes:
    """A whole HTTP/1.1 response with a JSON ``body``."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:  # a status the scripted fault chose that has no standard phrase
        reason = ""
    lines = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _error(status: int, message: str) -> bytes:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": None}}).encode()
    return response(status, body, close=True)


@dataclass(eq=False)  # compared and hashed by identity: kept in a set
class _Conn:
    sock: socket.socket
    inbuf: bytearray = field(default_factory=bytearray)  # bytearray: appending a chunk does not copy the rest
    out: bytes = b""
    close_after: bool = False  # close once ``out`` is sent
    waiting: Reply | None = None  # a reply not sent yet (delay or hold); later requests wait behind it
    continued: bool = False  # "100 Continue" sent for the request in ``inbuf``
    eof: bool = False  # the client closed its end: never watched for reading again (it would always be ready)
    head: bool = False  # the waiting reply answers a HEAD request: its head only
    events: int = selectors.EVENT_READ  # what the selector watches it for (0: not registered)
    closed: bool = False


class HttpLoop:
    """Serve ``respond(request) -> Reply`` on ``host``, an ephemeral port, from one background thread.

    ``respond`` runs on the loop's thread, one request at a time. ``wake()`` from any thread makes the loop
    re-check the waiting replies' ``released`` at once. ``stop()`` closes every connection (a waiting request's
    client sees the close) and joins the thread."""

    def __init__(self, host: str, respond: Callable[[Request], Reply], *, name: str = "http-loop",
                 max_body: int = 64 * 1024 * 1024):
        self.respond = respond
        self.max_body = max_body  # a larger Content-Length is refused (413) before any of the body is read
        self._listener = socket.create_server((host, 0))
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._conns: set[_Conn] = set()
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return self._listener.getsockname()[:2]

    def start(self) -> HttpLoop:
        self._thread.start()
        return self

    def wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):  # full (a wake is already pending) or closed (stopped): nothing to add
            pass

    def stop(self) -> None:
        self._stopping = True
        self.wake()
        if self._thread.is_alive():
            self._thread.join()
        else:  # never started
            self._close_all()

    # -- the loop (its thread only)

    def _serve(self) -> None:
        try:
            while not self._stopping:
                for key, events in self._sel.select(self._timeout()):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except (BlockingIOError, InterruptedError):
                            pass
                    else:
                        conn = key.data
                        try:
                            if events & selectors.EVENT_READ and not conn.closed:
                                self._on_read(conn)
                            if events & selectors.EVENT_WRITE and not conn.closed:
                                self._flush(conn)
                        except Exception:  # noqa: BLE001 - a defect met on one connection ends it, not the server
                            self._failed(conn)
                self._check_waiting()
        finally:
            self._close_all()

    def _timeout(self) -> float | None:
        deadlines = [d for c in self._conns if c.waiting is not None
                     for d in (c.waiting.after, c.waiting.hold_until) if d is not None]
        if any(c.waiting is not None and c.waiting.released is not None for c in self._conns):
            deadlines.append(time.monotonic() + 0.05)  # a release is also seen without a wake, within 50 ms
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: the connection waits in the backlog (no spinning meanwhile)
                time.sleep(0.01)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock)
            self._conns.add(conn)
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _on_read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset by the client
            data = b""
        if not data:
            conn.eof = True
            if conn.waiting is not None and conn.waiting.hold_until is not None:
                self._close(conn)  # a held request's client gave up: nothing left to hold
                return
            self._watch(conn)
        conn.inbuf += data
        self._process(conn)
        if conn.eof and not conn.closed and conn.waiting is None:
            # Every complete request is answered (an incomplete one never will be): close once that is sent.
            conn.close_after = True
            if not conn.out:
                self._close(conn)

    def _process(self, conn: _Conn) -> None:
        """Answer the complete requests in ``conn.inbuf``, in order, until one must wait."""
        while conn.waiting is None and not conn.closed and not conn.close_after:
            head_end, start = _head_end(conn.inbuf)
            if head_end < 0:
                if len(conn.inbuf) > MAX_HEAD_BYTES:
                    self._send(conn, _error(431, "request head over 64 KiB"), close=True)
                return
            request = _parse_head(bytes(conn.inbuf[:head_end]))
            if request is None:
                self._send(conn, _error(400, "malformed request line or header"), close=True)
                return
            length = request.headers.get("content-length")
            if length is None and request.method in ("GET", "HEAD", "DELETE", "OPTIONS"):
                length = "0"
            # isascii: str.isdigit also accepts digits int() refuses ("²").
            if length is None or not (length.isascii() and length.isdigit()) or "transfer-encoding" in request.headers:
                self._send(conn, _error(411, "a Content-Length is required"), close=True)
                return
            size = int(length)
            if size > self.max_body:
                self._send(conn, _error(413, f"a body over {self.max_body} bytes"), close=True)
                return
            if len(conn.inbuf) - start < size:
                if not conn.continued and request.headers.get("expect", "").lower() == "100-continue":
                    conn.continued = True
                    self._send(conn, _CONTINUE)
                return
            request.body = bytes(conn.inbuf[start:start + size])
            del conn.inbuf[:start + size]
            conn.continued = False
            try:
                reply = self.respond(request)
            except Exception:  # noqa: BLE001 - a defect of the caller's: one request fails, not the server
                # As socketserver reports a handler's exception: a traceback on stderr, the rest served on.
                self._failed(conn)
                return
            keep = request.version == "HTTP/1.1" and request.headers.get("connection", "").lower() != "close"
            if not keep:
                reply.close = True
            conn.head = request.method == "HEAD"
            if reply.after is not None or reply.hold_until is not None:
                conn.waiting = reply
                self._check_waiting()
                return
            if reply.status is None:  # a drop
                self._close(conn)
                return
            self._answer(conn, reply)

    def _check_waiting(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self._conns if c.waiting is not None and not c.closed]:
            reply = conn.waiting
            if reply.released is not None and reply.released():
                self._close(conn)
            elif reply.hold_until is not None:
                if now >= reply.hold_until:
                    self._close(conn)
            elif reply.after is not None and now >= reply.after:
                conn.waiting = None
                if reply.status is None:
                    self._close(conn)
                else:
                    reply.close = reply.close or conn.eof
                    self._answer(conn, reply)
                    self._process(conn)  # requests that arrived meanwhile

    def _failed(self, conn: _Conn) -> None:
        """A defect met while serving ``conn`` (``respond`` raised, say): as socketserver reports a handler's
        exception, a traceback on stderr; that connection gets 500 and a close, every other is served on."""
        import traceback

        traceback.print_exc()
        if not conn.closed:
            conn.waiting = None
            try:
                self._send(conn, _error(500, "the server failed on this request"), close=True)
            except Exception:  # noqa: BLE001 - it cannot even be answered: closed
                self._close(conn)

    def _answer(self, conn: _Conn, reply: Reply) -> None:
        data = response(reply.status, reply.body, reply.headers, close=reply.close)
        if conn.head:  # HEAD: the head of the answer only (its Content-Length says what a GET would carry)
            data = data[:data.index(b"\r\n\r\n") + 4]
        self._send(conn, data, close=reply.close)

    def _send(self, conn: _Conn, data: bytes, *, close: bool = False) -> None:
        conn.out += data
        conn.close_after = conn.close_after or close
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        while conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # the client is gone
                self._close(conn)
                return
            conn.out = conn.out[sent:]
        self._watch(conn)
        if not conn.out and conn.close_after:
            self._close(conn)

    def _watch(self, conn: _Conn) -> None:
        """Watch ``conn`` for reading until its client's end is closed, and for writing while ``out`` waits."""
        events = (0 if conn.eof else selectors.EVENT_READ) | (selectors.EVENT_WRITE if conn.out else 0)
        if events == conn.events:
            return
        if conn.events == 0:
            self._sel.register(conn.sock, events, conn)
        elif events == 0:
            self._sel.unregister(conn.sock)
        else:
            self._sel.modify(conn.sock, events, conn)
        conn.events = events

    def _close(self, conn: _Conn) -> None:
        """Close without a further answer: the client sees the end of the connection (a drop, a released hold)."""
        if conn.closed:
            return
        conn.closed = True
        conn.waiting = None
        self._conns.discard(conn)
        if conn.events:
            self._sel.unregister(conn.sock)
            conn.events = 0
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        conn.sock.close()

    def _close_all(self) -> None:
        for conn in list(self._conns):
            self._close(conn)
        for sock in (self._listener, self._wake_r, self._wake_w):
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self._sel.close()


def _head_end(buf: bytearray) -> tuple[int, int]:
    """(where the head ends, where the body starts), or (-1, -1) while the head is incomplete. Lines may end in
    CRLF or, as http.server also accepts, a bare LF."""
    crlf, lf = buf.find(b"\r\n\r\n"), buf.find(b"\n\n")
    if crlf >= 0 and (lf < 0 or crlf < lf):
        return crlf, crlf + 4
    return (lf, lf + 2) if lf >= 0 else (-1, -1)


def _parse_head(head: bytes) -> Request | None:
    """The request line and headers, or None when they are malformed: a request line that is not METHOD PATH
    HTTP/1.x, a header line without a name and a colon, a folded header (obsolete: RFC 9112 §5.2 lets a server
    refuse it), two Content-Lengths that disagree."""
    lines = [line.removesuffix("\r") for line in head.decode("latin-1").split("\n")]
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1] or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        name, value = name.lower(), value.strip()
        if name == "content-length" and headers.get(name, value) != value:
            return None
        headers[name] = value
    return Request(parts[0], parts[1], parts[2], headers, b"")
