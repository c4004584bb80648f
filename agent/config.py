"""The agent's model-facing configuration and its identity: settings, request bodies, snapshot, digest.

What it is for: one frozen ``AgentConfig`` holds every setting of a process (model, endpoint, key, provider, the
enabled tools, replay overrides, environment identity, timeouts, step budget, workspace). From it this module derives

- ``request_body(config, messages)``: the chat-completions body exactly as sent (system prompt + tools + output
  options);
- ``snapshot(config)`` / ``configuration_digest(config)``: the ``configurationSnapshot`` and its digest (SPEC §8.2,
  §8.4), computed from the *same* pieces as the request body, so the identity written in every ``stepAttempt``
  describes what is really sent;
- ``current_configuration(config)``: the planner's CurrentConfiguration (§8.7) plus ``"snapshot"`` (the snapshot
  behind the digest, which ``materialize`` copies into a new ``stepAttempt``).

Invariants it protects:

- The snapshot changes exactly when the model-facing configuration changes: model, provider, system prompt, a tool
  definition, the enabled tool set, or output options. Replay policies, the environment identity, base URL, API key,
  workspace and timeouts are deliberately outside it (§8.2), so moving a workspace or rotating a key does not make a
  pending attempt look like a different configuration.
- The enabled tools are offered in one stable, canonical order (``agent.tools.TOOL_NAMES``), whatever order
  ``--tools`` lists them in: the snapshot's tool order is significant (§8.2).
- ``environmentIdentity`` follows §8.5: ``--environment-identity``, else ``AGENT_ENVIRONMENT_IDENTITY`` stripped of
  ASCII whitespace when non-empty, else the workspace's real path.

What it does not do: parse command lines (the CLI turns flags into ``load_config`` arguments), talk to the provider,
or run tools. Stdlib only: it is on the agent's start path.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from agent.errors import AgentError
from agent.provider import DEFAULT_BASE_URL, DEFAULT_TIMEOUT, ChatClient, ProviderError, split_base_url
from agent.session import digests
from agent.tools import DEFAULT_BASH_TIMEOUT, TOOL_NAMES, ToolRunner, declaration, definition, request_elements

ADAPTER_IDENTITY = "openai:chat-completions:v1"  # §8.4: bump the suffix when request building/mapping changes meaning
DEFAULT_PROVIDER = "openai"
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_MAX_STEPS = 20
REPLAY_POLICIES = ("safe", "never")

SYSTEM_PROMPT = """\
You are a careful coding agent. You work inside one workspace directory on the user's machine and act only through \
the tools you are offered; every path you use is relative to the workspace root, and paths that leave the \
workspace are refused.

How to work:
- Understand before you change anything: read the relevant files and look at how the project is built and tested.
- Make the smallest change that fully solves the task. Keep the existing style, and do not reformat or rename \
things you were not asked to touch.
- Prefer edit for changes to existing files (old_string must match the file exactly, once) and write for new files.
- Use bash for searching, building and running tests. Commands run non-interactively with a time limit and get no \
input; background processes are stopped when the command ends.
- Verify your work, for example by running the tests, before you say it is done. Report failures honestly.
- Do not run destructive or irreversible commands (deleting data outside what the task needs, rewriting version \
control history, pushing, publishing) unless the user explicitly asked for them.
- Your session can be interrupted and resumed. A tool result may say that a call was not executed or that it was \
interrupted after its status became unknown. Before repeating such a call, check the current state (read the file, \
list the directory) so that you never apply a change twice.

When you are finished, answer with a short summary of what you changed, how you verified it, and anything left \
open. If you cannot finish, say exactly what is missing."""

# Every top-level request member except model, messages and tools (§8.4). None: each compatible endpoint keeps its
# own defaults, and an option a server does not know would make every request a bad_request there.
OUTPUT_OPTIONS: dict = {}


class ConfigError(AgentError):
    """A setting is unusable (unknown tool, malformed --replay, empty identity, bad timeout, ...)."""


@dataclass(frozen=True)
class AgentConfig:
    """Every setting of one agent process. Build it with ``load_config`` (which validates and fills defaults)."""

    workspace: str  # canonical real path of the workspace directory
    environment_identity: str  # resolved per §8.5
    model: str = DEFAULT_MODEL
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)  # never printed
    provider: str = DEFAULT_PROVIDER
    tools: tuple[str, ...] = TOOL_NAMES  # enabled tools, canonical order
    replay_overrides: tuple[tuple[str, str, str | None], ...] = ()  # (tool, "safe"|"never", replayKey or None)
    request_timeout: float = DEFAULT_TIMEOUT
    max_steps: int = DEFAULT_MAX_STEPS
    bash_timeout: float = DEFAULT_BASH_TIMEOUT


def parse_tools(value: str | list | tuple | None) -> tuple[str, ...]:
    """The enabled tools for ``--tools NAME,...`` (or a list), in canonical order; None means all."""
    if value is None:
        return TOOL_NAMES
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [name.strip() for name in names if name.strip()]
    unknown = [name for name in names if name not in TOOL_NAMES]
    if unknown:
        raise ConfigError(f"--tools: unknown tool {unknown[0]!r} (known: {', '.join(TOOL_NAMES)})")
    return tuple(name for name in TOOL_NAMES if name in names)


def parse_replay(value: str) -> tuple[str, str, str | None]:
    """One ``--replay TOOL=safe|never[:REPLAYKEY]`` value as (tool, policy, replayKey or None)."""
    tool, sep, rest = value.partition("=")
    tool = tool.strip()
    if not sep or not tool:
        raise ConfigError(f"--replay {value!r}: expected TOOL=safe|never[:REPLAYKEY]")
    if tool not in TOOL_NAMES:
        raise ConfigError(f"--replay {value!r}: unknown tool {tool!r} (known: {', '.join(TOOL_NAMES)})")
    policy, colon, key = rest.partition(":")
    if policy not in REPLAY_POLICIES:
        raise ConfigError(f"--replay {value!r}: policy must be safe or never, not {policy!r}")
    if colon and not key:
        raise ConfigError(f"--replay {value!r}: the replay key after ':' is empty")
    return tool, policy, key if colon else None


def resolve_environment_identity(explicit: str | None, workspace_real: str, environ) -> str:
    """SPEC §8.5: the flag, else AGENT_ENVIRONMENT_IDENTITY stripped (when non-empty), else the workspace's real path."""
    if explicit is not None:
        if not explicit:
            raise ConfigError("--environment-identity must not be empty")
        return explicit
    # Only ASCII whitespace is stripped (§8.5); str.strip() would also remove Unicode spaces.
    from_env = environ.get("AGENT_ENVIRONMENT_IDENTITY", "").strip(" \t\n\r\x0b\x0c")
    return from_env or workspace_real


def load_config(*, workspace, model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                provider: str | None = None, tools=None, replay=(), environment_identity: str | None = None,
                request_timeout: float | None = None, max_steps: int | None = None,
                bash_timeout: float | None = None, environ=None) -> AgentConfig:
    """A validated AgentConfig from flag values (None = not given); ``environ`` defaults to ``os.environ``."""
    env = os.environ if environ is None else environ
    workspace_real = os.path.realpath(os.fspath(workspace))
    if not os.path.isdir(workspace_real):
        raise ConfigError(f"workspace {os.fspath(workspace)!r} is not a directory")
    model = DEFAULT_MODEL if model is None else model
    if not model:
        raise ConfigError("--model must not be empty")
    provider = DEFAULT_PROVIDER if provider is None else provider
    if not provider:
        raise ConfigError("the provider setting must not be empty")
    url = (base_url or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    try:
        split_base_url(url)
    except ProviderError as exc:
        raise ConfigError(f"--base-url: {exc}") from None
    overrides: dict[str, tuple[str, str, str | None]] = {}
    for item in replay or ():
        parsed = parse_replay(item)
        if parsed[0] in overrides:
            raise ConfigError(f"--replay given twice for tool {parsed[0]!r}")
        overrides[parsed[0]] = parsed
    timeout = DEFAULT_TIMEOUT if request_timeout is None else request_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or timeout <= 0:
        raise ConfigError(f"--request-timeout must be a positive number of seconds, not {timeout!r}")
    steps = DEFAULT_MAX_STEPS if max_steps is None else max_steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"--max-steps must be an integer >= 1, not {steps!r}")
    bash = DEFAULT_BASH_TIMEOUT if bash_timeout is None else bash_timeout
    if isinstance(bash, bool) or not isinstance(bash, (int, float)) or not math.isfinite(bash) or bash <= 0:
        raise ConfigError(f"the bash timeout must be a positive number of seconds, not {bash!r}")
    return AgentConfig(
        workspace=workspace_real,
        environment_identity=resolve_environment_identity(environment_identity, workspace_real, env),
        model=model,
        base_url=url,
        api_key=api_key if api_key is not None else (env.get("OPENAI_API_KEY") or None),
        provider=provider,
        tools=parse_tools(tools),
        replay_overrides=tuple(overrides[name] for name in TOOL_NAMES if name in overrides),
        request_timeout=float(timeout),
        max_steps=steps,
        bash_timeout=float(bash),
    )


# --- what is sent, and its identity -------------------------------------------------------------------------------


def tool_elements(config: AgentConfig) -> list[dict]:
    """The request's ``tools`` array: one definition per enabled tool, in canonical order — the module's own
    definitions, shared (``tools.request_elements``): to be serialised, never changed."""
    return request_elements(config.tools)


def declarations(config: AgentConfig) -> dict[str, dict]:
    """``{name: {"replay", "replayKey"}}`` for the enabled tools: built-ins (§8.6) with the overrides applied."""
    out = {name: declaration(name) for name in config.tools}
    for name, policy, key in config.replay_overrides:
        if name in out:
            out[name]["replay"] = policy
            if key is not None:
                out[name]["replayKey"] = key
    return out


def request_body(config: AgentConfig, messages: list[dict]) -> dict:
    """The chat-completions body for ``messages`` (the active context, without the system prompt)."""
    body: dict = {"model": config.model, "messages": [{"role": "system", "content": SYSTEM_PROMPT}, *messages]}
    elements = tool_elements(config)
    if elements:  # several servers reject "tools": []; the snapshot's empty tools list describes the omission
        body["tools"] = elements
    body.update(OUTPUT_OPTIONS)
    return body


def build_snapshot(*, model: str, provider: str, system_prompt: str, tools: list[dict],
                   output_options: dict) -> dict:
    """A §8.2 configurationSnapshot from the pieces of a request, per our §8.4 definitions."""
    return _snapshot(model, provider, digests.system_prompt_digest(system_prompt),
                     [(element["function"]["name"], digests.definition_digest(element)) for element in tools],
                     digests.output_options_digest(output_options))


def _snapshot(model: str, provider: str, prompt_digest: str, tools: list[tuple[str, str]],
              options_digest: str) -> dict:
    """The snapshot's one shape, from its digests (``tools``: name and definition digest, in request order)."""
    return {
        "model": model,
        "systemPromptDigest": prompt_digest,
        "tools": [{"name": name, "definitionDigest": digest} for name, digest in tools],
        "adapterIdentity": ADAPTER_IDENTITY,
        "routingIdentity": f"{provider}:{model}",
        "outputOptionsDigest": options_digest,
    }


# The digests of this program's constant pieces (the system prompt, each tool's definition, the output options),
# taken once per process: snapshot() runs at every open and stepAttempt, and re-deriving them cost a deep copy of
# every definition and four canonical-JSON hashes each time (~0.3 ms a launch; a zygote's launches inherit them).
_CONSTANT_DIGESTS: dict[str, str] = {}


def _constant_digest(key: str, compute) -> str:
    digest = _CONSTANT_DIGESTS.get(key)
    if digest is None:
        digest = _CONSTANT_DIGESTS[key] = compute()
    return digest


def snapshot(config: AgentConfig) -> dict:
    """The configurationSnapshot this configuration writes in every stepAttempt (assistant and compaction): what
    ``build_snapshot`` makes of the request's pieces, from their digests taken once."""
    return _snapshot(
        config.model, config.provider,
        _constant_digest("prompt", lambda: digests.system_prompt_digest(SYSTEM_PROMPT)),
        [(name, _constant_digest(f"tool:{name}", lambda: digests.definition_digest(definition(name))))  # noqa: B023
         for name in config.tools],  # (each lambda is called at once, in its own iteration)
        _constant_digest("options", lambda: digests.output_options_digest(OUTPUT_OPTIONS)))


def configuration_digest(config: AgentConfig) -> str:
    """The configurationDigest of ``snapshot(config)``."""
    return digests.configuration_digest(snapshot(config))


def current_configuration(config: AgentConfig) -> dict:
    """SPEC §8.7 CurrentConfiguration plus ``"snapshot"`` (drop that member for the closed JSON schema)."""
    snap = snapshot(config)
    decl = declarations(config)
    return {
        "configurationDigest": digests.configuration_digest(snap),
        "environmentIdentity": config.environment_identity,
        "tools": [{"name": item["name"], "definitionDigest": item["definitionDigest"], **decl[item["name"]]}
                  for item in snap["tools"]],
        "snapshot": snap,
    }


def make_client(config: AgentConfig) -> ChatClient:
    """The provider client for this configuration (explicit values only: the environment was read already)."""
    return ChatClient(config.base_url, config.api_key or "", timeout=config.request_timeout)


def make_runner(config: AgentConfig, *, environ=None) -> ToolRunner:
    """The tool runner for this configuration's workspace (bash inherits ``environ``, default the agent's)."""
    return ToolRunner(config.workspace, environ=environ, bash_timeout=config.bash_timeout)
