"""bench/exitorder.py: a killed child's lock and its reaping, timed in the same round."""

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "bench" / "exitorder.py"
_spec = importlib.util.spec_from_file_location("bench_exitorder", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_a_round_times_the_lock_no_later_than_the_reap(tmp_path):
    """A round returns positive times with the lock free no later than the reap (the spin tries the lock first)."""
    lock = tmp_path / "lock"
    lock.touch()
    heap = [bytearray(bench.PAGE) for _ in range(8)]
    for _ in range(3):
        freed, reaped = bench.one_round(str(lock), heap, 8)
        assert 0 < freed <= reaped


def test_the_command_prints_both_medians_and_refuses_zero_kills(capsys):
    """The figures name the baseline; a run of zero kills is one line on stderr and exit 2."""
    assert bench.main(["--kills", "2", "--pages", "4"]) == 0
    out = capsys.readouterr().out
    assert "kill → lock free" in out and "kill → reaped" in out and "(baseline)" in out
    assert bench.main(["--kills", "0"]) == 2
    assert "--kills must be at least 1" in capsys.readouterr().err
