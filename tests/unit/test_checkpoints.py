"""Unit tests of agent.checkpoints: the agent side of the checkpoint protocol over a real Unix socket."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections import namedtuple

import pytest

from agent.checkpoints import CheckpointChannel

Checkpoint = namedtuple("Checkpoint", "phase facts seq_first seq_last offset synced_offset")
CP = Checkpoint("before-write", ("user", "runStarted"), 1, 2, 200, 200)


class LostError(Exception):
    """Raised by the test's on_lost instead of exiting the test process."""


def _raise_lost(reason: str) -> None:
    raise LostError(reason)


NO_ANSWER = object()  # a Supervisor answer: record the message, send nothing (a barrier the agent does not wait at)


class Supervisor:
    """A one-connection Unix-socket peer that records messages and answers from a list (None = close)."""

    def __init__(self, answers):
        self.dir = tempfile.mkdtemp(prefix="kp-cp-")
        self.path = os.path.join(self.dir, "control.sock")
        self.answers = list(answers)
        self.received: list[dict] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.server.accept()
        with conn, conn.makefile("rb") as reader:
            for raw in reader:
                self.received.append(json.loads(raw))
                answer = self.answers.pop(0) if self.answers else None
                if answer is None:
                    return
                if answer is NO_ANSWER:
                    continue
                conn.sendall(answer if isinstance(answer, bytes) else json.dumps(answer).encode() + b"\n")

    def close(self):
        self.thread.join(5)
        self.server.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


CONTINUE = {"action": "continue"}


class TestFromEnviron:
    def test_no_variable_no_channel(self):
        """Without CHAOS_CONTROL there is no channel at all (and so no socket and no per-commit cost)."""
        assert CheckpointChannel.from_environ({}) is None
        assert CheckpointChannel.from_environ({"CHAOS_CONTROL": ""}) is None

    def test_variable_names_the_socket(self):
        """CHAOS_CONTROL gives the socket path without connecting yet."""
        channel = CheckpointChannel.from_environ({"CHAOS_CONTROL": "/nonexistent.sock"})
        assert channel is not None and channel.path == "/nonexistent.sock"


class TestExchange:
    def test_hello_then_three_barriers(self):
        """The hello carries pid, session, protocol 1 and oneway; each checkpoint carries the camelCase fields."""
        sup = Supervisor([CONTINUE, CONTINUE, CONTINUE])
        try:
            channel = CheckpointChannel(sup.path, on_lost=_raise_lost)
            channel.open(pid=123, session="/s/x.jsonl")
            assert channel.hook(CP) is None
            assert channel.hook(CP._replace(phase="after-write", offset=300)) is None
            channel.close()
        finally:
            sup.close()
        assert sup.received[0] == {"hello": {"pid": 123, "session": "/s/x.jsonl", "protocol": 1, "oneway": True}}
        assert sup.received[1] == {"checkpoint": {"phase": "before-write", "facts": ["user", "runStarted"],
                                                  "seqFirst": 1, "seqLast": 2, "offset": 200, "syncedOffset": 200}}
        assert sup.received[2]["checkpoint"]["phase"] == "after-write"
        assert sup.received[2]["checkpoint"]["offset"] == 300

    def test_a_phase_not_waited_at_is_reported_without_waiting(self):
        """Told at hello to wait at after-sync only, the agent reports before-write and after-write and goes on at
        once (no answer comes for them), then waits at after-sync."""
        sup = Supervisor([{"action": "continue", "wait": ["after-sync"]}, NO_ANSWER, NO_ANSWER, CONTINUE])
        answers = []

        def commit():
            channel = CheckpointChannel(sup.path, on_lost=_raise_lost)
            channel.open(pid=1, session="s")
            for phase in ("before-write", "after-write", "after-sync"):
                answers.append(channel.hook(CP._replace(phase=phase)))
            channel.close()

        try:
            agent = threading.Thread(target=commit, daemon=True)
            agent.start()
            agent.join(10)
            assert not agent.is_alive(), "the agent waited for an answer at a phase it was told not to wait at"
        finally:
            sup.close()
        assert answers == [None, None, None]
        assert [m["checkpoint"]["phase"] for m in sup.received[1:]] == ["before-write", "after-write", "after-sync"]

    @pytest.mark.parametrize("answer", [b'{"action":"continue","wait":["now"]}\n',
                                        b'{"action":"continue","wait":"x"}\n', b'{"action":"continue","wait":null}\n',
                                        b'{"action":"continue","x":1}\n',
                                        b'{"action":"fail","errno":"EIO"}\n'])
    @pytest.mark.parametrize("then", ["barrier", "close"])
    def test_a_hello_answer_that_is_not_continue_is_lost(self, answer, then):
        """A hello answer other than continue with, at most, a list of known phases to wait at: a lost channel, found
        at the first barrier or, for an agent that ends without one, when it closes the channel."""
        sup = Supervisor([answer])
        try:
            channel = CheckpointChannel(sup.path, on_lost=_raise_lost)
            channel.open(pid=1, session="s")
            with pytest.raises(LostError, match="the hello may only be answered with continue"):
                channel.hook(CP) if then == "barrier" else channel.close()
        finally:
            sup.close()
        assert len(sup.received) == 1, "a checkpoint was sent before the hello's answer was read"

    def test_the_hello_answer_is_read_before_the_first_checkpoint_is_sent(self):
        """open() sends the hello and returns without its answer; the first barrier reads that answer before it sends
        anything, so the supervisor, which closes after the hello without answering, receives nothing more."""
        with tempfile.TemporaryDirectory(prefix="kp-cp-") as tmp:
            path = os.path.join(tmp, "control.sock")
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(path)
            server.listen(1)
            channel = CheckpointChannel(path, on_lost=_raise_lost)
            opening = threading.Thread(target=channel.open, kwargs={"pid": 1, "session": "s"}, daemon=True)
            opening.start()
            conn, _ = server.accept()
            opening.join(10)  # no answer is ever sent: an open() that waited for one would still be blocked
            assert not opening.is_alive(), "open() waited for the hello's answer"
            with conn, server:
                reader = conn.makefile("rb")
                assert json.loads(reader.readline())["hello"]["pid"] == 1
                conn.shutdown(socket.SHUT_WR)  # no answer: the agent reads end-of-file
                with pytest.raises(LostError, match="connection closed by the supervisor"):
                    channel.hook(CP)
                assert reader.read() == b"", "the checkpoint was sent before the hello's answer was read"

    @pytest.mark.parametrize("name,number", [("ENOSPC", errno.ENOSPC), ("EIO", errno.EIO)])
    def test_fail_returns_errno(self, name, number):
        """A fail answer at before-write returns the errno the store must inject."""
        sup = Supervisor([CONTINUE, {"action": "fail", "errno": name}])
        try:
            channel = CheckpointChannel(sup.path, on_lost=_raise_lost)
            channel.open(pid=1, session="s")
            assert channel.hook(CP) == number
            channel.close()
        finally:
            sup.close()

    def test_fail_at_after_sync_is_a_protocol_error(self):
        """A fail answer at after-sync (nothing left to fail) counts as a lost channel."""
        sup = Supervisor([CONTINUE, {"action": "fail", "errno": "EIO"}])
        try:
            channel = CheckpointChannel(sup.path, on_lost=_raise_lost)
            channel.open(pid=1, session="s")
            with pytest.raises(LostError, match="after-sync"):
                channel.hook(CP._replace(phase="after-sync"))
        finally:
            sup.close()

    @pytest.mark.parametrize("answer, reason", [
        (b"nonsense\n", "invalid answer"), (b'{"action":"continue","x":1}\n', "invalid answer"),
        (b'{"action":"fail","errno":"EPERM"}\n', "invalid answer"),
        # two lines for one message: a supervisor answering a barrier the agent did not wait at
        (b'{"action":"continue"}\n{"action":"continue"}\n', "a line no message asked for"),
    ])
    def test_invalid_answer_is_lost(self, answer, reason):
        """An answer that is not a valid protocol line, or more than one, is treated as a lost channel."""
        sup = Supervisor([CONTINUE, answer])
        try:
            channel = CheckpointChannel(sup.path, on_lost=_raise_lost)
            channel.open(pid=1, session="s")
            with pytest.raises(LostError, match=reason):
                channel.hook(CP)
        finally:
            sup.close()

    def test_closed_connection_is_lost(self):
        """A supervisor that closes instead of answering makes the channel lost."""
        sup = Supervisor([CONTINUE, None])
        try:
            channel = CheckpointChannel(sup.path, on_lost=_raise_lost)
            channel.open(pid=1, session="s")
            with pytest.raises(LostError, match="closed"):
                channel.hook(CP)
        finally:
            sup.close()

    def test_connect_failure_is_lost(self, tmp_path):
        """A socket path nobody listens on makes the channel lost at open."""
        channel = CheckpointChannel(str(tmp_path / "absent.sock"), on_lost=_raise_lost)
        with pytest.raises(LostError, match="cannot connect"):
            channel.open(pid=1, session="s")


class TestDefaultReaction:
    def test_lost_channel_exits_7_at_once(self, tmp_path):
        """The production reaction to a lost channel is exit status 7 with one stderr line."""
        code = (
            "from agent.checkpoints import CheckpointChannel\n"
            f"CheckpointChannel({str(tmp_path / 'absent.sock')!r}).open(pid=1, session='s')\n"
            "print('not reached')\n"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 7
        assert proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and "checkpoint channel lost" in proc.stderr
