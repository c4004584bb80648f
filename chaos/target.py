"""The system under test: one ``Target``, built in one place, recorded whole wherever a case is recorded.

A target says everything the harness needs to drive and judge an implementation, and nothing the harness would
otherwise learn by importing it (modelled on Jepsen's ``jepsen.db/DB`` protocol and chaostoolkit's drivers):

- how to launch it: argv *templates* for ``run`` (creates the session), ``run_again`` (a later run of the same
  session), ``compact``, ``resume`` and ``abort``, plus ``plan`` (one recovery decision on a log: the command shape
  of ``python -m agent plan``), ``bugs`` (its known-bug switches as JSON) and ``describe`` (its tool definitions,
  compaction prompt and the CurrentConfiguration a set of flags gives). Placeholders: ``{command}`` (the argv
  prefix, as several words), ``{flags}`` (the configuration flags, as several words), ``{session_dir}``,
  ``{workspace}``, ``{prompt}``, ``{log}``, ``{current}`` and, resolved later by the supervisor and the restart
  launcher, ``{session}`` and ``{restart}``;
- its environment (``env``), the known-bug switches to enable (``bugs`` → ``AGENT_BUGS``) and a foreign recovery
  planner for the bundled agent to consult (``planner_command`` / ``planner_scope`` / ``planner_dir`` →
  ``AGENT_PLANNER_CMD`` / ``AGENT_PLANNER_SCOPE`` / ``AGENT_PLANNER_DIR``, docs/agent.md; the command runs where it
  was written: the directory of the target file, or the one ``chaos`` ran in for ``--planner-cmd``);
- its kill-point vocabulary and how its durable state is read (``kind = "contract"``: the session contract's fact
  names, read with the reference reducer of ``agent.session``), which oracle invariants apply, how its effects are
  witnessed (``CHAOS_WITNESS``) and how it reaches the model (``OPENAI_BASE_URL``: chat completions);
- its exit codes (which mean "settled by itself", which "blocked", which "refused: session locked");
- how its processes start (``launcher``): forked from a warm zygote that imported its ``preload`` once
  (``chaos.zygote``; for a ``python -m MODULE`` command of this interpreter — the bundled agent — and for python
  targets, in their own interpreter), or exec'd from scratch (any other command). The launcher never changes a
  verdict (``chaos campaign --launcher-check``), so it is not part of the cache key.

A ``kind = "python"`` target is an unmodified Python program run under the injected probe (``chaos.probe``): its
``probe`` (``ProbeProgram``) says how to run and read it, in which prepared interpreter environment
(``chaos.environments``), with which fact vocabulary, guarantee and properties (``chaos.properties``). It is built
by ``python_target`` from a probe scenario's ``[target]`` table (docs/frameworks.md); its launch templates are unused.

The bundled agent is simply the default target (``Target()``). ``Target.key()`` names it in the baseline cache
(the bundled agent's key includes the digest of its source, so an edited agent never reuses stale kill points);
``to_json``/``from_json`` carry it through ``campaign.json``, journal records and repro bundles unchanged.

What a target *offers* (its switches, tools, CurrentConfiguration) is asked from it by running its ``bugs`` and
``describe`` commands — never by importing it — and memoised per process (``describe``).

Not here: running cases (``chaos.case``), the checkpoint protocol (docs/protocol.md).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from chaos.errors import ChaosError
from chaos.oracle import INVARIANTS  # a target may declare the subset of the oracle's invariants that applies
from chaos.properties import PROPERTIES  # ... and a python target the subset of the probe properties

TIMEOUT_VAR = "AGENT_PLANNER_TIMEOUT"  # the agent's (agent.planner_cmd), read here only to record it
AGENT_PLANNER_SECONDS = 30.0  # the agent's default for it (agent.planner_cmd.DEFAULT_TIMEOUT; a unit test pins it)

# "contract": writes the session contract (SPEC.md), judged by the oracle; "python": an unmodified Python program run
# under the injected probe (chaos.probe), judged by the properties (chaos.properties).
KINDS = ("contract", "python")
PLANNER_SCOPES = ("recovery", "all")
REPO = Path(__file__).resolve().parent.parent
PYTHON = "{python}"  # in a recorded target: "the interpreter running killpoint" (the path differs per machine)

# The bundled agent's command shapes (docs/agent.md); a target file may replace any of them.
DEFAULT_LAUNCH: dict[str, tuple[str, ...]] = {
    "run": ("{command}", "run", "--session-dir", "{session_dir}", "--workspace", "{workspace}", "{flags}",
            "{prompt}"),
    "run_again": ("{command}", "run", "--session", "{session}", "{flags}", "{restart}", "{prompt}"),
    "compact": ("{command}", "compact", "{session}", "{flags}", "{restart}"),
    "resume": ("{command}", "resume", "{session}", "{flags}", "{restart}"),
    "abort": ("{command}", "abort", "{session}", "{flags}", "{restart}"),
    "plan": ("{command}", "plan", "{log}", "{current}"),
    "bugs": ("{command}", "bugs", "--json"),
    "describe": ("{command}", "describe", "--workspace", "{workspace}", "{flags}"),
}
LAUNCH_KEYS = tuple(DEFAULT_LAUNCH)
# The verbs a target may leave out: an empty template says "not offered" (its recovery decisions, its bug switches
# and its description are then not asked for).
OPTIONAL_LAUNCH_KEYS = ("plan", "bugs", "describe")
# What the bundled agent's zygote imports once: `agent.warm`, the agent's own warm-up module (its start path, what a
# run imports lazily, the built CLI parser; it reads no environment at import).
BUNDLED_PRELOAD = ("agent.warm",)
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_PLACEHOLDERS = frozenset({"{command}", "{flags}", "{session_dir}", "{workspace}", "{prompt}", "{log}",
                           "{current}", "{session}", "{restart}"})


@dataclass(frozen=True)
class ProbeProgram:
    """How to run and read an unmodified Python program under the probe (a ``kind = "python"`` target).

    ``program`` and ``reader`` are ``PROGRAM ARGS`` or ``-m MODULE ARGS``, both run by ``python`` (the target's own
    interpreter environment, chaos.environments; None when it is not prepared); the word ``{case}`` stands for the
    case directory (the reader's: a copy of it, chaos.probe.inspect). ``state`` and ``sqlite`` are relative to the
    case directory. ``vocabulary`` is the fact names its barriers may carry (``chaos.probe.vocabulary``)."""

    name: str
    program: tuple[str, ...]
    vocabulary: tuple[str, ...]
    state: tuple[str, ...] = ("state",)
    sqlite: tuple[str, ...] = ()
    reader: tuple[str, ...] | None = None  # prints {"done": [...], "result": ..., "complete": bool}
    env: tuple[tuple[str, str], ...] = ()
    effect_bound: int = 1  # the program's documented guarantee: at most this many executions of one effect
    max_launches: int = 4
    properties: tuple[str, ...] = PROPERTIES
    python: str | None = sys.executable
    requirements: tuple[str, ...] = ()  # exact pins of its environment (chaos targets prepare)

    def interpreter_env(self) -> dict[str, str]:
        """What a process of another interpreter environment needs to import the probe (and nothing else of
        killpoint, whose packages would shadow the framework's): chaos.environments.probe_path on PYTHONPATH."""
        if not self.python or self.python == sys.executable:
            return {}
        from chaos.environments import probe_path

        return {"PYTHONPATH": probe_path()}

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "program": list(self.program), "vocabulary": list(self.vocabulary),
                "state": list(self.state), "sqlite": list(self.sqlite),
                "reader": list(self.reader) if self.reader else None, "env": dict(self.env),
                "effect_bound": self.effect_bound, "max_launches": self.max_launches,
                "properties": list(self.properties), "requirements": list(self.requirements),
                "python": PYTHON if self.python == sys.executable else self.python}

    @classmethod
    def from_json(cls, v: Mapping[str, Any]) -> ProbeProgram:
        python = v.get("python")
        return cls(name=v["name"], program=tuple(v["program"]), vocabulary=tuple(v["vocabulary"]),
                   state=tuple(v.get("state") or ()), sqlite=tuple(v.get("sqlite") or ()),
                   reader=tuple(v["reader"]) if v.get("reader") else None,
                   env=tuple(sorted((v.get("env") or {}).items())), effect_bound=int(v.get("effect_bound", 1)),
                   max_launches=int(v.get("max_launches", 4)), properties=tuple(v.get("properties") or PROPERTIES),
                   python=sys.executable if python == PYTHON else python,
                   requirements=tuple(v.get("requirements") or ()))


class TargetError(ChaosError):
    """A target file is unreadable or invalid, or the target cannot answer a question asked of it; one line each."""

    def __init__(self, messages: str | list[str]):
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        super().__init__("\n".join(self.messages))


@dataclass(frozen=True)
class Target:
    """The system under test (see the module docstring). Frozen and picklable: workers receive it as is."""

    name: str = "bundled"
    kind: str = "contract"
    command: tuple[str, ...] = (sys.executable, "-m", "agent")
    launch: tuple[tuple[str, tuple[str, ...]], ...] = ()  # overrides of DEFAULT_LAUNCH, (key, argv template)
    env: tuple[tuple[str, str], ...] = ()
    bugs: tuple[str, ...] = ()
    # True when it takes the bundled agent's configuration flags and answers `describe`, so the harness knows the
    # CurrentConfiguration each launch runs with (writer obligations, blocked reasons, the `changed` condition).
    configuration_flags: bool = True
    planner_command: str | None = None
    planner_scope: str = "recovery"
    # Where the planner command runs (absolute): its agents run in each case's workspace, where a command written as
    # `node planner.js` or `python3 -m mypkg.planner` in a project's directory would name nothing.
    planner_dir: str | None = None
    # Seconds the agent gives the command per decision (AGENT_PLANNER_TIMEOUT; None: the agent's default), recorded
    # so that a failure found with a short one reproduces with it, whatever the shell that resumes or re-runs it.
    planner_timeout: float | None = None
    invariants: tuple[str, ...] = INVARIANTS
    effects: str = "witness-file"  # CHAOS_WITNESS: a file outside the workspace its tools append effects to
    model: str = "openai-chat"  # OPENAI_BASE_URL + OPENAI_API_KEY, chat completions
    settled_exits: tuple[int, ...] = (0, 3, 4, 130)
    blocked_exit: int | None = 3
    locked_exit: int = 6
    source: str | None = None  # the target file it was read from (None: built in)
    # How its processes start (chaos.zygote): "zygote" forks them from a warm interpreter that imported `preload`
    # once (only for `python -m MODULE` commands of this interpreter); "exec" starts each one from scratch.
    launcher: str = "zygote"
    preload: tuple[str, ...] = BUNDLED_PRELOAD
    probe: ProbeProgram | None = None  # kind "python": the program under the probe (the launch templates unused)

    # ---- identity --------------------------------------------------------------------------------------------

    @property
    def bundled(self) -> bool:
        """The bundled agent of this source tree (its source digest is part of its cache key)."""
        return self.name == "bundled" and self.source is None

    def key(self, *, with_bugs: bool = False) -> str:
        """A short digest naming the target in cache keys: everything that changes what a crash-free run of the
        correct implementation does; ``with_bugs`` adds what makes the implementation under test differ from it
        (its switches and foreign planner), for what depends on recovery (depth-2 discovery)."""
        ident = {"kind": self.kind, "command": self.portable_command(), "launch": [list(x) for x in self.templates()],
                 "env": [list(p) for p in self.env], "configuration_flags": self.configuration_flags}
        if self.bundled:
            ident["source"] = agent_source_digest()
        if self.probe is not None:
            ident["probe"] = {**self.probe.to_json(), "python": None, "digest": _program_digest(self.probe)}
        if with_bugs:
            ident["bugs"] = sorted(self.bugs)
            # The directory only when there is one: a record from before it keys its planner as it did then.
            ident["planner"] = ([self.planner_command, self.planner_scope]
                                + ([self.planner_dir] if self.planner_dir else [])
                                + ([self.chosen_planner_timeout()] if self.chosen_planner_timeout() else [])
                                if self.planner_command else None)
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]

    def chosen_planner_timeout(self) -> float | None:
        """The planner command's timeout this target chose, None for the agent's default: recorded as 30 (a line
        that says it, ``cli_args``) or not at all, it is the same run, so keys and a resume's check agree."""
        return self.planner_timeout if self.planner_timeout != AGENT_PLANNER_SECONDS else None

    def without_bugs(self) -> Target:
        """This target with no known-bug switch enabled."""
        return replace(self, bugs=())

    def correct(self) -> Target:
        """The correct implementation: no switch, no foreign planner — what a crash-free baseline runs, so kill
        points never depend on the implementation under test."""
        return replace(self, bugs=(), planner_command=None, planner_dir=None, planner_timeout=None)

    def with_bugs(self, bugs: Sequence[str]) -> Target:
        return replace(self, bugs=tuple(sorted(dict.fromkeys(bugs))))

    def with_planner(self, command: str | None, scope: str | None = None, directory: str | None = None) -> Target:
        """This target with a foreign planner ``command`` run in ``directory`` (None: the directory it had, for the
        same command only — another command was written somewhere else)."""
        if directory is None and command == self.planner_command:
            directory = self.planner_dir
        return replace(self, planner_command=command or None, planner_scope=scope or self.planner_scope,
                       planner_dir=directory if command else None)

    def zygote_module(self) -> str | None:
        """The module a zygote can run for this target (``python -m MODULE`` by this interpreter, or the probe's
        runner in a python target's own interpreter), or None."""
        if self.launcher != "zygote":
            return None
        if self.probe is not None:
            return "chaos.probe.run" if self.probe.python else None
        if len(self.command) < 3 or self.command[:2] != (sys.executable, "-m"):
            return None
        return self.command[2]

    def interpreter(self) -> str:
        """The Python that runs this target's processes (a python target's prepared environment)."""
        if self.probe is not None and self.probe.python:
            return self.probe.python
        return sys.executable

    def interpreter_env(self) -> dict[str, str]:
        """What a process of another interpreter environment needs to import the probe (ProbeProgram's)."""
        return self.probe.interpreter_env() if self.probe is not None else {}

    def label(self) -> str:
        """How a person names this target in one line: ``bundled``, ``bundled AGENT_BUGS=x``, ``my-agent …``."""
        words = [self.name]
        if self.bugs:
            words.append(f"AGENT_BUGS={','.join(self.bugs)}")
        if self.planner_command:
            words.append(f"planner-cmd={self.planner_command!r}"
                         + (f" ({self.planner_scope})" if self.planner_scope != "recovery" else ""))
        return " ".join(words)

    def cli_args(self) -> list[str]:
        """The ``chaos run``/``campaign`` options that name this target again (for reproduce lines)."""
        out: list[str] = []
        if self.source:
            out += ["--target", self.source]
        if self.bugs:
            out += ["--agent-bugs", ",".join(self.bugs)]
        if self.planner_command:
            out += ["--planner-cmd", self.planner_command]
            if self.planner_dir:  # where it ran, wherever the line is pasted (a bundle's folder, a CI log)
                out += ["--planner-dir", self.planner_dir]
            if self.planner_timeout or TIMEOUT_VAR not in dict(self.env):
                # Said also when it is the agent's default: a line pasted into a shell that exports another
                # AGENT_PLANNER_TIMEOUT must not run the planner under that one. str(float) reads back exactly.
                out += ["--planner-timeout", str(self.planner_timeout or AGENT_PLANNER_SECONDS)]
            if self.planner_scope != "recovery":
                out += ["--planner-scope", self.planner_scope]
        return out

    # ---- launching ---------------------------------------------------------------------------------------------

    def templates(self) -> list[tuple[str, tuple[str, ...]]]:
        merged = dict(DEFAULT_LAUNCH)
        merged.update(dict(self.launch))
        return [(k, merged[k]) for k in LAUNCH_KEYS if k in merged]

    def template(self, key: str) -> tuple[str, ...] | None:
        return dict(self.templates()).get(key)

    def argv(self, key: str, *, flags: Sequence[str] = (), **values: str) -> tuple[str, ...]:
        """The argv of command ``key`` with ``{command}``/``{flags}`` spliced in and ``values`` substituted.

        ``{session}`` and ``{restart}`` stay for the supervisor (the path the hello announced) and the restart
        launcher (the scenario's restart flags after the first kill)."""
        template = self.template(key)
        if not template:
            raise TargetError(f"target {self.name}: has no {key!r} command")
        out: list[str] = []
        for word in template:
            if word == "{command}":
                out += self.command
            elif word == "{flags}":
                out += flags
            else:
                # One pass over the template word: a value (a prompt) that itself reads "{workspace}" stays as is.
                out.append(_PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), word))
        return tuple(out)

    def environment(self) -> dict[str, str]:
        """What every launch of this target gets on top of the case's own variables."""
        env = dict(self.env)
        # Always set, also to "": a case that asked for the correct agent must never inherit the harness's own.
        env["AGENT_BUGS"] = ",".join(self.bugs)
        if self.planner_command:
            env["AGENT_PLANNER_CMD"] = self.planner_command
            env["AGENT_PLANNER_SCOPE"] = self.planner_scope
            env["AGENT_PLANNER_DIR"] = self.planner_dir or ""
            # The recorded timeout, else the target file's env table's, else the agent's default: never the shell's.
            env["AGENT_PLANNER_TIMEOUT"] = (str(self.planner_timeout) if self.planner_timeout
                                            else env.get("AGENT_PLANNER_TIMEOUT", ""))
        else:
            env["AGENT_PLANNER_CMD"] = env["AGENT_PLANNER_DIR"] = ""
        return env

    def planner_argv(self) -> tuple[str, ...] | None:
        """The implementation's recovery planner as a ``CMD plan LOG CURRENT`` prefix with placeholders, or None.

        A foreign planner (``planner_command``) when there is one, else the target's own ``plan`` command."""
        if self.planner_command:
            return (*shlex.split(self.planner_command), "plan", "{log}", "{current}")
        if not self.template("plan"):
            return None
        return self.argv("plan", log="{log}", current="{current}")

    # ---- recording -----------------------------------------------------------------------------------------------

    def portable_command(self) -> list[str]:
        return [PYTHON if part == sys.executable else part for part in self.command]

    def to_json(self) -> dict[str, Any]:
        """The whole target as JSON (this interpreter's path recorded as ``{python}``)."""
        return {
            "name": self.name, "kind": self.kind, "command": self.portable_command(),
            "launch": {k: list(v) for k, v in self.launch}, "env": dict(self.env), "bugs": list(self.bugs),
            "configuration_flags": self.configuration_flags, "planner_command": self.planner_command,
            "planner_scope": self.planner_scope, "planner_dir": self.planner_dir,
            "planner_timeout": self.planner_timeout,
            "invariants": list(self.invariants), "effects": self.effects, "model": self.model,
            "settled_exits": list(self.settled_exits), "blocked_exit": self.blocked_exit,
            "locked_exit": self.locked_exit, "source": self.source, "launcher": self.launcher,
            "preload": list(self.preload), "probe": self.probe.to_json() if self.probe else None,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> Target:
        """The inverse of ``to_json`` (also accepts round 1's agent dicts: command, env pairs, bugs, bundled)."""
        if not value:
            return cls()
        v = dict(value)
        command = tuple(sys.executable if p == PYTHON else str(p) for p in v.get("command") or ()) or cls().command
        env = v.get("env") or {}
        env_pairs = tuple(sorted(env.items())) if isinstance(env, Mapping) else tuple(tuple(p) for p in env)
        launch = v.get("launch") or {}
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {k: v[k] for k in known & set(v) if k not in (
            "command", "env", "launch", "bugs", "invariants", "settled_exits", "preload", "probe")}
        if v.get("probe"):
            kwargs["probe"] = ProbeProgram.from_json(v["probe"])
        if "preload" in v:
            kwargs["preload"] = tuple(v["preload"] or ())
        if isinstance(v.get("planner_timeout"), int) and not isinstance(v["planner_timeout"], bool):
            kwargs["planner_timeout"] = float(v["planner_timeout"])  # JSON's 7 is 7.0: one key, one line
        if "launcher" not in v and (v.get("source") or v.get("config")):
            # A record older than launchers, of a target file: exec, as load_target defaults (never a zygote that
            # would preload the bundled agent for another program).
            kwargs["launcher"], kwargs["preload"] = "exec", ()
        if "bundled" in v and "configuration_flags" not in v:  # round-1 agent dict
            kwargs["configuration_flags"] = bool(v["bundled"])
        if "config" in v and "source" not in v:
            kwargs["source"] = v["config"]
        return cls(command=command, env=env_pairs,
                   launch=tuple((k, tuple(a)) for k, a in launch.items()),
                   bugs=tuple(v.get("bugs") or ()), invariants=tuple(v.get("invariants") or INVARIANTS),
                   settled_exits=tuple(v.get("settled_exits") or (0, 3, 4, 130)), **kwargs)


# --------------------------------------------------------------------------------------------------------------
# Loading a target file


_FILE_KEYS = ("name", "kind", "protocol", "command", "launch", "env", "configuration_flags", "planner_command",
              "planner_scope", "invariants", "effects", "model", "exits", "launcher", "preload")
LAUNCHERS = ("zygote", "exec")


def load_target(path: str | Path) -> Target:
    """Read ``--target FILE.toml``; every problem at once as ``file: key: message`` lines (``TargetError``).

    Relative paths in ``command`` (``./x``, ``../x``) are relative to the file, so a target works from any
    directory. docs/targets.md documents every key with an example."""
    from chaos.inputs import read_input

    path = Path(path)
    try:
        text = read_input(path).decode("utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise TargetError(f"{path}: no such target file") from None
    except IsADirectoryError:
        raise TargetError(f"{path}: is a directory, not a target file") from None
    except OSError as exc:
        raise TargetError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TargetError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise TargetError(f"{path}: toml: {exc}") from None
    except RecursionError:
        raise TargetError(f"{path}: toml: nested too deeply") from None
    if data.get("kind") == "python":
        return python_target(data, path.resolve().parent, str(path), source=str(path.resolve()))
    problems: list[str] = []

    def bad(key: str, message: str) -> None:
        problems.append(f"{path}: {key}: {message}")

    unknown = sorted(set(data) - set(_FILE_KEYS))
    if unknown:
        bad(unknown[0], f"unknown key (expected some of {', '.join(_FILE_KEYS)})")
    kind = data.get("kind", "contract")
    if kind not in KINDS:
        bad("kind", f"{kind!r}: expected one of {', '.join(KINDS)}")
    if data.get("protocol", 1) != 1:
        bad("protocol", f"this harness speaks checkpoint protocol 1, not {data.get('protocol')!r}")
    command = data.get("command")
    if not _strings(command) or not command:
        bad("command", "a non-empty list of strings (the argv prefix) is required")
        command = ["false"]
    env = data.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        bad("env", "must be a table of strings")
        env = {}
    launch = data.get("launch", {})
    if not isinstance(launch, dict):
        bad("launch", "must be a table of argv templates")
        launch = {}
    for key, argv in launch.items():
        if key not in LAUNCH_KEYS:
            bad(f"launch.{key}", f"unknown command (expected some of {', '.join(LAUNCH_KEYS)})")
        elif not _strings(argv) or not argv:
            bad(f"launch.{key}", "must be a non-empty list of strings")
        else:
            odd = [w for w in argv if w.startswith("{") and w.endswith("}") and w not in _PLACEHOLDERS
                   and w != PYTHON]
            if odd:
                bad(f"launch.{key}", f"unknown placeholder {odd[0]} (known: {', '.join(sorted(_PLACEHOLDERS))})")
    flags = data.get("configuration_flags", False)
    if not isinstance(flags, bool):
        bad("configuration_flags", "must be true or false")
    planner = data.get("planner_command")
    if planner is not None and (not isinstance(planner, str) or not planner.strip()):
        bad("planner_command", "must be a non-empty command line")
    scope = data.get("planner_scope", "recovery")
    if scope not in PLANNER_SCOPES:
        bad("planner_scope", f"{scope!r}: expected recovery or all")
    invariants = _known_names(data, "invariants", INVARIANTS, INVARIANTS, "invariant", bad)
    if data.get("effects", "witness-file") != "witness-file":
        bad("effects", "only \"witness-file\" is supported (CHAOS_WITNESS)")
    if data.get("model", "openai-chat") != "openai-chat":
        bad("model", "only \"openai-chat\" is supported (OPENAI_BASE_URL, chat completions)")
    launcher = data.get("launcher", "exec")
    preload = data.get("preload", [])
    if launcher not in LAUNCHERS:
        bad("launcher", f"{launcher!r}: expected zygote or exec")
    if not isinstance(preload, list) or not all(isinstance(m, str) and m for m in preload):
        bad("preload", "must be a list of module names")
        preload = []
    if launcher == "zygote" and not (isinstance(command, list) and len(command) >= 3 and command[1] == "-m"
                                     and command[0] in (PYTHON, sys.executable)):
        bad("launcher", 'zygote needs command = ["{python}", "-m", MODULE] (a Python module run by this '
                        "interpreter); any other command is launched by exec")
    exits = data.get("exits", {})
    if not isinstance(exits, dict) or set(exits) - {"settled", "blocked", "locked"}:
        bad("exits", "a table with settled (list of codes), blocked and locked (codes)")
        exits = {}
    settled = exits.get("settled", [0, 3, 4, 130])
    if not isinstance(settled, list) or not all(isinstance(c, int) for c in settled):
        bad("exits.settled", "must be a list of exit codes")
        settled = [0]
    for key in ("blocked", "locked"):
        if key in exits and not isinstance(exits[key], int):
            bad(f"exits.{key}", "must be an exit code")
    if problems:
        raise TargetError(problems)
    base = path.resolve().parent
    argv = tuple(sys.executable if a == PYTHON else str((base / a).resolve()) if a.startswith(("./", "../")) else a
                 for a in command)
    merged = {k: tuple(v) for k, v in launch.items()}
    if not flags:
        # Not bundled-shaped: `plan`, `bugs` and `describe` exist only when the file names them (an empty template
        # means "not offered"); run/resume/abort/compact keep the bundled agent's verbs unless replaced.
        for key in OPTIONAL_LAUNCH_KEYS:
            merged.setdefault(key, ())
    return Target(
        name=str(data.get("name", path.stem)), kind=kind, command=argv,
        launch=tuple((k, v) for k, v in merged.items()), env=tuple(sorted(env.items())),
        configuration_flags=flags, planner_command=planner.strip() if planner else None, planner_scope=scope,
        planner_dir=str(base) if planner else None,
        invariants=tuple(invariants), settled_exits=tuple(settled), blocked_exit=exits.get("blocked", 3),
        locked_exit=exits.get("locked", 6), source=str(path.resolve()), launcher=launcher,
        preload=tuple(preload) or ((argv[2],) if launcher == "zygote" else ()),
    )


PYTHON_KEYS = ("name", "kind", "requirements", "program", "reader", "state", "sqlite", "tables", "files", "points",
               "effect_bound", "max_launches", "properties", "preload", "env", "launcher")


def python_target(data: Mapping[str, Any], base: Path, where: str, *, source: str | None = None,
                  name: str | None = None) -> Target:
    """A ``kind = "python"`` target from its TOML table (a target file, or a probe scenario's ``[target]``); every
    problem at once as ``where: key: message`` lines. ``./x`` words of ``program``/``reader`` are relative to
    ``base``. Its interpreter is the prepared environment of its ``requirements`` (None when not prepared)."""
    from chaos.environments import interpreter
    from chaos.probe import vocabulary

    problems: list[str] = []

    def bad(key: str, message: str) -> None:
        problems.append(f"{where}: {key}: {message}")

    for key in sorted(set(data) - set(PYTHON_KEYS)):
        close = difflib.get_close_matches(key, PYTHON_KEYS, 1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (expected some of {', '.join(PYTHON_KEYS)})"
        bad(key, f"unknown key for a python target{hint}")
    lists = {}
    for key in ("requirements", "state", "sqlite", "tables", "files", "points", "preload"):
        value = data.get(key, ["state"] if key == "state" else [])  # ProbeProgram's default state path
        if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
            bad(key, "must be a list of non-empty strings")
            value = []
        lists[key] = value
    for pin in lists["requirements"]:
        if "==" not in pin and "@" not in pin:
            bad("requirements", f"{pin!r}: pin an exact version (name==X.Y.Z): a campaign must be reproducible")
    for key in ("state", "sqlite"):
        for rel in lists[key]:
            if os.path.isabs(rel) or ".." in Path(rel).parts:
                bad(key, f"{rel!r}: must be relative to the case directory, inside it")
    for rel in lists["sqlite"]:
        # Inspections read a copy of the state paths: a database outside them would always look absent.
        if not any(Path(rel) == Path(st) or Path(st) in Path(rel).parents for st in lists["state"]):
            bad("sqlite", f"{rel!r}: must lie under one of the state paths ({', '.join(lists['state']) or 'none'})")
    argvs = {}
    for key in ("program", "reader"):
        value = data.get(key)
        if value is None and key == "reader":
            argvs[key] = None
            continue
        if not _strings(value) or not value:
            bad(key, "a non-empty list of strings (PROGRAM ARGS or -m MODULE ARGS) is required")
            value = ["-m", "missing"]
        words = [str((base / w).resolve()) if w.startswith(("./", "../")) else w for w in value]
        if words[0] != "-m" and not os.path.isfile(words[0].replace("{case}", "")):
            bad(key, f"no such program file: {words[0]}")
        argvs[key] = tuple(words)
    numbers = {}
    for key, default in (("effect_bound", 1), ("max_launches", 4)):
        value = data.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            bad(key, "must be a positive integer")
            value = default
        numbers[key] = value
    from chaos.properties import ALL_PROPERTIES

    props = _known_names(data, "properties", PROPERTIES, ALL_PROPERTIES, "property", bad)
    needs_reader = [p for p in props if p in ("recorded-not-redone", "completes", "matches-baseline",
                                              "recovery-deterministic")]
    if needs_reader and data.get("reader") is None:
        # Without a reader they would compare nothing with nothing and hold: never a silent pass.
        bad("reader", f"required by {', '.join(needs_reader)} (they judge what the durable state records)")
    env = data.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        bad("env", "must be a table of strings")
        env = {}
    launcher = data.get("launcher", "zygote")
    if launcher not in LAUNCHERS:
        bad("launcher", f"{launcher!r}: expected zygote or exec")
    if problems:
        raise TargetError(problems)
    target_name = str(data.get("name") or name or Path(where).stem)
    program = ProbeProgram(
        name=target_name, program=argvs["program"], reader=argvs["reader"],
        vocabulary=vocabulary(lists["tables"], lists["files"], lists["points"]), state=tuple(lists["state"]),
        sqlite=tuple(lists["sqlite"]), env=tuple(sorted(env.items())), effect_bound=numbers["effect_bound"],
        max_launches=numbers["max_launches"], properties=tuple(props),
        python=interpreter(lists["requirements"]), requirements=tuple(lists["requirements"]))
    return Target(name=target_name, kind="python", command=(), configuration_flags=False, invariants=(),
                  source=source, launcher=launcher, preload=tuple(lists["preload"]), probe=program)


def is_probe(scenario: Any) -> bool:
    """Whether a loaded scenario runs a python target under the probe (a ``chaos.scenario.ProbeScenario``) rather
    than the session agent. By attribute, so that asking never imports the scenario model (pydantic)."""
    target = getattr(scenario, "the_target", None)
    return isinstance(target, Target) and target.probe is not None


def _program_digest(program: ProbeProgram) -> str:
    """The digest of the program's and reader's script files (an edited app must not reuse stale kill points)."""
    h = hashlib.sha256()
    for word in (*program.program, *(program.reader or ())):
        if word.endswith(".py") and os.path.isfile(word):
            h.update(word.encode() + b"\0" + Path(word).read_bytes())
    return h.hexdigest()[:16]


def _known_names(data: Mapping[str, Any], key: str, default: Sequence[str], known: Sequence[str], what: str,
                 bad) -> list[str]:
    """A target file's non-empty list of names from ``known`` (``default`` when absent); problems to ``bad``."""
    names = data.get(key, list(default))
    if not _strings(names) or not names:
        bad(key, f"must be a non-empty list of {what} names")
        return list(default)
    for name in names:
        if name not in known:
            bad(key, f"unknown {what} {name!r} (known: {', '.join(known)})")
    return names


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(a, str) and a for a in value)


def agent_source_digest() -> str:
    """The digest of the bundled agent's source files (an edited agent must not reuse cached kill points)."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        h = hashlib.sha256()
        root = REPO / "agent"
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
        _SOURCE_DIGEST = h.hexdigest()
    return _SOURCE_DIGEST


_SOURCE_DIGEST: str | None = None


# --------------------------------------------------------------------------------------------------------------
# Asking the target (never importing it)


_ANSWERS: dict[tuple, Any] = {}


def _ask(target: Target, key: str, *, flags: Sequence[str] = (), environ: Mapping[str, str] | None = None,
         workspace: str | None = None) -> Any | None:
    """Run the target's ``key`` command and parse its stdout as JSON; None when the target does not offer it."""
    template = target.template(key)
    if not template:
        return None
    workspace = workspace or os.getcwd()
    argv = target.argv(key, flags=flags, workspace=workspace)
    # Memo first: this runs several times per case (describe), and the answer depends only on the command, its
    # flags, the target's own env and the environment identity the question names.
    identity = (environ or {}).get("AGENT_ENVIRONMENT_IDENTITY", os.environ.get("AGENT_ENVIRONMENT_IDENTITY", ""))
    memo = (argv, target.env, identity)
    if memo in _ANSWERS:
        return _ANSWERS[memo]
    env = {**os.environ, **(environ or {}), **target.correct().environment()}
    env.pop("CHAOS_CONTROL", None)  # a question is not a case: no checkpoint channel
    try:
        from chaos.process import run_bounded

        proc = run_bounded(argv, env, 60.0, cwd=workspace)
    except (OSError, subprocess.SubprocessError) as exc:
        raise TargetError(f"target {target.name}: `{shlex.join(argv)}` could not run: {exc}") from None
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise TargetError(f"target {target.name}: `{shlex.join(argv)}` exited {proc.returncode}: {tail[0]}")
    try:
        answer = json.loads(proc.stdout)
    except ValueError:
        raise TargetError(f"target {target.name}: `{shlex.join(argv)}` did not print JSON") from None
    _ANSWERS[memo] = answer
    return answer


def known_bugs(target: Target) -> dict[str, dict[str, str]]:
    """The target's known-bug switches in its order, name → ``{"layer": "planner"|"executor", "description"}``,
    from its ``bugs`` command (``python -m agent bugs --json`` for the bundled agent)."""
    answer = _ask(target, "bugs")
    if answer is None:
        return {}
    if not isinstance(answer, list) or not all(isinstance(b, Mapping) and isinstance(b.get("name"), str)
                                               for b in answer):
        raise TargetError(f"target {target.name}: its bugs command must print a JSON list of {{name, layer}}")
    return {b["name"]: {"layer": str(b.get("layer", "")), "description": str(b.get("description", ""))}
            for b in answer}


def check_bugs(target: Target, bugs: Sequence[str]) -> tuple[str, ...]:
    """``bugs`` sorted, or ``TargetError`` naming every switch the target does not have (a typo must never make a
    run "pass" with the correct implementation)."""
    if not bugs:
        return ()
    offered = known_bugs(target)
    unknown = [b for b in bugs if b not in offered]
    if unknown:
        listing = ", ".join(offered) or "none"
        raise TargetError(f"unknown bug switch {', '.join(unknown)} for target {target.name} (it offers: {listing})")
    return tuple(sorted(dict.fromkeys(bugs)))


@dataclass(frozen=True)
class Description:
    """What ``describe`` says: the tools it can offer (request elements), its compaction prompt, and the
    CurrentConfiguration (SPEC §8.7 plus ``snapshot``) a launch with the given flags runs with."""

    tools: tuple[dict, ...] = ()
    summary_prompt: str | None = None
    current: dict | None = None
    extra: dict = field(default_factory=dict)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t.get("function", {}).get("name", "") for t in self.tools)


def describe(target: Target, flags: Sequence[str] = (), *, environ: Mapping[str, str] | None = None,
             workspace: str | None = None) -> Description | None:
    """The target's ``describe`` answer for ``flags`` (memoised per process), or None when it offers none."""
    if not target.configuration_flags:
        return None
    answer = _ask(target, "describe", flags=flags, environ=environ, workspace=workspace)
    if answer is None:
        return None
    if not isinstance(answer, Mapping):
        raise TargetError(f"target {target.name}: its describe command must print a JSON object")
    return Description(tools=tuple(answer.get("tools") or ()), summary_prompt=answer.get("summarySystemPrompt"),
                       current=answer.get("current"), extra=dict(answer))


def resolve_target(path: str | None = None, *, bugs: str | Sequence[str] = "", planner_command: str | None = None,
                   planner_scope: str | None = None, launcher: str | None = None,
                   planner_dir: str | None = None, planner_timeout: float | None = None,
                   environ: Mapping[str, str] | None = None) -> Target:
    """The one place a front end (CLI, pytest plugin, mutants) builds its target: the file (default: the bundled
    agent), then the known-bug switches (checked against what the target offers) and a foreign planner on top.
    A ``planner_command`` given here runs in ``planner_dir``, by default the directory this process runs in (where
    a shell or a CI job wrote it); ``planner_dir`` alone moves the file's ``planner_command``. The planner's timeout
    (seconds) is recorded: ``planner_timeout`` (a typed flag), else the target file's ``env`` table's, else
    ``environ``'s ``AGENT_PLANNER_TIMEOUT`` (the shell's, as the agent would read it: not on a resume, whose record
    rules), else none (the agent's default, which reproduce lines say: ``Target.cli_args``); like the variable, it
    is read only when there is a planner command."""
    target = load_target(path) if path else Target()
    if target.probe is not None:
        raise TargetError(f"{path}: a python target (kind = \"python\") is run from a probe scenario's [target] "
                          "table (docs/frameworks.md), not with --target")
    names = [b.strip() for b in bugs.split(",")] if isinstance(bugs, str) else list(bugs)
    names = [b for b in names if b]
    if planner_scope is not None and planner_scope not in PLANNER_SCOPES:
        raise TargetError(f"planner scope {planner_scope!r}: expected recovery or all")
    if planner_command is not None and not planner_command.strip():
        raise TargetError("planner command: must not be empty")
    if planner_command:
        try:
            shlex.split(planner_command)
        except ValueError as exc:
            raise TargetError(f"planner command {planner_command!r}: {exc}") from None
    if launcher is not None:
        if launcher not in LAUNCHERS:
            raise TargetError(f"launcher {launcher!r}: expected zygote or exec")
        target = replace(target, launcher=launcher, preload=target.preload or (
            (target.command[2],) if len(target.command) >= 3 and target.command[1] == "-m" else ()))
    target = target.with_bugs(check_bugs(target, names))
    if planner_dir is not None:
        if not (planner_command or target.planner_command):
            raise TargetError("planner directory: given without a planner command")
        if not os.path.isdir(planner_dir):  # (a reproduce line's directory on another machine, say)
            raise TargetError(f"planner directory {planner_dir!r}: " + (
                "is not a directory" if os.path.exists(planner_dir) else "does not exist (--planner-dir DIR: where "
                "the planner command's files are here)"))
        planner_dir = os.path.abspath(planner_dir)
    elif planner_command:
        try:
            planner_dir = os.getcwd()
        except FileNotFoundError:
            raise TargetError("planner command: the current directory no longer exists (give --planner-dir)") from None
    if planner_scope is not None and not (planner_command or target.planner_command):
        raise TargetError("planner scope: given without a planner command")
    if planner_command or planner_scope or planner_dir:
        target = target.with_planner(planner_command or target.planner_command, planner_scope, planner_dir)
    if planner_timeout is not None:
        if not target.planner_command:
            raise TargetError("planner timeout: given without a planner command")
        if planner_seconds(planner_timeout) is None:
            raise TargetError(f"planner timeout {planner_timeout!r}: must be a positive number of seconds")
        target = replace(target, planner_timeout=float(planner_timeout))
    elif target.planner_command and environ and environ.get(TIMEOUT_VAR) and TIMEOUT_VAR not in dict(target.env):
        value = planner_seconds(environ[TIMEOUT_VAR])
        if value is None:  # the agent would refuse it at every launch (exit 2)
            raise TargetError(f"{TIMEOUT_VAR}={environ[TIMEOUT_VAR]!r} (in this environment): must be a positive "
                              "number of seconds")
        target = replace(target, planner_timeout=value)
    return target


def planner_seconds(value: object) -> float | None:
    """A planner command's timeout as the agent takes it (``AGENT_PLANNER_TIMEOUT``, ``agent.planner_cmd``): a
    number, or its text, of seconds above 0 and finite; None for anything the agent would refuse."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return seconds if 0 < seconds < float("inf") else None
