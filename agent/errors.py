"""Root of the agent's exception hierarchy: every expected failure is an ``AgentError``.

The CLI turns each subclass into a one-line message and a documented exit code; anything that is not an
``AgentError`` is a defect and may surface as a traceback.
"""


class AgentError(Exception):
    """Base class of every error the agent raises on purpose."""
