"""Planner corpus runner: every entry of ../shared/session-contract/planner-fixtures/manifest.json.

Raw session bytes in, the real reducer (state + boundary, SPEC §14.1), the planner, deep-equal against the expected
plan. It also pins the §14.4 rule each case exercises, and shows that each upstream defect re-introduced by a bug
switch gives the upstream plan of SPEC §17.3, whose facts the reducer rejects.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from agent.session.errors import CorruptionError
from agent.session.framing import committed_lines, parse_line
from agent.session.materialize import transactions_for_plan
from agent.session.planner import plan_recovery, plan_rule
from agent.session.reducer import Reducer, reduce_session
from tests.conftest import planner_manifest

# The rule each corpus case must fire (OVERRIDES.md "Kept planner fixtures checked against our rules", SPEC §17.3).
EXPECTED_RULE = {
    "start-run-step": "P2",
    "retry-attempt": "P3.3",
    "configuration-changed": "P3.1",
    "replay-safe-tool": "P7.1.3.3",
    "abort-close-attempt": "P1.1",
    "finish-idle": "P0",
    "attempts-exhausted": "P3.4",
    "unknown-tool": "P7.2.1",
    "invalid-arguments": "P7.2.2",
    "interrupted-never-tool": "P7.1.4",
    "start-tool": "P7.2.1",
    "abort-pending-tool": "P1.2",
    "ours-stale-calls-same-run": "P5.2",
    "ours-stale-calls-cross-run": "P5.2",
    "ours-synthetic-then-next-call": "P7.2.4",
    "ours-synthetic-then-next-step": "P7.3",
    "ours-truncated-complete": "P6.3",
    "ours-abort-all-resolved": "P1.3",
}


def load_case(corpus: Path, entry: dict) -> tuple[bytes, dict, dict]:
    case = json.loads((corpus / "planner-fixtures" / entry["input"]).read_text())
    expected = json.loads((corpus / "planner-fixtures" / entry["expected"]).read_text())
    data = (corpus / "fixtures" / case["sessionFile"]).read_bytes()
    return data, case["current"], expected


def test_manifest_is_complete(corpus):
    """The planner manifest lists every case this runner pins a rule for, and nothing else."""
    assert {e["name"] for e in planner_manifest()} == set(EXPECTED_RULE)


@pytest.mark.parametrize("entry", planner_manifest(), ids=lambda e: e["name"])
def test_planner_fixture(corpus, entry):
    """The plan for the reduced session file deep-equals the expected plan."""
    data, current, expected = load_case(corpus, entry)
    reduction = reduce_session(data)
    assert plan_recovery(reduction, current) == expected


@pytest.mark.parametrize("entry", planner_manifest(), ids=lambda e: e["name"])
def test_planner_fixture_rule(corpus, entry):
    """The §14.4 rule that fires for each corpus case is the one the spec's case notes name."""
    data, current, _ = load_case(corpus, entry)
    assert plan_rule(reduce_session(data), current) == EXPECTED_RULE[entry["name"]]


# (case, switch, §17.3 upstream plan type, the reducer's rejection code for its first fact)
UPSTREAM_DEFECTS = [
    ("ours-stale-calls-same-run", "stale-assistant-calls", "startTool", "INVALID_REFERENCE"),
    ("ours-stale-calls-cross-run", "stale-assistant-calls", "startTool", "INVALID_REFERENCE"),
    ("ours-synthetic-then-next-call", "pre-exec-synthetic-repeat", "appendSynthetic", "INVALID_TRANSITION"),
    ("ours-synthetic-then-next-step", "pre-exec-synthetic-repeat", "appendSynthetic", "INVALID_TRANSITION"),
    ("ours-truncated-complete", "pre-exec-synthetic-repeat", "appendSynthetic", "INVALID_TRANSITION"),
    ("ours-abort-all-resolved", "pre-exec-synthetic-repeat", "appendSynthetic", "INVALID_TRANSITION"),
]


@pytest.mark.parametrize("name, switch, plan_type, code", UPSTREAM_DEFECTS, ids=[d[0] for d in UPSTREAM_DEFECTS])
def test_bug_switch_gives_the_rejected_upstream_plan(corpus, name, switch, plan_type, code):
    """With the switch on, the planner returns the upstream plan of SPEC §17.3 and the reducer rejects its facts."""
    entry = next(e for e in planner_manifest() if e["name"] == name)
    data, current, expected = load_case(corpus, entry)
    reduction = reduce_session(data)
    plan = plan_recovery(reduction, current, bugs=frozenset({switch}))
    assert plan["type"] == plan_type and plan != expected

    reducer = Reducer()
    lines, _ = committed_lines(data)
    reducer.apply_header(parse_line(lines[0], 1), 1)
    for number, text in enumerate(lines[1:], start=2):
        reducer.apply(parse_line(text, number), number)
    counter = itertools.count(0x900)
    ids = lambda: f"018f0000-0000-7000-8000-{next(counter):012x}"  # noqa: E731
    [first, *_] = transactions_for_plan(reduction, plan, dict(current, snapshot={}), ids)
    seq = reducer.next_seq
    facts = [dict(fact, seq=seq + k, timestamp=0) for k, fact in enumerate(first)]
    with pytest.raises(CorruptionError) as rejected:
        reducer.apply(facts if len(facts) > 1 else facts[0], reducer.next_line)
    assert rejected.value.code == code
