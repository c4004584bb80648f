"""chaos.files: a JSON file read back in any shape a crash, a person or another program left it is a value or None."""

from __future__ import annotations

import pytest

from chaos.files import read_json, write_json


def test_a_written_value_reads_back(tmp_path):
    """What write_json wrote, read_json reads back."""
    path = write_json(tmp_path / "v.json", {"a": [1, "é"]})
    assert read_json(path) == {"a": [1, "é"]}


@pytest.mark.parametrize("content", [None, b"", b"{\"a\":", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000])
def test_a_damaged_file_reads_as_none(tmp_path, content):
    """Missing, empty, cut short, not UTF-8, or nested deeper than the parser recurses: None, never an exception."""
    path = tmp_path / "v.json"
    if content is not None:
        path.write_bytes(content)
    assert read_json(path) is None
