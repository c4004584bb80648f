"""``python -m agent describe [configuration flags]``: what this agent offers a harness, as one JSON document.

What it is for. A harness that drives this agent must know, without importing it, the tool definitions it can offer
(to validate scenario files), the system prompt by which it asks for a compaction summary (so a scripted model can
recognise that request) and the CurrentConfiguration (SPEC §8.7, plus the ``snapshot`` behind its digest) a launch
with the given flags runs with (the planner's second input, which the harness's oracle needs to judge writer
obligations and blocked reasons). ``killpoint``'s targets ask for it (chaos/target.py); any other implementation
can print the same shape to be judged as fully.

Shape (stdout, one JSON object): ``protocol`` (1), ``tools`` (every known tool's chat-completions request element,
in canonical order), ``summarySystemPrompt``, ``current`` (CurrentConfiguration + ``snapshot``), ``bugs``
(``python -m agent bugs --json``'s list). A configuration the flags make invalid is a usage error (exit 2), exactly
as ``run`` would refuse it.

Stdlib only, and imported only by this verb.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping


def describe(args, environ: Mapping[str, str]) -> dict:
    """The document for ``args`` (the parsed configuration flags; ``--workspace`` defaults to the cwd)."""
    from agent import bugs as bug_switches
    from agent import config as agent_config
    from agent.provider import SUMMARY_SYSTEM_PROMPT
    from agent.tools import TOOL_NAMES, definition

    config = agent_config.load_config(
        workspace=args.workspace or os.getcwd(), model=args.model, base_url=args.base_url, tools=args.tools,
        replay=args.replay, environment_identity=args.environment_identity, request_timeout=args.request_timeout,
        max_steps=args.max_steps, environ=environ)
    return {
        "protocol": 1,
        "tools": [definition(name) for name in TOOL_NAMES],
        "summarySystemPrompt": SUMMARY_SYSTEM_PROMPT,
        "current": agent_config.current_configuration(config),
        "bugs": bug_switches.as_json(),
    }


def main(args, environ: Mapping[str, str]) -> int:
    """Print the document; a configuration error is the usage exit (2) with one line."""
    from agent.config import ConfigError

    try:
        document = describe(args, environ)
    except ConfigError as exc:
        sys.stderr.write(f"agent: {exc}\n")
        return 2
    sys.stdout.write(json.dumps(document, ensure_ascii=False, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0
