"""Tests of agent.config: settings, request bodies, and the configuration identity of SPEC §8.2–§8.7."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from agent import config as cfg
from agent.config import (
    ADAPTER_IDENTITY,
    OUTPUT_OPTIONS,
    SYSTEM_PROMPT,
    AgentConfig,
    ConfigError,
    build_snapshot,
    configuration_digest,
    current_configuration,
    declarations,
    load_config,
    parse_replay,
    parse_tools,
    request_body,
    snapshot,
)
from agent.provider import Completion
from agent.session import digests
from tests.openai_stub import OpenAIStub, completion

EXAMPLE_TOOL = {"type": "function", "function": {
    "name": "read", "description": "Read a file in the workspace.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string", "minLength": 1}},
                   "required": ["path"], "additionalProperties": False}}}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    return tmp_path / "ws"


def load(workspace, **kwargs) -> AgentConfig:
    return load_config(workspace=workspace, environ=kwargs.pop("environ", {}), **kwargs)


class TestSpecExamples:
    def test_worked_example_of_8_4(self):
        """The §8.4 worked example reproduces every digest, and the configuration digest 5003eafd…."""
        snap = build_snapshot(model="gpt-4o-mini", provider="openai", system_prompt="You are a careful coding agent.",
                              tools=[EXAMPLE_TOOL], output_options={"temperature": 0.2, "max_tokens": 4096})
        assert snap == {
            "adapterIdentity": "openai:chat-completions:v1",
            "model": "gpt-4o-mini",
            "outputOptionsDigest": "sha256:73aa57a344d5010a3a1bda2d00e06f16c1d7cf6fc8595b365411e508cf3aee43",
            "routingIdentity": "openai:gpt-4o-mini",
            "systemPromptDigest": "sha256:481ace4539d8c8dd2105d3192f3379cc2a9358a3734268efd34fc639b2a7817b",
            "tools": [{"definitionDigest": "sha256:1c5b0e1663c10a2e896411006d8166350415b54d40f26849f2c9a7180c459a2d",
                       "name": "read"}],
        }
        assert digests.configuration_digest(snap) == \
            "sha256:5003eafd105d47dc8411c3ded37c511e5ab2aca607ca04114ffeca78f5dbdbc4"

    def test_empty_prompt_and_options_digests(self):
        """An empty system prompt and no output options give the §8.4 reference digests."""
        snap = build_snapshot(model="m", provider="p", system_prompt="", tools=[], output_options={})
        assert snap["systemPromptDigest"] == \
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        assert snap["outputOptionsDigest"] == \
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        assert snap["tools"] == []


class TestSnapshotDescribesTheRequest:
    def test_snapshot_is_computed_from_the_request_body(self, workspace):
        """Every snapshot digest is recomputable from the body actually sent (§8.4 "exactly as sent")."""
        config = load(workspace, model="test/model", provider="openrouter")
        body = request_body(config, [{"role": "user", "content": "hi"}])
        snap = snapshot(config)
        assert snap["model"] == body["model"] == "test/model"
        assert snap["routingIdentity"] == "openrouter:test/model"
        assert snap["adapterIdentity"] == ADAPTER_IDENTITY
        assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert body["messages"][1:] == [{"role": "user", "content": "hi"}]
        assert snap["systemPromptDigest"] == digests.system_prompt_digest(body["messages"][0]["content"])
        assert snap["tools"] == [{"name": e["function"]["name"], "definitionDigest": digests.definition_digest(e)}
                                 for e in body["tools"]]
        options = {k: v for k, v in body.items() if k not in ("model", "messages", "tools")}
        assert options == OUTPUT_OPTIONS
        assert snap["outputOptionsDigest"] == digests.output_options_digest(options)

    def test_the_snapshot_from_digests_taken_once_is_the_one_built_from_the_request(self, workspace):
        """snapshot() (constant digests taken once per process) equals build_snapshot over the pieces as sent, for
        tool sets met one after the other in one process."""
        for tools in ("read", "bash,read", "read,write,edit,bash", "edit"):
            config = load(workspace, model="m", provider="p", tools=tools)
            assert snapshot(config) == build_snapshot(model="m", provider="p", system_prompt=SYSTEM_PROMPT,
                                                      tools=cfg.tool_elements(config), output_options=OUTPUT_OPTIONS)

    def test_the_real_system_prompt_is_substantial(self):
        """The system prompt is a real prompt for a careful coding agent, not a placeholder."""
        assert len(SYSTEM_PROMPT) > 500 and "workspace" in SYSTEM_PROMPT and "interrupted" in SYSTEM_PROMPT

    def test_tools_follow_canonical_order(self, workspace):
        """--tools bash,read and --tools read,bash offer the same tools in the same order, hence one digest."""
        one, two = load(workspace, tools="bash,read"), load(workspace, tools=["read", "bash", "read"])
        assert one.tools == two.tools == ("read", "bash")
        assert [t["name"] for t in snapshot(one)["tools"]] == ["read", "bash"]
        assert configuration_digest(one) == configuration_digest(two)

    def test_no_tools_omits_the_tools_member(self, workspace):
        """An empty tool set sends no tools member and snapshots an empty tools list."""
        config = load(workspace, tools="")
        assert "tools" not in request_body(config, [])
        assert snapshot(config)["tools"] == []

    @pytest.mark.parametrize("change", [{"model": "other"}, {"provider": "azure"}, {"tools": "read,write"}])
    def test_model_facing_changes_change_the_digest(self, workspace, change):
        """Changing the model, provider or tool set changes the configuration digest."""
        assert configuration_digest(load(workspace, **change)) != configuration_digest(load(workspace))

    def test_other_settings_do_not_change_the_digest(self, workspace, tmp_path):
        """Base URL, key, replay overrides, environment identity, workspace and timeouts stay out of the digest."""
        (tmp_path / "other").mkdir()
        base = configuration_digest(load(workspace))
        variants = [
            load(workspace, base_url="http://127.0.0.1:9/v1", api_key="sk-x"),
            load(workspace, replay=["bash=safe:custom:v2"]),
            load(workspace, environment_identity="elsewhere"),
            load(tmp_path / "other", request_timeout=5, max_steps=3, bash_timeout=7),
        ]
        assert {configuration_digest(v) for v in variants} == {base}


class TestCurrentConfiguration:
    def test_shape_matches_the_schema_plus_snapshot(self, workspace, corpus):
        """CurrentConfiguration validates against the corpus schema once "snapshot" is removed."""
        current = current_configuration(load(workspace))
        schema = json.loads((corpus / "schemas" / "current-configuration.schema.json").read_text())
        plain = {k: v for k, v in current.items() if k != "snapshot"}
        jsonschema.validate(plain, schema)
        assert current["configurationDigest"] == digests.configuration_digest(current["snapshot"])

    def test_tools_carry_declarations_in_snapshot_order(self, workspace):
        """tools lists the offered tools in snapshot order with definition digests and §8.6 declarations."""
        current = current_configuration(load(workspace))
        assert [(t["name"], t["replay"], t["replayKey"]) for t in current["tools"]] == [
            ("read", "safe", "builtin:read:v1"), ("write", "never", "builtin:write:v1"),
            ("edit", "never", "builtin:edit:v1"), ("bash", "never", "builtin:bash:v1")]
        assert [t["definitionDigest"] for t in current["tools"]] == \
            [t["definitionDigest"] for t in current["snapshot"]["tools"]]

    def test_replay_overrides_apply(self, workspace):
        """--replay changes the declaration (policy, and key when given) but not the digest."""
        config = load(workspace, replay=["read=never", "bash=safe:test:bash:v9"])
        tools = {t["name"]: t for t in current_configuration(config)["tools"]}
        assert (tools["read"]["replay"], tools["read"]["replayKey"]) == ("never", "builtin:read:v1")
        assert (tools["bash"]["replay"], tools["bash"]["replayKey"]) == ("safe", "test:bash:v9")
        assert current_configuration(config)["configurationDigest"] == configuration_digest(load(workspace))

    def test_override_of_a_disabled_tool_is_ignored(self, workspace):
        """An override for a tool that is not enabled adds nothing."""
        assert list(declarations(load(workspace, tools="read", replay=["bash=safe"]))) == ["read"]


class TestEnvironmentIdentity:
    def test_flag_wins(self, workspace):
        """--environment-identity wins over the environment variable."""
        env = {"AGENT_ENVIRONMENT_IDENTITY": "from-env"}
        assert load(workspace, environment_identity="flag", environ=env).environment_identity == "flag"

    def test_variable_is_stripped_of_ascii_whitespace(self, workspace):
        """AGENT_ENVIRONMENT_IDENTITY is used with leading and trailing ASCII whitespace removed."""
        env = {"AGENT_ENVIRONMENT_IDENTITY": " \t host-a \n"}
        assert load(workspace, environ=env).environment_identity == "host-a"

    def test_non_ascii_space_is_kept(self, workspace):
        """Only ASCII whitespace is stripped: a no-break space stays part of the identity."""
        env = {"AGENT_ENVIRONMENT_IDENTITY": "\u00a0id"}
        assert load(workspace, environ=env).environment_identity == "\u00a0id"

    def test_blank_variable_falls_back_to_real_workspace_path(self, workspace, tmp_path):
        """A blank variable falls back to the workspace's canonical real path (symlinks resolved)."""
        (tmp_path / "link").symlink_to(workspace)
        config = load(tmp_path / "link", environ={"AGENT_ENVIRONMENT_IDENTITY": "  "})
        assert config.environment_identity == config.workspace == os.path.realpath(workspace)

    def test_empty_flag_is_rejected(self, workspace):
        """An empty --environment-identity is a ConfigError."""
        with pytest.raises(ConfigError, match="environment-identity"):
            load(workspace, environment_identity="")


class TestSettings:
    def test_defaults(self, workspace):
        """Without flags: default model, OpenAI URL, provider openai, all tools, 20 steps, no key."""
        config = load(workspace)
        assert (config.model, config.base_url, config.provider, config.tools, config.max_steps, config.api_key) == \
            ("gpt-4o-mini", "https://api.openai.com/v1", "openai", ("read", "write", "edit", "bash"), 20, None)

    def test_openai_variables_and_explicit_values(self, workspace):
        """OPENAI_BASE_URL/OPENAI_API_KEY fill in missing values; explicit values win."""
        env = {"OPENAI_BASE_URL": "http://127.0.0.1:8/v1/", "OPENAI_API_KEY": "sk-env"}
        from_env = load(workspace, environ=env)
        assert (from_env.base_url, from_env.api_key) == ("http://127.0.0.1:8/v1", "sk-env")
        explicit = load(workspace, environ=env, base_url="http://127.0.0.1:9/x", api_key="sk-flag")
        assert (explicit.base_url, explicit.api_key) == ("http://127.0.0.1:9/x", "sk-flag")

    def test_repr_hides_the_key(self, workspace):
        """The config's repr never shows the API key."""
        assert "sk-secret" not in repr(load(workspace, api_key="sk-secret"))

    def test_config_is_frozen_and_hashable(self, workspace):
        """AgentConfig is immutable and hashable."""
        config = load(workspace, replay=["bash=safe"])
        hash(config)
        with pytest.raises(AttributeError):
            config.model = "x"  # type: ignore[misc]

    @pytest.mark.parametrize(
        "value, expected",
        [("bash=safe", ("bash", "safe", None)), ("read=never:k:v2", ("read", "never", "k:v2"))],
    )
    def test_parse_replay(self, value, expected):
        """--replay TOOL=safe|never[:REPLAYKEY] parses into (tool, policy, key or None)."""
        assert parse_replay(value) == expected

    @pytest.mark.parametrize("value", ["bash", "=safe", "bash=maybe", "nope=safe", "bash=safe:", "bash=Safe"])
    def test_malformed_replay_is_rejected(self, value):
        """A malformed --replay value is a ConfigError naming it."""
        with pytest.raises(ConfigError, match="--replay"):
            parse_replay(value)

    def test_duplicate_replay_is_rejected(self, workspace):
        """Two overrides for one tool are a ConfigError."""
        with pytest.raises(ConfigError, match="twice"):
            load(workspace, replay=["bash=safe", "bash=never"])

    def test_unknown_tool_is_rejected(self):
        """--tools with an unknown name is a ConfigError listing the known tools."""
        with pytest.raises(ConfigError, match="unknown tool 'grep'"):
            parse_tools("read,grep")

    @pytest.mark.parametrize(
        "kwargs, fragment",
        [
            ({"request_timeout": 0}, "--request-timeout"),
            ({"request_timeout": float("nan")}, "--request-timeout"),
            ({"max_steps": 0}, "--max-steps"),
            ({"max_steps": 2.5}, "--max-steps"),
            ({"model": ""}, "--model"),
            ({"base_url": "ftp://x"}, "--base-url"),
            ({"bash_timeout": -1}, "bash timeout"),
        ],
    )
    def test_unusable_settings_are_rejected(self, workspace, kwargs, fragment):
        """Unusable settings raise ConfigError with a message naming the setting."""
        with pytest.raises(ConfigError, match=fragment):
            load(workspace, **kwargs)

    def test_missing_workspace_is_rejected(self, tmp_path):
        """A workspace that is not a directory is a ConfigError."""
        with pytest.raises(ConfigError, match="not a directory"):
            load(tmp_path / "missing")


class TestWiring:
    def test_client_sends_the_configured_request(self, workspace):
        """make_client + request_body reach the configured endpoint with the key, prompt and tools."""
        with OpenAIStub([completion("hello")]) as stub:
            config = load(workspace, base_url=stub.base_url, api_key="sk-cfg", model="m1", tools="read")
            outcome = cfg.make_client(config).chat(request_body(config, [{"role": "user", "content": "hi"}]))
        assert isinstance(outcome, Completion) and outcome.message["content"] == "hello"
        sent = stub.requests[0]
        assert sent.headers["authorization"] == "Bearer sk-cfg"
        assert sent.json["model"] == "m1" and [t["function"]["name"] for t in sent.json["tools"]] == ["read"]
        assert sent.json["messages"][0]["content"] == SYSTEM_PROMPT

    def test_client_does_not_reread_the_environment(self, workspace, monkeypatch):
        """A config without a key sends none, even if OPENAI_API_KEY appears later in the environment."""
        with OpenAIStub([completion("x")]) as stub:
            config = load(workspace, base_url=stub.base_url)
            monkeypatch.setenv("OPENAI_API_KEY", "sk-late")
            cfg.make_client(config).chat(request_body(config, []))
        assert "authorization" not in stub.requests[0].headers

    def test_runner_uses_workspace_and_bash_timeout(self, workspace):
        """make_runner confines tools to the configured workspace with its bash timeout."""
        runner = cfg.make_runner(load(workspace, bash_timeout=3))
        assert runner.root == os.path.realpath(workspace) and runner.bash_timeout == 3


def test_start_path_imports_stay_light():
    """Importing agent.config (and with it provider, tools, digests) loads no heavy or lazy-only module."""
    heavy = ("pydantic", "click", "rich", "psutil", "httpx", "http.client", "ssl", "email")
    code = f"import sys, agent.config; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
