"""Importing this module does, once, the work every launch of the agent would do again: it imports the modules a
run imports lazily, builds the command-line parser, and *rehearses* a run end to end (``rehearse``).

What it is for: a launcher that forks agents from a warm interpreter (a harness's zygote) imports it once, and every
forked agent then starts at its first real step. Importing is not enough to be warm. CPython 3.11 specialises
bytecode in place the first times a function runs, and caches fill on first use (compiled regular expressions,
argparse's, ``json``'s, ``http.client``'s): in a forked child each of those first writes lands on a page shared
with the zygote and costs a copy-on-write fault (~5 µs each on these VMs, ~1,000 per launch). The rehearsal runs
those paths once in the zygote so the children find them done (measured: a forked idle ``resume`` 12 → 7.5 ms).

What a launch must see fresh — its argv, environment, cwd, streams, random and id state — is read when its command
runs, never at import, and the rehearsal leaves none of it behind: it passes its own environment to ``cli.main``
(the agent reads nothing of ``os.environ``; only ``mkdtemp`` reads ``TMPDIR``, and its cached choice is undone),
works in a temporary directory it removes, talks only to its own loopback model and checkpoint listener, and joins
its thread before returning (a fork copies only the calling thread, and the zygote
refuses a preload that leaves more than one). The UUIDv7 generator reseeds in every forked child
(``agent.session.ids``). An agent started by exec never imports this module.
"""

from __future__ import annotations

import contextlib
import http.client  # noqa: F401 - the provider imports it lazily on the first request (~10 ms)
import io
import json
import os
import selectors
import shutil
import socket
import tempfile
import threading
import urllib.parse  # noqa: F401 - the provider's URL split

from agent import checkpoints, cli, config, loop, provider, recovery, tools  # noqa: F401
from agent.session import materialize, planner, reducer, store  # noqa: F401

# The rehearsal's model: three turns that touch every built-in tool's path once (read, a write, a bash command that
# exits at once), then a final answer. Same chat.completion shape as any OpenAI-compatible server.
_TURNS = (
    [("read", {"path": "warm.txt"}), ("write", {"path": "out.txt", "content": "warm\n"})],
    [("edit", {"path": "out.txt", "old_string": "warm", "new_string": "hot"}), ("bash", {"command": "true"})],
    [],
)


def _completion(turn: int) -> bytes:
    """The whole HTTP response for the model's ``turn``-th answer (past the script: a final answer)."""
    calls = _TURNS[turn] if turn < len(_TURNS) else []
    message: dict = {"role": "assistant", "content": "" if calls else "done"}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{turn}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)
        ]
    body = {"id": f"chatcmpl-warm-{turn}", "object": "chat.completion", "created": 0, "model": "warm",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    data = json.dumps(body).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(data)) + data


class _Peers:
    """The rehearsal's loopback model (HTTP, one request per connection) and checkpoint supervisor (answers every
    barrier ``continue``), served by one thread until ``stop``. Without a Unix socket (its path too long for
    ``AF_UNIX``, say) the rehearsal runs without the checkpoint channel."""

    def __init__(self, directory: str):
        self.http = socket.create_server(("127.0.0.1", 0))
        self.control_path: str | None = os.path.join(directory, "c.sock")
        self.control: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.control.bind(self.control_path)
            self.control.listen()
        except OSError:
            self.control.close()
            self.control = self.control_path = None
        self.turn = 0
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="agent-warm", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http.getsockname()[1]}/v1"

    def stop(self) -> None:
        self._wake_w.send(b"x")
        self._thread.join()
        for s in (self.http, self.control, self._wake_r, self._wake_w):
            if s is not None:
                s.close()

    def _serve(self) -> None:
        """Until woken by ``stop``. Every failure stays with its own connection: the loop must outlive the agent's
        run, because a checkpoint channel closed under a running agent makes it exit 7 (``os._exit``) — here, in
        the zygote."""
        listeners = [s for s in (self.http, self.control) if s is not None]
        buffers: dict[socket.socket, bytes] = {}
        with selectors.DefaultSelector() as sel:
            for s in (*listeners, self._wake_r):
                sel.register(s, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    s = key.fileobj
                    if s is self._wake_r:
                        for conn in buffers:
                            conn.close()
                        return
                    try:
                        if s in listeners:
                            conn, _ = s.accept()
                            buffers[conn] = b""
                            sel.register(conn, selectors.EVENT_READ, s)
                            continue
                        if self._answer(s, key.data is self.control, buffers):
                            continue
                    except OSError:  # that connection is done (the agent closed it or gave up on it)
                        if s in listeners:
                            continue
                    sel.unregister(s)
                    buffers.pop(s, None)
                    s.close()

    def _answer(self, conn: socket.socket, control: bool, buffers: dict[socket.socket, bytes]) -> bool:
        """Read what ``conn`` sent and answer what is complete; False once the exchange is over."""
        chunk = conn.recv(65536)
        if not chunk:
            return False
        buffers[conn] += chunk
        if control:
            while b"\n" in buffers[conn]:
                _, buffers[conn] = buffers[conn].split(b"\n", 1)
                conn.sendall(b'{"action":"continue"}\n')
            return True
        if not self._request_complete(buffers[conn]):
            return True
        conn.sendall(_completion(self.turn))
        self.turn += 1
        return False  # one request per connection: the agent sends Connection: close

    @staticmethod
    def _request_complete(data: bytes) -> bool:
        """Headers and a body of the announced Content-Length have arrived."""
        head, sep, body = data.partition(b"\r\n\r\n")
        if not sep:
            return False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                return len(body) >= int(value)
        return True


def rehearse() -> tuple[int, int]:
    """Run the agent once: ``run`` (three model turns, every built-in tool, every barrier of the checkpoint
    protocol answered ``continue``), then ``resume`` of the finished session (the convergence probe's path).
    Returns both exit statuses (0, 0 when everything ran); never raises for the agent's own failures."""
    # mkdtemp caches the temporary directory it chose (tempfile.tempdir): a forked launch must choose its own, from
    # its own TMPDIR (a foreign planner's temporary files, agent.planner_cmd).
    cached_tempdir = tempfile.tempdir
    directory = tempfile.mkdtemp(prefix="agent-warm-")
    tempfile.tempdir = cached_tempdir
    try:
        workspace = os.path.join(directory, "workspace")
        sessions = os.path.join(directory, "sessions")
        os.mkdir(workspace)
        with open(os.path.join(workspace, "warm.txt"), "w", encoding="utf-8") as f:
            f.write("one\ntwo\n")
        peers = _Peers(directory)
        env = {"OPENAI_API_KEY": "warm", "AGENT_ENVIRONMENT_IDENTITY": "warm", "PATH": os.defpath}
        if peers.control_path is not None:
            env[checkpoints.ENV_VAR] = peers.control_path
        flags = ["--workspace", workspace, "--model", "warm", "--tools", ",".join(tools.TOOL_NAMES),
                 "--request-timeout", "5", "--base-url", peers.base_url]
        sink = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # the final answer is written to .buffer
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                ran = cli.main(["run", "--session-dir", sessions, *flags, "Read warm.txt."], env)
                logs = os.listdir(sessions) if os.path.isdir(sessions) else []
                resumed = cli.main(["resume", *flags, os.path.join(sessions, logs[0])], env) if logs else -1
        finally:
            peers.stop()
        return ran, resumed
    finally:
        shutil.rmtree(directory, ignore_errors=True)


cli.parser()
try:
    rehearse()
except Exception:  # noqa: BLE001 - only an optimisation: a zygote whose rehearsal failed serves, cold
    pass
