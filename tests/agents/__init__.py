"""Test doubles of the *agent* for the supervisor's tests: small stdlib scripts that speak the checkpoint protocol.

The supervisor is the thing under test, so its subject may be faked here: ``fake_agent.py`` behaves (writes a JSONL
log with fsync and announces every barrier), ``hung.py`` stops talking, ``crashing.py`` dies, ``rude.py`` breaks the
protocol. They are run as scripts (``sys.executable PATH …``), never imported by the tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAKE = HERE / "fake_agent.py"
HUNG = HERE / "hung.py"
CRASHING = HERE / "crashing.py"
RUDE = HERE / "rude.py"


def argv(script: Path, *args: str) -> tuple[str, ...]:
    """The command line that runs one of these scripts with this interpreter."""
    return (sys.executable, str(script), *args)
