"""bench/exitorder.py: a killed child's lock and its reaping, timed in the same round."""

import importlib.util
from pathlib import Path

import psutil
import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "exitorder.py"
_spec = importlib.util.spec_from_file_location("bench_exitorder", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_a_round_reaps_its_child_even_when_it_fails(tmp_path):
    """A round leaves no child behind: reaped after a measurement, and killed and reaped when the round fails
    (here: the lock file is missing, so the child exits before it holds the lock)."""
    lock = tmp_path / "lock"
    lock.touch()
    heap = [bytearray(bench.PAGE) for _ in range(8)]
    children = {p.pid for p in psutil.Process().children()}  # zombies included (listed by parent pid)
    freed, reaped = bench.one_round(str(lock), heap, 8)
    assert 0 < freed <= reaped
    with pytest.raises(RuntimeError, match="before it held the lock"):
        bench.one_round(str(tmp_path / "missing"), heap, 8)
    assert {p.pid for p in psutil.Process().children()} == children  # none left, not even a zombie


def test_the_command_prints_both_medians_and_refuses_zero_kills(capsys):
    """The figures name the baseline; a run of zero kills is one line on stderr and exit 2."""
    assert bench.main(["--kills", "2", "--pages", "4"]) == 0
    out = capsys.readouterr().out
    assert "kill → lock free" in out and "kill → reaped" in out and "(baseline)" in out
    assert bench.main(["--kills", "0"]) == 2
    assert "--kills must be at least 1" in capsys.readouterr().err
