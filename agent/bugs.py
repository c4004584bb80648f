"""Known-bug switches: ``AGENT_BUGS=name[,name…]`` re-introduces realistic defects so the harness can prove it fails.

What it is for. A chaos harness that never catches anything proves nothing. Each switch below re-creates one defect
that durable agent runtimes really ship (the first one is the upstream tiny-agent planner bug that motivated
killpoint); the harness's quality tests run the agent with one switch on and must report a violation. All
switches are off by default, and the correct agent is what runs without the variable.

Where each switch lives (one flag each, a few lines at the place that does the wrong thing):

- planner switches (``PLANNER_BUGS``) are passed to ``plan_recovery(bugs=…)`` — the planner stays pure, the bug is
  a parameter;
- executor switches (``EXECUTOR_BUGS``) are checked in ``agent.recovery`` (``effect-before-intent``,
  ``retry-live-failures``) and in the CLI's store opening (``no-torn-tail-repair``): they cannot be planner
  changes because the planner never performs effects, talks to the provider or touches the file.

What it does not do: it does not implement any bug; it only names them, describes them, and parses the variable.
An unknown name is a usage error (exit 2), never silently ignored: a typo would otherwise make a quality test
"pass" with the correct agent.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.errors import AgentError
from agent.session.planner import PLANNER_BUGS

# name -> one-line description (what the defective agent does). Order: the order `python -m agent bugs` prints.
BUGS: dict[str, str] = {
    "stale-assistant-calls": "planner takes the tool calls of the last assistant that ever had any (upstream defect)",
    "pre-exec-synthetic-repeat": "planner ignores pre-execution synthetic results and plans them again",
    "replay-never-tools": "planner re-runs never-replay tools on recovery instead of writing interrupted",
    "effect-before-intent": "executor runs the tool before its toolStarted intent is durable",
    "retry-live-failures": "executor re-sends a request that failed with HTTP 5xx/429 instead of failing the step",
    "unbounded-retry": "planner retries a crash-unknown attempt past attempt 2",
    "ignore-configuration-change": "planner retries an attempt although the configuration digest changed",
    "replay-ignores-environment": "planner replays a safe read although the environment identity changed",
    "no-torn-tail-repair": "store is opened without truncating a torn tail, so the next append follows it",
    "start-untouched-while-pending": "planner starts untouched calls of an answer before its pending (crash-unknown) call",
}

# The planner owns the names of its switches (it rejects unknown ones); one list, so the two cannot drift apart.
EXECUTOR_BUGS: frozenset[str] = frozenset(BUGS) - PLANNER_BUGS

ENV_VAR = "AGENT_BUGS"


class UnknownBugError(AgentError):
    """``AGENT_BUGS`` names a switch that does not exist."""


def parse_bugs(text: str | None) -> frozenset[str]:
    """The switches named in ``text`` (comma-separated, blanks ignored); raises UnknownBugError on an unknown name."""
    if not text:
        return frozenset()
    names = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(names - BUGS.keys())
    if unknown:
        raise UnknownBugError(
            f"{ENV_VAR}: unknown bug switch {', '.join(unknown)} (see `python -m agent bugs`)"
        )
    return names


def from_environ(environ: Mapping[str, str]) -> frozenset[str]:
    """The switches enabled by ``environ[AGENT_BUGS]`` (empty without the variable)."""
    return parse_bugs(environ.get(ENV_VAR))


def as_json() -> list[dict]:
    """The machine-readable listing a harness asks a target for (``bugs --json``, ``describe``): one object per
    switch, ``{"name", "layer": "planner"|"executor", "description"}``, in listing order."""
    return [{"name": name, "layer": "planner" if name in PLANNER_BUGS else "executor", "description": text}
            for name, text in BUGS.items()]


def listing() -> str:
    """The text of ``python -m agent bugs``: one line per switch, ``name  [layer]  description``."""
    width = max(len(name) for name in BUGS)
    lines = []
    for name, description in BUGS.items():
        layer = "planner " if name in PLANNER_BUGS else "executor"
        lines.append(f"{name:<{width}}  {layer}  {description}")
    return "\n".join(lines) + "\n"
