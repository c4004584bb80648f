"""`chaos validate` as a user runs it: a real subprocess, exact error lines, exit codes, never a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
name = "good"
description = "d"
[[runs]]
prompt = "p"
[[runs.turns]]
content = "a"
"""


def validate(*paths: object) -> subprocess.CompletedProcess:
    """Run `python -m chaos.cli validate PATHS...` and capture its output."""
    return subprocess.run([sys.executable, "-m", "chaos.cli", "validate", *map(str, paths)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_bundled_library_validates():
    """The bundled scenarios/ directory validates: exit 0 and a one-line OK summary."""
    result = validate("scenarios")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.fullmatch(r"OK: \d+ scenario\(s\) valid\n", result.stdout)


def test_malformed_files_give_one_line_per_problem(tmp_path):
    """A directory with broken files prints every problem as file:line: field: message, exit 2, no traceback."""
    (tmp_path / "good.toml").write_text(GOOD)
    (tmp_path / "syntax.toml").write_text('name = "x"\ndescription = \n')
    nested = tmp_path / "nested"
    nested.mkdir()
    (nested / "schema.toml").write_text(GOOD.replace('content = "a"', 'content = "a"\nfinish_reason = "done"\n'
                                                     'tool_calls = [{ id = "c", name = "read" }, { id = "c", name = "read" }]'))
    (tmp_path / "notes.txt").write_text("not a scenario")
    result = validate(tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"{nested / 'schema.toml'}:7: runs[0].turns[0].finish_reason: Input should be 'stop', 'tool_calls', 'length' "
        "or 'content_filter'",
        f"{nested / 'schema.toml'}:8: runs[0].turns[0].tool_calls[1].id: duplicate call id 'c': already used at "
        "runs[0].turns[0].tool_calls[0] (call ids must be unique within a scenario so effects can be attributed)",
        f"{tmp_path / 'syntax.toml'}:2:15: toml: Invalid value",
    ]
    assert result.stderr == "3 problem(s) in scenario files\n"


def test_missing_path_and_binary_file(tmp_path):
    """A missing path and a non-UTF-8 file are one line each, exit 2."""
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\x00\xff\xfe")
    result = validate(tmp_path / "absent.toml", binary)
    assert result.returncode == 2
    assert result.stdout.splitlines() == [f"{tmp_path / 'absent.toml'}:1: path: no such file or directory",
                                          f"{binary}:1: file: not UTF-8 (byte 1)"]
    assert "Traceback" not in result.stderr


def test_no_arguments_is_a_usage_error():
    """Without paths the command prints click's usage error and exits 2."""
    result = validate()
    assert result.returncode == 2 and "Missing argument" in result.stderr
