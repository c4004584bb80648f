"""Unit tests for agent.session.digests: RFC 8785 canonical JSON and the digests of SPEC §8."""

from __future__ import annotations

import json

import pytest

from agent.session.digests import (
    RunningSourceDigest,
    canonical_json,
    configuration_digest,
    definition_digest,
    output_options_digest,
    sha256_digest,
    source_digest,
    system_prompt_digest,
)

ZERO = "sha256:" + "0" * 64
READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read",
        "description": "Read a file in the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "minLength": 1}},
            "required": ["path"],
            "additionalProperties": False,
        },
    },
}
FIXTURE_SNAPSHOT = {
    "model": "test/model",
    "systemPromptDigest": ZERO,
    "tools": [{"name": "read", "definitionDigest": ZERO}],
    "adapterIdentity": "openrouter:chat-completions:v1",
    "routingIdentity": "openrouter:test/model",
    "outputOptionsDigest": ZERO,
}


class TestCanonicalJson:
    def test_spec_tool_element(self):
        """The §8.4 tool element canonicalizes to the spec's exact text."""
        assert canonical_json(READ_TOOL) == (
            b'{"function":{"description":"Read a file in the workspace.","name":"read","parameters":'
            b'{"additionalProperties":false,"properties":{"path":{"minLength":1,"type":"string"}},'
            b'"required":["path"],"type":"object"}},"type":"function"}'
        )

    def test_configuration_domain_example(self):
        """{"b":"x","a":["y"]} canonicalizes to {"a":["y"],"b":"x"} (§8.1)."""
        assert canonical_json({"b": "x", "a": ["y"]}) == b'{"a":["y"],"b":"x"}'

    @pytest.mark.parametrize(
        ("number", "text"),
        [
            (0.2, "0.2"),
            (1e-7, "1e-7"),
            (0.000001, "0.000001"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (100.0, "100"),
            (-0.0, "0"),
            (0, "0"),
            (-5, "-5"),
            (123.456, "123.456"),
            (-1.5e-9, "-1.5e-9"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (2**53 - 1, "9007199254740991"),
            (0.1 + 0.2, "0.30000000000000004"),
        ],
    )
    def test_ecmascript_number_format(self, number, text):
        """Numbers are written as ECMAScript's Number::toString writes them (§8.1 table)."""
        assert canonical_json(number) == text.encode()

    def test_member_order_is_utf16(self):
        """An astral member name (surrogates D83D..) sorts before U+E000, unlike Python's code-point order."""
        value = {"\ue000": 1, "\U0001f600": 2, "a": 3}
        assert canonical_json(value) == '{"a":3,"\U0001f600":2,"\ue000":1}'.encode()
        assert json.dumps(value, sort_keys=True, ensure_ascii=False).index("\ue000") < json.dumps(
            value, sort_keys=True, ensure_ascii=False
        ).index("\U0001f600")

    def test_string_escaping(self):
        """Strings use the shortest escapes, lowercase \\u00xx, and raw non-ASCII, '/', U+2028 and U+2029."""
        assert canonical_json('"\\\b\t\n\f\r\x01\x1f/é\u2028\u2029\x7f') == (
            '"\\"\\\\\\b\\t\\n\\f\\r\\u0001\\u001f/é\u2028\u2029\x7f"'.encode()
        )

    def test_nested_arrays_keep_order(self):
        """Array order is kept while nested object members are sorted."""
        assert canonical_json([3, {"b": None, "a": True}, [False]]) == b'[3,{"a":true,"b":null},[false]]'

    @pytest.mark.parametrize(
        "value",
        ["\ud800", {"\udc00": 1}, [float("inf")], float("nan"), 2**53, -(2**53), {1: "x"}, object(), b"x"],
        ids=["lone-value", "lone-name", "inf", "nan", "big", "big-negative", "int-key", "object", "bytes"],
    )
    def test_values_without_canonical_form(self, value):
        """Lone surrogates, non-finite numbers, unsafe integers and non-JSON values raise ValueError."""
        with pytest.raises(ValueError):
            canonical_json(value)

    def test_float_and_fast_path_agree_on_plain_values(self):
        """A value mixing floats and strings sorts members exactly like a value without floats."""
        assert canonical_json({"b": 1.5, "a": "x"}) == b'{"a":"x","b":1.5}'


class TestDigests:
    def test_sha256_digest_format(self):
        """sha256_digest gives 'sha256:' and 64 lowercase hex digits."""
        assert sha256_digest(b"") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    def test_definition_digest_example(self):
        """The §8.4 read tool element has definitionDigest 1c5b…9a2d."""
        assert definition_digest(READ_TOOL) == (
            "sha256:1c5b0e1663c10a2e896411006d8166350415b54d40f26849f2c9a7180c459a2d"
        )

    def test_output_options_digest_example(self):
        """{"temperature":0.2,"max_tokens":4096} has digest 73aa…ee43 (§8.4)."""
        assert output_options_digest({"temperature": 0.2, "max_tokens": 4096}) == (
            "sha256:73aa57a344d5010a3a1bda2d00e06f16c1d7cf6fc8595b365411e508cf3aee43"
        )

    def test_empty_output_options_digest(self):
        """No output options canonicalize to {} with digest 4413…ff8a (§8.4)."""
        assert output_options_digest({}) == "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"

    def test_system_prompt_digest_example(self):
        """The example prompt digests to 481a…817b and the empty prompt to e3b0…b855 (§8.4)."""
        assert system_prompt_digest("You are a careful coding agent.") == (
            "sha256:481ace4539d8c8dd2105d3192f3379cc2a9358a3734268efd34fc639b2a7817b"
        )
        assert system_prompt_digest("") == "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    def test_system_prompt_is_not_normalized(self):
        """The system prompt digest covers the exact UTF-8 bytes: composed and decomposed forms differ."""
        assert system_prompt_digest("\u00e9") != system_prompt_digest("e\u0301")

    def test_system_prompt_with_lone_surrogate(self):
        """A prompt holding a lone surrogate has no UTF-8 bytes and raises ValueError."""
        with pytest.raises(ValueError):
            system_prompt_digest("\ud800")

    def test_worked_configuration_example(self):
        """The §8.4 worked snapshot has configurationDigest 5003…dbc4."""
        snapshot = {
            "adapterIdentity": "openai:chat-completions:v1",
            "model": "gpt-4o-mini",
            "outputOptionsDigest": output_options_digest({"temperature": 0.2, "max_tokens": 4096}),
            "routingIdentity": "openai:gpt-4o-mini",
            "systemPromptDigest": system_prompt_digest("You are a careful coding agent."),
            "tools": [{"definitionDigest": definition_digest(READ_TOOL), "name": "read"}],
        }
        assert configuration_digest(snapshot) == (
            "sha256:5003eafd105d47dc8411c3ded37c511e5ab2aca607ca04114ffeca78f5dbdbc4"
        )

    def test_fixture_snapshot_digest(self):
        """The fixture snapshot of §6.3 has digest 83d5…5f75, whatever the member order."""
        expected = "sha256:83d5da8892d877c5f94a6ff60ea8babcd1138107dcb80ed8f747372346bb5f75"
        assert configuration_digest(FIXTURE_SNAPSHOT) == expected
        reordered = dict(reversed(list(FIXTURE_SNAPSHOT.items())))
        assert list(reordered) != list(FIXTURE_SNAPSHOT)
        assert configuration_digest(reordered) == expected

    def test_configuration_domain_rejects_numbers(self):
        """A snapshot holding a number, boolean or null is outside the configuration domain."""
        for bad in (1, True, None):
            with pytest.raises(ValueError):
                configuration_digest({**FIXTURE_SNAPSHOT, "model": bad})

    def test_completed_compaction_source_digest(self, corpus):
        """The four messages of fixture completed-compaction have source digest db63…38a2 (§8.3)."""
        lines = (corpus / "fixtures" / "completed-compaction.jsonl").read_text().splitlines()[1:]
        items = []
        for line in lines:
            value = json.loads(line)
            for fact in value if isinstance(value, list) else [value]:
                if fact["kind"] == "entry" and fact["entry"]["type"] == "message":
                    items.append({"sourceEntryId": fact["id"], "message": fact["entry"]["message"]})
                    if fact["id"].endswith("00e"):
                        break
            if items and items[-1]["sourceEntryId"].endswith("00e"):
                break
        assert [item["sourceEntryId"][-2:] for item in items] == ["02", "08", "0a", "0e"]
        expected = "sha256:db6327a0c5d143e3edccd8272ac325be493a617be09fb0de3763af44a11838a2"
        assert source_digest(items) == expected
        running = RunningSourceDigest()
        for item in items:
            running.add(item["sourceEntryId"], item["message"])
        assert running.digest() == expected

    def test_source_domain_rejects_numbers(self):
        """A source digest input holding a number is outside the message domain."""
        with pytest.raises(ValueError):
            source_digest([{"sourceEntryId": "x", "message": {"role": "user", "content": 1}}])


class TestRunningSourceDigest:
    def test_empty_list(self):
        """With no items the running digest is the digest of []."""
        assert RunningSourceDigest().digest() == sha256_digest(b"[]")

    def test_copy_is_independent(self):
        """A copy continues independently and the original is unchanged."""
        base = RunningSourceDigest()
        base.add("a", {"role": "user", "content": "x"})
        fork = base.copy()
        fork.add("b", {"role": "assistant", "content": None})
        assert base.digest() == source_digest([{"sourceEntryId": "a", "message": {"role": "user", "content": "x"}}])
        assert fork.digest() == source_digest(
            [
                {"sourceEntryId": "a", "message": {"role": "user", "content": "x"}},
                {"sourceEntryId": "b", "message": {"role": "assistant", "content": None}},
            ]
        )
        assert fork.count == 2 and base.count == 1
