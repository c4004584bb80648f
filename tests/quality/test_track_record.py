"""The track record (docs/track-record.md) is true: every row's command fails with its switch and passes without.

The table is parsed from the document itself, so a row edited into a command that no longer reproduces its defect
(or a regression file that drifted) fails here. Each row gives two test items — with the switch (exit 1, every
invariant of the "caught by" column reported failed) and without (exit 0) — so pytest-xdist spreads them.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agent.bugs import BUGS

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "track-record.md"
INVARIANTS = ("log-reduces", "acknowledged-durable", "converges", "transcript-legal", "effects-at-most-once",
              "attempts-bounded", "outcome")


def rows() -> list[dict]:
    """The table rows of the document: defect, caught-by invariants, command argv, switch."""
    out = []
    lines = DOC.read_text(encoding="utf-8").splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| #"))
    columns = [c.strip() for c in lines[header].strip("|").split("|")]
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        cells = dict(zip(columns, (c.strip() for c in line.strip().strip("|").split("|"))))
        command = re.fullmatch(r"`(.+)`", cells["reproduce"]).group(1)
        argv = shlex.split(command)
        out.append({"n": cells["#"], "caught": re.findall(r"`([a-z-]+)`", cells["caught by"]), "argv": argv,
                    "switch": argv[argv.index("--agent-bugs") + 1]})
    return out


ROWS = rows()


def test_the_table_has_one_row_per_switch():
    """Every known-bug switch has exactly one row, and every row names invariants the oracle has."""
    assert sorted(r["switch"] for r in ROWS) == sorted(BUGS)
    for r in ROWS:
        assert r["caught"] and set(r["caught"]) <= set(INVARIANTS), r
        assert r["argv"][:2] == ["chaos", "run"] and "--kill" in r["argv"], r


def _run(argv: list[str], reports: Path) -> subprocess.CompletedProcess:
    # `chaos` through this interpreter (no PATH shim); the case directories go to the test's temporary directory.
    cmd = [sys.executable, "-m", "chaos.cli", *argv[1:], "--reports", str(reports)]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def _failed_invariants(stdout: str) -> set[str]:
    """The invariants the verdict's failure details list (an indented ``name:`` line per failed invariant)."""
    return {m.group(1) for m in re.finditer(r"^ {2}([a-z-]+):$", stdout, re.M) if m.group(1) in INVARIANTS}


@pytest.mark.parametrize("row", ROWS, ids=[r["switch"] for r in ROWS])
def test_row_fails_with_its_switch(row, tmp_path):
    """With the switch on, the row's command exits 1 and reports every invariant its row names as failed."""
    proc = _run(row["argv"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    failed = _failed_invariants(proc.stdout)
    assert set(row["caught"]) <= failed, (row["caught"], failed, proc.stdout)
    assert f"AGENT_BUGS={row['switch']}" in proc.stdout


@pytest.mark.parametrize("row", ROWS, ids=[r["switch"] for r in ROWS])
def test_row_passes_without_its_switch(row, tmp_path):
    """Without ``--agent-bugs``, the same command (baseline and the pinned case) exits 0 with no failed invariant."""
    argv = list(row["argv"])
    i = argv.index("--agent-bugs")
    del argv[i:i + 2]
    proc = _run(argv, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _failed_invariants(proc.stdout) == set()
    assert "2 case(s): 2 pass" in proc.stdout
