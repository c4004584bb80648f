"""Importing this module does, once, the work every launch of the agent would do again: import the modules a run
imports lazily and build the command-line parser.

What it is for: a launcher that forks agents from a warm interpreter (a harness's zygote) imports it once, and every
forked agent then starts at its first real step. Nothing here reads the environment, opens a file or starts a
thread (a fork copies only the calling thread): what a launch must see fresh — its argv, environment, cwd, streams
— is read when its command runs, never at import. An agent started by exec never imports this module.
"""

from __future__ import annotations

import http.client  # noqa: F401 - the provider imports it lazily on the first request (~10 ms)
import socket  # noqa: F401 - the checkpoint client's
import urllib.parse  # noqa: F401 - the provider's URL split

from agent import checkpoints, cli, config, loop, provider, recovery, tools  # noqa: F401
from agent.session import materialize, planner, reducer, store  # noqa: F401

cli.parser()
