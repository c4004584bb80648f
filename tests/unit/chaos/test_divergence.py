"""Unit tests of chaos.divergence: plan descriptions, signatures, and the comparison with the reference planner."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from chaos.divergence import (Divergence, ask_plan, compare, describe_divergence, describe_plan, first_divergence,
                              planner_timeout, telling_line)
from chaos.target import Target

CONTRACT = Path(__file__).resolve().parents[3].parent / "shared" / "session-contract"


def fixture(name: str):
    """(log bytes, reduced state, current configuration) of a planner fixture of the contract corpus."""
    from agent.session.reducer import reduce_session

    data = json.loads((CONTRACT / "planner-fixtures" / f"{name}.json").read_text(encoding="utf-8"))
    log = (CONTRACT / "fixtures" / data["sessionFile"]).read_bytes()
    expected = json.loads((CONTRACT / "planner-fixtures" / f"{name}.expected.json").read_text(encoding="utf-8"))
    return log, reduce_session(log), data["current"], expected


STATE = {"operation": {"kind": "run", "step": {"status": "settled", "settledEntryId": "A2"},
                       "toolCalls": [{"assistantEntryId": "A1", "toolIndex": 0, "status": "completed"}]},
         "transcript": [{"role": "user", "content": "x"},
                        {"role": "assistant", "content": None,
                         "tool_calls": [{"id": "c", "function": {"name": "read", "arguments": "{}"}}]},
                        {"role": "tool", "tool_call_id": "c", "content": "ok"},
                        {"role": "assistant", "content": "done"}]}


class TestDescribePlan:
    @pytest.mark.parametrize("plan, words", [
        ({"type": "finish", "outcome": "completed", "completion": "normal", "finalEntryId": "A2"}, "finish completed"),
        ({"type": "finish", "outcome": "completed", "completion": "truncated", "finalEntryId": "A2"},
         "finish completed (truncated)"),
        ({"type": "finish", "outcome": "completed", "completion": "normal"}, "finish completed (idle no-op)"),
        ({"type": "finish", "outcome": "failed", "error": {"code": "empty_response"}}, "finish failed empty_response"),
        ({"type": "startStep", "stepKind": "assistant", "attempt": 2}, "startStep assistant attempt 2"),
        ({"type": "blocked", "reason": "attempts_exhausted"}, "blocked attempts_exhausted"),
        ({"type": "closeAttempt", "error": {"code": "aborted"}}, "closeAttempt aborted"),
        (None, "no plan"),
    ])
    def test_plans_in_a_few_words(self, plan, words):
        """Each plan type is described by its type and the members that tell plans apart."""
        assert describe_plan(STATE, plan) == words

    def test_a_stale_call_is_named_as_such(self):
        """A startTool for a call the current assistant message does not have says so."""
        plan = {"type": "startTool", "mode": "start", "assistantEntryId": "A2", "toolIndex": 0, "toolName": "read"}
        assert describe_plan(STATE, plan) == ("startTool read#0, not a call of the current assistant message "
                                              "(it has none)")

    def test_an_earlier_assistant_entry_is_named(self):
        """A plan naming another assistant entry than the current step's says it is an earlier message's."""
        plan = {"type": "startTool", "mode": "replay", "assistantEntryId": "A1", "toolIndex": 0, "toolName": "read"}
        assert describe_plan(STATE, plan) == "startTool read#0 (replay) of an earlier assistant message"

    def test_the_divergence_puts_the_reference_first(self):
        """The divergence reads `reference RULE PLAN; implementation PLAN`."""
        reference = {"type": "finish", "outcome": "completed", "completion": "normal", "finalEntryId": "A2"}
        stale = {"type": "startTool", "mode": "start", "assistantEntryId": "A2", "toolIndex": 0, "toolName": "read"}
        assert describe_divergence(STATE, reference, "P5.2", stale) == (
            "reference P5.2 finish completed; implementation startTool read#0, not a call of the current assistant "
            "message (it has none)")

    def test_plans_that_read_alike_name_the_members_that_differ(self):
        """Two plans with the same words are told apart by the members that differ."""
        a = {"type": "blocked", "reason": "attempts_exhausted"}
        assert describe_divergence(STATE, a, "P3.4", dict(a, extra=1)).endswith("(differs in extra)")


class TestCompare:
    def test_the_reference_plan_does_not_diverge(self):
        """The fixture's own expected plan agrees with the reference planner."""
        _, state, current, expected = fixture("retry-attempt")
        assert compare(state, current, expected) is None

    def test_another_plan_diverges_with_the_reference_rule(self):
        """Any other plan is a divergence naming the reference rule and both plans."""
        _, state, current, expected = fixture("retry-attempt")
        found = compare(state, current, {"type": "blocked", "reason": "attempts_exhausted"}, kill=2, fault="f")
        assert isinstance(found, Divergence) and found.reference_rule == "P3.3" and found.reference == expected
        assert found.signature.startswith("reference P3.3 startStep assistant attempt 2; implementation blocked")
        assert Divergence.from_json(json.loads(json.dumps(found.to_json()))) == found

    def test_no_plan_is_a_divergence(self):
        """An implementation that gave no plan diverges, with the reason instead of a plan."""
        _, state, current, _ = fixture("finish-idle")
        found = compare(state, current, None, failure="no plan (exit 3: boom)")
        assert found is not None and found.signature.endswith("implementation no plan (exit 3: boom)")


class TestAskPlan:
    def test_the_bundled_planner_answers_the_reference_plan(self):
        """`python -m agent plan` on a fixture prints the fixture's expected plan."""
        log, _, current, expected = fixture("replay-safe-tool")
        plan, failure = ask_plan((sys.executable, "-m", "agent", "plan", "{log}", "{current}"), log, current,
                                 {"PATH": "/usr/bin:/bin"})
        assert failure is None and plan == expected

    def test_a_failing_command_says_why(self, tmp_path):
        """A command that exits non-zero gives no plan and its last stderr line."""
        script = tmp_path / "p.py"
        script.write_text("import sys\nsys.stderr.write('cannot plan this\\n')\nsys.exit(3)\n")
        log, _, current, _ = fixture("finish-idle")
        plan, failure = ask_plan((sys.executable, str(script), "{log}", "{current}"), log, current, {})
        assert plan is None and failure == "no plan (exit 3: cannot plan this)"

    def test_a_failing_command_gives_its_error_line_not_its_runtimes_banner(self, tmp_path):
        """A command whose stderr ends with a runtime's banner (Node's version) fails with its error line."""
        script = tmp_path / "p.py"
        node = "Error: Cannot find module 'p.js'\n{\n}\n\nNode.js v20\n"
        script.write_text(f"import sys\nsys.stderr.write({node!r})\nsys.exit(1)\n")
        log, _, current, _ = fixture("finish-idle")
        plan, failure = ask_plan((sys.executable, str(script), "{log}", "{current}"), log, current, {})
        assert plan is None and failure == "no plan (exit 1: Error: Cannot find module 'p.js')"

    def test_output_that_is_not_json_is_shown(self, tmp_path):
        """A command that prints a debug line before its plan gives no plan, and the line says how stdout began."""
        script = tmp_path / "p.py"
        script.write_text("print('debug: planning')\nprint('{\"type\": \"finish\"}')\n")
        log, _, current, _ = fixture("finish-idle")
        plan, failure = ask_plan((sys.executable, str(script), "{log}", "{current}"), log, current, {})
        assert plan is None and failure.startswith("no plan (its output is not JSON: it starts 'debug: planning\\n")


def test_the_planner_timeout_is_the_agents():
    """AGENT_PLANNER_TIMEOUT read as the agent reads it: unset or empty 30 s, a value it would refuse None."""
    assert planner_timeout({}) == planner_timeout({"AGENT_PLANNER_TIMEOUT": ""}) == 30.0
    assert planner_timeout({"AGENT_PLANNER_TIMEOUT": "2.5"}) == 2.5
    assert [planner_timeout({"AGENT_PLANNER_TIMEOUT": v}) for v in ("0", "-1", "inf", "nan", "soon")] == [None] * 5


class TestFirstDivergence:
    def test_a_target_without_a_plan_command_is_not_asked(self):
        """first_divergence returns None when the target offers no planner to ask."""
        target = Target(launch=(("plan", ()),), configuration_flags=False, name="foreign")
        assert first_divergence(target, object()) is None


def test_a_planner_that_outlives_its_timeout_is_killed_with_its_children(tmp_path):
    """Past the timeout the planner's whole session is killed, its grandchildren included, and no plan is given."""
    import psutil

    marker = str(tmp_path / "marker")
    script = tmp_path / "slow.py"
    script.write_text(f"import subprocess, time\nsubprocess.Popen(['sleep', '30', {marker!r}])\ntime.sleep(30)\n")
    plan, failure = ask_plan((sys.executable, str(script), "{log}", "{current}"), b"", {}, {}, timeout=1)
    assert plan is None and "timed out" in failure
    left = [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]
    assert not psutil.wait_procs(left, timeout=2)[1]


def test_telling_line_prefers_the_error_to_a_runtime_banner():
    """The reason a failed command gives is its last error line, not a stack trace's last line (Node's version)."""
    node = "node:internal/modules/cjs/loader:1228\n  throw err;\n\nError: Cannot find module '/x/p.js'\n" \
           "    at Module._resolveFilename (node:internal)\n{\n  code: 'MODULE_NOT_FOUND'\n}\n\nNode.js v20.20.2\n"
    assert telling_line(node) == "Error: Cannot find module '/x/p.js'"
    framed = node.replace("    at Module._resolveFilename (node:internal)",
                          "    at new NodeError (node:internal/errors:405)")
    assert telling_line(framed) == "Error: Cannot find module '/x/p.js'"  # a frame naming an error is no reason
    python = "Traceback (most recent call last):\n  File \"p.py\"\nModuleNotFoundError: No module named 'x'\n"
    assert telling_line(python) == "ModuleNotFoundError: No module named 'x'"
    assert telling_line("plain failure\n\n") == "plain failure"
    assert telling_line("") == ""
