"""Tests of chaos.scenario: the TOML format, its `file:line: field: message` errors, conditions and expectations."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from chaos.errors import ScenarioError
from chaos.scenario import (ProbeScenario,
    KNOWN_TOOLS,
    Scenario,
    condition_holds,
    condition_problem,
    load_scenario,
    load_scenarios,
    parse_scenario,
)

REPO = Path(__file__).resolve().parents[3]

MINIMAL = """\
name = "minimal"
description = "one plain answer"

[[runs]]
prompt = "Say hello."

[[runs.turns]]
content = "Hello."
"""


def errors_of(text: str, name: str = "s.toml") -> list[str]:
    """The error lines parse_scenario reports for ``text`` (fails when it loads)."""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(textwrap.dedent(text), name)
    return info.value.messages


class TestParseScenario:
    def test_minimal_scenario_gets_documented_defaults(self):
        """A minimal file loads with the default agent settings, no restart changes and `completed` expected."""
        s = parse_scenario(MINIMAL)
        assert s.name == "minimal"
        assert s.agent.model == "scripted/model" and s.agent.tools == list(KNOWN_TOOLS)
        assert s.runs[0].turns[0].effective_finish_reason == "stop"
        assert not s.restart.changes_configuration and s.restart.agent_args() == []
        assert s.expect.outcome == "completed" and s.expect.when == []

    def test_toml_syntax_error_carries_line_and_column(self):
        """A TOML syntax error is one line `file:line:col: toml: message` with tomllib's position."""
        assert errors_of('name = "x"\ndescription = "d"\n[[runs]]\nprompt = \n') == ["s.toml:4:10: toml: Invalid value"]

    def test_unterminated_string_at_end_of_document(self):
        """An error tomllib reports 'at end of document' gets the last line and column."""
        messages = errors_of('name = "x"\ndescription = """open')
        assert len(messages) == 1 and re.fullmatch(r"s\.toml:2:\d+: toml: .+", messages[0])

    def test_wrong_type_names_field_and_line(self):
        """A value of the wrong type is reported at its key's line with the dotted field path."""
        text = MINIMAL.replace('content = "Hello."', 'content = "Hello."\nfinish_reason = 3')
        assert errors_of(text) == ["s.toml:9: runs[0].turns[0].finish_reason: Input should be 'stop', 'tool_calls', "
                                   "'length' or 'content_filter'"]

    def test_string_for_an_integer_is_not_coerced(self):
        """Strict typing: "5" where an integer is expected is an error, not silently converted."""
        text = MINIMAL + 'usage = { prompt_tokens = "5" }\n'
        assert errors_of(text) == ["s.toml:9: runs[0].turns[0].usage.prompt_tokens: Input should be a valid integer"]

    def test_unknown_key_suggests_the_close_name(self):
        """An unknown key is reported with a did-you-mean hint when a field name is close."""
        text = MINIMAL.replace('content = "Hello."', 'contnet = "Hello."')
        assert errors_of(text) == ["s.toml:8: runs[0].turns[0].contnet: unknown key (did you mean 'content'?)"]

    def test_unknown_key_lists_allowed_keys_otherwise(self):
        """An unknown key far from every field name lists the allowed keys."""
        text = MINIMAL + "\n[restart]\nzzz = 1\n"
        messages = errors_of(text)
        assert messages == ["s.toml:11: restart.zzz: unknown key (allowed: environment_identity, model, replay, then, "
                            "tools)"]

    def test_missing_required_key_points_at_its_table(self):
        """A missing required key is reported at the line of the table that lacks it."""
        text = 'name = "x"\ndescription = "d"\n\n[[runs]]\n[[runs.turns]]\ncontent = "a"\n'
        assert errors_of(text) == ["s.toml:4: runs[0].prompt: required key is missing"]

    def test_duplicate_call_id_names_both_places(self):
        """Two tool calls with the same id anywhere in the scenario are an error at the second one."""
        text = """\
            name = "dup"
            description = "d"
            [[runs]]
            prompt = "one"
            [[runs.turns]]
            tool_calls = [{ id = "c1", name = "read", arguments = { path = "a" } }]
            [[runs.turns]]
            tool_calls = [
              { id = "c2", name = "read", arguments = { path = "b" } },
              { id = "c1", name = "read", arguments = { path = "c" } },
            ]
            """
        assert errors_of(text) == [
            "s.toml:10: runs[0].turns[1].tool_calls[1].id: duplicate call id 'c1': already used at "
            "runs[0].turns[0].tool_calls[0] (call ids must be unique within a scenario so effects can be attributed)"
        ]

    def test_duplicate_prompt_is_rejected(self):
        """Two runs with the same prompt are an error: the server could not tell them apart."""
        text = MINIMAL + '\n[[runs]]\nprompt = "Say hello."\n[[runs.turns]]\ncontent = "Again."\n'
        messages = errors_of(text)
        assert messages == ["s.toml:11: runs[1].prompt: duplicate prompt: same as runs[0].prompt (prompts must be "
                            "distinct: the scripted server identifies a run by its prompt)"]

    def test_bad_fault_string_in_schedule(self):
        """A schedule fault that does not follow the grammar is reported with the grammar's reason."""
        text = MINIMAL + '\n[[schedules]]\nfaults = ["stepAttempt@after-sync#1", "kill:assistant@after-synk#1"]\n'
        messages = errors_of(text)
        assert len(messages) == 1
        assert messages[0].startswith("s.toml:11: schedules[0].faults[1]: ")
        assert "after-synk" in messages[0]

    @pytest.mark.parametrize("fault", ["stepAttempt@after-sync", "bogus@after-sync#1", "tx:0@before-write",
                                       "ioerror(EPERM):tx:1@before-write", "ioerror(EIO):tx:1@after-sync"])
    def test_each_malformed_fault_is_rejected(self, fault):
        """Faults without #N, with an unknown fact, K = 0, an unknown errno or ioerror after sync are rejected."""
        text = MINIMAL + f'\n[[schedules]]\nfaults = ["{fault}"]\n'
        messages = errors_of(text)
        assert len(messages) == 1 and messages[0].startswith("s.toml:11: schedules[0].faults[0]: ")

    @pytest.mark.parametrize("fault", ["stepAttempt@after-sync#2", "int:toolStarted@after-sync#1", "tx:3@before-write",
                                       "torn(7):assistant@after-write#1", "powerloss:usage@after-write#1",
                                       "dresume:operationFinished@before-write#1", "ioerror(ENOSPC):user@before-write#1"])
    def test_each_well_formed_fault_is_accepted(self, fault):
        """Every action of the grammar is accepted in a pinned schedule."""
        s = parse_scenario(MINIMAL + f'\n[[schedules]]\nfaults = ["{fault}"]\n')
        assert s.schedules[0].faults == [fault]

    def test_several_errors_are_reported_at_once_in_line_order(self):
        """Every problem of a file is reported in one pass, one line each, sorted by line."""
        text = """\
            name = "Bad Name"
            description = "d"
            [[runs]]
            prompt = "p"
            [[runs.turns]]
            content = 5
            tool_calls = [{ id = "x", name = "reed" }]
            [expect]
            outcome = "blocked:bogus"
            [[expect.when]]
            when = "open-atempt"
            """
        messages = errors_of(text)
        assert [m.split(": ")[0] for m in messages] == ["s.toml:1", "s.toml:6", "s.toml:7", "s.toml:9", "s.toml:11"]
        assert messages[0].startswith("s.toml:1: name: must be a slug")
        assert "tool 'reed' is not offered" in messages[2] and "did you mean 'read'?" in messages[2]
        assert "unknown blocked reason 'bogus'" in messages[3]
        assert messages[4] == "s.toml:11: expect.when[0].when: unknown condition 'open-atempt' (did you mean " \
                              "'open-attempt'?)"

    def test_keys_inside_multiline_strings_do_not_confuse_line_finding(self):
        """Text that looks like keys inside a multi-line string does not shift the reported line."""
        text = 'name = "x"\ndescription = """\nprompt = 1\n[[runs]]\n"""\n[[runs]]\nprompt = 7\n[[runs.turns]]\n'
        assert errors_of(text) == ["s.toml:7: runs[0].prompt: Input should be a valid string"]

    def test_unknown_tool_needs_explicit_flag(self):
        """A call to a tool the agent does not offer loads only with `unknown = true`, and the flag is checked."""
        good = MINIMAL + 'tool_calls = [{ id = "c", name = "frobnicate", unknown = true }]\n'
        assert parse_scenario(good).runs[0].turns[0].tool_calls[0].unknown
        bad = MINIMAL + 'tool_calls = [{ id = "c", name = "read", unknown = true }]\n'
        assert errors_of(bad) == ["s.toml:9: runs[0].turns[0].tool_calls[0].unknown: unknown = true, but the agent "
                                  "offers 'read'"]

    def test_workspace_paths_must_stay_inside(self):
        """Workspace and expected file paths must be relative without '..' components."""
        text = MINIMAL + '\n[workspace]\n"../escape" = "x"\n"/abs" = "y"\n"ok/file.txt" = "z"\n'
        messages = errors_of(text)
        assert messages == [
            's.toml:11: workspace["../escape"]: path \'../escape\' must not contain empty, \'.\' or \'..\' components',
            's.toml:12: workspace["/abs"]: path \'/abs\' must be relative to the workspace',
        ]

    def test_workspace_paths_no_file_system_could_hold_are_refused(self):
        """A file that another needs as a directory, a name over 255 bytes, a NUL: problems, not crashes at run."""
        long = "x" * 256
        text = MINIMAL + f'\n[workspace]\n"a" = "x"\n"a/b" = "y"\n"{long}" = "z"\n"n\\u0000ul" = "w"\n'
        messages = errors_of(text)
        assert any("'a' is a file, but 'a/b' needs it as a directory" in m for m in messages)
        assert any("a component of 256 bytes (a file name holds at most 255)" in m for m in messages)
        assert any("must not contain a NUL character" in m for m in messages)
        assert len(messages) == 3
        fine = MINIMAL + f'\n[workspace]\n"a/b" = "x"\n"a/c" = "y"\n"{"y" * 255}" = "z"\n'
        assert set(parse_scenario(textwrap.dedent(fine)).workspace) == {"a/b", "a/c", "y" * 255}

    def test_effects_must_name_scripted_calls(self):
        """An effect count for a call id that no turn scripts is an error."""
        text = MINIMAL + '\n[expect]\neffects = { call_x = 1 }\n'
        assert errors_of(text) == ["s.toml:11: expect.effects.call_x: no scripted tool call has id 'call_x'"]

    def test_fault_members_must_fit_the_kind(self):
        """A provider fault of kind http needs a status, and seconds belongs to delay/timeout only."""
        text = MINIMAL + '\n[runs.turns.fault]\nkind = "http"\n'
        assert errors_of(text) == ["s.toml:10: runs[0].turns[0].fault: kind 'http' needs status (e.g. 429, 500, 400)"]
        text = MINIMAL + '\n[runs.turns.fault]\nkind = "drop"\nseconds = 1\n'
        assert "seconds applies to kinds 'delay' and 'timeout' only" in errors_of(text)[0]

    def test_restart_must_change_something(self):
        """A restart model equal to the first launch's model is an error; replay declarations are checked."""
        text = MINIMAL + '\n[restart]\nmodel = "scripted/model"\nreplay = ["read=never:builtin:read:v2", "cat=safe"]\n'
        assert errors_of(text) == [
            "s.toml:11: restart.model: equals agent.model: a restart change must change something",
            "s.toml:12: restart.replay[1]: unknown tool 'cat' (the agent's tools: read, write, edit, bash)",
        ]

    def test_condition_tool_and_run_references_are_checked(self):
        """`pending:TOOL` must name a known or scripted tool and `run:N` an existing run."""
        text = MINIMAL + '\n[[expect.when]]\nwhen = ["pending:cat", "run:2"]\noutcome = "aborted"\n'
        assert errors_of(text) == [
            "s.toml:11: expect.when[0].when[0]: condition 'pending:cat': no tool 'cat' in the agent or the script",
            "s.toml:11: expect.when[0].when[1]: condition 'run:2': the scenario has 1 run(s)",
        ]


class TestScenarioModel:
    def test_arguments_table_is_sent_as_json_and_string_verbatim(self):
        """Table arguments become their JSON text; string arguments (even invalid JSON) are sent unchanged."""
        s = parse_scenario(MINIMAL + 'tool_calls = [{ id = "a", name = "read", arguments = { path = "é" } },\n'
                                     '  { id = "b", name = "read", arguments = \'{"path": "trunc\' }]\n')
        calls = s.runs[0].turns[0].tool_calls
        assert json.loads(calls[0].arguments_text) == {"path": "é"}
        assert calls[1].arguments_text == '{"path": "trunc'
        assert s.runs[0].turns[0].effective_finish_reason == "tool_calls"
        assert s.call_ids() == ["a", "b"]

    def test_operations_fault_map_and_restart_flags(self):
        """Compactions follow their run; faults are keyed by 0-based (run, turn); restart changes become flags."""
        text = MINIMAL + textwrap.dedent("""\
            [runs.turns.fault]
            kind = "http"
            status = 429
            [runs.compact]
            summary = "They said hello."
            fault = { kind = "drop", repeat = true }
            [[runs]]
            prompt = "Again?"
            [[runs.turns]]
            content = "Yes."
            [restart]
            model = "scripted/other"
            tools = ["read"]
            replay = ["read=never"]
            environment_identity = "elsewhere"
            then = "abort"
            """)
        s = parse_scenario(text)
        assert s.operations() == [("run", 0), ("compact", 0), ("run", 1)]
        faults = s.fault_map()
        assert faults[(0, 0)].status == 429 and faults[(0, "summary")].repeat and set(faults) == {(0, 0), (0, "summary")}
        assert s.restart.changes_configuration and s.restart.then == "abort"
        assert s.restart.agent_args() == ["--model", "scripted/other", "--tools", "read", "--replay", "read=never",
                                          "--environment-identity", "elsewhere"]


class TestConditions:
    @pytest.mark.parametrize(("fixture", "holding"), [
        ("header-only", {"none", "idle"}),
        ("run-accepted", {"none", "run", "run:1", "no-step"}),
        ("open-attempt", {"run", "run:1", "open-attempt", "open-attempt:1"}),
        ("attempts-exhausted", {"run", "run:1", "open-attempt", "open-attempt:2"}),
        ("pending-safe-tool", {"run", "run:1", "settled", "settled:toolUse", "pending", "pending:read"}),
        ("abort-mixed-tools-requested", {"run", "run:1", "settled", "settled:toolUse", "pending", "pending:read",
                                         "untouched", "untouched:read", "abort-requested"}),
        ("truncated-tool-call", {"none", "run", "run:1", "settled", "settled:length", "untouched",
                                 "untouched:read"}),
        ("ours-stale-calls-cross-run", {"none", "run", "run:2", "settled", "settled:stop"}),
        ("completed-compaction", {"none", "idle"}),
    ])
    def test_conditions_on_corpus_states(self, corpus, fixture, holding):
        """On the corpus's expected SessionStates exactly the documented conditions hold."""
        state = json.loads((corpus / "fixtures" / f"{fixture}.expected.json").read_text())["state"]
        vocabulary = ["none", "no-kill", "idle", "run", "run:1", "run:2", "compaction", "no-step", "open-attempt",
                      "open-attempt:1", "open-attempt:2", "failed-step", "settled", "settled:stop", "settled:length",
                      "settled:toolUse", "pending", "pending:read", "pending:bash", "untouched", "untouched:read",
                      "abort-requested"]
        assert {c for c in vocabulary if condition_holds(c, state)} == holding
        assert all(condition_holds(f"not:{c}", state) != (c in holding) for c in vocabulary)

    def test_untouched_by_tool_name(self):
        """`untouched:TOOL` looks at the names of the current assistant's untouched calls."""
        state = {
            "transcript": [{"role": "user", "content": "p"},
                           {"role": "assistant", "content": None, "tool_calls": [
                               {"id": "a", "type": "function", "function": {"name": "read", "arguments": "{}"}},
                               {"id": "b", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
                           {"role": "tool", "tool_call_id": "a", "content": "x"}],
            "operation": {"kind": "run", "toolCalls": [], "abortRequested": False,
                          "step": {"status": "settled", "stepKind": "assistant", "settledEntryId": "e2",
                                   "stopReason": "toolUse", "attempt": 1}},
        }
        assert condition_holds("untouched:bash", state) and not condition_holds("untouched:read", state)

    def test_no_kill_means_only_none_and_no_kill(self):
        """Without a kill (reduction None) only `none` and `no-kill` hold."""
        assert condition_holds("none", None) and condition_holds("no-kill", None)
        assert not condition_holds("idle", None) and condition_holds("not:pending", None)

    @staticmethod
    def current_of(state: dict, **changes) -> dict:
        """The CurrentConfiguration (SPEC §8.7) a launch that recorded ``state``'s step and intents ran with."""
        step = state["operation"].get("step") or {}
        intents = {t["toolName"]: t for t in state["operation"].get("toolCalls", [])}
        tools = [{"name": t["name"], "definitionDigest": t["definitionDigest"],
                  "replay": intents.get(t["name"], {}).get("replay", "safe"),
                  "replayKey": intents.get(t["name"], {}).get("replayKey", f"builtin:{t['name']}:v1")}
                 for t in step.get("configurationSnapshot", {}).get("tools", [])]
        current = {"configurationDigest": step.get("configurationDigest"),
                   "environmentIdentity": state["header"]["environmentIdentity"], "tools": tools}
        current.update(changes)
        return current

    @pytest.mark.parametrize("fixture", ["open-attempt", "attempts-exhausted", "pending-safe-tool"])
    def test_changed_compares_the_recorded_configuration_with_the_recovering_one(self, corpus, fixture):
        """`changed` holds only when the in-flight work was recorded under another configuration than the current."""
        state = json.loads((corpus / "fixtures" / f"{fixture}.expected.json").read_text())["state"]
        same = self.current_of(state)
        assert not condition_holds("changed", state, {"current": same})
        assert condition_holds("not:changed", state, {"current": same})
        for other in ({"configurationDigest": "sha256:" + "9" * 64}, {"environmentIdentity": "elsewhere"}):
            assert condition_holds("changed", state, {"current": {**same, **other}})
        assert condition_holds("changed", state)  # configuration unknown: the changes are assumed to apply

    def test_changed_sees_a_pending_call_whose_declaration_or_tool_changed(self, corpus):
        """A pending read under a new replay declaration, or with its tool removed, is `changed`; an idle state is not."""
        state = json.loads((corpus / "fixtures" / "pending-safe-tool.expected.json").read_text())["state"]
        same = self.current_of(state)
        never = {**same, "tools": [{**t, "replay": "never"} for t in same["tools"]]}
        assert condition_holds("changed", state, {"current": never})
        assert condition_holds("changed", state, {"current": {**same, "tools": []}})
        idle = json.loads((corpus / "fixtures" / "header-only.expected.json").read_text())["state"]
        assert not condition_holds("changed", idle, {"current": {**same, "tools": []}})

    def test_ended_reads_the_finished_operation_from_the_context(self, corpus):
        """`ended[:OUTCOME]` holds on an idle state whose latest operation ended so; never without that fact."""
        idle = json.loads((corpus / "fixtures" / "header-only.expected.json").read_text())["state"]
        assert condition_holds("ended:aborted", idle, {"ended": "aborted"})
        assert condition_holds("ended", idle, {"ended": "aborted"})
        assert not condition_holds("ended:completed", idle, {"ended": "aborted"})
        assert condition_holds("ended:failed", idle, {"ended": "failed:model_error"})
        assert not condition_holds("ended", idle) and not condition_holds("ended:aborted", idle, {"ended": None})
        busy = json.loads((corpus / "fixtures" / "open-attempt.expected.json").read_text())["state"]
        assert not condition_holds("ended:aborted", busy, {"ended": "aborted"})

    @pytest.mark.parametrize("text", ["pendng", "open-attempt:3", "run:0", "settled:toolUsed", "pending:", "foo:bar",
                                      "ended:blocked:configuration_changed", "ended:nope", "changd"])
    def test_malformed_conditions_are_reported(self, text):
        """Conditions outside the vocabulary have a problem message."""
        assert condition_problem(text)


class TestExpectResolve:
    TEXT = MINIMAL + textwrap.dedent("""\
        tool_calls = [{ id = "call_b", name = "bash", arguments = { command = "true" } }]
        [[runs.turns]]
        content = "done"
        [expect]
        answer = "done"
        files = { "a.txt" = "A" }
        effects = { call_b = 1 }
        [[expect.when]]
        when = ["open-attempt:2"]
        outcome = "blocked:attempts_exhausted"
        [[expect.when]]
        when = "pending:bash"
        effects = { call_b = [0, 1] }
        files = {}
        [[expect.when]]
        when = "pending"
        outcome = "failed"
        """)

    def test_defaults_apply_without_kill(self):
        """With no kill, the default expectations apply and no rule is named."""
        resolved = parse_scenario(self.TEXT).expect.resolve(None)
        assert (resolved.outcome, resolved.answer, resolved.files, resolved.effects, resolved.rule) == (
            "completed", "done", {"a.txt": "A"}, {"call_b": (1, 1)}, None)

    def test_first_matching_rule_replaces_given_fields(self):
        """The first rule whose conditions all hold replaces the fields it gives and keeps the others."""
        state = {"transcript": [{"role": "user", "content": "p"}],
                 "operation": {"kind": "run", "abortRequested": False,
                               "toolCalls": [{"status": "pending", "toolName": "bash"}],
                               "step": {"status": "settled", "stopReason": "toolUse", "attempt": 1}}}
        resolved = parse_scenario(self.TEXT).expect.resolve(state)
        assert (resolved.outcome, resolved.answer, resolved.files, resolved.effects, resolved.rule) == (
            "completed", "done", {}, {"call_b": (0, 1)}, 1)

    def test_rule_outcome_overrides(self):
        """A rule's outcome replaces the default outcome when it matches."""
        state = {"transcript": [], "operation": {"kind": "run", "toolCalls": [], "abortRequested": False,
                                                 "step": {"status": "attempting", "attempt": 2}}}
        resolved = parse_scenario(self.TEXT).expect.resolve(state)
        assert resolved.outcome == "blocked:attempts_exhausted" and resolved.rule == 0
        assert resolved.conditions == ("open-attempt:2",)


class TestLoadScenario:
    def test_unreadable_and_non_utf8_files(self, tmp_path):
        """A missing file and a file that is not UTF-8 each give one `file:line: file: message` line."""
        with pytest.raises(ScenarioError) as info:
            load_scenario(tmp_path / "missing.toml")
        assert info.value.messages == [f"{tmp_path / 'missing.toml'}:1: file: cannot read: No such file or directory"]
        bad = tmp_path / "bad.toml"
        bad.write_bytes(b'name = "x"\ndescription = "\xff"\n')
        with pytest.raises(ScenarioError) as info:
            load_scenario(bad)
        assert info.value.messages == [f"{bad}:2: file: not UTF-8 (byte 26)"]

    def test_source_is_remembered(self, tmp_path):
        """A loaded scenario knows the file it came from."""
        path = tmp_path / "m.toml"
        path.write_text(MINIMAL)
        assert load_scenario(path).source == path

    def test_duplicate_names_across_files(self, tmp_path):
        """Two files with the same scenario name: the second is reported at its `name` line."""
        (tmp_path / "a.toml").write_text(MINIMAL)
        (tmp_path / "b.toml").write_text("# comment\n" + MINIMAL)
        scenarios, problems = load_scenarios([tmp_path])
        assert [s.name for s in scenarios] == ["minimal"]
        assert problems == [f"{tmp_path / 'b.toml'}:2: name: 'minimal' is also the name of {tmp_path / 'a.toml'} "
                            "(names start case ids and must be unique)"]

    def test_bundled_scenarios_are_valid(self):
        """Every file under scenarios/ validates; probe scenarios live only under scenarios/frameworks/."""
        scenarios, problems = load_scenarios([REPO / "scenarios"])
        assert problems == []
        assert {"plain-answer", "read-then-answer", "bash-deploy", "write-edit", "two-runs"} <= {s.name for s in scenarios}
        for s in scenarios:
            framework = "frameworks" in s.source.parts
            assert isinstance(s, ProbeScenario if framework else Scenario), s.source

    def test_readme_example_is_a_valid_scenario(self):
        """The fully commented example in scenarios/README.md loads as a scenario."""
        readme = (REPO / "scenarios" / "README.md").read_text()
        blocks = re.findall(r"```toml\n(.*?)```", readme, re.S)
        assert blocks, "scenarios/README.md has no ```toml example"
        s = parse_scenario(blocks[0], "README.md")
        assert s.schedules and s.expect.when and s.restart.then == "abort"


def one_call(arguments: str, name: str = "write", extra: str = "") -> str:
    """A scenario whose first turn makes one call of tool ``name`` with the TOML ``arguments``."""
    return textwrap.dedent(f"""\
        name = "calls"
        description = "one call, then an answer"
        [[runs]]
        prompt = "Do it."
        [[runs.turns]]
        tool_calls = [{{ id = "call_1", name = "{name}", arguments = {arguments}{extra} }}]
        [[runs.turns]]
        content = "Done."
        """)


class TestToolArguments:
    def test_misnamed_argument_suggests_the_missing_one(self):
        """`write{path, text}` names its line and says the argument is `content`, once."""
        assert errors_of(one_call('{ path = "notes.txt", text = "x" }')) == [
            "s.toml:6: runs[0].turns[0].tool_calls[0].arguments.text: unknown argument 'text' for tool 'write' "
            "(did you mean 'content'?)"]

    def test_misspelled_argument_suggests_the_close_name(self):
        """`bash{cmd}` suggests `command`."""
        assert errors_of(one_call('{ cmd = "ls" }', "bash")) == [
            "s.toml:6: runs[0].turns[0].tool_calls[0].arguments.cmd: unknown argument 'cmd' for tool 'bash' "
            "(did you mean 'command'?)"]

    def test_missing_and_unrelated_arguments(self):
        """A missing required argument and an unknown one nothing resembles are each reported with the tool's
        argument list."""
        messages = errors_of(one_call('{ path = "a", colour = "red" }', "edit"))
        listing = "(the arguments of 'edit': path, old_string, new_string, replace_all)"
        assert messages == [
            f"s.toml:6: runs[0].turns[0].tool_calls[0].arguments: tool 'edit' needs argument 'new_string' {listing}",
            f"s.toml:6: runs[0].turns[0].tool_calls[0].arguments: tool 'edit' needs argument 'old_string' {listing}",
            f"s.toml:6: runs[0].turns[0].tool_calls[0].arguments.colour: unknown argument 'colour' for tool 'edit' "
            f"{listing}"]

    @pytest.mark.parametrize("arguments, message", [
        ('{ command = "ls", timeout = "5" }', "argument 'timeout' of tool 'bash' must be an integer"),
        ('{ command = "ls", timeout = 601 }', "argument 'timeout' of tool 'bash' must be <= 600"),
        ('{ command = "" }', "argument 'command' of tool 'bash' must not be empty"),
        ('{ command = "ls", timeout = true }', "argument 'timeout' of tool 'bash' must be an integer"),
    ])
    def test_values_are_checked_against_the_schema(self, arguments, message):
        """Argument values must fit the schema's type and bounds."""
        [line] = errors_of(one_call(arguments, "bash"))
        assert line.endswith(message)

    def test_string_arguments_and_unknown_tools_are_not_checked(self):
        """A string is sent verbatim (wrong on purpose is allowed), and so are the arguments of `unknown = true`."""
        parse_scenario(one_call("'{\"file\": \"x\"}'", "read"))
        parse_scenario(one_call('{ anything = 1 }', "web_search", ", unknown = true"))

    def test_another_targets_tools(self):
        """With another target's tool schemas, its calls are checked and the bundled tool names are unknown."""
        tools = {"search": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"],
                            "additionalProperties": False}}
        text = one_call('{ query = "x" }', "search").replace('description', 'agent = { tools = ["search"] }\n'
                                                                           'description', 1)
        parse_scenario(text, tools=tools)
        with pytest.raises(ScenarioError, match="unknown argument 'qeury' for tool 'search' .did you mean 'query'"):
            parse_scenario(text.replace("query", "qeury"), tools=tools)
        with pytest.raises(ScenarioError, match="unknown tool 'search'"):
            parse_scenario(text)

    def test_bundled_schemas_equal_what_the_agent_describes(self):
        """The static schemas are the `parameters` the bundled agent's `describe` reports (descriptions aside)."""
        from chaos.scenario import BUNDLED_TOOL_SCHEMAS
        from chaos.target import Target, describe

        def strip(value):
            if isinstance(value, dict):
                return {k: strip(v) for k, v in value.items() if k != "description"}
            return [strip(v) for v in value] if isinstance(value, list) else value

        described = {t["function"]["name"]: strip(t["function"]["parameters"]) for t in describe(Target()).tools}
        assert list(described) == list(BUNDLED_TOOL_SCHEMAS) == list(KNOWN_TOOLS)
        for name, schema in described.items():
            ours = BUNDLED_TOOL_SCHEMAS[name]
            assert {**ours, "required": sorted(ours["required"])} == {**schema, "required": sorted(schema["required"])}


class TestAuthoringTraps:
    def test_a_fact_named_as_a_condition_gets_the_fact_and_the_condition(self):
        """`when = "toolstarted"` says toolStarted is a fact name and suggests the condition `pending`."""
        text = MINIMAL + '[[expect.when]]\nwhen = "toolstarted"\noutcome = "completed"\n'
        assert errors_of(text) == [
            "s.toml:10: expect.when[0].when: unknown condition 'toolstarted': 'toolStarted' is a fact name "
            "(faults use it: toolStarted@PHASE#N), not a condition (did you mean 'pending'?)"]

    def test_a_miscased_fact_in_a_fault_gets_did_you_mean(self):
        """A pinned schedule's `toolstarted@after-sync#1` suggests `toolStarted`."""
        text = MINIMAL + '[[schedules]]\nfaults = ["toolstarted@after-sync#1"]\n'
        [line] = errors_of(text)
        assert "unknown fact 'toolstarted' (did you mean 'toolStarted'?)" in line

    def test_turns_after_a_stop_answer_are_unreachable(self):
        """A turn after one with no tool calls, in the same run, is flagged at that turn's line."""
        text = MINIMAL + '[[runs.turns]]\ncontent = "Never asked."\n'
        assert errors_of(text) == [
            "s.toml:9: runs[0].turns[1]: unreachable: turns[0] answers without tool calls, which ends the run, so "
            "turns[1:] are never requested (move them to a run of their own, or give turns[0] a tool call)"]

    def test_a_call_turn_then_an_answer_is_reachable(self):
        """Turns after tool-calling turns, and a second run after a stop answer, are fine."""
        text = one_call('{ path = "a", content = "b" }') + '[[runs]]\nprompt = "Again."\n[[runs.turns]]\ncontent = "x"\n'
        assert parse_scenario(text).runs[1].turns[0].content == "x"

    def test_the_format_docs_list_every_required_key(self):
        """scenarios/README.md names every key the model requires (a key without a default)."""
        from chaos.scenario import Run, ToolCall

        text = (REPO / "scenarios" / "README.md").read_text()
        [section] = re.findall(r"## Required keys\n(.*?)\n## ", text, re.S)
        for model, where in ((Scenario, ""), (Run, "runs"), (ToolCall, "tool_calls")):
            for key, info in model.model_fields.items():
                if info.is_required():
                    assert f"`{key}`" in section, (where, key)


class TestProbeScenarioExpectedFailure:
    """A probe scenario's expect_failure covers only the properties its finding names."""

    def scenario(self):
        return load_scenario(REPO / "tests" / "integration" / "frameworks" / "workflow-concurrent.toml")

    def test_failures_of_the_named_properties_are_expected(self):
        """Failures all among expect_properties are the expected failure."""
        assert self.scenario().expected([{"invariant": "consume-once"}, {"invariant": "effects-bounded"}])

    def test_another_property_or_a_hang_is_not_expected(self):
        """A property the finding does not name, or a hang, is a failure like any other."""
        sc = self.scenario()
        assert not sc.expected([{"invariant": "consume-once"}, {"invariant": "recorded-not-redone"}])
        assert not sc.expected([{"invariant": "hang"}])
        assert not sc.expected([])

    def test_expect_properties_outside_the_target_are_refused(self, tmp_path):
        """Naming a property the target does not judge is a one-line problem."""
        text = (REPO / "tests" / "integration" / "frameworks" / "workflow-concurrent.toml").read_text()
        path = tmp_path / "x.toml"
        program = str(REPO / "tests" / "agents" / "workflow.py")
        path.write_text(text.replace('"../../agents/workflow.py"', f'"{program}"').replace(
            'expect_properties = ["consume-once"', 'expect_properties = ["no-such-property", "consume-once"'))
        with pytest.raises(ScenarioError, match="expect_properties.*'no-such-property' is not one of the target"):
            load_scenario(path)
