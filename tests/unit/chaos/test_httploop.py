"""Tests of chaos.httploop: the scripted model's one-thread HTTP/1.1 loop, over real sockets on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from chaos.httploop import HttpLoop, Reply, Request


def echo(request: Request) -> Reply:
    """Answer each request with its method, path and body."""
    return Reply(200, f"{request.method} {request.path} {request.body.decode()}".encode())


@pytest.fixture
def loop():
    loops: list[HttpLoop] = []

    def start(respond=echo) -> HttpLoop:
        started = HttpLoop("127.0.0.1", respond).start()
        loops.append(started)
        return started

    yield start
    for each in loops:
        each.stop()


def connect(loop: HttpLoop) -> socket.socket:
    sock = socket.create_connection(loop.address, timeout=10)
    return sock


def post(path: str = "/p", body: bytes = b"hi", *, version: str = "HTTP/1.1", extra: str = "") -> bytes:
    return (f"POST {path} {version}\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection."""
    chunks = []
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def read_responses(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """``count`` responses (status, body) from a kept-alive connection."""
    buf, out = b"", []
    while len(out) < count:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(1 << 16)
            assert chunk, f"closed after {len(out)} responses"
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        length = next(int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length"))
        while len(buf) < length:
            chunk = sock.recv(1 << 16)
            assert chunk
            buf += chunk
        out.append((int(lines[0].split()[1]), buf[:length]))
        buf = buf[length:]
    return out


class TestRequests:
    def test_pipelined_requests_are_answered_in_order_on_one_connection(self, loop):
        """Three requests sent in one write get three answers, in order, and the connection stays open."""
        server = loop()
        with connect(server) as sock:
            sock.sendall(post("/a", b"1") + post("/b", b"2") + post("/c", b"3"))
            assert read_responses(sock, 3) == [(200, b"POST /a 1"), (200, b"POST /b 2"), (200, b"POST /c 3")]
            sock.sendall(post("/d", b"4"))
            assert read_responses(sock, 1) == [(200, b"POST /d 4")]

    def test_a_request_split_across_writes_is_read_whole(self, loop):
        """Head and body arriving byte by byte make one request."""
        server = loop()
        with connect(server) as sock:
            for byte in post("/slow", b"body"):
                sock.send(bytes([byte]))
            assert read_responses(sock, 1) == [(200, b"POST /slow body")]

    def test_expect_100_continue_is_answered_before_the_body(self, loop):
        """A client that waits for 100 Continue gets it, then its answer."""
        server = loop()
        with connect(server) as sock:
            sock.sendall(b"POST /e HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
            assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
            sock.sendall(b"abc")
            assert read_responses(sock, 1) == [(200, b"POST /e abc")]

    @pytest.mark.parametrize("version, extra", [("HTTP/1.0", ""), ("HTTP/1.1", "Connection: close\r\n")])
    def test_http_1_0_and_connection_close_are_closed_after_the_answer(self, loop, version, extra):
        """The answer says Connection: close and the connection ends after it."""
        server = loop()
        with connect(server) as sock:
            sock.sendall(post(version=version, extra=extra))
            data = read_all(sock)
        assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" in data and data.endswith(b"POST /p hi")

    def test_a_client_that_half_closes_still_gets_its_answer(self, loop):
        """Request, then shutdown(SHUT_WR): the answer comes, then the close."""
        server = loop()
        with connect(server) as sock:
            sock.sendall(post())
            sock.shutdown(socket.SHUT_WR)
            assert read_all(sock).endswith(b"POST /p hi")

    def test_an_answer_larger_than_the_socket_buffer_arrives_whole(self, loop):
        """8 MiB of body: sent as the client reads it."""
        big = b"x" * (8 << 20)
        server = loop(lambda request: Reply(200, big))
        with connect(server) as sock:
            sock.sendall(post())
            time.sleep(0.2)  # let the server's buffer fill before reading
            assert read_responses(sock, 1) == [(200, big)]


class TestBadRequests:
    @pytest.mark.parametrize("raw, status", [
        (b"NONSENSE\r\n\r\n", 400),
        (b"POST /p HTTP/2.0\r\nContent-Length: 0\r\n\r\n", 400),
        (b"POST /p HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"POST /p HTTP/1.1\r\n\r\n", 411),
        (b"POST /p HTTP/1.1\r\nContent-Length: x\r\n\r\n", 411),
        (b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
        (b"POST /p HTTP/1.1\r\nX: " + b"y" * (70 << 10), 431),
        (b"POST /p HTTP/1.1\r\nContent-Length: \xb2\r\n\r\n", 411),
        (b"POST /p HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", 400),
        (b"POST /p HTTP/1.1\r\nX: a\r\n  folded\r\nContent-Length: 0\r\n\r\n", 400),
        (b"POST /p HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413),
    ])
    def test_a_bad_request_gets_its_status_and_a_close(self, loop, raw, status):
        """Malformed heads, a missing length, a head over 64 KiB: one JSON error, then the close."""
        answered = []
        server = loop(lambda request: answered.append(request) or Reply(200))
        with connect(server) as sock:
            sock.sendall(raw)
            data = read_all(sock)
        assert data.split(b"\r\n", 1)[0].split()[1] == str(status).encode()
        assert b'"error"' in data and answered == []

    def test_a_request_the_callback_fails_on_gets_500_and_the_loop_serves_on(self, loop, capsys):
        """An exception in respond() is one 500 and a traceback on stderr; the next connection is served."""
        def respond(request: Request) -> Reply:
            if request.path == "/boom":
                raise RuntimeError("boom")
            return echo(request)

        server = loop(respond)
        with connect(server) as sock:
            sock.sendall(post("/boom"))
            assert read_all(sock).startswith(b"HTTP/1.1 500 ")
        with connect(server) as sock:
            sock.sendall(post("/ok"))
            assert read_responses(sock, 1) == [(200, b"POST /ok hi")]
        assert "RuntimeError: boom" in capsys.readouterr().err

    def test_a_bad_length_does_not_stop_the_server(self, loop):
        """A Content-Length str.isdigit accepts but int() refuses ("²", byte B2 in the latin-1 of a head) is 411 for
        that connection; the next is served (it used to end the loop's thread: every later connection refused)."""
        server = loop()
        with connect(server) as sock:
            sock.sendall(b"POST /p HTTP/1.1\r\nContent-Length: \xb2\r\n\r\n")
            assert read_all(sock).startswith(b"HTTP/1.1 411 ")
        with connect(server) as sock:
            sock.sendall(post())
            assert read_responses(sock, 1) == [(200, b"POST /p hi")]

    def test_bare_lf_line_ends_are_accepted(self, loop):
        """Lines ending in LF alone (as http.server accepts them) make a request."""
        server = loop()
        with connect(server) as sock:
            sock.sendall(b"POST /lf HTTP/1.1\nContent-Length: 2\n\nok")
            assert read_responses(sock, 1) == [(200, b"POST /lf ok")]

    def test_a_head_request_gets_no_body(self, loop):
        """HEAD: the status line and headers of the answer, no body; the connection stays usable."""
        server = loop()
        with connect(server) as sock:
            sock.sendall(b"HEAD /h HTTP/1.1\r\n\r\n" + post("/after"))
            data = b""
            deadline = time.monotonic() + 10
            # Read until the second answer's body is in (the two may come in separate segments on a loaded machine).
            while not data.endswith(b"POST /after hi") and time.monotonic() < deadline:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        first, rest = data.split(b"\r\n\r\n", 1)
        assert first.startswith(b"HTTP/1.1 200 ") and b"Content-Length: 8" in first
        assert rest.startswith(b"HTTP/1.1 200 ") and rest.endswith(b"POST /after hi")

    def test_a_get_without_a_body_is_a_request(self, loop):
        """GET carries no Content-Length: it is still passed on (the caller decides what it answers)."""
        server = loop()
        with connect(server) as sock:
            sock.sendall(b"GET /g HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_responses(sock, 1) == [(200, b"GET /g ")]


class TestWaits:
    def test_a_delayed_answer_comes_after_its_time_and_holds_the_next(self, loop):
        """after: the answer is not sent before then; a pipelined request behind it waits its turn."""
        def respond(request: Request) -> Reply:
            if request.path == "/slow":
                return Reply(200, b"slow", after=time.monotonic() + 0.3)
            return echo(request)

        server = loop(respond)
        with connect(server) as sock:
            started = time.monotonic()
            sock.sendall(post("/slow") + post("/fast"))
            answers = read_responses(sock, 2)
            assert time.monotonic() - started >= 0.3
            assert answers == [(200, b"slow"), (200, b"POST /fast hi")]

    def test_a_client_that_closes_during_a_delay_does_not_make_the_loop_spin(self, loop):
        """The closed end is not watched while the delay runs (it would be ready on every turn): the loop's thread
        stays idle, and the other connections are served."""
        turns = []

        def respond(request: Request) -> Reply:
            if request.path == "/slow":
                return Reply(200, b"slow", after=time.monotonic() + 0.5)
            return echo(request)

        server = loop(respond)
        original = server._on_read

        def counted(conn):
            turns.append(conn)
            return original(conn)

        server._on_read = counted
        with connect(server) as sock:
            sock.sendall(post("/slow"))
            time.sleep(0.05)
        time.sleep(0.3)  # the client is gone; the delay still runs
        assert len(turns) < 10, len(turns)
        with connect(server) as sock:
            sock.sendall(post("/fast"))
            assert read_responses(sock, 1) == [(200, b"POST /fast hi")]

    def test_a_hold_ends_in_a_close_at_its_deadline(self, loop):
        """hold_until: nothing is answered; the connection is closed when the time is up."""
        server = loop(lambda request: Reply(None, hold_until=time.monotonic() + 0.3))
        with connect(server) as sock:
            started = time.monotonic()
            sock.sendall(post())
            assert read_all(sock) == b"" and time.monotonic() - started >= 0.3

    def test_a_released_hold_is_closed_once_woken(self, loop):
        """released turning true (and a wake) ends a long hold at once."""
        released = threading.Event()
        server = loop(lambda request: Reply(None, hold_until=time.monotonic() + 60, released=released.is_set))
        with connect(server) as sock:
            sock.sendall(post())
            time.sleep(0.1)
            released.set()
            server.wake()
            started = time.monotonic()
            assert read_all(sock) == b"" and time.monotonic() - started < 5

    def test_a_drop_closes_without_an_answer(self, loop):
        """Reply(None): the client sees the connection end before any status line."""
        server = loop(lambda request: Reply(None))
        with connect(server) as sock:
            sock.sendall(post())
            assert read_all(sock) == b""

    def test_stop_closes_held_connections_and_ends_the_thread(self, loop):
        """stop() with a request held for a minute: the client sees the close, the loop's thread is gone."""
        server = loop(lambda request: Reply(None, hold_until=time.monotonic() + 60))
        with connect(server) as sock:
            sock.sendall(post())
            time.sleep(0.1)
            started = time.monotonic()
            server.stop()
            assert read_all(sock) == b"" and time.monotonic() - started < 5
        assert not any(t.name == "http-loop" for t in threading.enumerate())
