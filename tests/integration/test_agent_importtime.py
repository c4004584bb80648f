"""The agent's start path stays on the standard library: ``python -X importtime -m agent resume FILE``.

The agent is launched thousands of times per campaign; pydantic, click, rich, psutil and httpx each cost 100-400 ms
to import. This test reads the interpreter's own import log (``-X importtime``), so it sees every module the resume
path really imports, however indirectly. It asserts no timing (figures are measured in bench/, not in tests).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from agent.session.store import SessionStore
from tests.integration.test_agent_run import REPO

FORBIDDEN = ("pydantic", "click", "rich", "psutil", "httpx")
_IMPORT_LINE = re.compile(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)")


def imported_modules(argv: list[str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``python -X importtime -m agent ARGV``; return the process and the set of modules it imported."""
    env = {k: v for k, v in os.environ.items() if k not in ("AGENT_BUGS", "CHAOS_CONTROL")}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "agent", *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    modules = {m.group(1) for m in map(_IMPORT_LINE.match, proc.stderr.splitlines()) if m}
    return proc, modules


def idle_session(tmp_path) -> Path:
    """A new, idle session file (header only) with a workspace beside it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = SessionStore.create(tmp_path / "sessions", cwd=str(workspace), provider="openai", model="m",
                                environment_identity="e")
    store.close()
    return Path(store.path)


def test_resume_imports_only_the_standard_library(tmp_path):
    """`resume` of a real session imports none of pydantic, click, rich, psutil, httpx (nor http.client)."""
    proc, modules = imported_modules(["resume", str(idle_session(tmp_path))])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "agent.loop" in modules and "agent.session.store" in modules  # the log really covers the resume path
    heavy = sorted(m for m in modules if m.split(".")[0] in FORBIDDEN)
    assert heavy == []
    # http.client pulls in ssl and email: it is imported at the first request, and resuming an idle session sends
    # none.
    assert "http.client" not in modules and "ssl" not in modules


def test_reduce_does_not_import_the_loop(corpus):
    """`reduce` stays minimal: it does not import the loop, the provider or the tools."""
    proc, modules = imported_modules(["reduce", str(corpus / "fixtures" / "run-accepted.jsonl")])
    assert proc.returncode == 0
    assert "agent.session.reducer" in modules
    assert not {"agent.loop", "agent.provider", "agent.tools"} & modules
