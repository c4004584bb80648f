"""Unit tests of agent.bugs: the AGENT_BUGS switch names, their parsing and their listing."""

from __future__ import annotations

import pytest

from agent import bugs
from agent.session import planner


class TestNames:
    def test_ten_known_bug_switches(self):
        """Exactly the nine switches of issue [2/7] plus start-untouched-while-pending exist, each with one line."""
        assert set(bugs.BUGS) == {
            "stale-assistant-calls", "pre-exec-synthetic-repeat", "replay-never-tools", "effect-before-intent",
            "retry-live-failures", "unbounded-retry", "ignore-configuration-change", "replay-ignores-environment",
            "no-torn-tail-repair", "start-untouched-while-pending",
        }
        assert all(text and "\n" not in text for text in bugs.BUGS.values())

    def test_planner_switches_match_the_planner(self):
        """The planner-level switches are exactly the ones plan_recovery accepts."""
        assert bugs.PLANNER_BUGS == planner.PLANNER_BUGS
        assert bugs.EXECUTOR_BUGS == {"effect-before-intent", "retry-live-failures", "no-torn-tail-repair"}


class TestParse:
    def test_empty_means_correct_agent(self):
        """No variable, or an empty one, enables nothing."""
        assert bugs.from_environ({}) == frozenset()
        assert bugs.parse_bugs("") == frozenset()
        assert bugs.parse_bugs(" , ") == frozenset()

    def test_comma_separated_names(self):
        """Names are comma-separated and surrounding blanks are ignored."""
        assert bugs.parse_bugs("unbounded-retry, no-torn-tail-repair") == {"unbounded-retry", "no-torn-tail-repair"}

    def test_unknown_name_is_refused(self):
        """A misspelt switch is an error naming it, never silently ignored."""
        with pytest.raises(bugs.UnknownBugError, match="stale-calls"):
            bugs.parse_bugs("unbounded-retry,stale-calls")


class TestListing:
    def test_one_line_per_switch(self):
        """The listing has one line per switch, naming it and its layer."""
        lines = bugs.listing().splitlines()
        assert len(lines) == len(bugs.BUGS)
        for line, name in zip(lines, bugs.BUGS):
            assert line.startswith(name)
            assert line.split()[1] == ("planner" if name in bugs.PLANNER_BUGS else "executor")
