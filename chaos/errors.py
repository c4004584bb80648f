"""Root of the harness's exception hierarchy: every expected failure of ``chaos`` is a ``ChaosError``.

The CLI turns each subclass into clear lines and a non-zero exit code; anything that is not a ``ChaosError`` is a
defect of the harness and may surface as a traceback. A crash, hang or bad exit of the *agent under test* is not an
exception at all: the supervisor turns it into a verdict.
"""

from __future__ import annotations


class ChaosError(Exception):
    """Base class of every error the harness raises on purpose."""


class ScenarioError(ChaosError):
    """A scenario file is unreadable or invalid.

    ``messages`` holds one line per problem, each ``file:line: field: message`` (TOML syntax errors:
    ``file:line:column: toml: message``), so that a user fixes every problem in one pass instead of one per run.
    """

    def __init__(self, messages: list[str]) -> None:
        self.messages = list(messages)
        super().__init__("\n".join(self.messages))


class ScriptedServerError(ChaosError):
    """The scripted model server was used wrongly (unknown or duplicate case route, not started)."""
