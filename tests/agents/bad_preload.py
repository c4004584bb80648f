"""A preload with a side effect (for tests/integration/test_launcher_check.py): it edits the agent's system prompt
when imported, so every agent forked from a zygote that preloads it differs from an exec'd one — the kind of defect
the launcher check exists to catch (a preload whose import changes behaviour)."""

import agent.config

agent.config.SYSTEM_PROMPT = agent.config.SYSTEM_PROMPT + "\n(preloaded)"
