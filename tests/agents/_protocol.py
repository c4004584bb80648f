"""The agent side of the checkpoint protocol, in a few lines (shared by the test agents of this folder).

Connects to ``CHAOS_CONTROL``, sends one JSON line per message and blocks for the one-line answer. A lost channel
exits 7 at once, writing nothing more (fail closed), as the protocol requires of every agent. With ``oneway`` it
offers, in its hello, to wait only at the phases the hello's answer names (``wait``), and does so.
"""

from __future__ import annotations

import json
import os
import socket
import sys


class Channel:
    """One connection to the supervisor (or nothing when CHAOS_CONTROL is unset)."""

    def __init__(self, oneway: bool = False) -> None:
        path = os.environ.get("CHAOS_CONTROL")
        self.oneway = oneway
        self.wait = None  # the phases answered (the hello's answer); None: every phase
        self.sock = None
        if path:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(path)
            self.reader = self.sock.makefile("rb")

    def send_raw(self, line: bytes) -> dict:
        """Send one raw line and return the parsed answer."""
        if self.sock is None:
            return {"action": "continue"}
        try:
            self.sock.sendall(line)
            answer = self.reader.readline()
        except OSError:
            answer = b""
        if not answer:
            print("checkpoint channel lost", file=sys.stderr)
            os._exit(7)
        return json.loads(answer)

    def send(self, message: dict) -> dict:
        return self.send_raw(json.dumps(message).encode() + b"\n")

    def hello(self, session: str) -> dict:
        hello = {"pid": os.getpid(), "session": session, "protocol": 1, **({"oneway": True} if self.oneway else {})}
        answer = self.send({"hello": hello})
        self.wait = answer.get("wait")
        return answer

    def checkpoint(self, phase: str, facts: list[str], seq_first: int, offset: int, synced: int) -> dict:
        message = {"checkpoint": {"phase": phase, "facts": facts, "seqFirst": seq_first,
                                  "seqLast": seq_first + len(facts) - 1, "offset": offset, "syncedOffset": synced}}
        if self.sock is not None and self.wait is not None and phase not in self.wait:
            self.sock.sendall(json.dumps(message).encode() + b"\n")  # reported only: no answer comes
            return {"action": "continue"}
        return self.send(message)
