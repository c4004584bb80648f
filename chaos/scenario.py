"""Scenario files: the pydantic v2 model of ``scenarios/*.toml`` and a loader that reports every problem at once.

A scenario describes one deterministic piece of agent work and what must hold after any crash: the workspace to
lay down, the runs (prompts) performed in one session with optional compactions after them, the scripted model's
answers by *position* (run, turn) with provider faults attached to a turn, restart changes applied on every launch
after the first kill, pinned fault schedules, and expectations. Expectations may depend on where the last kill
landed, stated as *conditions on the durable state* at that kill (never on kill-point names, which would tie a
scenario to one agent's transaction layout). ``scenarios/README.md`` documents the format with a commented example.

Condition vocabulary (``condition_holds(cond, reduction, context)``; ``reduction`` is the SPEC §10 SessionState of
the log at the last kill, or ``None`` when no fault killed the agent):

    none             nothing in flight: no kill at all, or no open attempt, no pending tool and no abort request
    no-kill          the case never killed the agent (``reduction is None``)
    idle             the kill landed between operations
    run  / run:N     inside a run (the N-th run of the session, 1-based)
    compaction       inside a compaction operation
    no-step          the operation has begun but no stepAttempt is durable yet
    open-attempt     the latest attempt is open (stepAttempt durable, no outcome); open-attempt:N for attempt N
    failed-step      the latest step failed (a live provider error is durable)
    settled / settled:R   the latest step settled (R = stopReason: stop, length, toolUse)
    pending / pending:TOOL      a toolStarted without result (of tool TOOL)
    untouched / untouched:TOOL  the current assistant has a call neither started nor resolved (SPEC §14.3)
    interrupted / interrupted:TOOL  a call in the transcript got the `interrupted` result (SPEC §5.6): an earlier
                     crash left it pending and it was never replayed (after a depth-2 kill it is no longer pending)
    abort-requested  an abortRequested record is durable for the current operation
    changed          the work in flight was recorded under another configuration than the one of the launch that
                     recovers from the kill (``context["current"]``, SPEC §8.7): an open/failed attempt whose
                     configurationDigest or header environmentIdentity differs, a pending call whose recorded
                     environmentIdentity, replay declaration or tool definition differs (a safe one also when the
                     step's digest differs), or an untouched call whose tool was removed or redefined. False when
                     the restart changes applied before the work was recorded, or not yet (they apply only after a
                     SIGKILL). Unknown configuration (a foreign agent): holds.
    ended / ended:OUTCOME  the kill landed between operations and the latest operation had ended (with OUTCOME:
                     completed, aborted, failed or failed:CODE; ``context["ended"]``)
    not:COND         negation; a rule's ``when`` may also be a list of conditions that must all hold

``context`` holds what the oracle knows beyond the log at the kill; without it, ``changed`` holds and ``ended:R``
does not.

Invariant protected: a scenario that loads is internally consistent (distinct prompts, so the scripted server can
identify a run from a request; provider call ids unique, so effects and results are attributable; tools, fault
texts, outcomes and conditions well-formed; scripted arguments given as a table fit the tool's argument schema,
``BUNDLED_TOOL_SCHEMAS`` or a target's own; no turn follows a stop answer in its run, where it could never be
requested). Errors come as ``file:line: field: message`` lines, one per problem.

It does not run anything, does not know the agent's transaction layout, and evaluates conditions only on a reduced
state handed to it. pydantic is imported here and nowhere on a hot path: the CLI and the pytest plugin import this
module lazily.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from chaos.errors import ScenarioError

# The bundled target's tools, in its canonical order (what `python -m agent describe` lists; a test checks they agree,
# so the harness need not import the agent to validate a scenario). Another agent may offer others, but scenario
# content (bash commands, argument shapes) is agent-specific anyway, and a closed list turns a typo (`reed`) into a
# load error instead of a silent unknown-tool scenario.
KNOWN_TOOLS: tuple[str, ...] = ("read", "write", "edit", "bash")
# The bundled target's argument schemas (the `parameters` of its tool definitions, descriptions left out), as data
# for the same reason: scripted calls are checked against them (`write{path, text}` is a mistake: the argument is
# `content`). tests/unit/chaos/test_scenario.py checks they equal what `describe(Target())` reports; a front end
# with another target passes that target's schemas (`tools=` of parse_scenario/load_scenario/load_scenarios).
_STRING = {"type": "string"}
_PATH = {"type": "string", "minLength": 1}
BUNDLED_TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "read": {"type": "object", "additionalProperties": False, "required": ["path"], "properties": {
        "path": _PATH, "offset": {"type": "integer", "minimum": 1}, "limit": {"type": "integer", "minimum": 1}}},
    "write": {"type": "object", "additionalProperties": False, "required": ["path", "content"], "properties": {
        "path": _PATH, "content": _STRING}},
    "edit": {"type": "object", "additionalProperties": False, "required": ["path", "old_string", "new_string"],
             "properties": {"path": _PATH, "old_string": {"type": "string", "minLength": 1}, "new_string": _STRING,
                            "replace_all": {"type": "boolean"}}},
    "bash": {"type": "object", "additionalProperties": False, "required": ["command"], "properties": {
        "command": {"type": "string", "minLength": 1}, "timeout": {"type": "integer", "minimum": 1, "maximum": 600}}},
}
BLOCKED_REASONS = ("configuration_changed", "environment_changed", "replay_declaration_changed", "attempts_exhausted")
FINISH_REASONS = ("stop", "tool_calls", "length", "content_filter")
STOP_REASONS = ("stop", "length", "toolUse")
FAULT_KINDS = ("http", "delay", "timeout", "drop", "malformed")
DEFAULT_MODEL = "scripted/model"

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_REPLAY_RE = re.compile(r"^(?P<tool>[^=\s]+)=(?P<replay>safe|never)(?::(?P<key>\S+))?$")
_OUTCOME_RE = re.compile(r"^(completed|aborted|failed(:[a-z_]+)?|blocked:(?P<reason>[a-z_]+))$")
# Fallback used only while chaos.faults (the full grammar, another module) is not importable.
_FAULT_RE = re.compile(
    r"^(?:(?:kill|int|powerloss|dresume|torn\([1-9][0-9]*\)|ioerror\((?:ENOSPC|EIO)\)):)?"
    r"(?:tx:[1-9][0-9]*@(?:before-write|after-write|after-sync)"
    r"|[A-Za-z][A-Za-z0-9_]*@(?:before-write|after-write|after-sync)#[1-9][0-9]*)$"
)


# --------------------------------------------------------------------------------------------------------------
# Per-value checks (pure; also used by other modules that accept the same texts on a command line)


def fault_problem(text: str) -> str | None:
    """Why ``text`` is not a fault in the ``[ACTION:]FACT@PHASE#N`` / ``[ACTION:]tx:K@PHASE`` grammar, or None."""
    try:
        from chaos.faults import FaultSyntaxError, parse_fault
    except ImportError:  # pragma: no cover - only before chaos.faults exists
        ok = _FAULT_RE.match(text)
        return None if ok else f"{text!r} is not a fault: expected [ACTION:]FACT@PHASE#N or [ACTION:]tx:K@PHASE"
    try:
        parse_fault(text)
    except FaultSyntaxError as exc:
        return str(exc)
    return None


def outcome_problem(text: str) -> str | None:
    """Why ``text`` is not an outcome (``completed``, ``aborted``, ``failed[:CODE]``, ``blocked:REASON``), or None."""
    m = _OUTCOME_RE.match(text)
    if not m:
        return f"{text!r} is not an outcome: expected completed, aborted, failed, failed:CODE or blocked:REASON"
    if text.startswith("blocked:") and m.group("reason") not in BLOCKED_REASONS:
        return f"unknown blocked reason {m.group('reason')!r} (expected one of {', '.join(BLOCKED_REASONS)})"
    return None


def replay_problem(text: str) -> str | None:
    """Why ``text`` is not a replay declaration ``TOOL=safe|never[:REPLAYKEY]`` naming a known tool, or None."""
    m = _REPLAY_RE.match(text)
    if not m:
        return f"{text!r} is not a replay declaration: expected TOOL=safe|never[:REPLAYKEY]"
    if m.group("tool") not in KNOWN_TOOLS:
        return f"unknown tool {m.group('tool')!r} (the agent's tools: {', '.join(KNOWN_TOOLS)})"
    return None


_CONDITIONS_PLAIN = frozenset(
    {"none", "no-kill", "idle", "run", "compaction", "no-step", "open-attempt", "failed-step", "settled", "pending",
     "untouched", "interrupted", "abort-requested", "changed", "ended"}
)


def condition_problem(text: str) -> str | None:
    """Why ``text`` is not a condition of the vocabulary (module docstring), or None. Tool names are checked later."""
    body = text[4:] if text.startswith("not:") else text
    name, sep, arg = body.partition(":")
    if not sep:
        if body in _CONDITIONS_PLAIN:
            return None
        fact = _fact_named(body)
        if fact is not None:
            # A condition describes the durable state at the kill; a fact name is how faults name a kill point.
            condition = _FACT_CONDITIONS.get(fact)
            return (f"unknown condition {body!r}: {fact!r} is a fact name (faults use it: {fact}@PHASE#N), not a "
                    "condition" + (f" (did you mean {condition!r}?)" if condition else ""))
        return f"unknown condition {body!r}{_did_you_mean(body, _CONDITIONS_PLAIN)}"
    if name in ("run", "open-attempt"):
        if not re.fullmatch(r"[1-9][0-9]*", arg):
            return f"condition {body!r}: {name}:N needs N an integer >= 1"
        if name == "open-attempt" and int(arg) > 2:
            return f"condition {body!r}: there are at most 2 attempts per step (SPEC §14.4 P3)"
        return None
    if name == "settled":
        return None if arg in STOP_REASONS else f"condition {body!r}: stopReason must be one of {', '.join(STOP_REASONS)}"
    if name in ("pending", "untouched", "interrupted"):
        return None if arg else f"condition {body!r}: {name}:TOOL needs a tool name"
    if name == "ended":
        problem = outcome_problem(arg)
        if problem is None and arg.startswith("blocked:"):
            problem = "an operation never ends blocked (blocked is a launch's exit, not a durable outcome)"
        return None if problem is None else f"condition {body!r}: {problem}"
    return (f"unknown condition {body!r} (conditions with an argument: run:N, open-attempt:N, settled:R, pending:TOOL, "
            "untouched:TOOL, interrupted:TOOL, ended:OUTCOME)")


# The condition that holds while a fact is the latest word on its subject (what an author naming a fact means).
_FACT_CONDITIONS = {"runStarted": "run", "compactionStarted": "compaction", "stepAttempt": "open-attempt",
                    "stepFailed": "failed-step", "toolStarted": "pending", "abortRequested": "abort-requested",
                    "operationFinished": "ended", "assistant": "settled", "compaction": "compaction",
                    "synthetic": "interrupted"}


def _fact_named(word: str) -> str | None:
    """The fault grammar's fact name ``word`` spells, ignoring case (``toolstarted`` → ``toolStarted``), or None."""
    from chaos.faults import FACT_NAMES

    return next((f for f in FACT_NAMES if f.lower() == word.lower()), None)


def _did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _checked(problem):
    """An AfterValidator that raises the problem ``problem(value)`` reports (pydantic turns it into a field error)."""

    def check(value: str) -> str:
        message = problem(value)
        if message:
            raise ValueError(message)
        return value

    return AfterValidator(check)


FaultText = Annotated[str, _checked(fault_problem)]
OutcomeText = Annotated[str, _checked(outcome_problem)]
ReplayText = Annotated[str, _checked(replay_problem)]
ConditionText = Annotated[str, _checked(condition_problem)]


def _effect_count(value: object) -> object:
    # An exact count, or [lo, hi] when the kill position decides (e.g. a never tool killed before or after its effect).
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return (value, value)
    if (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            and 0 <= value[0] <= value[1]):
        return (value[0], value[1])
    raise ValueError("must be a count >= 0 or a range [lo, hi] with 0 <= lo <= hi")


def _file_expectation(value: object) -> object:
    if isinstance(value, (str, bool)):
        return value
    raise ValueError("must be the file's exact content (a string), false (must not exist) or true (must exist)")


EffectCount = Annotated[tuple[int, int], BeforeValidator(_effect_count)]
FileExpectation = Annotated[str | bool, BeforeValidator(_file_expectation)]


# --------------------------------------------------------------------------------------------------------------
# The model


class _Model(BaseModel):
    # strict: TOML values are already typed, so "5" for an int is a mistake to report, not to coerce.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ToolCall(_Model):
    """One scripted tool call of an assistant turn."""

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    # A table is sent as its JSON text; a string is sent verbatim, so invalid or truncated arguments can be scripted.
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    # Deliberately a tool the agent does not offer (the unknown-tool scenario); otherwise an unknown name is an error.
    unknown: bool = False

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments_shape(cls, value: object) -> object:
        if not isinstance(value, (dict, str)):
            raise ValueError("must be a table (sent as JSON) or a string (sent verbatim; may be invalid JSON)")
        if isinstance(value, dict):
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                raise ValueError("contains a value JSON cannot express (a date/time, inf or nan)") from None
        return value

    @property
    def arguments_text(self) -> str:
        """The ``function.arguments`` string the scripted model sends."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


class Usage(_Model):
    """Usage numbers of one scripted answer (OpenAI names)."""

    prompt_tokens: int = Field(default=20, ge=0)
    completion_tokens: int = Field(default=10, ge=0)
    cached_tokens: int = Field(default=0, ge=0)


class ProviderFault(_Model):
    """A provider fault attached to one (run, turn) or to a compaction summary request.

    ``http``: answer with ``status`` (e.g. 429, 500, 400). ``delay``: wait ``seconds``, then answer normally.
    ``timeout``: hold the request without answering (``seconds``, default: until the client gives up or the server
    stops). ``drop``: process the request, then close the connection without a response. ``malformed``: HTTP 200 with
    ``body`` (default: truncated JSON). A fault hits the first request for its position only, unless ``repeat``.
    """

    kind: Literal["http", "delay", "timeout", "drop", "malformed"]
    status: int | None = Field(default=None, ge=400, le=599)
    seconds: float | None = Field(default=None, gt=0)
    body: str | None = None
    repeat: bool = False

    @model_validator(mode="after")
    def _members_fit_kind(self) -> ProviderFault:
        if self.kind == "http" and self.status is None:
            raise ValueError("kind 'http' needs status (e.g. 429, 500, 400)")
        if self.kind != "http" and self.status is not None:
            raise ValueError(f"status applies to kind 'http' only, not {self.kind!r}")
        if self.kind == "delay" and self.seconds is None:
            raise ValueError("kind 'delay' needs seconds")
        if self.kind not in ("delay", "timeout") and self.seconds is not None:
            raise ValueError(f"seconds applies to kinds 'delay' and 'timeout' only, not {self.kind!r}")
        if self.kind != "malformed" and self.body is not None:
            raise ValueError(f"body applies to kind 'malformed' only, not {self.kind!r}")
        return self


class Turn(_Model):
    """One scripted assistant answer: the ``turn``-th model request of its run (0-based) gets it."""

    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: Literal["stop", "tool_calls", "length", "content_filter"] | None = None
    usage: Usage = Field(default_factory=Usage)
    fault: ProviderFault | None = None

    @property
    def effective_finish_reason(self) -> str:
        """``finish_reason`` as given, else ``tool_calls`` when the turn has calls and ``stop`` otherwise."""
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


class Compaction(_Model):
    """A manual compaction (``agent compact``) performed after its run, and the summary the model answers."""

    summary: str
    usage: Usage = Field(default_factory=Usage)
    fault: ProviderFault | None = None


class Run(_Model):
    """One run: a prompt and the scripted answers to its model requests, in order."""

    prompt: str = Field(min_length=1)
    turns: list[Turn] = Field(min_length=1)
    compact: Compaction | None = None

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank (the scripted server identifies a run by its prompt)")
        return value


class AgentSettings(_Model):
    """The agent's configuration on its first launch."""

    model: str = Field(default=DEFAULT_MODEL, min_length=1)
    tools: list[str] = Field(default_factory=lambda: list(KNOWN_TOOLS))
    request_timeout: float = Field(default=5.0, gt=0)
    max_steps: int | None = Field(default=None, ge=1)
    environment_identity: str | None = Field(default=None, min_length=1)


class Restart(_Model):
    """Configuration changes applied on every launch after the first kill, and what to do when the agent blocks."""

    model: str | None = Field(default=None, min_length=1)
    tools: list[str] | None = None
    replay: list[ReplayText] = Field(default_factory=list)
    environment_identity: str | None = Field(default=None, min_length=1)
    # "abort": when the agent ends blocked, run `agent abort` (the documented way out of blocked).
    then: Literal["abort"] | None = None

    @property
    def changes_configuration(self) -> bool:
        """True when a restart launches the agent with a configuration different from the first launch."""
        return bool(self.model or self.tools is not None or self.replay or self.environment_identity)

    def agent_args(self) -> list[str]:
        """The agent flags (issue 3) that apply these changes."""
        args: list[str] = []
        if self.model:
            args += ["--model", self.model]
        if self.tools is not None:
            args += ["--tools", ",".join(self.tools)]
        for declaration in self.replay:
            args += ["--replay", declaration]
        if self.environment_identity:
            args += ["--environment-identity", self.environment_identity]
        return args


class Schedule(_Model):
    """A pinned schedule: faults applied in order (a later one may land during recovery)."""

    faults: list[FaultText] = Field(min_length=1)
    description: str = ""


class _Expected(_Model):
    outcome: OutcomeText | None = None
    answer: str | None = None
    files: dict[str, FileExpectation] = Field(default_factory=dict)
    effects: dict[str, EffectCount] = Field(default_factory=dict)


class Rule(_Expected):
    """``[[expect.when]]``: expectations that replace the defaults when every condition holds at the last kill."""

    when: list[ConditionText] = Field(min_length=1)
    # None = keep the defaults; a table (even an empty one) replaces them, so a rule can say "no file expectation"
    # where the kill position makes the content unknowable (a never tool killed around its effect).
    files: dict[str, FileExpectation] | None = None
    effects: dict[str, EffectCount] | None = None

    @field_validator("when", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


@dataclass(frozen=True)
class Resolved:
    """The expectations that apply to one case: defaults overlaid with the first matching rule (if any)."""

    outcome: str
    answer: str | None
    files: dict[str, str | bool]
    effects: dict[str, tuple[int, int]]
    rule: int | None = None  # index into expect.when, None when the defaults apply
    conditions: tuple[str, ...] = field(default=())


class Expect(_Expected):
    """What must hold at the end of a case; ``when`` rules are tried in order, the first match applies."""

    outcome: OutcomeText = "completed"
    when: list[Rule] = Field(default_factory=list)

    def resolve(self, reduction: Mapping | None, context: Mapping | None = None) -> Resolved:
        """The expectations for a case whose last kill left ``reduction`` (None: no kill); ``context`` as for
        ``condition_holds``. Pure.

        A matching rule replaces each of ``outcome``, ``answer``, ``files`` and ``effects`` that it gives (a
        ``files``/``effects`` table replaces the default table as a whole).
        """
        for index, rule in enumerate(self.when):
            if all(condition_holds(c, reduction, context) for c in rule.when):
                return Resolved(
                    outcome=rule.outcome or self.outcome,
                    answer=rule.answer if rule.answer is not None else self.answer,
                    files=dict(rule.files if rule.files is not None else self.files),
                    effects=dict(rule.effects if rule.effects is not None else self.effects),
                    rule=index,
                    conditions=tuple(rule.when),
                )
        return Resolved(self.outcome, self.answer, dict(self.files), dict(self.effects))


class Scenario(_Model):
    """One scenario file. ``source`` is the file it was loaded from (not part of the TOML)."""

    name: str
    description: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    workspace: dict[str, str] = Field(default_factory=dict)
    runs: list[Run] = Field(min_length=1)
    restart: Restart = Field(default_factory=Restart)
    schedules: list[Schedule] = Field(default_factory=list)
    expect: Expect = Field(default_factory=Expect)

    _source: Path | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        # The name starts every case id (`<scenario>::<fault>`) and names report folders: keep it a plain slug.
        if not _NAME_RE.match(value):
            raise ValueError("must be a slug: lowercase letters, digits, '.', '_' or '-', starting with a letter or digit")
        return value

    @property
    def source(self) -> Path | None:
        """The file this scenario was loaded from, when it came from a file."""
        return self._source

    def call_ids(self) -> list[str]:
        """Every scripted provider call id, in script order."""
        return [c.id for run in self.runs for turn in run.turns for c in turn.tool_calls]

    def operations(self) -> list[tuple[str, int]]:
        """The session's operations in order: ``("run", i)`` and ``("compact", i)`` (compaction after run i)."""
        ops: list[tuple[str, int]] = []
        for index, run in enumerate(self.runs):
            ops.append(("run", index))
            if run.compact is not None:
                ops.append(("compact", index))
        return ops

    def fault_map(self) -> dict[tuple[int, int | str], ProviderFault]:
        """Provider faults by position: ``(run, turn)`` 0-based, or ``(run, "summary")`` for a compaction."""
        faults: dict[tuple[int, int | str], ProviderFault] = {}
        for r, run in enumerate(self.runs):
            for t, turn in enumerate(run.turns):
                if turn.fault is not None:
                    faults[(r, t)] = turn.fault
            if run.compact is not None and run.compact.fault is not None:
                faults[(r, "summary")] = run.compact.fault
        return faults


# --------------------------------------------------------------------------------------------------------------
# Conditions on the durable state at the last kill


def _current_assistant(reduction: Mapping) -> tuple[dict | None, int]:
    """SPEC §14.3: the last assistant message of the transcript and its index (only meaningful for a settled step)."""
    transcript = reduction.get("transcript") or []
    for index in range(len(transcript) - 1, -1, -1):
        if transcript[index].get("role") == "assistant":
            return transcript[index], index
    return None, -1


def _untouched_calls(reduction: Mapping) -> list[dict]:
    op = reduction["operation"]
    step = op.get("step")
    if op.get("kind") != "run" or not step or step.get("status") != "settled" or step.get("stepKind") != "assistant":
        return []
    assistant, index = _current_assistant(reduction)
    if assistant is None:
        return []
    started = {(t["assistantEntryId"], t["toolIndex"]) for t in op.get("toolCalls", [])}
    answered = {m.get("tool_call_id") for m in reduction["transcript"][index + 1:] if m.get("role") == "tool"}
    untouched = []
    for i, call in enumerate(assistant.get("tool_calls") or []):
        if (step.get("settledEntryId"), i) not in started and call.get("id") not in answered:
            untouched.append(call)
    return untouched


# SPEC §5.6: the fixed content of an `interrupted` synthetic result (the transcript keeps messages, not result types).
INTERRUPTED_CONTENT = "Operation interrupted after execution status became unknown; the tool was not replayed."


def _interrupted_calls(reduction: Mapping) -> list[str]:
    """Tool names of the transcript's calls resolved by an ``interrupted`` result, in transcript order."""
    names: dict[str, str] = {}
    out = []
    for message in reduction.get("transcript") or []:
        for call in message.get("tool_calls") or () if message.get("role") == "assistant" else ():
            names[call.get("id")] = call.get("function", {}).get("name")
        if message.get("role") == "tool" and message.get("content") == INTERRUPTED_CONTENT:
            out.append(names.get(message.get("tool_call_id"), ""))
    return out


def condition_holds(cond: str, reduction: Mapping | None, context: Mapping | None = None) -> bool:
    """Whether condition ``cond`` (module docstring) holds for ``reduction``; ``None`` means no kill happened.

    ``context`` (optional): ``current``, the SPEC §8.7 CurrentConfiguration of the launch that recovered from the
    kill (None: unknown), and ``ended``, the outcome of the latest finished operation at the kill (None: none). Pure.
    """
    if cond.startswith("not:"):
        return not condition_holds(cond[4:], reduction, context)
    name, _, arg = cond.partition(":")
    if reduction is None:
        return name in ("none", "no-kill")
    context = context or {}
    op = reduction["operation"]
    kind = op.get("kind")
    step = op.get("step")
    if name == "no-kill":
        return False
    if name == "none":
        return not (condition_holds("open-attempt", reduction) or condition_holds("pending", reduction)
                    or condition_holds("abort-requested", reduction))
    if name == "idle":
        return kind == "idle"
    if name == "changed":
        return _recorded_under_other_configuration(reduction, context.get("current"))
    if name == "ended":
        ended = context.get("ended")
        if kind != "idle" or not ended:
            return False
        return not arg or ended == arg or (arg == "failed" and ended.startswith("failed:"))
    if name == "run":
        if kind != "run":
            return False
        # Each run commits exactly one user entry and nothing else does (a compaction entry is not a message).
        runs = sum(1 for m in reduction.get("transcript", []) if m.get("role") == "user")
        return not arg or runs == int(arg)
    if name == "compaction":
        return kind == "compaction"
    if name == "no-step":
        return kind != "idle" and step is None
    if name == "open-attempt":
        return bool(step) and step.get("status") == "attempting" and (not arg or step.get("attempt") == int(arg))
    if name == "failed-step":
        return bool(step) and step.get("status") == "failed"
    if name == "settled":
        return bool(step) and step.get("status") == "settled" and (not arg or step.get("stopReason") == arg)
    if name == "pending":
        return any(t.get("status") == "pending" and (not arg or t.get("toolName") == arg)
                   for t in op.get("toolCalls", []))
    if name == "untouched":
        return any(not arg or c.get("function", {}).get("name") == arg for c in _untouched_calls(reduction))
    if name == "interrupted":
        return any(not arg or name_ == arg for name_ in _interrupted_calls(reduction))
    if name == "abort-requested":
        return bool(op.get("abortRequested"))
    raise ValueError(f"unknown condition {cond!r}")


def _recorded_under_other_configuration(reduction: Mapping, current: Mapping | None) -> bool:
    """The ``changed`` condition: in-flight work whose recorded configuration differs from ``current``.

    WHY: restart changes apply on the launches after the first SIGKILL, so work in flight at the *last* kill may have
    been recorded already under the new configuration (the first kill lost the run, the supervisor issued it again),
    or the recovering launch may still run the old one (an ioerror exits without SIGKILL). Only a difference between
    what was recorded and what resumes it makes the planner's gates (SPEC §14.4 P3.1-2, P7.1.1-3) block.
    """
    if current is None:
        return True  # unknown: assume the changes apply (the conservative reading before this condition existed)
    op = reduction["operation"]
    step = op.get("step") or {}
    digest, env = current.get("configurationDigest"), current.get("environmentIdentity")
    if step.get("status") in ("attempting", "failed") and (
            step.get("configurationDigest") != digest or reduction.get("header", {}).get("environmentIdentity") != env):
        return True
    declared = {t.get("name"): t for t in current.get("tools", []) if isinstance(t, Mapping)}
    seen = {t.get("name"): t for t in (step.get("configurationSnapshot") or {}).get("tools", [])}
    for call in op.get("toolCalls", []):
        if call.get("status") != "pending":
            continue
        decl, name = declared.get(call.get("toolName")), call.get("toolName")
        if call.get("environmentIdentity") != env or decl is None or name not in seen \
                or decl.get("definitionDigest") != seen[name].get("definitionDigest"):
            return True
        if call.get("replay") == "safe" and (decl.get("replay") != "safe" or decl.get("replayKey") != call.get("replayKey")
                                             or step.get("configurationDigest") != digest):
            return True
    for call in _untouched_calls(reduction):  # P7.2.3: a tool the model saw, now removed or redefined
        name = call.get("function", {}).get("name")
        try:
            arguments = json.loads(call.get("function", {}).get("arguments") or "")
        except ValueError:
            arguments = None
        if name in seen and isinstance(arguments, dict) and (
                name not in declared or declared[name].get("definitionDigest") != seen[name].get("definitionDigest")):
            return True
    return False


# --------------------------------------------------------------------------------------------------------------
# Cross-field checks, on the raw TOML data so that they run even when the schema has errors elsewhere

Loc = tuple[str | int, ...]


def _as_list(value: object) -> list:
    return value if isinstance(value, list) else []


def _as_dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _path_problem(path: object) -> str | None:
    if not isinstance(path, str) or not path:
        return "a workspace path must be a non-empty string"
    parts = path.replace("\\", "/").split("/")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return f"path {path!r} must be relative to the workspace"
    if any(p in ("", ".", "..") for p in parts):
        return f"path {path!r} must not contain empty, '.' or '..' components"
    if "\0" in path:
        return f"path {path!r} must not contain a NUL character (no file name can)"
    long = [p for p in parts if len(p.encode("utf-8", "surrogatepass")) > _NAME_MAX]
    if long:
        return f"path {path!r}: a component of {len(long[0].encode('utf-8', 'surrogatepass'))} bytes (a file " \
               f"name holds at most {_NAME_MAX})"
    return None


_NAME_MAX = 255  # bytes in one path component (Linux NAME_MAX; the case directories live on tmpfs or ext4)


def _workspace_clashes(paths: list[str]) -> dict[str, str]:
    """Workspace files that another one needs as a directory (``a`` and ``a/b``): path → the path it blocks."""
    files = {p.replace("\\", "/") for p in paths if isinstance(p, str)}
    clashes = {}
    for path in sorted(files):
        parts = path.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in files:
                clashes.setdefault(prefix, path)
    return clashes


def _argument_problems(tool: str, arguments: dict, schema: Mapping[str, Any]) -> list[tuple[tuple, str]]:
    """Scripted ``arguments`` (a table) checked against ``tool``'s JSON Schema ``parameters``: unknown names with
    did-you-mean, missing required ones, wrong types and bounds. Each problem with the key path it is about,
    relative to the call's ``arguments`` (empty for a missing argument)."""
    properties = _as_dict(schema.get("properties"))
    required = [name for name in _as_list(schema.get("required")) if isinstance(name, str)]
    missing = [name for name in required if name not in arguments]
    listing = f"(the arguments of {tool!r}: {', '.join(properties) or 'none'})"
    problems: list[tuple[tuple, str]] = []
    unknown = [name for name in arguments if name not in properties]
    suggested: set[str] = set()
    if schema.get("additionalProperties") is False:
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(properties), n=1)
            # `write{path, text}`: no spelling is close, but the one missing required argument is what was meant.
            guess = close[0] if close else (missing[0] if len(missing) == 1 and len(unknown) == 1 else None)
            if guess is not None:
                suggested.add(guess)
            problems.append(((name,), f"unknown argument {name!r} for tool {tool!r}"
                             + (f" (did you mean {guess!r}?)" if guess else f" {listing}")))
    for name in missing:
        if name not in suggested:
            problems.append(((), f"tool {tool!r} needs argument {name!r} {listing}"))
    for name, value in arguments.items():
        problem = _value_problem(value, _as_dict(properties.get(name)))
        if problem:
            problems.append(((name,), f"argument {name!r} of tool {tool!r} {problem}"))
    return problems


def _value_problem(value: object, schema: Mapping[str, Any]) -> str | None:
    """Why ``value`` does not fit ``schema`` (the JSON Schema subset tool definitions use), or None."""
    kind = schema.get("type")
    if kind == "string":
        if not isinstance(value, str):
            return "must be a string"
        if len(value) < schema.get("minLength", 0):
            return "must not be empty"
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer"
        if isinstance(schema.get("minimum"), int) and value < schema["minimum"]:
            return f"must be >= {schema['minimum']}"
        if isinstance(schema.get("maximum"), int) and value > schema["maximum"]:
            return f"must be <= {schema['maximum']}"
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be a number"
    elif kind == "boolean":
        if not isinstance(value, bool):
            return "must be true or false"
    elif kind == "array":
        if not isinstance(value, list):
            return "must be an array"
    elif kind == "object":
        if not isinstance(value, dict):
            return "must be a table"
    return None


def _semantic_problems(data: dict, tools: Mapping[str, Mapping[str, Any]]) -> list[tuple[Loc, str]]:
    problems: list[tuple[Loc, str]] = []
    known = tuple(tools)
    agent = _as_dict(data.get("agent"))
    offered = agent.get("tools", list(known))
    offered = [t for t in _as_list(offered) if isinstance(t, str)]
    for section in ("agent", "restart"):
        section_tools = _as_dict(data.get(section)).get("tools")
        seen: set[str] = set()
        for i, tool in enumerate(_as_list(section_tools)):
            if isinstance(tool, str) and tool not in known:
                problems.append(((section, "tools", i),
                                 f"unknown tool {tool!r}{_did_you_mean(tool, known)} (the agent's tools: "
                                 f"{', '.join(known)})"))
            elif isinstance(tool, str) and tool in seen:
                problems.append(((section, "tools", i), f"tool {tool!r} listed twice"))
            seen.add(tool) if isinstance(tool, str) else None

    restart = _as_dict(data.get("restart"))
    for key, default in (("model", DEFAULT_MODEL), ("environment_identity", None)):
        if key in restart and restart[key] == agent.get(key, default):
            problems.append((("restart", key), f"equals agent.{key}: a restart change must change something"))

    prompts: dict[str, int] = {}
    calls: dict[str, Loc] = {}
    scripted_names: set[str] = set()
    for r, run in enumerate(_as_list(data.get("runs"))):
        run = _as_dict(run)
        prompt = run.get("prompt")
        if isinstance(prompt, str):
            if prompt in prompts:
                problems.append((("runs", r, "prompt"),
                                 f"duplicate prompt: same as runs[{prompts[prompt]}].prompt (prompts must be distinct: "
                                 "the scripted server identifies a run by its prompt)"))
            else:
                prompts[prompt] = r
        turns = _as_list(run.get("turns"))
        for t, turn in enumerate(turns):
            if t + 1 < len(turns) and isinstance(turn, dict) and not _as_list(turn.get("tool_calls")):
                # A stop answer (no tool calls) ends the run: the agent never asks the model again in it.
                problems.append((("runs", r, "turns", t + 1),
                                 f"unreachable: turns[{t}] answers without tool calls, which ends the run, so "
                                 f"turns[{t + 1}:] are never requested (move them to a run of their own, or give "
                                 f"turns[{t}] a tool call)"))
                break
        for t, turn in enumerate(turns):
            for c, call in enumerate(_as_list(_as_dict(turn).get("tool_calls"))):
                call = _as_dict(call)
                loc: Loc = ("runs", r, "turns", t, "tool_calls", c)
                call_id, name, unknown = call.get("id"), call.get("name"), call.get("unknown") is True
                if isinstance(call_id, str) and call_id:
                    if call_id in calls:
                        problems.append((loc + ("id",),
                                         f"duplicate call id {call_id!r}: already used at {_format_loc(calls[call_id])} "
                                         "(call ids must be unique within a scenario so effects can be attributed)"))
                    else:
                        calls[call_id] = loc
                if isinstance(name, str) and name:
                    scripted_names.add(name)
                    if not unknown and name not in offered:
                        problems.append((loc + ("name",),
                                         f"tool {name!r} is not offered by the agent (agent.tools: {', '.join(offered)})"
                                         f"{_did_you_mean(name, offered)}; set unknown = true to script a call to a "
                                         "tool the agent does not offer"))
                    elif unknown and name in offered:
                        problems.append((loc + ("unknown",), f"unknown = true, but the agent offers {name!r}"))
                    arguments = call.get("arguments")
                    # A table is checked against the tool's schema; a string is sent verbatim, unchecked, so a
                    # scenario can still script arguments that are wrong on purpose.
                    if not unknown and name in offered and name in tools and isinstance(arguments, dict):
                        for where, message in _argument_problems(name, arguments, _as_dict(tools[name])):
                            problems.append((loc + ("arguments", *where), message))

    for path in _as_dict(data.get("workspace")):
        message = _path_problem(path)
        if message:
            problems.append((("workspace", path), message))
    for path, blocked in _workspace_clashes(list(_as_dict(data.get("workspace")))).items():
        problems.append((("workspace", path), f"{path!r} is a file, but {blocked!r} needs it as a directory"))

    runs_count = len(_as_list(data.get("runs")))
    expect = _as_dict(data.get("expect"))
    targets: list[tuple[Loc, dict]] = [(("expect",), expect)]
    targets += [(("expect", "when", i), _as_dict(rule)) for i, rule in enumerate(_as_list(expect.get("when")))]
    for base, table in targets:
        for path in _as_dict(table.get("files")):
            message = _path_problem(path)
            if message:
                problems.append((base + ("files", path), message))
        for call_id in _as_dict(table.get("effects")):
            if call_id not in calls:
                problems.append((base + ("effects", call_id),
                                 f"no scripted tool call has id {call_id!r}{_did_you_mean(call_id, calls)}"))
        conditions = table.get("when")
        conditions = [conditions] if isinstance(conditions, str) else _as_list(conditions)
        for i, cond in enumerate(conditions):
            if not isinstance(cond, str) or condition_problem(cond):
                continue  # the schema reports it
            name, _, arg = cond.removeprefix("not:").partition(":")
            loc = base + ("when",) if isinstance(table.get("when"), str) else base + ("when", i)
            if name in ("pending", "untouched", "interrupted") and arg and arg not in known and arg not in scripted_names:
                problems.append((loc, f"condition {cond!r}: no tool {arg!r} in the agent or the script"))
            if name == "run" and arg and int(arg) > runs_count:
                problems.append((loc, f"condition {cond!r}: the scenario has {runs_count} run(s)"))
    return problems


# --------------------------------------------------------------------------------------------------------------
# Loading and error reporting


class _KeyLines:
    """Best-effort map from key paths (as pydantic locs: str keys and int array indices) to 1-based line numbers.

    tomllib does not report positions of valid keys, so this walks the (already valid) TOML text once: table and
    array-of-tables headers, dotted keys, inline tables and arrays spanning lines, and strings (which may contain
    anything that looks like a key). On any surprise it stops and keeps what it found; callers fall back to the
    nearest enclosing key, then to line 1.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1
        self.lines: dict[Loc, int] = {}
        self._aot: dict[Loc, int] = {}
        try:
            self._document()
        except (IndexError, ValueError):
            pass

    def line_of(self, loc: Loc) -> int:
        for end in range(len(loc), 0, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return 1

    # -- scanning helpers
    def _peek(self, n: int = 1) -> str:
        return self.text[self.pos:self.pos + n]

    def _advance(self, n: int = 1) -> None:
        self.line += self.text.count("\n", self.pos, self.pos + n)
        self.pos += n

    def _skip(self, newlines: bool) -> None:
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in " \t" or (newlines and ch in "\r\n"):
                self._advance()
            elif ch == "#":
                end = self.text.find("\n", self.pos)
                self._advance((len(self.text) if end < 0 else end) - self.pos)
            else:
                return

    def _record(self, loc: Loc, line: int) -> None:
        self.lines.setdefault(loc, line)

    def _document(self) -> None:
        table: Loc = ()
        while True:
            self._skip(newlines=True)
            if self.pos >= len(self.text):
                return
            line = self.line
            if self._peek(2) == "[[":
                self._advance(2)
                keys = self._key()
                self._skip(False)
                self._advance(2)  # ]]
                parent = self._resolve(keys[:-1])
                aot = parent + (keys[-1],)
                index = self._aot.get(aot, 0)
                self._aot[aot] = index + 1
                self._record(aot, line)
                table = aot + (index,)
                self._record(table, line)
            elif self._peek() == "[":
                self._advance()
                keys = self._key()
                self._skip(False)
                self._advance()  # ]
                table = self._resolve(keys)
                self._record(table, line)
            else:
                self._pair(table)

    def _resolve(self, keys: list[str]) -> Loc:
        # A header key that names an array of tables means its latest element (TOML semantics).
        loc: Loc = ()
        for key in keys:
            loc = loc + (key,)
            if loc in self._aot:
                loc = loc + (self._aot[loc] - 1,)
        return loc

    def _key(self) -> list[str]:
        keys = []
        while True:
            self._skip(False)
            ch = self._peek()
            if ch == '"':
                start = self.pos
                self._string_basic()
                keys.append(json.loads(self.text[start:self.pos]))
            elif ch == "'":
                end = self.text.index("'", self.pos + 1)
                keys.append(self.text[self.pos + 1:end])
                self._advance(end + 1 - self.pos)
            else:
                m = re.compile(r"[A-Za-z0-9_-]+").match(self.text, self.pos)
                if not m:
                    raise ValueError("not a key")
                keys.append(m.group(0))
                self._advance(m.end() - self.pos)
            self._skip(False)
            if self._peek() != ".":
                return keys
            self._advance()

    def _pair(self, table: Loc) -> None:
        line = self.line
        keys = self._key()
        loc = table
        for key in keys:
            loc = loc + (key,)
            self._record(loc, line)
        self._skip(False)
        if self._peek() != "=":
            raise ValueError("expected '='")
        self._advance()
        self._skip(False)
        self._value(loc)

    def _string_basic(self) -> None:
        self._advance()  # opening quote
        while self.text[self.pos] != '"':
            self._advance(2 if self.text[self.pos] == "\\" else 1)
        self._advance()

    def _value(self, loc: Loc) -> None:
        text = self.text
        if text.startswith('"""', self.pos) or text.startswith("'''", self.pos):
            quote = text[self.pos:self.pos + 3]
            self._advance(3)
            while not text.startswith(quote, self.pos):
                self._advance(2 if quote == '"""' and text[self.pos] == "\\" else 1)
            self._advance(3)
            while self._peek() == quote[0]:  # up to two quotes may end the content: `""""` / `'''''`
                self._advance()
        elif self._peek() == '"':
            self._string_basic()
        elif self._peek() == "'":
            self._advance(text.index("'", self.pos + 1) + 1 - self.pos)
        elif self._peek() == "[":
            self._advance()
            index = 0
            while True:
                self._skip(True)
                if self._peek() == "]":
                    self._advance()
                    return
                self._record(loc + (index,), self.line)
                self._value(loc + (index,))
                self._skip(True)
                if self._peek() == ",":
                    self._advance()
                index += 1
        elif self._peek() == "{":
            self._advance()
            while True:
                self._skip(False)
                if self._peek() == "}":
                    self._advance()
                    return
                self._pair(loc)
                self._skip(False)
                if self._peek() == ",":
                    self._advance()
        else:
            m = re.compile(r"[^,\]}\n#]+").match(text, self.pos)
            if not m:
                raise ValueError("empty value")
            self._advance(m.end() - self.pos)


def _format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", part):
            out += ("." if out else "") + part
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out or "(top level)"


def _clean_loc(loc: tuple, data: object) -> Loc:
    """Keep the parts of a pydantic error location that are real keys/indices of the data (drop union/type tags)."""
    out: list[str | int] = []
    cur = data
    for part in loc:
        if isinstance(cur, dict) and isinstance(part, str):
            out.append(part)
            if part not in cur:
                break  # a missing or extra key: it is the last meaningful part
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            out.append(part)
            cur = cur[part]
        else:
            break  # a scalar: what follows are pydantic's type tags ("str", "dict[str,any]", ...)
    return tuple(out)


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The model class whose instance sits at ``loc`` (for "unknown key" suggestions), if loc is a model."""
    cls: object = Scenario
    for part in loc:
        if isinstance(part, int):
            cls = _inner_model(cls)
            continue
        model = _inner_model(cls)
        if model is None or part not in model.model_fields:
            return None
        cls = model.model_fields[part].annotation
    return _inner_model(cls)


def _inner_model(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _schema_problems(exc: ValidationError, data: dict) -> list[tuple[Loc, str]]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = _clean_loc(error["loc"], data)
        kind = error["type"]
        if kind == "missing":
            message = "required key is missing"
        elif kind == "extra_forbidden":
            model = _model_at(loc[:-1])
            allowed = sorted(model.model_fields) if model else []
            hint = _did_you_mean(str(loc[-1]), allowed) if allowed else ""
            message = f"unknown key{hint}" + (f" (allowed: {', '.join(allowed)})" if allowed and not hint else "")
        else:
            message = error["msg"].removeprefix("Value error, ")
        problems.append((loc, message))
    return problems


_TOML_POS = re.compile(r"^(?P<msg>.*?)\s*\(at (?:line (?P<line>\d+), column (?P<col>\d+)|end of document)\)$")


def _toml_syntax_message(name: str, exc: tomllib.TOMLDecodeError, text: str) -> str:
    m = _TOML_POS.match(str(exc))
    if not m:
        return f"{name}:1: toml: {exc}"
    if m.group("line"):
        line, col = int(m.group("line")), int(m.group("col"))
    else:
        lines = text.split("\n")
        line, col = len(lines), len(lines[-1]) + 1
    return f"{name}:{line}:{col}: toml: {m.group('msg')}"


MAX_DEPTH = 32  # nesting levels of tables and arrays, the document itself included (tool arguments are the deepest)


def _depth(value: object) -> int:
    """How deeply ``value`` nests lists and dicts (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level + 1)
            if level < MAX_DEPTH:  # deeper is refused anyway: no need to walk all of it
                stack.extend((child, level + 1) for child in item)
    return deepest


def _too_deep(name: str) -> str:
    return f"{name}:1: toml: arrays or tables nested more than {MAX_DEPTH} levels deep"


# --------------------------------------------------------------------------------------------------------------
# Probe scenarios: an unmodified Python program (a ``[target]`` table of kind "python") instead of the session agent


class ProbeSchedule(_Model):
    """A pinned schedule of a probe scenario: fault texts in its target's vocabulary (checked after loading)."""

    faults: list[str] = Field(min_length=1)
    description: str = ""


class ProbeScenario(_Model):
    """A scenario file with a ``[target]`` table of ``kind = "python"`` (docs/frameworks.md): the program, where the
    framework documents its guarantee, an optional expected failure and scripted model runs. ``target`` is the
    built ``chaos.target.Target`` (its ``probe`` says how to run and read the program)."""

    name: str
    description: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    guarantee: str = Field(min_length=1)  # verbatim, from the docs or docstrings shipped in the pinned package
    guarantee_source: str = Field(min_length=1)
    expect_failure: str | None = Field(default=None, min_length=1)  # "<reason, link>": a confirmed finding
    # The properties the finding fails: a case is an expected failure only when every failure it has is one of them
    # (never a hang, protocol error, crash or unexpected exit). Empty: any of the target's properties.
    expect_properties: list[str] = Field(default_factory=list)
    target: dict[str, Any]
    schedules: list[ProbeSchedule] = Field(default_factory=list)
    runs: list[Run] = Field(default_factory=list)  # the scripted model (OPENAI_BASE_URL), when the program has one

    _source: Path | None = PrivateAttr(default=None)
    _target: Any = PrivateAttr(default=None)

    _name_shape = field_validator("name")(Scenario._name_shape.__func__)  # type: ignore[attr-defined]

    @property
    def source(self) -> Path | None:
        return self._source

    @property
    def the_target(self):
        """The ``chaos.target.Target`` of kind "python" this scenario runs."""
        return self._target

    def expected(self, failures: list[dict]) -> bool:
        """Whether a case's failures are this scenario's expected failure: it declares one, and every failure is a
        property it names (``expect_properties``, or any property of its target)."""
        if not self.expect_failure or not failures:
            return False
        allowed = set(self.expect_properties or self._target.probe.properties)
        return all(f.get("invariant") in allowed for f in failures)

    fault_map = Scenario.fault_map  # the scripted server reads provider faults of the runs the same way


def _validated(model, data: dict) -> tuple[Any, list[tuple[Loc, str]]]:
    """``model`` validated from ``data`` (None when it does not validate) and its schema problems."""
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, _schema_problems(exc, data)


def _raise_problems(text: str, name: str, problems: list[tuple[Loc, str]], extra: list[str] = ()) -> None:
    """``ScenarioError`` with one ``file:line: field: message`` per problem (sorted by line), then ``extra``."""
    keys = _KeyLines(text)
    found = sorted({(keys.line_of(loc), _format_loc(loc), message) for loc, message in problems})
    raise ScenarioError([f"{name}:{line}: {where}: {message}" for line, where, message in found] + list(extra))


def _parse_probe_scenario(data: dict, text: str, name: str) -> ProbeScenario:
    from chaos.faults import FaultSyntaxError, parse_fault, probe_fault_problem
    from chaos.target import TargetError, python_target

    scenario, problems = _validated(ProbeScenario, data)
    target = None
    lines: list[str] = []
    try:
        target = python_target(data.get("target") or {}, Path(name).resolve().parent, f"{name}: target",
                               source=str(Path(name).resolve()), name=str(data.get("name") or ""))
    except TargetError as exc:
        lines += exc.messages
    if target is not None:
        for i, prop in enumerate(data.get("expect_properties") or []):
            if prop not in target.probe.properties:
                problems.append((("expect_properties", i), f"{prop!r} is not one of the target's properties "
                                 f"({', '.join(target.probe.properties)})"))
        if data.get("expect_properties") and not data.get("expect_failure"):
            problems.append((("expect_properties",), "needs expect_failure (the reason)"))
        for i, sched in enumerate(data.get("schedules") or []):
            for j, text_ in enumerate(sched.get("faults") or [] if isinstance(sched, dict) else []):
                try:
                    problem = probe_fault_problem(parse_fault(text_, target.probe.vocabulary))
                except (FaultSyntaxError, TypeError) as exc:
                    problem = str(exc)
                if problem:
                    problems.append((("schedules", i, "faults", j), problem))
    if problems or lines:
        _raise_problems(text, name, problems, lines)
    assert scenario is not None
    scenario._target = target
    return scenario


def parse_scenario(text: str, name: str = "<scenario>", *, tools: Mapping[str, Mapping[str, Any]] | None = None
                   ) -> Scenario:
    """Validate scenario TOML ``text``; ``name`` prefixes the error lines. Raises ``ScenarioError`` with all problems.

    ``tools``: the target's tools, name → argument schema (the ``parameters`` of its tool definitions, as its
    ``describe`` reports them); default ``BUNDLED_TOOL_SCHEMAS``. Scripted calls are checked against them."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError([_toml_syntax_message(name, exc, text)]) from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively (~350+ levels)
        raise ScenarioError([_too_deep(name)]) from None
    if _depth(data) > MAX_DEPTH:  # the validators below recurse too; no scenario needs more than a few levels
        raise ScenarioError([_too_deep(name)])
    if data.get("target") is not None:  # a probe scenario: a Python program, not the session agent
        if not isinstance(data["target"], dict) or data["target"].get("kind") != "python":
            raise ScenarioError([f"{name}:1: target: a scenario's [target] table must have kind = \"python\" "
                                 "(a session-contract target is given with --target)"])
        return _parse_probe_scenario(data, text, name)  # type: ignore[return-value]
    scenario, problems = _validated(Scenario, data)
    problems += _semantic_problems(data, BUNDLED_TOOL_SCHEMAS if tools is None else tools)
    if problems:
        _raise_problems(text, name, problems)
    assert scenario is not None
    return scenario


def load_scenario(path: str | Path, *, tools: Mapping[str, Mapping[str, Any]] | None = None) -> Scenario:
    """Load and validate one scenario file. Raises ``ScenarioError`` (one ``file:line: field: message`` per problem).
    ``tools``: as for ``parse_scenario``."""
    path = Path(path)
    name = str(path)
    from chaos.inputs import read_input

    try:
        raw = read_input(path)
    except OSError as exc:
        raise ScenarioError([f"{name}:1: file: cannot read: {exc.strerror or exc}"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ScenarioError([f"{name}:{line}: file: not UTF-8 (byte {exc.start})"]) from None
    scenario = parse_scenario(text, name, tools=tools)
    scenario._source = path
    return scenario


def scenario_files(paths: list[str | Path]) -> tuple[list[Path], list[str]]:
    """Expand files and directories (recursively, ``*.toml``) into scenario files; second item: problems found."""
    files: list[Path] = []
    problems: list[str] = []
    for raw in paths:
        path = Path(raw)
        if "\0" in str(raw):  # no file has such a name; the checks below would raise ValueError
            problems.append(f"{str(raw)!r}:1: path: contains a NUL byte")
        elif path.is_dir():
            found = sorted(p for p in path.rglob("*.toml") if p.is_file())
            if not found:
                problems.append(f"{path}:1: path: directory contains no *.toml scenario files")
            files += found
        elif path.is_file():
            files.append(path)
        elif path.exists() or path.is_symlink():  # a FIFO, a device, a dangling or looping link
            problems.append(f"{path}:1: path: not a regular file")
        else:
            problems.append(f"{path}:1: path: no such file or directory")
    return files, problems


def load_scenarios(paths: list[str | Path], *, tools: Mapping[str, Mapping[str, Any]] | None = None
                   ) -> tuple[list[Scenario], list[str]]:
    """Load every scenario under ``paths``; returns the valid ones and every problem line (names must be unique).
    ``tools``: as for ``parse_scenario``."""
    files, problems = scenario_files(paths)
    scenarios: list[Scenario] = []
    seen: dict[str, Path] = {}
    for path in files:
        try:
            scenario = load_scenario(path, tools=tools)
        except ScenarioError as exc:
            problems += exc.messages
            continue
        if scenario.name in seen and seen[scenario.name].resolve() != path.resolve():
            line = _KeyLines(path.read_text(encoding="utf-8")).line_of(("name",))
            problems.append(f"{path}:{line}: name: {scenario.name!r} is also the name of {seen[scenario.name]} "
                            "(names start case ids and must be unique)")
            continue
        if scenario.name not in seen:
            seen[scenario.name] = path
            scenarios.append(scenario)
    return scenarios, problems
