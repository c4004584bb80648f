"""bench/campaign.py's pure parts: how a figure stands against issue [2/5]'s targets."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "campaign.py"
_spec = importlib.util.spec_from_file_location("bench_campaign", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("value, low, expected", [
    (10.4, 10.1, "met"),  # the figure and its whole interval at or above the floor
    (10.0, 10.0, "met"),  # the floor itself counts as reaching it
    (10.0, 9.5, "at its edge"),  # the figure reaches the floor, its interval does not
    (9.9, 9.5, "not met"),
    (11.0, None, "met"),  # no interval: the figure alone
])
def test_a_floor_is_met_only_when_the_interval_clears_it(value, low, expected):
    """A ratio target is met when the ratio and its interval's low end reach it; at its edge when only the
    ratio does."""
    assert bench.standing(value, 10.0, at_least=True, low=low, high=value + 1) == expected


@pytest.mark.parametrize("value, target, high, expected", [
    (4.1, 5.0, 4.6, "met"),
    (5.0, 5.0, 5.0, "met"),  # the ceiling itself counts as staying under it
    (4.6, 5.0, 5.4, "at its edge"),
    (5.4, 5.0, 6.0, "not met"),
    (0.18, 0.2, None, "met"),  # the round trip: no interval, the figure alone
    (0.21, 0.2, None, "not met"),
])
def test_a_ceiling_is_met_only_when_the_interval_stays_under_it(value, target, high, expected):
    """A milliseconds target is met when the figure and its interval's high end stay at or under it."""
    assert bench.standing(value, target, at_least=False, low=0.0, high=high) == expected
