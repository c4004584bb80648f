"""The agent's command line: ``python -m agent reduce|plan|run|resume|abort|compact|bugs``.

What it is for. Two audiences share it. People (and CI) check and drive sessions; the chaos harness launches the
agent thousands of times, kills it, and restarts it with possibly changed configuration flags. The ``reduce`` and
``plan`` output shapes are a stable protocol: a later conformance runner drives other implementations through the
very same shapes, so they never change meaning:

- ``reduce FILE``            stdout ``{"ok":true,"state":STATE}`` exit 0, or ``{"ok":false,"error":{code,line,seq?}}``
                             exit 1 (raw bytes in, SPEC §10/§11; takes no lock, never modifies the file);
- ``plan FILE CURRENT.json`` stdout the RecoveryPlan JSON (SPEC §14.2) exit 0, or the same ``{"ok":false,…}`` exit 1
                             (always the built-in planner: ``AGENT_PLANNER_CMD`` is never consulted here, so
                             ``AGENT_PLANNER_CMD="python3 -m agent"`` cannot recurse);
- ``bugs [--json]``          the known-bug switches, as lines or as ``[{"name","layer","description"}, …]``.

Invariant it protects: every expected condition ends in one clear stderr line and a documented exit code, never a
Python traceback (the table is ``agent.exits.EXIT_CODES``, repeated in ``--help`` and docs/agent.md; a failed planner
command adds its stderr tail after that line). An unknown ``AGENT_BUGS`` name is exit 2 for every verb, checked once
before dispatch. Anything that is not an ``AgentError`` (or an OS error of an input file) is a defect and is allowed
to surface.

What it does not do: no session logic. Argument parsing and the error-to-exit mapping of ``main`` live here (the
codes themselves in ``agent.exits``, input-path checks in ``agent.files``); the plan executor and live loop live in
``agent.loop`` / ``agent.recovery``, imported only by the commands that execute plans, so ``reduce`` and ``plan``
stay cheap. The dependency goes one way: cli imports loop (lazily), loop never imports cli. Standard library only
(argparse, json): the agent's start path must not import pydantic, click, rich, psutil or httpx.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping

from agent.errors import AgentError

from agent.exits import (  # noqa: F401 - re-exported: the exit-code table lives in agent.exits
    EXIT_BAD_LOG,
    EXIT_BLOCKED,
    EXIT_CHANNEL_LOST,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_IO,
    EXIT_LOCKED,
    EXIT_LOG_ERROR_JSON,
    EXIT_OK,
    EXIT_PLANNER_CMD,
    EXIT_REJECTED,
    EXIT_USAGE,
    describe_error,
)
from agent.files import check_input_file

_CONFIG_HELP = """\
configuration (the same on run, resume, abort, compact, so a supervisor can change it across a restart):
  --model, --base-url (else OPENAI_BASE_URL), OPENAI_API_KEY, --tools, --replay TOOL=safe|never[:KEY],
  --environment-identity (else AGENT_ENVIRONMENT_IDENTITY, else the workspace's real path),
  --request-timeout SECONDS, --max-steps N (default 20)
environment:
  AGENT_BUGS=name[,name…]  re-introduce known defects (see `python -m agent bugs`)
  CHAOS_CONTROL=SOCKET     report durable-log checkpoints to a supervisor (docs/protocol.md)
  AGENT_PLANNER_CMD=CMD    run `CMD plan LOG CURRENT.json` for each recovery decision instead of the built-in
                           planner (AGENT_PLANNER_SCOPE=recovery|all, AGENT_PLANNER_TIMEOUT=SECONDS, default 30,
                           AGENT_PLANNER_DIR=DIR where it runs, default the agent's working directory)
"""


class UsageError(AgentError):
    """Bad command-line input: one line on stderr, exit 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (the project rule: one clear line, no usage dump, exit 2)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(f"{message} (see `{self.prog} --help`)")


_PARSER: argparse.ArgumentParser | None = None


def parser() -> argparse.ArgumentParser:
    """The command-line parser, built once per process (building it costs ~5 ms: argparse and gettext look-ups;
    a process forked from a warm one, see ``agent.warm``, finds it built). parse_args never changes it."""
    global _PARSER
    if _PARSER is None:
        _PARSER = _build_parser()
    return _PARSER


def _build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="python -m agent",
        description="A durable tool-calling agent whose every step is an fsync'd JSONL log (session contract v2).",
        epilog=EXIT_CODES + "\n" + _CONFIG_HELP,
        formatter_class=formatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    sub = commands.add_parser("reduce", help="reduce a session log to its state (JSON on stdout)",
                              epilog=EXIT_CODES, formatter_class=formatter)
    sub.add_argument("file", metavar="FILE")

    sub = commands.add_parser("plan", help="print the recovery plan for a log and a CurrentConfiguration",
                              epilog=EXIT_CODES, formatter_class=formatter)
    sub.add_argument("file", metavar="FILE")
    sub.add_argument("current", metavar="CURRENT.json")

    config = _Parser(add_help=False)
    group = config.add_argument_group("configuration")
    group.add_argument("--model", help="model name sent in every request (default: the session header's model, "
                                       "or the built-in default for a new session)")
    group.add_argument("--base-url", help="chat-completions base URL (default: OPENAI_BASE_URL, else OpenAI)")
    group.add_argument("--tools", metavar="NAME,…", help="the enabled tool set, in order (default: all built-ins)")
    group.add_argument("--replay", metavar="TOOL=safe|never[:KEY]", action="append", default=[],
                       help="override a tool's replay declaration (repeatable)")
    group.add_argument("--environment-identity", metavar="ID",
                       help="environment identity (default: AGENT_ENVIRONMENT_IDENTITY, else the workspace path)")
    group.add_argument("--request-timeout", metavar="SECONDS", type=_positive_float,
                       help="total time allowed for one model request")
    group.add_argument("--max-steps", metavar="N", type=_positive_int, default=20,
                       help="model steps a run may start, counted from the durable log (default 20)")
    group.add_argument("--workspace", metavar="DIR",
                       help="workspace directory (run: required for a new session; else: the header's cwd)")

    sub = commands.add_parser("run", parents=[config], help="perform one run (new session, or --session FILE)",
                              epilog=EXIT_CODES, formatter_class=formatter)
    where = sub.add_mutually_exclusive_group(required=True)
    where.add_argument("--session-dir", metavar="DIR", help="create a new session in DIR (needs --workspace)")
    where.add_argument("--session", metavar="FILE", help="recover FILE to idle, then run again in it")
    sub.add_argument("prompt", metavar="PROMPT")

    for name, text in (
        ("resume", "recover a session: plan and execute until idle or blocked (one stderr line per plan)"),
        ("abort", "abort the unfinished operation of a session and reconcile it durably"),
        ("compact", "compact a session's history as its own durable operation"),
    ):
        sub = commands.add_parser(name, parents=[config], help=text, epilog=EXIT_CODES, formatter_class=formatter)
        sub.add_argument("file", metavar="FILE")

    commands.add_parser("describe", parents=[config],
                        help="what this agent offers a harness: tools, summary prompt, CurrentConfiguration (JSON)")
    sub = commands.add_parser("bugs", help="list the known-bug switches of AGENT_BUGS")
    sub.add_argument("--json", action="store_true",
                     help='print [{"name", "layer": "planner"|"executor", "description"}, …] instead')
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


# --------------------------------------------------------------------------------------------------------------
# Output helpers
# --------------------------------------------------------------------------------------------------------------


def _emit(value: object) -> None:
    """One compact JSON line on stdout, UTF-8 whatever the locale (states carry non-ASCII text)."""
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _note(text: str) -> None:
    sys.stderr.write(f"agent: {text}\n")
    sys.stderr.flush()


def _read_input(path: str) -> bytes:
    check_input_file(path)
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None


# --------------------------------------------------------------------------------------------------------------
# reduce / plan / bugs
# --------------------------------------------------------------------------------------------------------------


def _cmd_reduce(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    data = _read_input(args.file)
    from agent.session.errors import CorruptionError
    from agent.session.reducer import reduce_session

    try:
        state = reduce_session(data)
    except CorruptionError as exc:
        _emit({"ok": False, "error": exc.to_json()})
        return EXIT_LOG_ERROR_JSON
    _emit({"ok": True, "state": state})
    return EXIT_OK


_DIGEST_PREFIX = "sha256:"


def _is_digest(value: object) -> bool:
    return (isinstance(value, str) and len(value) == 71 and value.startswith(_DIGEST_PREFIX)
            and all(c in "0123456789abcdef" for c in value[7:]))


def parse_current(data: bytes, path: str) -> dict:
    """Validate a CurrentConfiguration file (SPEC §8.7, closed shape); a bad one is a usage error naming the field."""
    try:
        current = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: not a JSON document: {exc}") from None
    except RecursionError:  # json's C decoder recurses per nesting level: [[[… thousands deep
        raise UsageError(f"{path}: not a CurrentConfiguration: nested too deeply to read") from None

    def bad(field: str, message: str) -> UsageError:
        return UsageError(f"{path}: {field}: {message}")

    if not isinstance(current, dict):
        raise bad("(top level)", "must be an object")
    extra = set(current) - {"configurationDigest", "environmentIdentity", "tools"}
    if extra:
        raise bad(sorted(extra)[0], "unknown member")
    if not _is_digest(current.get("configurationDigest")):
        raise bad("configurationDigest", "must be a sha256:<64 lowercase hex> digest")
    identity = current.get("environmentIdentity")
    if not isinstance(identity, str) or not identity:
        raise bad("environmentIdentity", "must be a non-empty string")
    tools = current.get("tools")
    if not isinstance(tools, list):
        raise bad("tools", "must be an array")
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise bad(where, "must be an object")
        extra = set(tool) - {"name", "definitionDigest", "replay", "replayKey"}
        if extra:
            raise bad(f"{where}.{sorted(extra)[0]}", "unknown member")
        for member in ("name", "replayKey"):
            if not isinstance(tool.get(member), str) or not tool[member]:
                raise bad(f"{where}.{member}", "must be a non-empty string")
        if not _is_digest(tool.get("definitionDigest")):
            raise bad(f"{where}.definitionDigest", "must be a sha256:<64 lowercase hex> digest")
        if tool.get("replay") not in ("safe", "never"):
            raise bad(f"{where}.replay", "must be \"safe\" or \"never\"")
    return current


def _cmd_plan(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    data = _read_input(args.file)
    current = parse_current(_read_input(args.current), args.current)
    from agent import bugs as bug_switches
    from agent.session.errors import CorruptionError
    from agent.session.planner import plan_recovery
    from agent.session.reducer import reduce_session

    # Planner-level switches apply here too, so a harness can check that a conformance runner catches them.
    planner_bugs = bug_switches.from_environ(environ) & bug_switches.PLANNER_BUGS
    try:
        state = reduce_session(data)
    except CorruptionError as exc:
        _emit({"ok": False, "error": exc.to_json()})
        return EXIT_LOG_ERROR_JSON
    _emit(plan_recovery(state, current, bugs=planner_bugs))
    return EXIT_OK


def _cmd_bugs(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from agent import bugs as bug_switches

    if args.json:
        # The machine-readable listing a harness asks a target for (instead of importing agent.bugs).
        _emit(bug_switches.as_json())
        return EXIT_OK
    sys.stdout.write(bug_switches.listing())
    sys.stdout.flush()
    return EXIT_OK


def _cmd_execute(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from agent import loop

    return loop.execute_command(args, environ)


def _cmd_describe(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from agent import describe

    return describe.main(args, environ)


_COMMANDS = {
    "reduce": _cmd_reduce,
    "plan": _cmd_plan,
    "bugs": _cmd_bugs,
    "describe": _cmd_describe,
    "run": _cmd_execute,
    "resume": _cmd_execute,
    "abort": _cmd_execute,
    "compact": _cmd_execute,
}


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run one command; returns the exit status (see EXIT_CODES). ``environ`` defaults to ``os.environ``."""
    env = os.environ if environ is None else environ
    try:
        args = parser().parse_args(argv)
        _check_bug_switches(env)  # every verb refuses an unknown AGENT_BUGS name (exit 2), before it does anything
        return _COMMANDS[args.command](args, env)
    except UsageError as exc:
        _note(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        # SIGINT before the loop's handlers are installed (or in reduce/plan): nothing was written.
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `python -m agent reduce big.jsonl | head`: the reader left; nothing useful remains to report, and the
        # interpreter must not try to flush into the closed pipe again at exit.
        sys.stdout = None  # type: ignore[assignment]
        return EXIT_IO
    except AgentError as exc:
        code, message = describe_error(exc)
        _note(message)
        for line in getattr(exc, "details", ()):  # e.g. the failed planner command's stderr tail (exit 8)
            _note(line)
        return code
    except OSError as exc:
        # An I/O failure outside the store's own error handling (reading the session, the disk going away):
        # report it in one line; the durable log is whatever was acknowledged before.
        _note(f"I/O error: {exc}")
        return EXIT_IO


def _check_bug_switches(environ: Mapping[str, str]) -> None:
    """Raise UnknownBugError (exit 2) for an unknown AGENT_BUGS name (agent.bugs is imported only when it is set)."""
    if environ.get("AGENT_BUGS"):
        from agent import bugs as bug_switches

        bug_switches.from_environ(environ)
