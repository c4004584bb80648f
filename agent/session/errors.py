"""Errors of the session contract.

``CorruptionError`` is the reducer's one exception type (SPEC §11): it carries the exact ``code``, the 1-based
physical ``line`` and the ``seq`` (``None`` when the spec says the error has none). The store re-raises it
unchanged when it rejects a candidate transaction (SPEC §13.3 step 4).
"""

from __future__ import annotations

from agent.errors import AgentError


class CorruptionError(AgentError):
    """A log (or a candidate transaction) violates the contract at ``line`` (and ``seq``)."""

    def __init__(self, code: str, line: int, seq: int | None = None):
        self.code = code
        self.line = line
        self.seq = seq
        where = f"line {line}" + (f", seq {seq}" if seq is not None else "")
        super().__init__(f"{code} at {where}")

    def to_json(self) -> dict:
        """The spec's error object: ``{code, line}`` plus ``seq`` only when it has one."""
        out = {"code": self.code, "line": self.line}
        if self.seq is not None:
            out["seq"] = self.seq
        return out


class StoreError(AgentError):
    """The store refused an operation for a reason other than log corruption."""


class SessionLockedError(StoreError):
    """Another process holds the session's writer lock (``flock``)."""


class StorePoisonedError(StoreError):
    """An fsync failed earlier; the page cache state is unknown, so every later call is refused."""


class StoreClosedError(StoreError):
    """The store was closed."""


class SessionFileError(StoreError):
    """The path is a symlink, not a regular file, missing, or its name does not match its header id."""
