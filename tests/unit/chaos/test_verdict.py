"""Unit tests of chaos.verdict's console: piped output never wraps a case id."""

from __future__ import annotations

import io

from rich.table import Table

from chaos import verdict


def test_piped_output_keeps_long_case_ids_on_one_line(monkeypatch):
    """Without a terminal, a table row with a 300-character case id is one line, and nothing is padded to the width."""
    case_id = "tool-answer::" + "+".join(["toolStarted@after-sync#1", "assistant@after-sync#2"] * 6)
    out = io.StringIO()
    console = verdict.console()
    assert console.width == verdict.PIPED_WIDTH  # pytest captures stdout: not a terminal
    console.file = out
    table = Table()
    table.add_column("case", overflow="fold")
    table.add_column("status")
    table.add_row(case_id, "fail")
    console.print(table)
    console.print(f"✗ {case_id}  [fail; agent exit:70]", markup=False)
    lines = out.getvalue().splitlines()
    assert any(case_id in line for line in lines[:-1]) and lines[-1] == f"✗ {case_id}  [fail; agent exit:70]"
    assert max(len(line) for line in lines) < len(case_id) + 40
